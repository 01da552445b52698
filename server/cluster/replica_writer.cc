#include "server/cluster/replica.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "log_entry.pb.h"  // generated from server/cluster/log_entry.proto
#include "proto/state_convert.h"
#include "server/cluster/replica_internal.h"
#include "server/log/log.h"

namespace failover::cluster {

// --- writing: the leader's Changes go to the log, fenced on its leadership ---

void Replica::Stamp(Change* change) {
  // Only a leader's changes take a place in the log. One made as leadership
  // was lost (its maker passed the engine's accepting gate before the
  // step-down) gets none (LogCursor), so a deposed replica never skips the
  // next real entry; Write drops it, and the engine goes back to the log's state.
  change->log_index = cursor_.Stamp();
}

absl::Status Replica::Write(const std::vector<const Change*>& changes, const LocalWrite& local) {
  std::vector<const Change*> fresh;  // made here and not in etcd yet
  const uint64_t in_etcd = cursor_.in_etcd();
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
      RequireLeaderKey(&txn, keys_.Leader(), term, lease_.load());
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
      cursor_.Written(fresh[next - 1]->log_index);
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

void Replica::Compact() {
  if (!IsLeader() || options_.log_keep == 0) return;
  if (!cursor_.DueForSnapshot(LogIndex(), options_.log_keep)) return;
  const RestoredState state = feed_->State();  // published: in etcd and here
  const uint64_t at = state.log_index;
  if (!cursor_.DueForSnapshot(at, options_.log_keep)) return;
  const int64_t term = term_.load();
  const std::vector<failover::v1::FollowedState> parts = api::StateToProto(state, options_.max_request_bytes / 3);
  // Fenced like every leader write, each part on its own (one transaction
  // would exceed etcd's request limit): a deposed leader writes none, so it
  // never overwrites what the next leader wrote at the same index.
  for (size_t i = 0; i < parts.size(); ++i) {
    etcdpb::TxnRequest part;
    RequireLeaderKey(&part, keys_.Leader(), term, lease_.load());
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
  RequireLeaderKey(&txn, keys_.Leader(), term, lease_.load());
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
  cursor_.KnowSnapshot(at);
  log::Info("change log compacted", {{"snapshot_at", at}, {"kept_from", keep_from}});
}

}  // namespace failover::cluster
