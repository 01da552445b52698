// Applies the config files at start and again whenever they change: on SIGHUP
// and when their fingerprint (names, sizes, mtimes, inodes) changes, which
// also catches Kubernetes' ConfigMap symlink swap. A new config is validated
// whole and applied all-or-nothing; a bad one is logged with file, line and
// field, and the running config stays.
#pragma once

#include <functional>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "server/committer/committer.h"
#include "server/engine/engine.h"

namespace failover {

class ConfigReloader {
 public:
  // An apply returns once its Change is durable (`committer`). `on_result`
  // hears whether each load-and-apply was accepted (for metrics).
  ConfigReloader(std::string path, Engine* engine, const Clock* clock, Committer* committer,
                 std::function<void(bool accepted)> on_result = nullptr);
  ~ConfigReloader();

  // Loads and applies the files now.
  [[nodiscard]] absl::Status Apply();
  // Apply(), logging the outcome; for SIGHUP and the watcher.
  void Reload(const char* why);
  // Cluster mode: only the leader applies the files (`gate` says whether this
  // replica is it); a follower notes their version and applies nothing.
  void SetGate(std::function<bool()> gate) { gate_ = std::move(gate); }
  // Polls for changes every `interval` until destroyed.
  void Watch(absl::Duration interval);

 private:
  const std::string path_;
  Engine* engine_;
  const Clock* clock_;
  Committer* committer_;
  const std::function<void(bool)> on_result_;
  std::function<bool()> gate_;
  absl::Mutex mu_;  // one apply at a time
  std::string fingerprint_;
  int rejected_in_a_row_ = 0;  // versions rejected since the last accepted one
  bool stop_ = false;
  std::thread watcher_;
};

}  // namespace failover
