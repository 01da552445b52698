#include "server/engine/retry_budget.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace failover {

RetryBudget::Slice& RetryBudget::At(absl::Time now) {
  const int64_t second = absl::ToUnixSeconds(now);
  Slice& s = slices_[static_cast<size_t>(((second % kWindowSeconds) + kWindowSeconds) % kWindowSeconds)];
  if (s.second != second) s = Slice{second, 0, 0};
  return s;
}

void RetryBudget::CountFirstAttempt(absl::Time now) { ++At(now).firsts; }

bool RetryBudget::TrySpend(double ratio, double min_per_second, absl::Time now, std::string* why) {
  const int64_t second = absl::ToUnixSeconds(now);
  uint64_t firsts = 0;
  uint64_t retries = 0;
  for (const Slice& s : slices_) {
    if (s.second > second - kWindowSeconds && s.second <= second) {
      firsts += s.firsts;
      retries += s.retries;
    }
  }
  const double allowed = std::max(ratio * static_cast<double>(firsts), min_per_second * kWindowSeconds);
  if (static_cast<double>(retries + 1) > allowed) {
    *why = absl::StrCat("retry budget spent: ", retries, " retries for ", firsts, " first attempts in the last ",
                        kWindowSeconds, "s (retry_budget.ratio ", ratio, ", min_per_second ", min_per_second, ")");
    return false;
  }
  ++At(now).retries;
  return true;
}

}  // namespace failover
