// The ids of reports already counted (DESIGN 3.14, invariant 4): a client that
// resends a batch whose call failed, or a cluster follower that relays again,
// counts nothing twice.
//
// Per sender: the highest sequence seen and a bitmap of the `window`
// sequences below it. An id older than the window is taken as counted: a
// resend that late is far likelier than a first send. Senders are forgotten
// least recently heard first once there are more than `max_senders`; a
// forgotten sender's resend would count again, so the bound is generous.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "common/change.h"

namespace failover::api {

class ReportIdWindow {
 public:
  struct Options {
    uint64_t window = 16384;  // sequences per sender; a multiple of 64
    size_t max_senders = 4096;
  };
  ReportIdWindow() : ReportIdWindow(Options()) {}
  explicit ReportIdWindow(Options options);

  // True the first time (sender, sequence) is seen: count it. False for an id
  // seen before or older than the sender's window: count nothing.
  bool FirstTime(absl::string_view sender, uint64_t sequence);
  // Marks ids as seen: reports counted elsewhere (before a restart, or by the
  // leader that wrote a log entry).
  void Note(const std::vector<CountedReport>& counted);
  size_t senders() const;

 private:
  struct Sender {
    uint64_t highest = 0;
    std::vector<uint64_t> seen;  // bit (s % window) for s in (highest - window, highest]
    std::list<std::string>::iterator lru;
  };
  bool Test(const Sender& s, uint64_t seq) const { return (s.seen[(seq % window_) / 64] >> (seq % 64)) & 1; }
  void Set(Sender& s, uint64_t seq, bool on);

  const uint64_t window_;
  const size_t max_senders_;
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, Sender> senders_;  // guarded by mu_
  std::list<std::string> lru_;                        // most recent first; guarded by mu_
};

}  // namespace failover::api
