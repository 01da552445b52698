// The engine's space-saving types: SmallMutex (a 4-byte lock) and RareString
// (an 8-byte string while empty). They stand in for std::mutex and
// std::string in every target's and chain's runtime, so each must behave as
// the type it replaces.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/rare_string.h"
#include "common/small_mutex.h"
#include "gtest/gtest.h"

namespace failover {
namespace {

TEST(SmallMutexTest, IsFourBytes) { EXPECT_EQ(sizeof(SmallMutex), 4u); }

TEST(SmallMutexTest, KeepsOthersOutWhileHeld) {
  SmallMutex mu;
  ASSERT_TRUE(mu.try_lock());
  std::atomic<bool> tried{false};
  std::atomic<bool> entered{false};
  std::thread other([&] {
    const bool got = mu.try_lock();  // held by the test's thread until `tried` is seen
    EXPECT_FALSE(got);
    if (got) mu.unlock();
    tried = true;
    std::lock_guard<SmallMutex> lock(mu);  // waits here (spins, then sleeps on the futex)
    entered = true;
  });
  while (!tried.load()) std::this_thread::yield();
  // The other thread cannot be in while this one holds the lock, however
  // long it runs meanwhile.
  for (int i = 0; i < 1000; ++i) {
    EXPECT_FALSE(entered.load());
    std::this_thread::yield();
  }
  mu.unlock();  // wakes it if it sleeps
  other.join();
  EXPECT_TRUE(entered.load());
  EXPECT_TRUE(mu.try_lock());
  mu.unlock();
}

TEST(SmallMutexTest, NoIncrementIsLostUnderContention) {
  // More threads than this machine has cores, so holders are preempted and
  // waiters go to sleep: the path where a wake-up could be missed.
  constexpr int kThreads = 8;
  constexpr int kRounds = 20000;
  SmallMutex mu;
  uint64_t counter = 0;  // plain: only the lock orders the increments
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        std::lock_guard<SmallMutex> lock(mu);
        const uint64_t read = counter;
        if (i % 64 == 0) std::this_thread::yield();  // held across a reschedule now and then
        counter = read + 1;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(counter, uint64_t{kThreads} * kRounds);
}

TEST(RareStringTest, TakesAPointerAndReadsAsAString) {
  EXPECT_EQ(sizeof(RareString), sizeof(void*));
  RareString s;
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(s.str(), "");
  s = std::string("probe: connection refused");
  EXPECT_FALSE(s.empty());
  const std::string& read = s;
  EXPECT_EQ(read, "probe: connection refused");
  EXPECT_TRUE(s == "probe: connection refused");
  EXPECT_TRUE(s != "other");
}

TEST(RareStringTest, CopiesAreDeepAndEmptyingFrees) {
  RareString a;
  a = std::string("pinned-target");
  RareString b = a;
  a = std::string("another");
  EXPECT_EQ(b.str(), "pinned-target");
  EXPECT_EQ(a.str(), "another");
  b = a;
  EXPECT_EQ(b.str(), "another");
  a = std::string();
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(b.str(), "another");
  b.clear();
  EXPECT_TRUE(b.empty());
  RareString moved = std::move(a);
  EXPECT_TRUE(moved.empty());
}

}  // namespace
}  // namespace failover
