// A chain's retry budget (DESIGN 3.5): how many retries its callers may make
// for the first attempts it planned, so that a provider-wide outage does not
// turn every request into several. Not thread-safe: the chain's mutex guards it.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace failover {

class RetryBudget {
 public:
  // Retries and first attempts count over this long, in 1 s slices.
  static constexpr int kWindowSeconds = 10;

  void CountFirstAttempt(absl::Time now);
  // Spends one retry when at most max(ratio x first attempts, min_per_second
  // x the window) were made in the window, this one included. Otherwise
  // spends nothing and says why in `why`.
  bool TrySpend(double ratio, double min_per_second, absl::Time now, std::string* why);

 private:
  struct Slice {
    int64_t second = INT64_MIN;
    uint32_t firsts = 0;
    uint32_t retries = 0;
  };
  Slice& At(absl::Time now);
  std::array<Slice, kWindowSeconds> slices_{};
};

}  // namespace failover
