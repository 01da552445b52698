#include "server/api/report_ids.h"

#include <algorithm>

namespace failover::api {

ReportIdWindow::ReportIdWindow(Options options)
    : window_(std::max<uint64_t>(64, options.window / 64 * 64)), max_senders_(std::max<size_t>(1, options.max_senders)) {}

void ReportIdWindow::Set(Sender& s, uint64_t seq, bool on) {
  uint64_t& word = s.seen[(seq % window_) / 64];
  const uint64_t bit = uint64_t{1} << (seq % 64);
  word = on ? word | bit : word & ~bit;
}

void ReportIdWindow::Note(const std::vector<CountedReport>& counted) {
  for (const CountedReport& r : counted) FirstTime(r.sender, r.sequence);
}

bool ReportIdWindow::FirstTime(absl::string_view sender, uint64_t sequence) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = senders_.find(sender);
  if (it == senders_.end()) {
    if (senders_.size() >= max_senders_) {
      senders_.erase(lru_.back());
      lru_.pop_back();
    }
    lru_.emplace_front(sender);
    it = senders_.emplace(std::string(sender), Sender{}).first;
    it->second.seen.assign(window_ / 64, 0);
    it->second.lru = lru_.begin();
  } else {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  }
  Sender& s = it->second;
  if (sequence > s.highest) {
    // The slots of the sequences the window moves over are cleared first.
    if (sequence - s.highest >= window_) {
      std::fill(s.seen.begin(), s.seen.end(), 0);
    } else {
      for (uint64_t q = s.highest + 1; q < sequence; ++q) Set(s, q, false);
    }
    s.highest = sequence;
    Set(s, sequence, true);
    return true;
  }
  if (s.highest - sequence >= window_ || Test(s, sequence)) return false;
  Set(s, sequence, true);
  return true;
}

size_t ReportIdWindow::senders() const {
  std::lock_guard<std::mutex> lock(mu_);
  return senders_.size();
}

}  // namespace failover::api
