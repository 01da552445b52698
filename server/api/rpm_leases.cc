#include "server/api/rpm_leases.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace failover::api {

absl::Status GrantRpmShares(const v1::LeaseRpmRequest& request, int64_t now_minute, bool single_node, Engine* engine,
                            RpmLedger* ledger, v1::LeaseRpmResponse* response) {
  for (int i = 0; i < request.asks_size(); ++i) {
    const int64_t minute = request.asks(i).minute();
    if (minute < now_minute - 1 || minute > now_minute + 1) {
      return absl::InvalidArgumentError(absl::StrCat("asks[", i, "].minute: ", minute, " is not within a minute of ",
                                                     single_node ? "failoverd's" : "the leader's", " (", now_minute,
                                                     ")"));
    }
  }
  ledger->Forget(now_minute - 1);
  for (const v1::RpmAsk& ask : request.asks()) {
    const uint32_t cap = engine->RpmCap(ask.target());
    if (cap == 0) continue;  // no such target, or no cap (any more)
    // A single node's own planning so far is out of the requesters' reach.
    const uint32_t planned_here = single_node ? std::min(cap, engine->RpmUsed(ask.target(), ask.minute())) : 0;
    const uint32_t granted = ledger->Grant(request.requester(), {ask.target(), ask.minute(), cap - planned_here,
                                                                 std::min(ask.want(), cap), ask.held(), ask.used(),
                                                                 ask.give_back()});
    if (single_node) {
      const uint64_t leased = std::min<uint64_t>(cap, ledger->Granted(ask.target(), ask.minute()));
      engine->SetRpmGrant(ask.target(), ask.minute(), static_cast<uint32_t>(cap - leased));
      engine->LeaseRpm(true);
    }
    v1::RpmGrant* grant = response->add_grants();
    grant->set_target(ask.target());
    grant->set_minute(ask.minute());
    grant->set_requests(granted);
  }
  return absl::OkStatus();
}

}  // namespace failover::api
