// Pages for GetStatus and List*: a large state is read in several responses,
// each well below gRPC's default 4 MiB receive limit.
#pragma once

#include <cstddef>
#include <cstdint>

namespace failover::api {

class Page {
 public:
  static constexpr size_t kDefaultSize = 500;
  static constexpr size_t kMaxSize = 1000;
  static constexpr size_t kMaxBytes = 2 << 20;

  // `requested`: the request's page_size (0 = the default; larger than the
  // most is cut to the most).
  explicit Page(uint32_t requested)
      : limit_(requested == 0 ? kDefaultSize : requested > kMaxSize ? kMaxSize : requested) {}

  // No further object fits: the response has `limit` objects or passed the byte bound.
  bool full() const { return count_ >= limit_ || bytes_ >= kMaxBytes; }
  void Add(size_t bytes) {
    ++count_;
    bytes_ += bytes;
  }

 private:
  size_t limit_;
  size_t count_ = 0;
  size_t bytes_ = 0;
};

}  // namespace failover::api
