// Checks config files offline, exactly as failoverd would apply them (parse,
// then a dry run on an empty engine), for `failoverctl validate` and
// `failoverd --check-config`: the same file:line errors, no server needed.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace failover::config {

struct CheckSummary {
  size_t files = 0;
  size_t targets = 0;
  size_t chains = 0;
};

// The files under `path` are valid together; otherwise the first error, with
// its file and line.
[[nodiscard]] absl::StatusOr<CheckSummary> CheckConfigPath(const std::string& path);
[[nodiscard]] absl::StatusOr<CheckSummary> CheckConfigPaths(const std::vector<std::string>& paths);

}  // namespace failover::config
