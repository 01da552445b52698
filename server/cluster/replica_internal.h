// What the parts of Replica share: limits, and the helpers for fenced writes.
// Replica's parts: replica.cc (start, stop, status), replica_writer.cc (the
// leader's fenced log writes and snapshots), replica_follower.cc (applying
// the log), replica_session.cc (elections and leadership), replica_peers.cc
// (calls passed to the leader, relayed outcomes), replica_rpm.cc (rpm caps
// leased from the leader).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "server/cluster/etcd.h"

namespace failover::cluster {

constexpr size_t kRangePage = 256;
constexpr size_t kRelayBatch = 1000;
constexpr size_t kRelayMinBatch = 16;
constexpr absl::Duration kRelayGather = absl::Milliseconds(10);
// How long a leader that refused ReportOutcomes is sent streams before it is asked again.
constexpr absl::Duration kAskForBatchesAgain = absl::Minutes(1);
constexpr uint32_t kMaxCount = 5000;  // under ReportOutcomeRequest.count's limit of 10,000

// The transaction succeeds only while `key` is the one created at `revision`:
// a leader's writes are fenced on the leader key it created (its term).
inline void RequireKeyCreatedAt(etcdpb::TxnRequest* txn, const std::string& key, int64_t revision) {
  etcdpb::Compare* compare = txn->add_compare();
  compare->set_key(key);
  compare->set_target(etcdpb::Compare::CREATE);
  compare->set_result(etcdpb::Compare::EQUAL);
  compare->set_create_revision(revision);
}

// A leader's fence: the transaction succeeds only while the leader key is
// the one it created in its term (`term`, the key's create revision) and is
// still on its lease. A key written over in place keeps its create revision,
// so the lease is what tells a key made again by hand, or by an impostor on
// another lease, from the leader's own.
inline void RequireLeaderKey(etcdpb::TxnRequest* txn, const std::string& key, int64_t term, int64_t lease) {
  RequireKeyCreatedAt(txn, key, term);
  etcdpb::Compare* own = txn->add_compare();
  own->set_key(key);
  own->set_target(etcdpb::Compare::LEASE);
  own->set_result(etcdpb::Compare::EQUAL);
  own->set_lease(lease);
}

// Replicas write the leader key on their lease; one on none was written by
// hand and belongs to no replica.
inline bool HeldByALease(const mvccpb::KeyValue& kv) { return kv.lease() != 0; }

inline std::chrono::system_clock::time_point DeadlineIn(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d);
}

}  // namespace failover::cluster
