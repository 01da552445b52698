// Decision ids and the records of decisions that saw a failure. Private to
// the engine (its nested types).
#pragma once

#include <array>
#include <deque>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "server/engine/engine.h"

namespace failover {

// ---------------------------------------------------------------------------
// Decisions: the id carries everything a report needs (chain, exclusions,
// whether replay is allowed, when it was made), so a pick stores nothing.
// Only a decision that saw a failure gets a record, for retries and the
// final error message.
// ---------------------------------------------------------------------------

struct Engine::DecisionId {
  uint32_t epoch = 0;
  uint64_t seq = 0;
  absl::Time time;
  uint64_t exclude_mask = 0;
  bool single_attempt = false;
  std::string chain;

  static bool Parse(absl::string_view text, DecisionId* out) {
    const size_t tilde = text.find('~');
    if (tilde == absl::string_view::npos) return false;
    out->chain = std::string(text.substr(tilde + 1));
    std::vector<absl::string_view> parts = absl::StrSplit(text.substr(0, tilde), '-');
    if (parts.size() != 5) return false;
    uint64_t epoch = 0, ms = 0, flags = 0;
    if (!absl::SimpleHexAtoi(parts[0], &epoch) || !absl::SimpleHexAtoi(parts[1], &out->seq) ||
        !absl::SimpleHexAtoi(parts[2], &ms) || !absl::SimpleHexAtoi(parts[3], &out->exclude_mask) ||
        !absl::SimpleHexAtoi(parts[4], &flags)) {
      return false;
    }
    out->epoch = static_cast<uint32_t>(epoch);
    out->time = absl::FromUnixMillis(static_cast<int64_t>(ms));
    out->single_attempt = (flags & 1) != 0;
    return !out->chain.empty();
  }
};

struct Engine::DecisionRecord {
  uint64_t tried_mask = 0;
  absl::flat_hash_map<std::string, uint32_t> retries_used;
  std::vector<std::pair<std::string, std::string>> failures;  // target, summary (last per target)

  void AddFailure(const std::string& target, const std::string& summary) {
    for (auto& [t, s] : failures) {
      if (t == target) {
        s = summary;
        return;
      }
    }
    failures.emplace_back(target, summary);
  }
  std::string Describe() const {
    return absl::StrJoin(failures, "; ", [](std::string* out, const auto& f) {
      absl::StrAppend(out, f.first, ": ", f.second);
    });
  }
};

class Engine::DecisionStore {
 public:
  explicit DecisionStore(size_t max_records) : max_per_shard_(std::max<size_t>(1, max_records / kShards)) {}

  // Copies the record for `seq` into `out`; false if there is none.
  bool Get(uint64_t seq, DecisionRecord* out) {
    Shard& s = shards_[seq % kShards];
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.records.find(seq);
    if (it == s.records.end()) return false;
    *out = it->second;
    return true;
  }
  void Put(uint64_t seq, absl::Time created, DecisionRecord record) {
    Shard& s = shards_[seq % kShards];
    std::lock_guard<std::mutex> lock(s.mu);
    auto [it, inserted] = s.records.insert_or_assign(seq, std::move(record));
    if (inserted) s.order.emplace_back(seq, created);
    while (s.records.size() > max_per_shard_ && !s.order.empty()) {
      s.records.erase(s.order.front().first);
      s.order.pop_front();
    }
  }
  void Erase(uint64_t seq) {
    Shard& s = shards_[seq % kShards];
    std::lock_guard<std::mutex> lock(s.mu);
    s.records.erase(seq);
  }
  void Expire(absl::Time cutoff) {
    for (Shard& s : shards_) {
      std::lock_guard<std::mutex> lock(s.mu);
      while (!s.order.empty() && s.order.front().second < cutoff) {
        s.records.erase(s.order.front().first);
        s.order.pop_front();
      }
    }
  }

 private:
  static constexpr size_t kShards = 16;
  struct Shard {
    std::mutex mu;
    absl::flat_hash_map<uint64_t, DecisionRecord> records;
    std::deque<std::pair<uint64_t, absl::Time>> order;
  };
  const size_t max_per_shard_;
  std::array<Shard, kShards> shards_;
};

}  // namespace failover
