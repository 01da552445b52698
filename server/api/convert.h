// Conversion between failover.v1 messages and the engine's own types (plans,
// verdicts, outcome facts, status views); the neutral model's conversions are
// in proto/model_convert.h. Errors are INVALID_ARGUMENT with the field path.
#pragma once

#include "failover/v1/admin.pb.h"
#include "failover/v1/decision.pb.h"
#include "proto/model_convert.h"
#include "server/engine/engine.h"
#include "server/engine/replay.h"

namespace failover::api {

// `now` (wall clock) places reset times given as dates in f.response.
[[nodiscard]] absl::StatusOr<OutcomeFacts> FailureFromProto(const v1::Failure& f, absl::string_view path,
                                                          absl::Time now);
v1::Verdict VerdictToProto(Verdict v);
void TargetStatusToProto(const TargetStatus& s, v1::TargetStatus* out);
void ChainStatusToProto(const ChainStatus& s, v1::ChainStatus* out);
void AttemptToProto(const PlannedAttempt& a, v1::Attempt* out);
void DiffToProto(const ConfigDiff& d, v1::ConfigDiff* out);
void TraceEntryToProto(const TraceEntry& e, v1::TraceEntry* out);
// One column of a Simulate answer: what `policy` did in the replay.
void SimulatedRunToProto(const ReplaySummary& run, const Policy& policy, v1::SimulatedRun* out);

}  // namespace failover::api
