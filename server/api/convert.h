// Conversion between failover.v1 messages and the engine model. Inputs are
// checked here for what only the wire can get wrong (malformed durations,
// unknown enum values, unknown reason names); the engine validates the rest.
// Errors are INVALID_ARGUMENT with the field path.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "failover/v1/admin.pb.h"
#include "failover/v1/decision.pb.h"
#include "failover/v1/types.pb.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/timestamp.pb.h"
#include "server/engine/engine.h"

namespace failover::api {

namespace v1 = ::failover::v1;

[[nodiscard]] absl::StatusOr<absl::Duration> DurationFromProto(const google::protobuf::Duration& d,
                                                               absl::string_view path);
void DurationToProto(absl::Duration d, google::protobuf::Duration* out);
// Leaves `out` unset for InfinitePast (never happened).
void TimeToProto(absl::Time t, google::protobuf::Timestamp* out);
// Unset = InfinitePast.
absl::Time TimeFromProto(const google::protobuf::Timestamp& t);

[[nodiscard]] absl::StatusOr<TargetConfig> TargetFromProto(const v1::Target& t, absl::string_view path);
[[nodiscard]] absl::StatusOr<ChainConfig> ChainFromProto(const v1::Chain& c, absl::string_view path);
[[nodiscard]] absl::StatusOr<ConfigChange> ConfigChangeFromProto(const v1::ApplyRequest& req);
void TargetToProto(const TargetConfig& t, v1::Target* out);
void ChainToProto(const ChainConfig& c, v1::Chain* out);

[[nodiscard]] absl::StatusOr<OutcomeFacts> FailureFromProto(const v1::Failure& f, absl::string_view path);

v1::HealthState HealthToProto(HealthState s);
v1::ChainState ChainStateToProto(ChainState s);
v1::FailureReason ReasonToProto(Reason r);
v1::Verdict VerdictToProto(Verdict v);

void TargetStatusToProto(const TargetStatus& s, v1::TargetStatus* out);
void ChainStatusToProto(const ChainStatus& s, v1::ChainStatus* out);
void AttemptToProto(const PlannedAttempt& a, v1::Attempt* out);
void EventToProto(const Event& e, v1::Event* out);
// The inverse of EventToProto, for events read back from storage.
Event EventFromProto(const v1::Event& in);
void DiffToProto(const ConfigDiff& d, v1::ConfigDiff* out);

}  // namespace failover::api
