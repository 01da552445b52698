// Runs the calls that wait off gRPC's callback threads. Those threads are few
// (two on a two-core machine) and also answer PickTarget and ReportOutcome,
// while a change waits until it is in etcd and on disk, and a follower waits
// for the leader's answer to a call it passed on: a few slow writes would
// stall every decision, and a replica passing calls to itself (leadership
// moving) would wait on its own busy threads until the callers gave up.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace failover::api {

class BlockingCalls {
 public:
  // `threads` run the calls; at most `queue_limit` more wait for one.
  BlockingCalls(size_t threads, size_t queue_limit);
  // Runs what is queued, then ends the threads.
  ~BlockingCalls();
  BlockingCalls(const BlockingCalls&) = delete;
  BlockingCalls& operator=(const BlockingCalls&) = delete;

  // Queues `call`; false (and `call` is not run) when the queue is full.
  [[nodiscard]] bool Submit(std::function<void()> call);

 private:
  void Run();

  const size_t queue_limit_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace failover::api
