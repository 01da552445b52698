// Strict config validation (DESIGN 3.1). Every error is INVALID_ARGUMENT and
// starts with the field path, then says what is wrong and the value given.
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/model.h"

namespace failover {

inline constexpr size_t kMaxNameLength = 128;
inline constexpr size_t kMinChainTargets = 2;
inline constexpr size_t kMaxChainTargets = 64;
inline constexpr size_t kMaxLabels = 64;
inline constexpr size_t kMaxLabelBytes = 4096;
inline constexpr size_t kMaxPhrases = 256;
// Longest duration any setting takes; also keeps "inf" out of the arithmetic.
inline constexpr absl::Duration kMaxDuration = absl::Hours(24 * 30);

// 1..128 characters of A-Za-z0-9._:/@-
[[nodiscard]] absl::Status ValidateName(absl::string_view name, absl::string_view path);
[[nodiscard]] absl::Status ValidateTarget(const TargetConfig& target, absl::string_view path);
[[nodiscard]] absl::Status ValidatePolicy(const Policy& policy, absl::string_view path);
// `kind_of(name)` says what an existing name is: "target", "chain" or "" (none).
[[nodiscard]] absl::Status ValidateChain(
    const ChainConfig& chain, absl::string_view path,
    const std::function<std::string(const std::string&)>& kind_of);

}  // namespace failover
