#include "server/config_reloader.h"

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "server/api/release_memory.h"
#include "server/config/config_file.h"
#include "common/status_macros.h"
#include "server/log/log.h"

namespace failover {

ConfigReloader::ConfigReloader(std::string path, Engine* engine, const Clock* clock, Committer* committer,
                               std::function<void(bool accepted)> on_result)
    : path_(std::move(path)), engine_(engine), clock_(clock), committer_(committer), on_result_(std::move(on_result)) {}

ConfigReloader::~ConfigReloader() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (watcher_.joinable()) watcher_.join();
}

absl::Status ConfigReloader::Apply() {
  absl::MutexLock lock(&mu_);
  absl::Cleanup release = [] { api::ReleaseFreedMemorySoon(); };  // asked once the temporaries below are freed
  // A rejected version (one that does not parse, too) is not retried until
  // the files change again.
  fingerprint_ = config::Fingerprint(path_);
  if (gate_ && !gate_()) return absl::OkStatus();
  auto rejected = [&](absl::Status s) {
    ++rejected_in_a_row_;
    if (on_result_) on_result_(false);
    return s;
  };
  absl::StatusOr<config::LoadedConfig> loaded = config::LoadConfigPath(path_);
  if (!loaded.ok()) return rejected(loaded.status());
  ApplyOptions options;
  options.from_files = true;
  Committer::Scope changes(committer_);
  absl::StatusOr<ApplyResult> result = engine_->Apply(loaded->change, options, clock_->Now());
  if (!result.ok()) return rejected(config::Locate(*loaded, result.status()));
  if (absl::Status durable = changes.Await(); !durable.ok()) return rejected(durable);
  if (on_result_) on_result_(true);
  if (rejected_in_a_row_ > 0) {
    log::Info("config reload accepted again", {{"path", path_},
                                                {"rejected_before", rejected_in_a_row_}});
    rejected_in_a_row_ = 0;
  }
  for (const std::string& w : result->warnings) log::Warn(absl::StrCat("config: ", w));
  int changed = 0;
  for (const ConfigDiff& d : result->changes) changed += d.change != ConfigChangeKind::kUnchanged;
  log::Info("config applied", {{"path", path_},
                               {"files", loaded->files.size()},
                               {"changed", changed},
                               {"generation", result->generation}});
  return absl::OkStatus();
}

void ConfigReloader::Reload(const char* why) {
  const absl::Status s = Apply();
  if (s.ok()) return;
  log::Error(absl::StrCat("config reload (", why, ") rejected, the running config stays: ", s.message()));
}

void ConfigReloader::Watch(absl::Duration interval) {
  watcher_ = std::thread([this, interval] {
    absl::MutexLock lock(&mu_);
    while (!mu_.AwaitWithTimeout(absl::Condition(&stop_), interval)) {
      const bool changed = config::Fingerprint(path_) != fingerprint_;
      if (!changed) continue;
      mu_.Unlock();
      Reload("files changed");
      mu_.Lock();
    }
  });
}

}  // namespace failover
