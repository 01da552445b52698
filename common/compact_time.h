// An absl::Time in 8 bytes rather than 16, for the times an engine keeps per
// target and per chain by the ten thousand. It holds nanoseconds since the
// Unix epoch, with the infinities kept as the ends of the range; it reads and
// writes as the absl::Time it stands for. (Finer than a nanosecond is lost;
// nothing failoverd decides uses it.)
#pragma once

#include <cstdint>
#include <limits>

#include "absl/time/time.h"

namespace failover {

class CompactTime {
 public:
  CompactTime(absl::Time t = absl::InfinitePast()) : ns_(ToNanos(t)) {}  // NOLINT: stands for an absl::Time
  operator absl::Time() const { return FromNanos(ns_); }                 // NOLINT

  // The encoding itself, for times kept in a std::atomic<int64_t>.
  static constexpr int64_t kPast = std::numeric_limits<int64_t>::min();
  static constexpr int64_t kFuture = std::numeric_limits<int64_t>::max();
  static int64_t ToNanos(absl::Time t) {
    if (t == absl::InfinitePast()) return kPast;
    if (t == absl::InfiniteFuture()) return kFuture;
    // absl saturates a finite time beyond the range at its ends.
    return absl::ToUnixNanos(t);
  }
  static absl::Time FromNanos(int64_t ns) {
    if (ns == kPast) return absl::InfinitePast();
    if (ns == kFuture) return absl::InfiniteFuture();
    return absl::FromUnixNanos(ns);
  }

  friend bool operator==(CompactTime a, CompactTime b) { return a.ns_ == b.ns_; }
  friend bool operator!=(CompactTime a, CompactTime b) { return a.ns_ != b.ns_; }
  friend bool operator<(CompactTime a, CompactTime b) { return a.ns_ < b.ns_; }

 private:
  int64_t ns_;
};

}  // namespace failover
