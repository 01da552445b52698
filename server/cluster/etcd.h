// What a replica needs of etcd (DESIGN 3.12): the KV calls, leases and
// watches of etcd's v3 API, in etcd's own messages. EtcdClient speaks it to a
// real etcd over gRPC; the cluster simulator's in-memory etcd (tests/sim)
// keeps the same promises in one process, so the replica code it drives is
// the code that runs against etcd.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "etcd/etcdserver/etcdserverpb/rpc.pb.h"

namespace failover::cluster {

namespace etcdpb = ::etcdserverpb;

class Etcd {
 public:
  virtual ~Etcd() = default;

  [[nodiscard]] virtual absl::StatusOr<etcdpb::RangeResponse> Range(const etcdpb::RangeRequest& request) = 0;
  [[nodiscard]] virtual absl::StatusOr<etcdpb::TxnResponse> Txn(const etcdpb::TxnRequest& request) = 0;
  [[nodiscard]] virtual absl::StatusOr<etcdpb::PutResponse> Put(const etcdpb::PutRequest& request) = 0;
  [[nodiscard]] virtual absl::StatusOr<etcdpb::DeleteRangeResponse> DeleteRange(
      const etcdpb::DeleteRangeRequest& request) = 0;
  // A lease of `ttl` (whole seconds, at least one); returns its id.
  [[nodiscard]] virtual absl::StatusOr<int64_t> Grant(absl::Duration ttl) = 0;
  // Renews a lease once; returns the TTL left in seconds (0: the lease is gone).
  [[nodiscard]] virtual absl::StatusOr<int64_t> KeepAlive(int64_t lease) = 0;
  // Ends a lease and deletes the keys on it; errors are not reported (the
  // lease runs out anyway).
  virtual void Revoke(int64_t lease) = 0;

  // One watch stream. Next blocks until etcd sends something; false when the
  // stream ended (then `status()` says why: OUT_OF_RANGE when its start was
  // compacted away). Cancel may be called from another thread and makes Next
  // return false.
  class Watch {
   public:
    virtual ~Watch() = default;
    virtual bool Next(etcdpb::WatchResponse* response) = 0;
    virtual void Cancel() = 0;
    virtual const absl::Status& status() const = 0;
  };
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<Watch>> StartWatch(
      const etcdpb::WatchCreateRequest& request) = 0;

  // Calls that failed since start.
  virtual uint64_t errors() const = 0;
};

}  // namespace failover::cluster
