// limits.rpm as budgets the leader leases out (DESIGN 3.12): the leader's
// books, and each replica's loop that asks for its shares.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "failover/v1/decision.grpc.pb.h"
#include "server/cluster/replica.h"
#include "server/cluster/replica_internal.h"

namespace failover::cluster {
namespace {

constexpr absl::Duration kRpmAskEvery = absl::Milliseconds(100);

int64_t MinuteOf(absl::Time t) { return absl::ToUnixSeconds(t) / 60; }

}  // namespace

absl::Status Replica::LeaseRpm(const failover::v1::LeaseRpmRequest& request,
                               failover::v1::LeaseRpmResponse* response) {
  if (!IsLeader()) {
    return absl::UnavailableError("this replica is not the cluster's leader (leadership is moving); try again");
  }
  const int64_t now = MinuteOf(clock_->Now());
  for (int i = 0; i < request.asks_size(); ++i) {
    const int64_t minute = request.asks(i).minute();
    if (minute < now - 1 || minute > now + 1) {
      return absl::InvalidArgumentError(absl::StrCat("asks[", i, "].minute: ", minute,
                                                     " is not within a minute of the leader's (", now, ")"));
    }
  }
  std::lock_guard<std::mutex> lock(rpm_mu_);
  rpm_ledger_.Forget(now - 1);
  for (const failover::v1::RpmAsk& ask : request.asks()) {
    const uint32_t cap = engine_->RpmCap(ask.target());
    if (cap == 0) continue;  // no such target, or no cap (any more)
    const uint32_t granted = rpm_ledger_.Grant(
        request.requester(), {ask.target(), ask.minute(), cap, std::min(ask.want(), cap), ask.held(), ask.used()});
    failover::v1::RpmGrant* grant = response->add_grants();
    grant->set_target(ask.target());
    grant->set_minute(ask.minute());
    grant->set_requests(granted);
  }
  return absl::OkStatus();
}

void Replica::RunRpmLeases() {
  while (SleepFor(kRpmAskEvery)) {
    const absl::Time now = clock_->Now();
    const int64_t minute = MinuteOf(now);
    const std::vector<Engine::RpmUse> uses = engine_->RpmUses(minute);
    if (uses.empty()) continue;
    const std::vector<RpmLedger::Ask> asks =
        PlanRpmAsks(uses, minute, now - absl::FromUnixSeconds(minute * 60), engine_->rpm_replicas());
    if (asks.empty()) continue;
    failover::v1::LeaseRpmRequest request;
    request.set_requester(advertise_);
    for (const RpmLedger::Ask& ask : asks) {
      failover::v1::RpmAsk* out = request.add_asks();
      out->set_target(ask.target);
      out->set_minute(ask.minute);
      out->set_want(ask.want);
      out->set_held(ask.held);
      out->set_used(ask.used);
    }
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
    for (const failover::v1::RpmGrant& grant : response.grants()) {
      engine_->SetRpmGrant(grant.target(), grant.minute(), grant.requests());
    }
  }
}

}  // namespace failover::cluster
