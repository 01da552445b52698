// BlockingCalls: where calls that wait run, off gRPC's callback threads.
#include "server/api/blocking_calls.h"

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "gtest/gtest.h"

namespace failover::api {
namespace {

// Holds the pool's only thread until released.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  bool entered = false;
  void Pass() {
    std::unique_lock<std::mutex> lock(mu);
    entered = true;
    cv.notify_all();
    cv.wait(lock, [this] { return open; });
  }
  void AwaitEntered() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [this] { return entered; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
};

TEST(BlockingCallsTest, BeyondTheQueueACallIsRefusedAndNeverRun) {
  Gate gate;
  std::atomic<int> ran{0};
  std::atomic<bool> refused_ran{false};
  {
    BlockingCalls calls(1, 2);
    ASSERT_TRUE(calls.Submit([&] { gate.Pass(); }));
    gate.AwaitEntered();  // the thread is busy; the queue is empty
    EXPECT_TRUE(calls.Submit([&] { ++ran; }));
    EXPECT_TRUE(calls.Submit([&] { ++ran; }));
    EXPECT_FALSE(calls.Submit([&] { refused_ran = true; })) << "a third call waits beyond the queue's two";
    gate.Open();
  }  // stopping runs what was queued
  EXPECT_EQ(ran.load(), 2);
  EXPECT_FALSE(refused_ran.load());
}

TEST(BlockingCallsTest, CallsRunSideBySideUpToTheThreads) {
  // Four calls that each wait for all four to have started: they finish only
  // if four threads run them at once.
  std::mutex mu;
  std::condition_variable cv;
  int started = 0;
  std::atomic<int> finished{0};
  {
    BlockingCalls calls(4, 10);
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(calls.Submit([&] {
        std::unique_lock<std::mutex> lock(mu);
        ++started;
        cv.notify_all();
        if (cv.wait_for(lock, std::chrono::seconds(30), [&] { return started == 4; })) ++finished;
      }));
    }
  }
  EXPECT_EQ(finished.load(), 4);
}

}  // namespace
}  // namespace failover::api
