// The cluster simulator's pacer: threads take turns on a simulated clock,
// in an order the seed draws, and the code they run waits as it would.
#include "tests/sim/sim_pacer.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace failover::sim {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

// Three threads that sleep, through a PacedCondition as the replica does,
// for 3, 1 and 2 s, then note when they woke; the simulator's thread sleeps
// 10 s. What the threads noted, and the turns they took.
struct Sleepers {
  std::vector<std::string> woke;
  uint64_t digest = 0;
};

Sleepers RunSleepers(uint64_t seed) {
  SimulatedClock clock(kStart);
  SimPacer pacer(&clock, seed);
  pacer.Adopt();
  std::mutex mu;
  PacedCondition never(&pacer);
  Sleepers out;
  std::vector<std::thread> threads;
  for (int seconds : {3, 1, 2}) {
    threads.push_back(pacer.Start([&, seconds] {
      for (int i = 0; i < 3; ++i) {
        std::unique_lock<std::mutex> lock(mu);
        never.WaitFor(lock, absl::Seconds(seconds), [] { return false; });
        out.woke.push_back(absl::StrCat(seconds, "s@", absl::ToInt64Seconds(clock.Now() - kStart)));
      }
    }));
  }
  pacer.Sleep(absl::Seconds(10));
  EXPECT_EQ(clock.Now(), kStart + absl::Seconds(10));
  for (std::thread& t : threads) pacer.Join(t);
  out.digest = pacer.digest();
  return out;
}

TEST(SimPacerTest, SleepsEndInTheOrderOfTheirDeadlinesOnTheSimulatedClock) {
  const absl::Time real_start = absl::Now();
  const Sleepers run = RunSleepers(7);
  // 9 s of sleeping took no 9 s of the machine's time, and each woke when
  // its time came, not before and not after.
  EXPECT_LT(absl::Now() - real_start, absl::Seconds(5));
  const std::vector<std::string> expected = {"1s@1", "2s@2", "1s@2", "3s@3", "1s@3",
                                             "2s@4", "3s@6", "2s@6", "3s@9"};
  // Two that wake at one instant go in the order the seed draws.
  std::vector<std::string> sorted = run.woke;
  std::vector<std::string> want = expected;
  std::sort(sorted.begin(), sorted.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(sorted, want);
  for (size_t i = 1; i < run.woke.size(); ++i) {
    const auto at = [](const std::string& s) { return std::stoi(s.substr(s.find('@') + 1)); };
    EXPECT_LE(at(run.woke[i - 1]), at(run.woke[i])) << "woke out of the clock's order";
  }
}

TEST(SimPacerTest, OneSeedTakesTheSameTurnsTwice) {
  const Sleepers first = RunSleepers(11);
  const Sleepers second = RunSleepers(11);
  EXPECT_EQ(first.woke, second.woke);
  EXPECT_EQ(first.digest, second.digest);
  // And the seed does choose: among several, some seed orders the ties
  // (1 s and 2 s at 2 s, 1 s and 3 s at 3 s, 3 s and 2 s at 6 s) otherwise.
  bool differs = false;
  for (uint64_t seed = 1; seed <= 20 && !differs; ++seed) differs = RunSleepers(seed).woke != first.woke;
  EXPECT_TRUE(differs);
}

TEST(SimPacerTest, ANoticeWakesAWaiterWithoutTheClockMoving) {
  SimulatedClock clock(kStart);
  SimPacer pacer(&clock, 1);
  pacer.Adopt();
  std::mutex mu;
  PacedCondition ready(&pacer);
  bool go = false;
  absl::Time woke;
  std::thread waiter = pacer.Start([&] {
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(ready.WaitFor(lock, absl::Hours(1), [&] { return go; }));
    woke = clock.Now();
  });
  pacer.Sleep(absl::Seconds(1));  // the waiter waits meanwhile
  {
    std::lock_guard<std::mutex> lock(mu);
    go = true;
  }
  ready.NotifyAll();
  pacer.Join(waiter);
  EXPECT_EQ(woke, kStart + absl::Seconds(1));
}

TEST(SimPacerTest, APausedGroupGetsNoTurnUntilThePauseEnds) {
  SimulatedClock clock(kStart);
  SimPacer pacer(&clock, 3);
  pacer.Adopt();
  std::mutex mu;
  PacedCondition ready(&pacer);
  bool go = false;
  absl::Time woke;
  pacer.SetGroup(1);
  std::thread paused = pacer.Start([&] {
    std::unique_lock<std::mutex> lock(mu);
    ready.Wait(lock, [&] { return go; });
    woke = clock.Now();
  });
  pacer.SetGroup(-1);
  pacer.Pause(1, absl::Seconds(4));
  {
    std::lock_guard<std::mutex> lock(mu);
    go = true;
  }
  ready.NotifyAll();
  pacer.Join(paused);
  EXPECT_EQ(woke, kStart + absl::Seconds(4));
}

}  // namespace
}  // namespace failover::sim
