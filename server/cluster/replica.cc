#include "server/cluster/replica.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/trailers.h"
#include "failover/v1/decision.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "log_entry.pb.h"  // generated from server/cluster/log_entry.proto
#include "common/report_sender.h"
#include "common/replace_with.h"
#include "common/utf8.h"
#include "proto/model_convert.h"
#include "proto/state_convert.h"
#include "server/log/log.h"

namespace failover::cluster {
namespace {

constexpr size_t kRangePage = 256;
constexpr size_t kRelayBatch = 1000;
constexpr size_t kRelayMinBatch = 16;
// The log index of a Change made while this replica was not the leader.
constexpr uint64_t kNotInTheLog = std::numeric_limits<uint64_t>::max();
constexpr absl::Duration kRelayGather = absl::Milliseconds(10);
constexpr uint32_t kMaxCount = 5000;  // under ReportOutcomeRequest.count's limit of 10,000

std::string ReadFileOrEmpty(const std::string& path) {
  if (path.empty()) return "";
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The transaction succeeds only while `key` is the one created at `revision`:
// a leader's writes are fenced on the leader key it created (its term).
void RequireKeyCreatedAt(etcdpb::TxnRequest* txn, const std::string& key, int64_t revision) {
  etcdpb::Compare* compare = txn->add_compare();
  compare->set_key(key);
  compare->set_target(etcdpb::Compare::CREATE);
  compare->set_result(etcdpb::Compare::EQUAL);
  compare->set_create_revision(revision);
}

// Replicas write the leader key on their lease; one on none was written by
// hand and belongs to no replica.
bool HeldByALease(const mvccpb::KeyValue& kv) { return kv.lease() != 0; }

std::chrono::system_clock::time_point DeadlineIn(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d);
}

}  // namespace

Replica::Replica(ReplicaOptions options, std::unique_ptr<EtcdClient> etcd, Engine* engine, const Clock* clock)
    : options_(std::move(options)),
      keys_(options_.prefix),
      etcd_(std::move(etcd)),
      engine_(engine),
      clock_(clock),
      relay_sender_(NewReportSender()),
      relay_batch_(kRelayBatch) {
  if (!options_.peer_ca.empty() || !options_.peer_cert.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFileOrEmpty(options_.peer_ca);
    ssl.pem_cert_chain = ReadFileOrEmpty(options_.peer_cert);
    ssl.pem_private_key = ReadFileOrEmpty(options_.peer_key);
    peer_credentials_ = grpc::SslCredentials(ssl);
  } else {
    peer_credentials_ = grpc::InsecureChannelCredentials();
  }
}

Replica::~Replica() { Stop(); }

// --- writing: the leader's Changes go to the log, fenced on its leadership ---

void Replica::Stamp(Change* change) {
  // The applied cursor is the log's: only a leader's changes take a place in
  // it. One made as leadership was lost (its maker passed the engine's
  // accepting gate before the step-down) gets none, so a deposed replica never
  // skips the next real entry; Write drops it, and the engine goes back to the
  // log's state.
  if (!IsLeader()) {
    change->log_index = kNotInTheLog;
    return;
  }
  change->log_index = last_index_.fetch_add(1) + 1;
}

absl::Status Replica::Write(const std::vector<const Change*>& changes, const LocalWrite& local) {
  std::vector<const Change*> fresh;  // made here and not in etcd yet
  const uint64_t in_etcd = etcd_index_.load();
  for (const Change* c : changes) {
    if (c->log_index > in_etcd) fresh.push_back(c);
  }
  if (!fresh.empty()) {
    const int64_t term = term_.load();
    const bool unplaced = std::any_of(fresh.begin(), fresh.end(), [](const Change* c) {
      return c->log_index == kNotInTheLog;
    });
    if (!IsLeader() || term == 0 || unplaced) {
      StepDown("a change was made while not the leader");
      return Dropped(absl::UnavailableError(
          "not saved: this replica is no longer the cluster's leader; the change was dropped, try again"));
    }
    // When a later group fails, the batch's first changes may already be in
    // etcd (earlier groups, or entries that were there before): those are
    // saved, and their callers hear so; the rest is dropped.
    auto saved_before = [&](size_t first_unwritten) {
      const uint64_t through = first_unwritten > 0 ? fresh[first_unwritten - 1]->log_index : 0;
      size_t saved = 0;
      while (saved < changes.size() && (changes[saved]->log_index <= in_etcd || changes[saved]->log_index <= through)) {
        ++saved;
      }
      return saved;
    };
    // One fenced transaction per group of entries under etcd's request limit
    // (keys and framing have a third to spare); a single larger entry goes
    // alone and etcd judges it.
    size_t next = 0;
    while (next < fresh.size()) {
      etcdpb::TxnRequest txn;
      RequireKeyCreatedAt(&txn, keys_.Leader(), term);
      size_t bytes = 0;
      const size_t first = next;
      while (next < fresh.size()) {
        std::string entry = EncodeEntry(*fresh[next], term);
        if (next > first && bytes + entry.size() > options_.max_request_bytes / 3 * 2) break;
        bytes += entry.size();
        etcdpb::PutRequest* put = txn.add_success()->mutable_request_put();
        put->set_key(keys_.Log(fresh[next]->log_index));
        put->set_value(std::move(entry));
        ++next;
      }
      absl::StatusOr<etcdpb::TxnResponse> written = etcd_->Txn(txn);
      if (!written.ok()) {
        // Not retried: by the time etcd answers again the lease may be gone
        // and another replica leading. The leader steps down, drops what it
        // made (its engine goes back to the log's state, which brings back
        // any group written before this one) and stands again, so a refused
        // change is not made anywhere.
        NoteEtcd(written.status());
        StepDown(absl::StrCat("cannot write the change log: ", written.status().message()));
        const bool refused = written.status().code() == absl::StatusCode::kInvalidArgument ||
                             written.status().code() == absl::StatusCode::kResourceExhausted;
        return Dropped(absl::Status(refused ? written.status().code() : absl::StatusCode::kUnavailable,
                                    absl::StrCat("not saved: cannot write the change log to etcd (",
                                                 written.status().message(), "); the change was dropped",
                                                 refused ? "" : ", try again")),
                       saved_before(first));
      }
      NoteEtcd(absl::OkStatus());
      if (!written->succeeded()) {
        StepDown("another replica holds the leader key");
        return Dropped(absl::UnavailableError("not saved: this replica lost the cluster's leadership before the "
                                              "change was written; the change was dropped, try again"),
                       saved_before(first));
      }
      const uint64_t last = fresh[next - 1]->log_index;
      uint64_t known = etcd_index_.load();
      while (known < last && !etcd_index_.compare_exchange_weak(known, last)) {
      }
    }
  }
  return local(changes);
}

void Replica::OnWrites(const absl::Status& status) {
  writes_ok_.store(status.ok());
  if (status.ok()) {
    log::Info("change log writes go through again");
    if (IsLeader()) engine_->SetAcceptingChanges(true);
  } else {
    log::Error(absl::StrCat("cannot save state changes, refusing further changes until they go through: ",
                            status.message()));
    engine_->SetAcceptingChanges(false, std::string(status.message()));
    if (IsLeader()) {
      // A leader that cannot save would refuse every change cluster-wide:
      // hand leadership on at once (giving up the lease drops the leader key)
      // and stand again only once writes go through.
      StepDown(absl::StrCat("its data dir refuses writes: ", status.message()));
      etcd_->Revoke(lease_.exchange(0));
    }
  }
}

// --- start and stop ---

void Replica::Prepare(uint64_t restored_index, Committer* committer, api::ChangeFeed* feed,
                      absl::Duration catch_up) {
  committer_ = committer;
  feed_ = feed;
  last_index_ = restored_index;
  etcd_index_ = restored_index;
  // Catch up before serving, so a replica that was away starts from what the
  // cluster decided meanwhile; without etcd it serves its own copy.
  const absl::Time give_up = absl::Now() + catch_up;
  for (;;) {
    int64_t revision = 0;
    const absl::Status caught_up = CatchUp(&revision);
    if (caught_up.ok()) break;
    NoteEtcd(caught_up);
    if (absl::Now() >= give_up) {
      log::Warn(absl::StrCat("cannot read the change log from etcd yet, serving the local copy meanwhile: ",
                             caught_up.message()),
                {{"applied_index", last_index_.load()}});
      break;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
}

void Replica::Run(std::string advertise, std::string peer_token, std::function<void()> on_leader) {
  advertise_ = std::move(advertise);
  peer_token_ = std::move(peer_token);
  on_leader_ = std::move(on_leader);
  log::Info("cluster replica running", {{"prefix", keys_.prefix()},
                                        {"advertise", advertise_},
                                        {"applied_index", last_index_.load()}});
  log_thread_ = std::thread([this] { RunLog(); });
  session_thread_ = std::thread([this] { RunSession(); });
  relay_thread_ = std::thread([this] { RunRelay(); });
}

void Replica::Stop() {
  if (stopping_.exchange(true)) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (watch_) watch_->Cancel();
    changed_.notify_all();
    relay_ready_.notify_all();
  }
  if (log_thread_.joinable()) log_thread_.join();
  if (session_thread_.joinable()) session_thread_.join();
  if (relay_thread_.joinable()) relay_thread_.join();
  if (leader_.exchange(false)) engine_->SetAcceptingChanges(false, "failoverd is shutting down");
  // Resign at once, so another replica takes over without waiting out the lease.
  const int64_t lease = lease_.exchange(0);
  if (lease != 0) etcd_->Revoke(lease);
}

bool Replica::SleepFor(absl::Duration d) {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait_for(lock, absl::ToChronoNanoseconds(d), [&] { return stopping_.load(); });
  return !stopping_.load();
}

// --- following the log ---

absl::Status Replica::CatchUp(int64_t* revision) {
  etcdpb::RangeRequest leader;
  leader.set_key(keys_.Leader());
  absl::StatusOr<etcdpb::RangeResponse> held = etcd_->Range(leader);
  if (!held.ok()) return held.status();
  *revision = held->header().revision();
  SetLeaderAddress(held->kvs_size() > 0 && HeldByALease(held->kvs(0)) ? held->kvs(0).value() : "");
  if (absl::Status from_snapshot = InstallSnapshot(*revision); !from_snapshot.ok()) return from_snapshot;
  for (;;) {
    etcdpb::RangeRequest page;
    page.set_key(keys_.Log(last_index_.load() + 1));
    page.set_range_end(keys_.LogEnd());
    page.set_limit(kRangePage);
    page.set_revision(*revision);
    absl::StatusOr<etcdpb::RangeResponse> entries = etcd_->Range(page);
    if (!entries.ok()) return entries.status();
    for (const auto& kv : entries->kvs()) {
      const std::optional<uint64_t> index = keys_.IndexOf(kv.key());
      if (!index) continue;
      if (!ApplyEntry(*index, kv.value())) return absl::AbortedError("log catch-up starts over");
    }
    if (!entries->more() || entries->kvs_size() == 0) break;
  }
  NoteEtcd(absl::OkStatus());
  {
    std::lock_guard<std::mutex> lock(mu_);
    applied_revision_ = std::max(applied_revision_.load(), *revision);
    changed_.notify_all();
  }
  return absl::OkStatus();
}

bool Replica::ApplyEntry(uint64_t index, const std::string& value) {
  uint64_t seen = seen_index_.load();
  while (seen < index && !seen_index_.compare_exchange_weak(seen, index)) {
  }
  const uint64_t last = last_index_.load();
  if (index <= last) {
    // Applied already, or made here. Past the first index this replica
    // stamped as leader, an entry of another term means another leader wrote
    // there: what this one made at that index was never written.
    const uint64_t own = own_from_.load();
    if (own != 0 && index >= own) {
      LogEntry entry;
      if (!entry.ParseFromString(value) || entry.term() != term_.load()) {
        StepDown(absl::StrCat("another leader wrote log entry ", index));
        return false;
      }
    }
    return true;
  }
  if (index != last + 1) {
    log::Warn("gap in the change log, reading it again", {{"expected", last + 1}, {"got", index}});
    return false;
  }
  if (IsLeader()) {
    StepDown(absl::StrCat("another leader wrote log entry ", index));
    return false;
  }
  absl::StatusOr<Change> change = DecodeEntry(value, index);
  absl::Status applied = change.status();
  if (applied.ok()) applied = engine_->ApplyChange(*change, clock_->Now());
  if (!applied.ok()) {
    // Keep what is applied, say so, and try again until the entry is fixed or
    // replaced (or a snapshot passes it).
    NoteStuck(index, applied);
    SleepFor(absl::Seconds(1));
    return false;
  }
  uint64_t known = etcd_index_.load();
  while (known < index && !etcd_index_.compare_exchange_weak(known, index)) {
  }
  last_index_ = index;
  committer_->Submit(std::move(*change));
  NoteApplied();
  return true;
}

void Replica::NoteStuck(uint64_t index, const absl::Status& why) {
  const uint64_t seen = seen_index_.load();
  const uint64_t applied = last_index_.load();
  const std::string error = absl::StrCat("cannot apply change log entry ", index, " (", seen > applied ? seen - applied : 0,
                                         " entries behind the log): ", why.message());
  bool was_applying;
  {
    std::lock_guard<std::mutex> lock(mu_);
    was_applying = log_error_.empty();
    log_error_ = error;
  }
  stuck_index_ = index;
  if (was_applying) {
    log::Error(absl::StrCat(error, "; not fit to serve until it is past it"), {{"applied_index", applied}});
    if (on_log_health_) on_log_health_(false);
  }
}

void Replica::NoteApplied() {
  const uint64_t stuck = stuck_index_.load();
  if (stuck == 0 || last_index_.load() < stuck) return;
  stuck_index_ = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    log_error_.clear();
  }
  log::Info("the change log applies again", {{"applied_index", last_index_.load()}});
  if (on_log_health_) on_log_health_(true);
}

void Replica::RunLog() {
  absl::Duration backoff = absl::Milliseconds(100);
  while (!stopping_.load()) {
    if (reset_wanted_.exchange(false)) ResetToLog();
    int64_t revision = 0;
    absl::Status caught_up = CatchUp(&revision);
    if (!caught_up.ok()) {
      if (caught_up.code() != absl::StatusCode::kAborted) {
        NoteEtcd(caught_up);
        if (!SleepFor(backoff)) break;
        backoff = std::min(backoff * 2, absl::Seconds(2));
      }
      continue;
    }
    etcdpb::WatchCreateRequest create;
    create.set_key(keys_.prefix() + "/");
    create.set_range_end(keys_.PrefixEnd());
    create.set_start_revision(revision + 1);
    absl::StatusOr<std::unique_ptr<EtcdClient::Watch>> started = etcd_->StartWatch(create);
    if (!started.ok()) {
      NoteEtcd(started.status());
      if (!SleepFor(backoff)) break;
      backoff = std::min(backoff * 2, absl::Seconds(2));
      continue;
    }
    std::shared_ptr<EtcdClient::Watch> watch = std::move(started).value();
    {
      std::lock_guard<std::mutex> lock(mu_);
      watch_ = watch;
    }
    // Checked after watch_ is set, so a step-down just before is not missed.
    if (reset_wanted_.load() || stopping_.load()) watch->Cancel();
    backoff = absl::Milliseconds(100);
    bool restart = false;
    etcdpb::WatchResponse response;
    while (!restart && watch->Next(&response)) {
      for (const mvccpb::Event& event : response.events()) {
        const mvccpb::KeyValue& kv = event.kv();
        if (kv.key() == keys_.Leader()) {
          // A key on no lease is no leader's (a hand-written one): vacant.
          const bool gone = event.type() == mvccpb::Event::DELETE || !HeldByALease(kv);
          SetLeaderAddress(gone ? "" : kv.value());
          if (gone) {
            std::lock_guard<std::mutex> lock(mu_);
            campaign_now_ = true;  // the leader resigned or its lease ran out: stand at once
            changed_.notify_all();
          }
          continue;
        }
        const std::optional<uint64_t> index = keys_.IndexOf(kv.key());
        if (!index || event.type() != mvccpb::Event::PUT) continue;
        if (!ApplyEntry(*index, kv.value())) {
          restart = true;
          break;
        }
      }
      if (!restart) {
        std::lock_guard<std::mutex> lock(mu_);
        applied_revision_ = std::max(applied_revision_.load(), response.header().revision());
        changed_.notify_all();
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      watch_.reset();
    }
    if (!restart && !stopping_.load() && !reset_wanted_.load()) {
      NoteEtcd(watch->status());
      if (!SleepFor(backoff)) break;
    }
  }
}

absl::Status Replica::InstallSnapshot(int64_t revision) {
  etcdpb::RangeRequest where;
  where.set_key(keys_.Snapshot());
  where.set_revision(revision);
  absl::StatusOr<etcdpb::RangeResponse> found = etcd_->Range(where);
  if (!found.ok()) return found.status();
  if (found->kvs_size() == 0) return absl::OkStatus();
  SnapshotPointer pointer;
  if (!pointer.ParseFromString(found->kvs(0).value())) {
    return absl::DataLossError(absl::StrCat(keys_.Snapshot(), ": does not parse"));
  }
  uint64_t known = snapshot_index_.load();
  while (known < pointer.log_index() && !snapshot_index_.compare_exchange_weak(known, pointer.log_index())) {
  }
  const uint64_t next = last_index_.load() + 1;
  if (pointer.log_index() < next) return absl::OkStatus();
  etcdpb::RangeRequest entry;
  entry.set_key(keys_.Log(next));
  entry.set_revision(revision);
  entry.set_count_only(true);
  absl::StatusOr<etcdpb::RangeResponse> present = etcd_->Range(entry);
  if (!present.ok()) return present.status();
  if (present->count() > 0) return absl::OkStatus();  // the log still reaches back here

  const uint64_t at = pointer.log_index();
  etcdpb::RangeRequest read;
  read.set_key(keys_.SnapshotPart(at, 0));
  read.set_range_end(keys_.SnapshotPart(at, pointer.parts()));
  read.set_revision(revision);
  absl::StatusOr<etcdpb::RangeResponse> parts = etcd_->Range(read);
  if (!parts.ok()) return parts.status();
  if (parts->kvs_size() != static_cast<int>(pointer.parts())) {
    return absl::DataLossError(absl::StrCat("the snapshot at log entry ", at, " has ", parts->kvs_size(), " of its ",
                                            pointer.parts(), " parts"));
  }
  RestoredState state;
  for (int i = 0; i < parts->kvs_size(); ++i) {
    failover::v1::FollowedState part;
    if (!part.ParseFromString(parts->kvs(i).value())) {
      return absl::DataLossError(absl::StrCat("the snapshot at log entry ", at, ": part ", i, " does not parse"));
    }
    if (absl::Status added = api::AddStatePart(part, static_cast<size_t>(i), &state); !added.ok()) {
      return absl::DataLossError(absl::StrCat("the snapshot at log entry ", at, ": ", added.message()));
    }
  }
  state.log_index = at;
  // With nothing queued, the feed's state is what the engine and the store hold.
  while (!stopping_.load() && !committer_->AwaitIdle(absl::Seconds(1))) {
  }
  std::set<std::string> targets;
  std::set<std::string> chains;
  const RestoredState now = feed_->State();
  for (const TargetConfig& t : now.targets) targets.insert(t.name);
  for (const ChainConfig& c : now.chains) chains.insert(c.name);
  Change full = ReplaceWith(state, targets, chains);
  if (absl::Status applied = engine_->ApplyChange(full, clock_->Now()); !applied.ok()) {
    return absl::DataLossError(absl::StrCat("the snapshot at log entry ", at, ": ", applied.message()));
  }
  last_index_ = at;
  known = etcd_index_.load();
  while (known < at && !etcd_index_.compare_exchange_weak(known, at)) {
  }
  committer_->Submit(std::move(full));
  log::Info("this replica was behind the kept change log; started from the cluster's snapshot",
            {{"log_index", at}, {"was_at", next - 1}});
  NoteApplied();
  return absl::OkStatus();
}

void Replica::Compact() {
  if (!IsLeader() || options_.log_keep == 0) return;
  if (LogIndex() < snapshot_index_.load() + options_.log_keep) return;
  const RestoredState state = feed_->State();  // published: in etcd and here
  const uint64_t at = state.log_index;
  if (at < snapshot_index_.load() + options_.log_keep) return;
  const int64_t term = term_.load();
  const std::vector<failover::v1::FollowedState> parts = api::StateToProto(state, options_.max_request_bytes / 3);
  // Fenced like every leader write, each part on its own (one transaction
  // would exceed etcd's request limit): a deposed leader writes none, so it
  // never overwrites what the next leader wrote at the same index.
  for (size_t i = 0; i < parts.size(); ++i) {
    etcdpb::TxnRequest part;
    RequireKeyCreatedAt(&part, keys_.Leader(), term);
    etcdpb::PutRequest* put = part.add_success()->mutable_request_put();
    put->set_key(keys_.SnapshotPart(at, static_cast<uint32_t>(i)));
    put->set_value(parts[i].SerializeAsString());
    absl::StatusOr<etcdpb::TxnResponse> written = etcd_->Txn(part);
    if (!written.ok()) return NoteEtcd(written.status());
    if (!written->succeeded()) return StepDown("another replica holds the leader key");
  }
  // The pointer moves, and what it makes unneeded goes, only while this
  // replica still leads.
  etcdpb::TxnRequest txn;
  RequireKeyCreatedAt(&txn, keys_.Leader(), term);
  SnapshotPointer pointer;
  pointer.set_log_index(at);
  pointer.set_parts(static_cast<uint32_t>(parts.size()));
  pointer.set_term(term);
  etcdpb::PutRequest* move = txn.add_success()->mutable_request_put();
  move->set_key(keys_.Snapshot());
  move->set_value(pointer.SerializeAsString());
  const uint64_t keep_from = at > options_.log_keep ? at - options_.log_keep + 1 : 1;
  etcdpb::DeleteRangeRequest* old_entries = txn.add_success()->mutable_request_delete_range();
  old_entries->set_key(keys_.Log(1));
  old_entries->set_range_end(keys_.Log(keep_from));
  etcdpb::DeleteRangeRequest* old_parts = txn.add_success()->mutable_request_delete_range();
  old_parts->set_key(keys_.SnapshotParts(0));
  old_parts->set_range_end(keys_.SnapshotParts(at));
  absl::StatusOr<etcdpb::TxnResponse> done = etcd_->Txn(txn);
  if (!done.ok()) return NoteEtcd(done.status());
  if (!done->succeeded()) return StepDown("another replica holds the leader key");
  snapshot_index_ = at;
  log::Info("change log compacted", {{"snapshot_at", at}, {"kept_from", keep_from}});
}

void Replica::ResetToLog() {
  // What this replica made and could not write is dropped by the committer
  // (it is not the leader); once nothing is queued, the feed's state is
  // exactly the log's up to the last entry stored here.
  while (!stopping_.load() && !committer_->AwaitIdle(absl::Seconds(1))) {
  }
  const RestoredState state = feed_->State();
  const absl::Status reset = engine_->ResetTo(state, clock_->Now());
  if (!reset.ok()) log::Error(absl::StrCat("cannot go back to the replicated state: ", reset.message()));
  last_index_ = state.log_index;
  etcd_index_ = state.log_index;
  own_from_ = 0;
  log::Info("back to the replicated state; following the log", {{"applied_index", state.log_index}});
}

// --- leadership ---

void Replica::RunSession() {
  const absl::Duration renew_every = options_.lease / 3;
  absl::Time renewed = absl::InfinitePast();
  while (!stopping_.load()) {
    if (lease_.load() == 0) {
      absl::StatusOr<int64_t> granted = etcd_->Grant(options_.lease);
      if (!granted.ok()) {
        NoteEtcd(granted.status());
        if (!SleepFor(absl::Milliseconds(250))) break;
        continue;
      }
      lease_ = *granted;
      renewed = absl::Now();
    }
    if (!IsLeader() && !reset_wanted_.load() && writes_ok_.load()) {
      // Stand: create the leader key, on this replica's lease, if nobody holds it.
      etcdpb::TxnRequest txn;
      RequireKeyCreatedAt(&txn, keys_.Leader(), 0);  // 0: no such key
      etcdpb::PutRequest* put = txn.add_success()->mutable_request_put();
      put->set_key(keys_.Leader());
      put->set_value(advertise_);
      put->set_lease(lease_.load());
      txn.add_failure()->mutable_request_range()->set_key(keys_.Leader());
      absl::StatusOr<etcdpb::TxnResponse> stood = etcd_->Txn(txn);
      if (!stood.ok()) {
        NoteEtcd(stood.status());
      } else if (stood->succeeded()) {
        BecomeLeader(stood->header().revision());
      } else if (!stood->responses().empty() && stood->responses(0).response_range().kvs_size() > 0) {
        const mvccpb::KeyValue& held = stood->responses(0).response_range().kvs(0);
        if (!HeldByALease(held)) {
          // Every replica writes its key on its lease, so etcd drops it when
          // the replica dies; this one would never go. Clear exactly it
          // (unchanged since read) and stand again.
          log::Warn("the leader key is on no lease, so no replica holds it: clearing it and standing",
                    {{"key", keys_.Leader()}, {"value", SanitizeUtf8(held.value(), 64)}});
          etcdpb::TxnRequest clear;
          etcdpb::Compare* same = clear.add_compare();
          same->set_key(keys_.Leader());
          same->set_target(etcdpb::Compare::MOD);
          same->set_result(etcdpb::Compare::EQUAL);
          same->set_mod_revision(held.mod_revision());
          clear.add_success()->mutable_request_delete_range()->set_key(keys_.Leader());
          absl::StatusOr<etcdpb::TxnResponse> cleared = etcd_->Txn(clear);
          if (cleared.ok()) continue;
          NoteEtcd(cleared.status());  // tried again after the wait below
        } else {
          SetLeaderAddress(held.value());
          if (held.lease() == lease_.load() && held.create_revision() != left_term_.load()) {
            // This replica's own campaign: etcd carried it out, its answer
            // was lost and the client asked again elsewhere. Won.
            BecomeLeader(held.create_revision());
          } else if (held.lease() == lease_.load()) {
            // This replica's own key from the term it has left: give it up so
            // a clean election follows.
            etcd_->Revoke(lease_.exchange(0));
            continue;
          }
        }
      }
    }
    ListReplicas();
    {
      std::unique_lock<std::mutex> lock(mu_);
      changed_.wait_for(lock, absl::ToChronoNanoseconds(renew_every),
                        [&] { return stopping_.load() || (campaign_now_ && !leader_.load()); });
      campaign_now_ = false;
    }
    if (stopping_.load()) break;
    absl::StatusOr<int64_t> ttl = etcd_->KeepAlive(lease_.load());
    if (ttl.ok() && *ttl > 0) {
      renewed = absl::Now();
      NoteEtcd(absl::OkStatus());
    } else if (ttl.ok()) {
      lease_ = 0;
      StepDown("its etcd lease expired");
    } else {
      NoteEtcd(ttl.status());
      if (absl::Now() - renewed >= options_.lease) {
        lease_ = 0;
        StepDown(absl::StrCat("its etcd lease could not be renewed: ", ttl.status().message()));
      }
    }
    Compact();
  }
}

void Replica::ListReplicas() {
  constexpr int kMostListed = 64;
  const int64_t lease = lease_.load();
  if (lease == 0) return;
  if (card_lease_ != lease) {
    etcdpb::PutRequest put;
    put.set_key(keys_.Replica(advertise_));
    put.set_value(EncodeCard({advertise_, options_.version, started_}));
    put.set_lease(lease);
    absl::StatusOr<etcdpb::PutResponse> written = etcd_->Put(put);
    if (!written.ok()) return NoteEtcd(written.status());
    card_lease_ = lease;
  }
  etcdpb::RangeRequest every;
  every.set_key(keys_.ReplicasPrefix());
  every.set_range_end(keys_.ReplicasEnd());
  every.set_limit(kMostListed);
  absl::StatusOr<etcdpb::RangeResponse> read = etcd_->Range(every);
  if (!read.ok()) return NoteEtcd(read.status());
  std::vector<ReplicaCard> replicas;
  for (const mvccpb::KeyValue& kv : read->kvs()) {
    if (HeldByALease(kv)) replicas.push_back(DecodeCard(keys_, kv.key(), kv.value()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  replicas_ = std::move(replicas);
}

bool Replica::AwaitLogAt(int64_t term) {
  // Up to a lease, renewing it every third of one: the wait must not cost the
  // lease the new key is on (a stuck entry makes this wait twice).
  const absl::Time give_up = absl::Now() + options_.lease;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      const absl::Duration slice = std::min(options_.lease / 3, std::max(give_up - absl::Now(), absl::ZeroDuration()));
      if (changed_.wait_for(lock, absl::ToChronoNanoseconds(slice), [&] {
            return stopping_.load() || (applied_revision_.load() >= term && !reset_wanted_.load());
          })) {
        return !stopping_.load();
      }
    }
    if (absl::Now() >= give_up) return false;
    const absl::StatusOr<int64_t> ttl = etcd_->KeepAlive(lease_.load());
    if (ttl.ok() && *ttl <= 0) return false;  // the lease, and the key on it, are gone
  }
}

bool Replica::OverwriteStuckEntry(int64_t term) {
  const uint64_t stuck = stuck_index_.load();
  if (stuck == 0 || stuck != last_index_.load() + 1) return false;
  std::string why;
  {
    std::lock_guard<std::mutex> lock(mu_);
    why = log_error_;
  }
  // Nobody applied it (this replica, the most up to date, could not), so the
  // cluster loses nothing it acted on; left there it would stop every election.
  log::Error(absl::StrCat("elected, but ", why, "; overwriting the entry with an empty one so the cluster goes on"),
             {{"index", stuck}, {"term", term}});
  Change empty;
  empty.log_index = stuck;
  empty.next_sequence = engine_->next_sequence();
  etcdpb::TxnRequest txn;
  RequireKeyCreatedAt(&txn, keys_.Leader(), term);
  etcdpb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(keys_.Log(stuck));
  put->set_value(EncodeEntry(empty, term));
  absl::StatusOr<etcdpb::TxnResponse> written = etcd_->Txn(txn);
  if (!written.ok()) NoteEtcd(written.status());
  return written.ok() && written->succeeded();
}

void Replica::BecomeLeader(int64_t term) {
  // Everything written before this term is applied first: the watch passes
  // this replica's own leader key only after every earlier log entry.
  bool ready = AwaitLogAt(term);
  if (!ready && !stopping_.load() && OverwriteStuckEntry(term)) ready = AwaitLogAt(term);
  if (!ready) {
    if (!stopping_.load()) log::Warn("won the election but could not read the change log in time; standing down");
    etcd_->Revoke(lease_.exchange(0));
    return;
  }
  term_ = term;
  own_from_ = last_index_.load() + 1;
  leader_.store(true, std::memory_order_release);
  leader_changes_.fetch_add(1);
  if (writes_ok_.load()) engine_->SetAcceptingChanges(true);
  SetLeaderAddress(advertise_);
  log::Info("this replica is the cluster's leader", {{"term", term}, {"applied_index", last_index_.load()}});
  if (on_leader_) on_leader_();
}

void Replica::StepDown(const std::string& why) {
  if (leader_.exchange(false)) {
    left_term_ = term_.load();
    engine_->SetAcceptingChanges(false, absl::StrCat("this replica stopped being the cluster's leader: ", why));
    leader_changes_.fetch_add(1);
    log::Warn(absl::StrCat("this replica is no longer the cluster's leader: ", why));
  }
  reset_wanted_ = true;
  std::lock_guard<std::mutex> lock(mu_);
  if (watch_) watch_->Cancel();
  changed_.notify_all();
}

// --- the way to the leader ---

void Replica::SetLeaderAddress(std::string address) {
  std::lock_guard<std::mutex> lock(mu_);
  leader_address_ = std::move(address);
}

std::shared_ptr<grpc::Channel> Replica::LeaderChannel(std::string* address) const {
  std::lock_guard<std::mutex> lock(mu_);
  *address = leader_address_;
  if (leader_address_.empty()) return nullptr;
  auto& channel = channels_[leader_address_];
  if (!channel) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetMaxReceiveMessageSize(-1);
    channel = grpc::CreateCustomChannel(leader_address_, peer_credentials_, args);
  }
  return channel;
}

grpc::Status Replica::Forward(const std::string& method, const grpc::ServerContextBase& call,
                              const grpc::ByteBuffer& request, grpc::ByteBuffer* response) {
  {
    // Cut off from etcd (nothing answered for a lease), this replica could
    // not show the change it asked for: it refuses, as the leader would. One
    // failed call that the next endpoint answered is not that.
    std::lock_guard<std::mutex> lock(mu_);
    const auto silent = std::chrono::steady_clock::now() - etcd_answered_;
    if (!etcd_error_.empty() && silent > absl::ToChronoNanoseconds(options_.lease)) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          absl::StrCat("this replica cannot reach etcd, so it makes no changes until it can: ",
                                       etcd_error_));
    }
  }
  std::string address;
  std::shared_ptr<grpc::Channel> channel = LeaderChannel(&address);
  if (address == advertise_) {
    // The leader key still names this replica, which has just stepped down
    // (or not yet taken up its term): a call to itself would only be refused.
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "this replica is not the cluster's leader (leadership is moving); try again");
  }
  if (!channel) {
    std::lock_guard<std::mutex> lock(mu_);
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrCat("the cluster has no leader right now, so changes cannot be made",
                                     etcd_error_.empty() ? "" : absl::StrCat(" (etcd: ", etcd_error_, ")")));
  }
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  for (const auto& [key, value] : call.client_metadata()) {
    if (key == "authorization") context.AddMetadata("authorization", std::string(value.data(), value.size()));
  }
  context.AddMetadata(api::kForwardedHeader, "1");
  const auto cap = DeadlineIn(absl::Seconds(30));
  context.set_deadline(std::min(call.deadline(), cap));
  // On a completion queue of its own, on this thread: waiting in a gRPC
  // callback for a callback of the client API could take the last thread
  // gRPC's callbacks run on.
  grpc::CompletionQueue queue;
  grpc::Status result;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> pending =
      stub.PrepareUnaryCall(&context, method, request, &queue);
  pending->StartCall();
  pending->Finish(response, &result, &queue);
  void* tag = nullptr;
  bool ok = false;
  queue.Next(&tag, &ok);
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  // Read your writes: answer once this replica has applied what the call changed.
  const auto& trailers = context.GetServerTrailingMetadata();
  if (auto index = trailers.find(api::kLogIndexTrailer); index != trailers.end()) {
    uint64_t needed = 0;
    if (absl::SimpleAtoi(absl::string_view(index->second.data(), index->second.size()), &needed)) {
      const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(call.deadline() -
                                                                             std::chrono::system_clock::now());
      WaitApplied(needed, std::min(absl::FromChrono(left), absl::Seconds(5)));
    }
  }
  if (result.error_code() == grpc::StatusCode::UNAVAILABLE &&
      context.GetServerTrailingMetadata().count(kAnsweredTrailer) == 0) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrCat("the cluster's leader at ", address, " did not answer: ", result.error_message()));
  }
  return result;
}

