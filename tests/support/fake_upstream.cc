#include "tests/support/fake_upstream.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

namespace failover::testing {

FakeUpstream::FakeUpstream(std::string model) : model_(std::move(model)) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  listen(listen_fd_, 64);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

FakeUpstream::~FakeUpstream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  shutdown(listen_fd_, SHUT_RDWR);
  close(listen_fd_);
  acceptor_.join();
  for (auto& t : connections_) t.join();
}

void FakeUpstream::set_mode(Mode mode) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    mode_ = mode;
  }
  changed_.notify_all();
}

std::string FakeUpstream::last_authorization() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_authorization_;
}

void FakeUpstream::AcceptLoop() {
  for (;;) {
    const int fd = accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      close(fd);
      return;
    }
    connections_.emplace_back([this, fd] { Serve(fd); });
  }
}

void FakeUpstream::Serve(int fd) {
  const int now_in_flight = ++in_flight_;
  int seen = max_in_flight_.load();
  while (now_in_flight > seen && !max_in_flight_.compare_exchange_weak(seen, now_in_flight)) {
  }
  ++requests_;
  std::string request;
  char buf[4096];
  while (request.find("\r\n\r\n") == std::string::npos) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    request.append(buf, static_cast<size_t>(n));
  }
  std::string authorization;
  if (size_t at = request.find("Authorization: "); at != std::string::npos) {
    authorization = request.substr(at + 15, request.find("\r\n", at) - at - 15);
  }
  Mode mode;
  {
    std::unique_lock<std::mutex> lock(mu_);
    last_authorization_ = authorization;
    // A hanging upstream answers nothing until told otherwise (or stopped).
    changed_.wait(lock, [&] { return mode_ != Mode::kHang || stopping_; });
    mode = mode_;
  }
  const bool models = request.rfind("GET /v1/models", 0) == 0;
  int status = 200;
  std::string body;
  switch (mode) {
    case Mode::kRateLimited: status = 429; body = R"({"error":{"message":"rate limit reached"}})"; break;
    case Mode::kServerError: status = 500; body = R"({"error":{"message":"upstream exploded"}})"; break;
    case Mode::kDropModel:
      body = models ? R"({"object":"list","data":[{"id":"some-other-model"}]})" : R"({"choices":[]})";
      break;
    default:
      body = models ? R"({"object":"list","data":[{"id":"some-other-model"},{"id":")" + model_ + R"("}]})"
                    : R"({"choices":[{"message":{"content":"p"}}]})";
  }
  const std::string response = "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: application/json\r\n" +
                               "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  (void)!write(fd, response.data(), response.size());
  close(fd);
  --in_flight_;
}

}  // namespace failover::testing
