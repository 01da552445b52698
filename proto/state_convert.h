// Conversion between Changes and whole states (common/change.h) and the
// FollowState messages: how failoverd's state reaches an engine in another
// process (a client deciding locally, DESIGN 3.13). Inputs are checked for
// what only the wire can get wrong (unknown enum values, malformed configs);
// the engine validates the rest. Errors are INVALID_ARGUMENT with the field path.
#pragma once

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "common/change.h"
#include "failover/v1/decision.pb.h"

namespace failover::api {

namespace v1 = ::failover::v1;

// Events are left out: a follower numbers from next_sequence and learns of
// events from WatchEvents.
void ChangeToProto(const Change& c, v1::StateChange* out);
[[nodiscard]] absl::StatusOr<Change> ChangeFromProto(const v1::StateChange& in);

// The whole state in parts of about `part_bytes` or less (a single object
// larger than that gets a part of its own); every part but the last has `more`.
std::vector<v1::FollowedState> StateToProto(const RestoredState& state, size_t part_bytes);
// Adds one part to `state`; `index` names the part in errors.
[[nodiscard]] absl::Status AddStatePart(const v1::FollowedState& part, size_t index, RestoredState* state);

}  // namespace failover::api