void Replica::DropOldestRelayedLocked() {
  if (relay_.front().acked) --relay_waited_;  // its caller stops waiting at its deadline
  relay_.pop_front();
  ++relay_dropped_;
}

void Replica::Relay(failover::v1::ReportOutcomeRequest report) {
  std::lock_guard<std::mutex> lock(mu_);
  if (relay_.size() >= options_.relay_limit) DropOldestRelayedLocked();
  relay_.push_back(Relayed{std::move(report), nullptr});
  if (relay_.size() == 1) relay_ready_.notify_one();
}

void Replica::RelayAndWait(failover::v1::ReportOutcomeRequest report, absl::Duration timeout) {
  if (!leader_reachable_.load()) return Relay(std::move(report));  // fail-static: no waiting on a lost leader
  const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
  auto acked = std::make_shared<Acked>();
  std::unique_lock<std::mutex> lock(mu_);
  if (relay_.size() >= options_.relay_limit) DropOldestRelayedLocked();
  relay_.push_back(Relayed{std::move(report), acked});
  ++relay_waited_;
  relay_ready_.notify_one();
  if (!changed_.wait_until(lock, deadline, [&] { return acked->done || stopping_.load(); })) return;
  changed_.wait_until(lock, deadline, [&] { return last_index_.load() >= acked->log_index || stopping_.load(); });
}

