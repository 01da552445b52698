#include "server/api/blocking_calls.h"

namespace failover::api {

BlockingCalls::BlockingCalls(size_t threads, size_t queue_limit) : queue_limit_(queue_limit) {
  for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

BlockingCalls::~BlockingCalls() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

bool BlockingCalls::Submit(std::function<void()> call) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() >= queue_limit_) return false;
    queue_.push_back(std::move(call));
  }
  wake_.notify_one();
  return true;
}

void BlockingCalls::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to answer
    std::function<void()> call = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    call();
    lock.lock();
  }
}

}  // namespace failover::api
