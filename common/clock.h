// Time source. The engine itself never reads a clock: every operation takes
// `now`. The service layer reads it from a Clock so tests can drive it by hand.
#pragma once

#include <chrono>

#include <mutex>
#include <shared_mutex>

#include "absl/base/thread_annotations.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace failover {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

// failoverd's clock: the wall time when it was made plus the monotonic time
// since. Holds, dwells and cooldowns are spans between two readings, so a
// step of the wall clock (an NTP jump, `date -s`) cannot stretch or cut them;
// the times shown and stored stay close to wall time.
class RealClock final : public Clock {
 public:
  // The sources are injectable so a test can step the wall clock.
  using WallSource = absl::Time (*)();
  using MonotonicSource = absl::Duration (*)();  // time since any fixed point
  static absl::Duration SteadyNow() {
    return absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
  }

  explicit RealClock(WallSource wall = &absl::Now, MonotonicSource monotonic = &SteadyNow)
      : monotonic_(monotonic), wall_at_start_(wall()), monotonic_at_start_(monotonic()) {}
  absl::Time Now() const override { return wall_at_start_ + (monotonic_() - monotonic_at_start_); }

 private:
  const MonotonicSource monotonic_;
  const absl::Time wall_at_start_;
  const absl::Duration monotonic_at_start_;
};

// A clock that moves only when told to.
class SimulatedClock final : public Clock {
 public:
  explicit SimulatedClock(absl::Time start = absl::FromUnixSeconds(1'800'000'000))
      : now_(start) {}
  absl::Time Now() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ += d;
  }
  void Set(absl::Time t) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ = t;
  }

 private:
  mutable std::mutex mu_;
  absl::Time now_;
};

}  // namespace failover
