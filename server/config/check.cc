#include "server/config/check.h"

#include "absl/time/clock.h"
#include "server/config/config_file.h"
#include "server/engine/engine.h"

namespace failover::config {

absl::StatusOr<CheckSummary> CheckConfigPath(const std::string& path) { return CheckConfigPaths({path}); }

absl::StatusOr<CheckSummary> CheckConfigPaths(const std::vector<std::string>& paths) {
  absl::StatusOr<LoadedConfig> loaded = LoadConfigPaths(paths);
  if (!loaded.ok()) return loaded.status();
  Engine engine;
  ApplyOptions options;
  options.from_files = true;
  options.dry_run = true;
  const absl::StatusOr<ApplyResult> applied = engine.Apply(loaded->change, options, absl::Now());
  if (!applied.ok()) return Locate(*loaded, applied.status());
  CheckSummary summary;
  summary.files = loaded->files.size();
  summary.targets = loaded->change.targets.size();
  summary.chains = loaded->change.chains.size();
  return summary;
}

}  // namespace failover::config
