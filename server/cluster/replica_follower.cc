#include "server/cluster/replica.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "log_entry.pb.h"  // generated from server/cluster/log_entry.proto
#include "common/replace_with.h"
#include "proto/state_convert.h"
#include "server/api/release_memory.h"
#include "server/cluster/replica_internal.h"
#include "server/log/log.h"

namespace failover::cluster {

// --- following the log ---

absl::Status Replica::CatchUp(int64_t* revision) {
  etcdpb::RangeRequest leader;
  leader.set_key(keys_.Leader());
  absl::StatusOr<etcdpb::RangeResponse> held = etcd_->Range(leader);
  if (!held.ok()) return held.status();
  *revision = held->header().revision();
  SawLeaderKey(held->kvs_size() > 0 ? &held->kvs(0) : nullptr);
  if (absl::Status from_snapshot = InstallSnapshot(*revision); !from_snapshot.ok()) return from_snapshot;
  for (;;) {
    etcdpb::RangeRequest page;
    page.set_key(keys_.Log(cursor_.applied() + 1));
    page.set_range_end(keys_.LogEnd());
    page.set_limit(kRangePage);
    page.set_revision(*revision);
    absl::StatusOr<etcdpb::RangeResponse> entries = etcd_->Range(page);
    if (!entries.ok()) return entries.status();
    for (const auto& kv : entries->kvs()) {
      const std::optional<uint64_t> index = keys_.IndexOf(kv.key());
      if (!index) continue;
      if (!ApplyEntry(*index, kv)) return absl::AbortedError("log catch-up starts over");
    }
    if (!entries->more() || entries->kvs_size() == 0) break;
  }
  NoteEtcd(absl::OkStatus());
  {
    std::lock_guard<std::mutex> lock(mu_);
    cursor_.DeliveredThrough(*revision);
    changed_.NotifyAll();
  }
  return absl::OkStatus();
}

bool Replica::SawLeaderKey(const mvccpb::KeyValue* kv) {
  // A key on no lease is no leader's (a hand-written one): vacant.
  const bool held = kv != nullptr && HeldByALease(*kv);
  if (IsLeader() && (!held || kv->create_revision() != term_.load() || kv->lease() != lease_.load())) {
    // This replica's key was deleted, replaced, or written over in place (on
    // no lease or on another's): it leads no more, though its own lease lives
    // and, for a key written over in place, its fenced writes still pass.
    // Without this it would go on answering as the leader (admin calls, rpm
    // shares) until a write of its failed.
    StepDown(held ? "another replica holds the leader key" : "its leader key was deleted or written over on no lease");
  }
  SetLeaderAddress(held ? kv->value() : "");
  return held;
}

bool Replica::ApplyEntry(uint64_t index, const mvccpb::KeyValue& kv) {
  const std::string& value = kv.value();
  cursor_.Saw(index);
  switch (cursor_.PlaceOf(index)) {
    case LogCursor::Place::kHeld: return true;
    case LogCursor::Place::kMadeThisTerm: {
      // An entry of another term where this replica stamped one means another
      // leader wrote there: what this one made at that index was never written.
      LogEntry entry;
      if (!entry.ParseFromString(value) || entry.term() != term_.load()) {
        StepDown(absl::StrCat("another leader wrote log entry ", index));
        return false;
      }
      return true;
    }
    case LogCursor::Place::kGap:
      log::Warn("gap in the change log, reading it again", {{"expected", cursor_.applied() + 1}, {"got", index}});
      return false;
    case LogCursor::Place::kNext: break;
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
    NoteStuck(index, kv.mod_revision(), applied);
    SleepFor(absl::Seconds(1));
    return false;
  }
  cursor_.AppliedThrough(index);
  // A config change builds a new snapshot and frees the old one (and the
  // entry's copies) once the committer has written it: as on a leader, the
  // memory goes back to the system a tick later.
  if (change->config_generation != 0) api::ReleaseFreedMemorySoon();
  if (on_counted_reports_ && !change->counted_reports.empty()) on_counted_reports_(change->counted_reports);
  committer_->Submit(std::move(*change));
  NoteApplied();
  return true;
}

void Replica::NoteStuck(uint64_t index, int64_t revision, const absl::Status& why) {
  const std::string error = absl::StrCat("cannot apply change log entry ", index, " (", cursor_.lag(),
                                         " entries behind the log): ", why.message());
  bool was_applying;
  {
    std::lock_guard<std::mutex> lock(mu_);
    was_applying = log_error_.empty();
    log_error_ = error;
    stuck_revision_ = revision;
  }
  cursor_.Stuck(index);
  if (was_applying) {
    log::Error(absl::StrCat(error, "; not fit to serve until it is past it"), {{"applied_index", cursor_.applied()}});
    if (on_log_health_) on_log_health_(false);
  }
}

void Replica::NoteApplied() {
  if (!cursor_.PassedStuck()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    log_error_.clear();
  }
  log::Info("the change log applies again", {{"applied_index", cursor_.applied()}});
  if (on_log_health_) on_log_health_(true);
}

void Replica::RunLog() {
  absl::Duration backoff = absl::Milliseconds(100);
  while (!stopping_.load()) {
    if (reset_wanted_.exchange(false) && !ResetToLog()) break;
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
    // The leader key and the log, which sort next to each other, and nothing
    // else: a snapshot (the whole state, in parts) is read when one is
    // needed, so writing it does not stream the state to every replica.
    etcdpb::WatchCreateRequest create;
    create.set_key(keys_.Leader());
    create.set_range_end(keys_.LogEnd());
    create.set_start_revision(revision + 1);
    absl::StatusOr<std::unique_ptr<Etcd::Watch>> started = etcd_->StartWatch(create);
    if (!started.ok()) {
      NoteEtcd(started.status());
      if (!SleepFor(backoff)) break;
      backoff = std::min(backoff * 2, absl::Seconds(2));
      continue;
    }
    std::shared_ptr<Etcd::Watch> watch = std::move(started).value();
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
          const bool gone = !SawLeaderKey(event.type() == mvccpb::Event::DELETE ? nullptr : &kv);
          if (gone) {
            std::lock_guard<std::mutex> lock(mu_);
            campaign_now_ = true;  // the leader resigned or its lease ran out: stand at once
            changed_.NotifyAll();
          }
          continue;
        }
        const std::optional<uint64_t> index = keys_.IndexOf(kv.key());
        if (!index || event.type() != mvccpb::Event::PUT) continue;
        if (!ApplyEntry(*index, kv)) {
          restart = true;
          break;
        }
      }
      if (!restart) {
        std::lock_guard<std::mutex> lock(mu_);
        cursor_.DeliveredThrough(response.header().revision());
        changed_.NotifyAll();
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
  cursor_.KnowSnapshot(pointer.log_index());
  const uint64_t next = cursor_.applied() + 1;
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
  if (stopping_.load()) return absl::AbortedError("stopping");  // as ResetToLog: the feed may be behind
  std::set<std::string> targets;
  std::set<std::string> chains;
  const RestoredState now = feed_->State();
  for (const TargetConfig& t : now.targets) targets.insert(t.name);
  for (const ChainConfig& c : now.chains) chains.insert(c.name);
  Change full = ReplaceWith(state, targets, chains);
  if (absl::Status applied = engine_->ApplyChange(full, clock_->Now()); !applied.ok()) {
    return absl::DataLossError(absl::StrCat("the snapshot at log entry ", at, ": ", applied.message()));
  }
  cursor_.AppliedThrough(at);
  committer_->Submit(std::move(full));
  api::ReleaseFreedMemorySoon();  // the parts and the replaced state
  log::Info("this replica was behind the kept change log; started from the cluster's snapshot",
            {{"log_index", at}, {"was_at", next - 1}});
  NoteApplied();
  return absl::OkStatus();
}

bool Replica::ResetToLog() {
  // What this replica made and could not write is dropped by the committer
  // (it is not the leader); once nothing is queued, the feed's state is
  // exactly the log's up to the last entry stored here.
  while (!stopping_.load() && !committer_->AwaitIdle(absl::Seconds(1))) {
  }
  // Stopping with Changes still queued (its data dir refuses them): the feed
  // is behind what the engine applied, and going back to it would apply
  // those entries again, queued twice, published twice by the committer's
  // last try.
  if (stopping_.load()) return false;
  const RestoredState state = feed_->State();
  const absl::Status reset = engine_->ResetTo(state, clock_->Now());
  if (!reset.ok()) log::Error(absl::StrCat("cannot go back to the replicated state: ", reset.message()));
  cursor_.Reset(state.log_index);
  api::ReleaseFreedMemorySoon();  // the state gone back from
  log::Info("back to the replicated state; following the log", {{"applied_index", state.log_index}});
  return true;
}

}  // namespace failover::cluster
