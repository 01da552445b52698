// Config files: YAML documents declaring targets and chains (DESIGN 3.1, 3.7).
// A path is one file or a directory of *.yaml / *.yml files (not recursive);
// a file may hold several documents separated by `---`. Every error names the
// file, the line and the field.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model.h"

namespace failover::config {

// Where an object was declared.
struct Origin {
  std::string file;
  int line = 0;
};

struct LoadedConfig {
  // Every object carries its file in `managed_by`.
  ConfigChange change;
  std::vector<Origin> target_origins;  // parallel to change.targets
  std::vector<Origin> chain_origins;   // parallel to change.chains
  std::vector<std::string> files;      // the files read, in order (a directory's sorted)
};

[[nodiscard]] absl::StatusOr<LoadedConfig> LoadConfigPath(const std::string& path);
// Several paths read as one config (`failoverctl apply -f a.yaml -f dir/`): an
// object declared twice is an error naming both places, as within one path.
[[nodiscard]] absl::StatusOr<LoadedConfig> LoadConfigPaths(const std::vector<std::string>& paths);

// Parses one YAML text (for tests and for single files).
[[nodiscard]] absl::StatusOr<LoadedConfig> ParseConfigText(const std::string& text, const std::string& file);

// A policy on its own (`failoverctl simulate --policy FILE`): the settings a
// chain's `policy:` holds, with or without that key around them. Settings
// the text leaves out keep `base`'s values.
[[nodiscard]] absl::StatusOr<Policy> ParsePolicyText(const std::string& text, const std::string& file,
                                                     const Policy& base);

// Rewrites an engine error about `targets[i]` / `chains[i]` of the loaded
// change so it starts with the file and line that declared that object.
absl::Status Locate(const LoadedConfig& config, const absl::Status& error);

// A cheap fingerprint of the files under `path` (names, sizes, mtimes,
// inodes), to notice edits and Kubernetes' symlink swaps without reading them.
std::string Fingerprint(const std::string& path);

}  // namespace failover::config
