// Conversion between failover.v1 messages and the neutral model (common/):
// configuration objects, durations, times, states and events. Inputs are
// checked here for what only the wire can get wrong (malformed durations,
// unknown enum values, unknown reason names); the engine validates the rest.
// Errors are INVALID_ARGUMENT with the field path. failoverctl uses this
// without linking the engine.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model.h"
#include "failover/v1/admin.pb.h"
#include "failover/v1/decision.pb.h"
#include "failover/v1/types.pb.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/timestamp.pb.h"

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
[[nodiscard]] absl::StatusOr<Policy> PolicyFromProto(const v1::Policy& p, absl::string_view path);
void PolicyToProto(const Policy& p, v1::Policy* out);
void TargetToProto(const TargetConfig& t, v1::Target* out);
void ChainToProto(const ChainConfig& c, v1::Chain* out);

v1::HealthState HealthToProto(HealthState s);
v1::ChainState ChainStateToProto(ChainState s);
v1::FailureReason ReasonToProto(Reason r);
v1::TransitionSource SourceToProto(Source s);
v1::SwitchReason SwitchReasonToProto(SwitchReason r);
v1::ConfigObjectKind ObjectToProto(ConfigObject o);
v1::ConfigChange ChangeToProto(ConfigChangeKind c);

void EventToProto(const Event& e, v1::Event* out);
// The inverse of EventToProto.
Event EventFromProto(const v1::Event& in);

}  // namespace failover::api
