// Cluster mode (DESIGN 3.12) as the gRPC handlers see it: is this replica the
// one that makes changes, and the way to the one that is. Single node: none.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "failover/v1/admin.pb.h"
#include "failover/v1/decision.pb.h"
#include "grpcpp/grpcpp.h"

namespace failover::api {

// Marks a call one replica passed to another, so it is never passed on twice.
inline constexpr char kForwardedHeader[] = "x-failoverd-forwarded";
// The leader's answer to a passed-on call: the Change log entry its changes are in.
inline constexpr char kLogIndexTrailer[] = "x-failoverd-log-index";

class LeaderLink {
 public:
  virtual ~LeaderLink() = default;
  virtual bool IsLeader() const = 0;
  // Sends `request` for `method` ("/failover.v1.AdminService/PinChain") to
  // the leader as the caller sent it (with its token) and waits for the
  // answer: the leader's, or UNAVAILABLE naming why there was none.
  virtual grpc::Status Forward(const std::string& method, const grpc::ServerContextBase& call,
                               const grpc::ByteBuffer& request, grpc::ByteBuffer* response) = 0;
  // Passes an outcome judged here on to the leader, which counts it; batched,
  // never waits.
  virtual void Relay(failover::v1::ReportOutcomeRequest report) = 0;
  // Relays `report` and waits (up to `timeout`) until the leader counted it
  // and this replica applied what that changed, so a failure that trips a
  // target is seen in the verdict and plans that follow here, as on a single
  // node. Does not wait while the leader cannot be reached.
  virtual void RelayAndWait(failover::v1::ReportOutcomeRequest report, absl::Duration timeout) = 0;
  // The last Change log entry made or applied here.
  virtual uint64_t LogIndex() const = 0;
  virtual void Describe(failover::v1::ClusterStatus* out) const = 0;
  // The leader: grants shares of targets' limits.rpm from its books
  // (GrantRpmShares). Called only on the leader.
  virtual absl::Status LeaseRpm(const failover::v1::LeaseRpmRequest& request,
                                failover::v1::LeaseRpmResponse* response) = 0;
};

}  // namespace failover::api
