// Where failoverd's background threads wait and read the time, so that a
// simulation can run them one at a time on a simulated clock, its choices
// drawn from a seed (tests/sim/sim_pacer.h; DESIGN 3.14). failoverd itself
// passes no pacer: then a wait is the condition variable's and time is the
// monotonic clock's, exactly as without this file.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace failover {

class Pacer {
 public:
  virtual ~Pacer() = default;
  virtual absl::Time Now() = 0;
  // Runs `body` on a thread of its own, which runs only on its turns.
  virtual std::thread Start(std::function<void()> body) = 0;
  // Joins a thread Start made, letting the others run meanwhile.
  virtual void Join(std::thread& thread) = 0;
  // `lock` is held: lets it go, waits until `key` is notified or the time is
  // `deadline` (or earlier: callers check again), then takes it again.
  virtual void Wait(std::unique_lock<std::mutex>& lock, const void* key, absl::Time deadline) = 0;
  virtual void Notify(const void* key) = 0;
  // A point where another thread may run first (a call on its way over the
  // network); the calling thread holds no lock here.
  virtual void Yield() {}
};

// Time for spans and deadlines: the pacer's, else the monotonic clock's (so a
// step of the wall clock stretches no lease and cuts no wait).
inline absl::Time PacedNow(Pacer* pacer) {
  if (pacer != nullptr) return pacer->Now();
  return absl::UnixEpoch() + absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

inline std::thread StartThread(Pacer* pacer, std::function<void()> body) {
  return pacer != nullptr ? pacer->Start(std::move(body)) : std::thread(std::move(body));
}

inline void JoinThread(Pacer* pacer, std::thread& thread) {
  if (!thread.joinable()) return;
  if (pacer != nullptr) return pacer->Join(thread);
  thread.join();
}

// A condition variable whose waits go through the pacer when there is one.
// Deadlines are PacedNow's.
class PacedCondition {
 public:
  explicit PacedCondition(Pacer* pacer = nullptr) : pacer_(pacer) {}

  template <class Ready>
  bool WaitUntil(std::unique_lock<std::mutex>& lock, absl::Time deadline, Ready ready) {
    if (pacer_ == nullptr) {
      const absl::Duration left = std::max(deadline - PacedNow(nullptr), absl::ZeroDuration());
      return cv_.wait_for(lock, absl::ToChronoNanoseconds(left), ready);
    }
    while (!ready()) {
      if (pacer_->Now() >= deadline) return false;
      pacer_->Wait(lock, this, deadline);
    }
    return true;
  }
  template <class Ready>
  bool WaitFor(std::unique_lock<std::mutex>& lock, absl::Duration timeout, Ready ready) {
    if (pacer_ == nullptr) return cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout), ready);
    return WaitUntil(lock, pacer_->Now() + timeout, ready);
  }
  template <class Ready>
  void Wait(std::unique_lock<std::mutex>& lock, Ready ready) {
    if (pacer_ == nullptr) return cv_.wait(lock, ready);
    while (!ready()) pacer_->Wait(lock, this, absl::InfiniteFuture());
  }
  void NotifyAll() {
    if (pacer_ != nullptr) return pacer_->Notify(this);
    cv_.notify_all();
  }
  void NotifyOne() {
    if (pacer_ != nullptr) return pacer_->Notify(this);
    cv_.notify_one();
  }

 private:
  Pacer* const pacer_;
  std::condition_variable cv_;
};

}  // namespace failover
