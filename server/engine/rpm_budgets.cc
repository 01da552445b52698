#include "server/engine/rpm_budgets.h"

#include <algorithm>
#include <cmath>

namespace failover {

uint32_t RpmLedger::Grant(const std::string& requester, const Ask& ask) {
  Book& book = books_[{ask.minute, ask.target}];
  if (book.shares.size() >= kMostRequesters && book.shares.count(requester) == 0) return 0;
  uint32_t& share = book.shares[requester];
  if (ask.give_back) {
    // What it planned is spent and stays counted; the rest it will not plan.
    book.total = book.total - share + ask.used;
    share = ask.used;
    return share;
  }
  // What the requester holds or already planned is spent or promised: it
  // stays its own (and counts against the cap) whatever the books said.
  const uint32_t owned = std::max({share, ask.held, ask.used});
  book.total += owned - share;
  share = owned;
  if (ask.want > share) {
    const uint64_t room = book.total < ask.cap ? ask.cap - book.total : 0;
    const auto more = static_cast<uint32_t>(std::min<uint64_t>(ask.want - share, room));
    share += more;
    book.total += more;
  }
  return share;
}

void RpmLedger::Forget(int64_t before_minute) {
  books_.erase(books_.begin(), books_.lower_bound({before_minute, std::string()}));
}

uint64_t RpmLedger::Granted(const std::string& target, int64_t minute) const {
  auto it = books_.find({minute, target});
  return it == books_.end() ? 0 : it->second.total;
}

std::vector<RpmLedger::Ask> PlanRpmAsks(const std::vector<Engine::RpmUse>& uses, int64_t minute,
                                        absl::Duration into, uint32_t sharers) {
  constexpr absl::Duration kAheadFrom = absl::Seconds(45);
  std::vector<RpmLedger::Ask> asks;
  const double seconds = std::max(1.0, absl::ToDoubleSeconds(into));
  for (const Engine::RpmUse& use : uses) {
    const uint32_t chunk = std::max<uint32_t>(1, use.cap / (4 * std::max<uint32_t>(sharers, 1)));
    const double pace = use.used / seconds;  // requests a second so far this minute
    const auto at_pace = [&](double s) { return static_cast<uint32_t>(std::min<double>(use.cap, std::ceil(pace * s))); };
    const uint32_t low = std::max(chunk, at_pace(1));
    const auto capped = [&](uint64_t n) { return static_cast<uint32_t>(std::min<uint64_t>(n, use.cap)); };
    if (!use.has_grant) {
      asks.push_back({use.target, minute, use.cap, capped(uint64_t{use.used} + low), 0, use.used});
    } else if (use.granted < use.cap && uint64_t{use.used} + low > use.granted) {
      asks.push_back({use.target, minute, use.cap, capped(uint64_t{use.used} + 2 * uint64_t{low}), use.granted,
                      use.used});
    }
    if (into >= kAheadFrom && !use.has_next_grant) {
      asks.push_back({use.target, minute + 1, use.cap, capped(std::max(chunk, at_pace(20))), 0, 0});
    }
  }
  return asks;
}

}  // namespace failover
