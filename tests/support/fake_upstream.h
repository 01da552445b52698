// A fake OpenAI-compatible upstream on loopback for the probe tests: answers
// GET /v1/models and POST /v1/chat/completions, and can be told to answer
// 200, 429 or 500, to hang, or to drop the model from /models.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace failover::testing {

class FakeUpstream {
 public:
  enum class Mode { kOk, kRateLimited, kServerError, kHang, kDropModel };

  explicit FakeUpstream(std::string model);
  ~FakeUpstream();

  int port() const { return port_; }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1"; }
  void set_mode(Mode mode);
  int requests() const { return requests_.load(); }
  // The most requests it ever served at the same time.
  int max_in_flight() const { return max_in_flight_.load(); }
  // The Authorization header of the last request.
  std::string last_authorization() const;

 private:
  void Serve(int fd);
  void AcceptLoop();

  const std::string model_;
  int listen_fd_ = -1;
  int port_ = 0;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  Mode mode_ = Mode::kOk;
  bool stopping_ = false;
  std::string last_authorization_;
  std::atomic<int> requests_{0};
  std::atomic<int> in_flight_{0};
  std::atomic<int> max_in_flight_{0};
  std::thread acceptor_;
  std::vector<std::thread> connections_;
};

}  // namespace failover::testing
