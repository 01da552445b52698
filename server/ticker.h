// Runs the time-driven work about once a second: the engine's dwell expiry,
// targets without health checks coming back, decision expiry (their Changes
// go through the committer like any other); and once a minute, the age limit
// of the event log.
#pragma once

#include <functional>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/engine/engine.h"
#include "storage/store.h"

namespace failover {

class Ticker {
 public:
  // `every_tick`, if given, also runs once a tick (FollowState's heartbeat).
  Ticker(Engine* engine, const Clock* clock, storage::Store* store, size_t events_keep, absl::Duration events_max_age,
         std::function<void()> every_tick = {});
  // Stops.
  ~Ticker();
  Ticker(const Ticker&) = delete;
  Ticker& operator=(const Ticker&) = delete;
  // Ends the thread after the tick under way, if any.
  void Stop();

 private:
  void Run();

  Engine* const engine_;
  const Clock* const clock_;
  storage::Store* const store_;
  const size_t events_keep_;
  const absl::Duration events_max_age_;
  const std::function<void()> every_tick_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace failover
