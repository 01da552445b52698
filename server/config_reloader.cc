#include "server/config_reloader.h"

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "server/api/release_memory.h"
#include "server/config/config_file.h"
#include "common/status_macros.h"
#include "server/log/log.h"

namespace failover {

ConfigReloader::ConfigReloader(std::string path, Engine* engine, const Clock* clock, Committer* committer)
    : path_(std::move(path)), engine_(engine), clock_(clock), committer_(committer) {}

ConfigReloader::~ConfigReloader() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (watcher_.joinable()) watcher_.join();
}

absl::Status ConfigReloader::Apply() {
  absl::MutexLock lock(&mu_);
  absl::Cleanup release = [] { api::ReleaseFreedMemory(); };  // runs last, after the temporaries below are freed
  const std::string fingerprint = config::Fingerprint(path_);
  ASSIGN_OR_RETURN(config::LoadedConfig loaded, config::LoadConfigPath(path_));
  ApplyOptions options;
  options.from_files = true;
  Committer::Scope changes(committer_);
  absl::StatusOr<ApplyResult> result = engine_->Apply(loaded.change, options, clock_->Now());
  fingerprint_ = fingerprint;  // a rejected version is not retried until it changes again
  if (!result.ok()) return config::Locate(loaded, result.status());
  RETURN_IF_ERROR(changes.Await());
  for (const std::string& w : result->warnings) log::Warn(absl::StrCat("config: ", w));
  int changed = 0;
  for (const ConfigDiff& d : result->changes) changed += d.change != ConfigChangeKind::kUnchanged;
  log::Info("config applied", {{"path", path_},
                               {"files", std::to_string(loaded.files.size())},
                               {"changed", std::to_string(changed)},
                               {"generation", std::to_string(result->generation)}});
  return absl::OkStatus();
}

void ConfigReloader::Reload(const char* why) {
  const absl::Status s = Apply();
  if (!s.ok()) {
    log::Error(absl::StrCat("config reload (", why, ") rejected, the running config stays: ", s.message()));
  }
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
