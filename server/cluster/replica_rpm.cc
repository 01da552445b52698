// limits.rpm as budgets the leader leases out (DESIGN 3.12): the leader's
// books, and each replica's loop that asks for its shares.
#include <algorithm>

#include "failover/v1/decision.grpc.pb.h"
#include "server/api/decision_convert.h"
#include "server/api/rpm_leases.h"
#include "server/cluster/replica.h"
#include "server/cluster/replica_internal.h"

namespace failover::cluster {
namespace {

constexpr absl::Duration kRpmAskEvery = absl::Milliseconds(100);

}  // namespace

absl::Status Replica::LeaseRpm(const failover::v1::LeaseRpmRequest& request,
                               failover::v1::LeaseRpmResponse* response) {
  if (!IsLeader()) {
    return absl::UnavailableError("this replica is not the cluster's leader (leadership is moving); try again");
  }
  std::lock_guard<std::mutex> lock(rpm_mu_);
  return api::GrantRpmShares(request, RpmMinuteOf(clock_->Now()), /*single_node=*/false, engine_, &rpm_ledger_,
                             response);
}

void Replica::RunRpmLeases() {
  while (SleepFor(kRpmAskEvery)) {
    const failover::v1::LeaseRpmRequest request =
        api::RpmLeaseRequest(*engine_, clock_->Now(), engine_->rpm_replicas(), advertise_);
    if (request.asks_size() == 0) continue;
    failover::v1::LeaseRpmResponse response;
    if (IsLeader()) {
      if (!LeaseRpm(request, &response).ok()) continue;
    } else {
      std::string address;
      std::shared_ptr<grpc::Channel> channel = LeaderChannel(&address);
      if (!channel || address == advertise_) continue;
      grpc::ClientContext context;
      PrepareLeaderCall(&context);
      // Unanswered: this replica keeps what it holds; a minute it holds
      // nothing for is planned at its even part (Engine::Saturated).
      if (!failover::v1::DecisionService::NewStub(channel)->LeaseRpm(&context, request, &response).ok()) continue;
    }
    api::TakeRpmGrants(response, engine_);
  }
}

}  // namespace failover::cluster
