// Pick and Report without a call around them: the checks that name a bad
// field, and the conversion between failover.v1 and the engine. Shared by the
// gRPC adapter (decision_service) and a client's local decisions, which must
// decide exactly as failoverd does without linking its server.
#pragma once

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "failover/v1/decision.pb.h"
#include "server/engine/engine.h"

namespace failover::api {

[[nodiscard]] absl::StatusOr<PickRequest> PickFromProto(const v1::PickTargetRequest& req);
void PlanToProto(const Plan& plan, v1::PickTargetResponse* resp);

// Checks every field, report_id's shape included (whether it was seen before
// is the caller's to know). `now` dates a failure's retry-after.
[[nodiscard]] absl::StatusOr<ReportRequest> ReportFromProto(const v1::ReportOutcomeRequest& req, absl::Time now);
// The outcomes one report stands for (count is 0 or 1 for a single one).
inline uint32_t OutcomesOf(const v1::ReportOutcomeRequest& req) { return req.count() > 1 ? req.count() : 1; }
void ReportResultToProto(const ReportResult& result, v1::ReportOutcomeResponse* resp);

// One round of asking for rpm shares (DESIGN 3.12), for a replica and for a
// client deciding locally alike: what `engine` should ask `requester`'s
// shares for now (no asks: nothing to ask), and the answer taken in.
// `sharers`: see PlanRpmAsks.
v1::LeaseRpmRequest RpmLeaseRequest(const Engine& engine, absl::Time now, uint32_t sharers,
                                    const std::string& requester);
void TakeRpmGrants(const v1::LeaseRpmResponse& response, Engine* engine);
// What a closing requester gives back: for every share `engine` holds, this
// minute's and the next's, a give-back ask that keeps only what it planned
// (no asks: it holds none).
v1::LeaseRpmRequest RpmGiveBackRequest(const Engine& engine, absl::Time now, const std::string& requester);

}  // namespace failover::api
