// Runs a simulated cluster's threads one at a time, on a simulated clock, in
// an order drawn from a seed (DESIGN 3.14). Each thread is a party: the
// simulator's own (Adopt) and every thread the replicas, committers and their
// watches start through the Pacer. Only the party holding the turn runs; it
// hands the turn on where the real code waits (a condition variable, a sleep,
// a join) or calls etcd (Yield: the call may take a while), and the next party
// is drawn from the ones that may run. When none may, the clock jumps to the
// earliest deadline among the waiting. So a seed replays its interleaving,
// not only its schedule, and a second of leases costs no second of the
// machine's time.
//
// A party must hand the turn on only where it holds no lock other than the
// one its wait lets go (the real code waits that way); a watchdog aborts, with
// every party's state, when the turn has not moved for 30 s of real time.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/pacer.h"
#include "tests/sim/rng.h"

namespace failover::sim {

class SimPacer final : public Pacer {
 public:
  SimPacer(SimulatedClock* clock, uint64_t seed);
  ~SimPacer() override;

  // The calling thread (the simulator's) becomes a party and holds the turn.
  void Adopt();
  // The simulator's thread: lets the others run for `d` of simulated time.
  void Sleep(absl::Duration d);
  // Threads started from now on belong to `group` (a replica's process).
  void SetGroup(int group);
  // The group's threads get no turn for `d` (a process stopped: SIGSTOP, a
  // long pause); its leases run out meanwhile as they would.
  void Pause(int group, absl::Duration d);
  // Turns given so far, and a digest of who got each and when: two runs of
  // one seed give equal ones.
  uint64_t turns() const;
  uint64_t digest() const;

  absl::Time Now() override { return clock_->Now(); }
  std::thread Start(std::function<void()> body) override;
  void Join(std::thread& thread) override;
  void Wait(std::unique_lock<std::mutex>& lock, const void* key, absl::Time deadline) override;
  void Notify(const void* key) override;
  void Yield() override;

 private:
  struct Party {
    int id = 0;
    int group = -1;
    enum State { kRunnable, kWaiting, kDone } state = kRunnable;
    const void* key = nullptr;       // what it waits to be notified of
    absl::Time deadline;             // and until when at the latest
    std::thread::id thread;
    std::condition_variable turn;  // told when it gets the turn
  };

  // mu_ held: when `p` may run next (InfiniteFuture: only once notified).
  absl::Time ReadyAtLocked(const Party& p) const;
  // mu_ held: gives the turn to a party that may run, moving the clock on
  // when none may yet.
  void PassLocked();
  // mu_ held: waits for `me`'s turn.
  void AwaitTurnLocked(std::unique_lock<std::mutex>& lock, Party* me);
  // mu_ held: the calling party waits (for `key` or `deadline`) and hands the turn on.
  void WaitLocked(std::unique_lock<std::mutex>& lock, const void* key, absl::Time deadline);
  std::string DescribeLocked() const;
  void Watchdog();

  SimulatedClock* const clock_;
  Rng rng_;
  mutable std::mutex mu_;
  Party* turn_ = nullptr;
  std::vector<std::unique_ptr<Party>> parties_;
  std::map<int, absl::Time> paused_until_;
  int group_ = -1;
  uint64_t turns_ = 0;
  uint64_t digest_ = 1469598103934665603ull;
  bool stopping_ = false;
  std::condition_variable watchdog_wake_;
  std::thread watchdog_;
};

}  // namespace failover::sim
