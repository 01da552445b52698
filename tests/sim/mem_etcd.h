// An etcd in one process, for the cluster simulator (DESIGN 3.14): the parts of
// etcd's v3 API a replica uses, with etcd's rules for them. One revision per
// write (a transaction's writes share it), every key's versions kept back to
// the compacted revision (ranges at an old revision, watches from one), Txn
// compares (a VALUE compare on a missing key fails; the others compare with
// zeros), leases that end on the simulated clock and take their keys with
// them, and watches that deliver every change in a range in revision order.
// tests/integration/etcd_conformance_test.cc runs the same checks against it
// and a real etcd, so what the simulator finds is what etcd would do.
//
// Each replica gets its own Client, which the simulator can cut off (every
// call fails UNAVAILABLE and its watches end) or make lose answers (the call
// is carried out, the answer says UNAVAILABLE), the faults a real network
// makes. Thread-safe: a watch's Next waits for changes, for tests that run
// replicas on their threads; a single-threaded simulator asks Ready first.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/pacer.h"
#include "server/cluster/etcd.h"

namespace failover::sim {

namespace etcdpb = ::etcdserverpb;

class MemEtcd {
 public:
  class Client;
  class MemWatch;
  // `pacer`: where watches wait (a simulation that runs its threads by turns).
  // Each call of a client's is then also a point where another thread may run first.
  explicit MemEtcd(const Clock* clock, Pacer* pacer = nullptr) : clock_(clock), pacer_(pacer), changed_(pacer) {}

  // A connection of one replica's.
  std::unique_ptr<Client> Connect();

  // Drops history before `revision` (etcd's compaction): ranges and watches
  // from before it are refused with OUT_OF_RANGE.
  absl::Status Compact(int64_t revision);
  int64_t revision() const;
  // Ends the leases whose time ran out on the clock (every call does this first).
  void ExpireLeases();
  // Whether `lease` is alive.
  bool LeaseAlive(int64_t lease) const;
  // Watches started and not yet destroyed, over every client.
  size_t OpenWatches() const;

 private:
  friend class Client;
  struct Version {
    int64_t revision = 0;
    bool deleted = false;
    mvccpb::KeyValue kv;  // unset when deleted
  };
  struct Lease {
    int64_t ttl_seconds = 0;
    absl::Time expires;
    std::set<std::string> keys;
  };
  struct Change {  // one key's change, for watches
    int64_t revision = 0;
    mvccpb::Event event;
  };

  // All below: mu_ held.
  void ExpireLocked();
  absl::Status CheckRevisionLocked(int64_t revision) const;
  // The key's value at `revision` (0: now), or null.
  const mvccpb::KeyValue* AtLocked(const std::string& key, int64_t revision) const;
  etcdpb::RangeResponse RangeLocked(const etcdpb::RangeRequest& request) const;
  bool CompareLocked(const etcdpb::Compare& compare) const;
  // Writes at `revision_ + 1`; `wrote` is set once a write happened there.
  absl::Status PutLocked(const etcdpb::PutRequest& request, etcdpb::PutResponse* response, bool* wrote);
  etcdpb::DeleteRangeResponse DeleteLocked(const std::string& key, const std::string& range_end, bool prev_kv,
                                           bool* wrote);
  absl::StatusOr<etcdpb::TxnResponse> TxnLocked(const etcdpb::TxnRequest& request);
  void RevokeLocked(int64_t lease);
  void HeaderLocked(etcdpb::ResponseHeader* header) const { header->set_revision(revision_); }

  const Clock* const clock_;
  Pacer* const pacer_;
  mutable std::mutex mu_;
  PacedCondition changed_;  // a write, a cut, a cancel: watches look again
  int64_t revision_ = 1;             // etcd's first revision
  int64_t compacted_ = 0;
  int64_t next_lease_ = 0x1000;
  std::map<std::string, std::vector<Version>> keys_;  // each key's versions, oldest first
  std::map<int64_t, Lease> leases_;
  std::vector<Change> changes_;  // since compacted_, in revision order
  std::set<MemWatch*> watches_;  // open ones
};

// A watch on MemEtcd: Etcd::Watch, and Ready for a simulator that must not block.
class MemEtcd::MemWatch final : public cluster::Etcd::Watch {
 public:
  MemWatch(MemEtcd* etcd, Client* client, const etcdpb::WatchCreateRequest& request);
  ~MemWatch() override;
  bool Next(etcdpb::WatchResponse* response) override;
  void Cancel() override;
  const absl::Status& status() const override { return status_; }
  // Whether Next would return now (something to deliver, or the end).
  bool Ready() const;

 private:
  friend class MemEtcd;
  // mu_ held: false once the watch has ended (status_ says why).
  bool AliveLocked();
  // mu_ held: fills `response` with what there is to deliver; false when nothing.
  bool TakeLocked(etcdpb::WatchResponse* response);
  bool Covers(const std::string& key) const;

  MemEtcd* const etcd_;
  Client* const client_;
  const std::string key_;
  const std::string range_end_;
  const uint64_t cuts_at_start_;
  int64_t next_revision_;  // guarded by etcd_->mu_, as are the two below
  bool cancelled_ = false;
  absl::Status status_;
};

class MemEtcd::Client final : public cluster::Etcd {
 public:
  explicit Client(MemEtcd* etcd) : etcd_(etcd) {}

  // Cut off: every call fails UNAVAILABLE and open watches end.
  void SetReachable(bool reachable);
  // The next `n` writes (Txn, Put, DeleteRange, Grant, Revoke) are carried out
  // and answered UNAVAILABLE, as when the answer is lost on the way.
  void LoseAnswers(int n);

  absl::StatusOr<etcdpb::RangeResponse> Range(const etcdpb::RangeRequest& request) override;
  absl::StatusOr<etcdpb::TxnResponse> Txn(const etcdpb::TxnRequest& request) override;
  absl::StatusOr<etcdpb::PutResponse> Put(const etcdpb::PutRequest& request) override;
  absl::StatusOr<etcdpb::DeleteRangeResponse> DeleteRange(const etcdpb::DeleteRangeRequest& request) override;
  absl::StatusOr<int64_t> Grant(absl::Duration ttl) override;
  absl::StatusOr<int64_t> KeepAlive(int64_t lease) override;
  void Revoke(int64_t lease) override;
  absl::StatusOr<std::unique_ptr<Watch>> StartWatch(const etcdpb::WatchCreateRequest& request) override;
  uint64_t errors() const override;

 private:
  friend class MemEtcd::MemWatch;
  // Before a call (no lock held): the call is on its way, and others may go first.
  void OnTheWay() {
    if (etcd_->pacer_ != nullptr) etcd_->pacer_->Yield();
  }
  // mu_ held: UNAVAILABLE while cut off.
  absl::Status ReachLocked(const char* what);
  // mu_ held, after a write: whether its answer is lost.
  bool LoseAnswerLocked(const char* what, absl::Status* lost);

  MemEtcd* const etcd_;
  bool reachable_ = true;  // guarded by etcd_->mu_, as are the two below
  int lose_answers_ = 0;
  uint64_t errors_ = 0;
  uint64_t cuts_ = 0;  // times cut off: a watch opened before a cut ends
};

}  // namespace failover::sim
