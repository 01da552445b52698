// LeaseRpm answered from a ledger (DESIGN 3.12): by a cluster's leader, for
// its replicas and for clients deciding locally, or by a single node, for
// those clients. What a single node plans itself is the cap less what it
// leased out: its engine's grant for the minute shrinks as the clients'
// shares grow, so the node and its clients together plan the cap.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "failover/v1/decision.pb.h"
#include "server/engine/engine.h"
#include "server/engine/rpm_budgets.h"

namespace failover::api {

// Checks the asks' minutes against `now_minute` (the answering process's
// clock) and answers each ask whose target has a limits.rpm. `single_node`:
// the engine is the one process that plans besides the requesters. The
// caller holds whatever guards `ledger`.
absl::Status GrantRpmShares(const v1::LeaseRpmRequest& request, int64_t now_minute, bool single_node, Engine* engine,
                            RpmLedger* ledger, v1::LeaseRpmResponse* response);

}  // namespace failover::api