void Replica::StampRelayed(failover::v1::ReportOutcomeRequest* report) {
  if (report->has_report_id()) return;
  report->mutable_report_id()->set_sender(relay_sender_);
  report->mutable_report_id()->set_sequence(++relay_sequence_);
}

void Replica::RunRelay() {
  while (!stopping_.load()) {
    std::vector<Relayed> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      relay_ready_.wait_for(lock, std::chrono::milliseconds(200), [&] { return stopping_.load() || !relay_.empty(); });
      // Background successes wait a moment for company (a call per outcome
      // would cost more than the outcome); one that is waited for goes at once.
      relay_ready_.wait_for(lock, absl::ToChronoNanoseconds(kRelayGather),
                            [&] { return stopping_.load() || relay_waited_ > 0 || relay_.size() >= relay_batch_; });
      // Background successes (ones that change nothing at the leader) on the
      // same target and chain travel as one report with a count; never across
      // an outcome that is waited for, so the order that matters is kept.
      std::map<std::pair<std::string, std::string>, size_t> merged;
      while (!relay_.empty() && batch.size() < relay_batch_) {
        Relayed next = std::move(relay_.front());
        relay_.pop_front();
        if (next.acked) --relay_waited_;
        // One with an id (sent before, or the caller's) keeps what the id stands for.
        if (next.acked || !next.report.has_success() || next.report.has_report_id()) {
          merged.clear();
          batch.push_back(std::move(next));
          continue;
        }
        auto [at, fresh] = merged.try_emplace({next.report.target(), next.report.chain()}, batch.size());
        if (!fresh) {  // (a fresh entry's index is one past the end of batch)
          failover::v1::ReportOutcomeRequest& into = batch[at->second].report;
          if (!into.has_report_id() && std::max<uint32_t>(into.count(), 1) < kMaxCount) {
            into.set_count(std::max<uint32_t>(into.count(), 1) + std::max<uint32_t>(next.report.count(), 1));
            continue;
          }
        }
        at->second = batch.size();
        batch.push_back(std::move(next));
      }
    }
    if (batch.empty()) continue;
    for (Relayed& r : batch) StampRelayed(&r.report);
    std::string address;
    std::shared_ptr<grpc::Channel> channel = LeaderChannel(&address);
    grpc::Status sent(grpc::StatusCode::UNAVAILABLE, "no leader");
    if (channel) {
      auto stub = failover::v1::DecisionService::NewStub(channel);
      grpc::ClientContext context;
      // Short: while a leader does not answer, followers must stop waiting on it soon.
      context.set_deadline(DeadlineIn(absl::Seconds(1)));
      if (!peer_token_.empty()) context.AddMetadata("authorization", "Bearer " + peer_token_);
      context.AddMetadata(api::kForwardedHeader, "1");
      failover::v1::StreamOutcomesResponse summary;
      auto writer = stub->StreamOutcomes(&context, &summary);
      for (const Relayed& r : batch) {
        if (!writer->Write(r.report)) break;
      }
      writer->WritesDone();
      sent = writer->Finish();
      if (sent.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        for (Relayed& r : batch) {
          if (!r.acked) continue;
          r.acked->done = true;
          r.acked->log_index = summary.cluster_log_index();
        }
        changed_.notify_all();
      }
    }
    leader_reachable_ = sent.ok();
    // A batch the leader could not take within the deadline is sent again
    // smaller, or it would time out again and again while the leader counts it.
    if (sent.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      relay_batch_ = std::max<size_t>(kRelayMinBatch, relay_batch_ / 2);
    } else if (sent.ok()) {
      relay_batch_ = std::min(kRelayBatch, relay_batch_ * 2);
    }
    if (!sent.ok()) {
      // Kept for the next leader (oldest first), up to the limit.
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = batch.rbegin(); it != batch.rend(); ++it) {
        if (it->acked) ++relay_waited_;
        relay_.push_front(std::move(*it));
      }
      while (relay_.size() > options_.relay_limit) DropOldestRelayedLocked();
    }
    if (!sent.ok() && !SleepFor(absl::Milliseconds(200))) break;
  }
}

