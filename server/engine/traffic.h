// A target's traffic over the last minutes, as callers report it: requests,
// errors and the latency of timed successes per minute, in a small ring (the
// status page's and failoverctl's "what has been happening"). Guarded by the
// target's mutex, which every counted outcome already holds.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "absl/time/time.h"

namespace failover {

struct TrafficMinute {
  absl::Time start;
  uint64_t requests = 0;
  uint64_t errors = 0;
  absl::Duration latency_sum;  // over `timed` successes
  uint64_t timed = 0;
};

class TrafficRing {
 public:
  static constexpr int kMinutes = 10;

  void Record(absl::Time now, bool failed, absl::Duration latency) {
    const auto minute = static_cast<int32_t>(absl::ToUnixSeconds(now) / 60);
    Slot& s = slots_[static_cast<size_t>(((minute % kMinutes) + kMinutes) % kMinutes)];
    if (s.minute != minute) {
      s = Slot();
      s.minute = minute;
    }
    ++s.requests;
    if (failed) ++s.errors;
    if (!failed && latency > absl::ZeroDuration()) {
      s.latency_us += absl::ToInt64Microseconds(std::min(latency, absl::Hours(1)));
      ++s.timed;
    }
  }

  // The minutes with traffic among the last kMinutes before the newest one
  // recorded, oldest first (a view has no clock: clients judge their age).
  std::vector<TrafficMinute> Minutes() const {
    int32_t newest = -1;
    for (const Slot& s : slots_) newest = std::max(newest, s.minute);
    std::vector<TrafficMinute> out;
    for (int32_t m = newest - kMinutes + 1; newest >= 0 && m <= newest; ++m) {
      const Slot& s = slots_[static_cast<size_t>(((m % kMinutes) + kMinutes) % kMinutes)];
      if (s.minute != m) continue;
      out.push_back(TrafficMinute{absl::FromUnixSeconds(int64_t{m} * 60), s.requests, s.errors,
                                  absl::Microseconds(s.latency_us), s.timed});
    }
    return out;
  }

 private:
  // 24 bytes: a ring is 240 (and is made only for a target with traffic).
  struct Slot {
    int64_t latency_us = 0;  // sum over `timed` successes
    int32_t minute = -1;     // minutes since the epoch
    uint32_t requests = 0;
    uint32_t errors = 0;
    uint32_t timed = 0;
  };
  std::array<Slot, kMinutes> slots_{};
};

}  // namespace failover
