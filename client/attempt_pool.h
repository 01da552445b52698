// The threads hedged attempts run on. A thread is kept and reused once its
// attempt returns; a new one starts only when every kept thread is busy, so a
// steady stream of hedged requests starts no threads at all.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace failover::client {

class AttemptPool {
 public:
  AttemptPool() = default;
  AttemptPool(const AttemptPool&) = delete;
  AttemptPool& operator=(const AttemptPool&) = delete;

  // Waits for the attempts still running (a losing hedge the caller no longer
  // waits for), then ends the threads.
  ~AttemptPool() {
    {
      std::unique_lock<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  void Run(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
      if (idle_ < tasks_.size()) threads_.emplace_back([this] { Work(); });
    }
    wake_.notify_one();
  }

  size_t threads() const {
    std::lock_guard<std::mutex> lock(mu_);
    return threads_.size();
  }

 private:
  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      ++idle_;
      wake_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      --idle_;
      if (tasks_.empty()) return;  // stopping, nothing left
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      task = nullptr;
      lock.lock();
    }
  }

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  size_t idle_ = 0;                          // threads waiting for a task; guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  std::vector<std::thread> threads_;         // guarded by mu_
};

}  // namespace failover::client