// --- what the replica says about itself ---

void Replica::NoteEtcd(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  etcd_error_ = status.ok() ? "" : std::string(status.message());
  if (status.ok()) etcd_answered_ = std::chrono::steady_clock::now();
}

void Replica::Describe(failover::v1::ClusterStatus* out) const {
  out->set_role(IsLeader() ? failover::v1::ClusterStatus::ROLE_LEADER : failover::v1::ClusterStatus::ROLE_FOLLOWER);
  out->set_self(advertise_);
  out->set_applied_revision(applied_revision_.load());
  out->set_applied_index(last_index_.load());
  const uint64_t seen = seen_index_.load();
  const uint64_t applied = last_index_.load();
  out->set_lag(seen > applied ? seen - applied : 0);
  out->set_leader_changes(leader_changes_.load());
  std::lock_guard<std::mutex> lock(mu_);
  // Both come from etcd (the leader key's value, its error messages): sent
  // only as valid, bounded UTF-8.
  out->set_leader(SanitizeUtf8(leader_address_, 256));
  out->set_etcd_error(SanitizeUtf8(etcd_error_, 1024));
  out->set_log_error(SanitizeUtf8(log_error_, 1024));
  for (const ReplicaCard& card : replicas_) {
    failover::v1::ClusterStatus::Replica* replica = out->add_replicas();
    replica->set_address(SanitizeUtf8(card.address, 256));
    replica->set_version(SanitizeUtf8(card.version, 64));
    if (card.started != absl::InfinitePast()) api::TimeToProto(card.started, replica->mutable_started());
    replica->set_leader(!card.address.empty() && card.address == leader_address_);
  }
}

