// What every RPC handler needs: the engine, the time source and where events go.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/api/auth.h"
#include "server/api/blocking_calls.h"
#include "server/api/event_log.h"
#include "server/api/leader_link.h"
#include "server/api/metrics.h"
#include "server/api/outcome_trace.h"
#include "server/committer/committer.h"
#include "common/clock.h"
#include "server/engine/engine.h"

namespace failover::api {

class ChangeFeed;
class ReportIdWindow;

struct ServiceContext {
  Engine* engine = nullptr;
  const Clock* clock = nullptr;
  EventLog* events = nullptr;
  // Where FollowState streams come from; null: FollowState is UNIMPLEMENTED.
  ChangeFeed* changes = nullptr;
  // Where the engine's Changes become durable; an RPC answers once its own
  // are. Null (tests of the handlers alone): nothing is waited for.
  Committer* committer = nullptr;
  Metrics* metrics = nullptr;        // optional
  // The ids of reports counted (DESIGN 3.14, invariant 4); null: the decision
  // service keeps its own. The daemon's is seeded from the store, and in
  // cluster mode its log follower adds what each entry was counted from.
  ReportIdWindow* report_ids = nullptr;
  // Where counted outcomes are traced (DESIGN 3.17); optional. In cluster
  // mode only the leader traces: it counts every replica's outcomes.
  OutcomeTrace* trace = nullptr;
  // Reads the outcome trace (OutcomeTrace::Read on the data dir); null: ListTrace is UNIMPLEMENTED.
  std::function<absl::StatusOr<std::vector<TraceEntry>>(absl::Time from, absl::Time to, absl::string_view chain,
                                                        size_t limit, uint64_t after)>
      read_trace;
  const Authorizer* auth = nullptr;  // null: every call is allowed
  // Cluster mode: the way to the leader; null on a single node.
  LeaderLink* leader = nullptr;
  // Where calls that wait (changes, calls passed to the leader) run; null:
  // on gRPC's callback thread.
  BlockingCalls* blocking = nullptr;
  absl::Time started;
  std::string version;

  absl::Status Authorize(const grpc::ServerContextBase& ctx, Role role) const {
    return auth == nullptr ? absl::OkStatus() : auth->Check(ctx, role);
  }
  // Whether a call marked forwarded (x-failoverd-forwarded) really comes from
  // another replica: only a cluster leader receives relays, and with a tokens
  // file only a peer token may send them. Anything else is counted as any
  // caller's (the mark would hide its outcomes from this replica's metrics).
  bool FromAPeer(const grpc::ServerContextBase& ctx) const {
    if (leader == nullptr || !leader->IsLeader()) return false;
    return auth == nullptr || auth->IsPeer(ctx);
  }
};

}  // namespace failover::api
