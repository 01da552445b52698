// Time source. The engine itself never reads a clock: every operation takes
// `now`. The service layer reads it from a Clock so tests can drive it by hand.
#pragma once

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace failover {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

// A clock that moves only when told to.
class SimulatedClock final : public Clock {
 public:
  explicit SimulatedClock(absl::Time start = absl::FromUnixSeconds(1'800'000'000))
      : now_(start) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  void Set(absl::Time t) {
    absl::MutexLock lock(&mu_);
    now_ = t;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_;
};

}  // namespace failover