std::vector<prometheus::MetricFamily> Replica::CollectMetrics() const {
  std::vector<prometheus::MetricFamily> out;
  auto add = [&](const char* name, const char* help, prometheus::MetricType type, double value) {
    prometheus::MetricFamily& family = out.emplace_back();
    family.name = name;
    family.help = help;
    family.type = type;
    prometheus::ClientMetric& metric = family.metric.emplace_back();
    (type == prometheus::MetricType::Counter ? metric.counter.value : metric.gauge.value) = value;
  };
  const uint64_t seen = seen_index_.load();
  const uint64_t applied = last_index_.load();
  uint64_t dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dropped = relay_dropped_;
  }
  using prometheus::MetricType;
  add("failover_cluster_leader", "1 while this replica is the cluster's leader.", MetricType::Gauge,
      IsLeader() ? 1 : 0);
  add("failover_cluster_lag_entries", "Change log entries in etcd this replica has not applied yet.",
      MetricType::Gauge, static_cast<double>(seen > applied ? seen - applied : 0));
  add("failover_cluster_applied_index", "The last Change log entry this replica applied.", MetricType::Gauge,
      static_cast<double>(applied));
  add("failover_cluster_etcd_errors_total", "etcd calls that failed (each endpoint tried counts).",
      MetricType::Counter, static_cast<double>(etcd_->errors()));
  add("failover_cluster_leader_changes_total", "Times this replica became or stopped being the leader.",
      MetricType::Counter, static_cast<double>(leader_changes_.load()));
  add("failover_cluster_relay_dropped_total",
      "Outcomes not passed on to the leader because too many were waiting.", MetricType::Counter,
      static_cast<double>(dropped));
  return out;
}

bool Replica::WaitApplied(uint64_t index, absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return changed_.wait_for(lock, absl::ToChronoNanoseconds(timeout), [&] { return last_index_.load() >= index; });
}

}  // namespace failover::cluster
