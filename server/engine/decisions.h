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
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/engine/engine.h"

namespace failover {

// ---------------------------------------------------------------------------
// Decisions: the id carries everything a report needs (chain, exclusions,
// whether replay is allowed, when it was made), so a pick stores nothing.
// Only a decision that saw a failure gets a record, for retries and the
// final error message.
// ---------------------------------------------------------------------------

// The text is "<epoch>-<seq>-<unix ms>-<exclude mask>-<flags>~<chain>", the
// numbers in lowercase hex without leading zeros. It is made and read on
// every local decision, so both are written out by hand: no allocation but
// the id's own buffer, which the caller reuses.
struct Engine::DecisionId {
  uint32_t epoch = 0;
  uint64_t seq = 0;
  absl::Time time;
  uint64_t exclude_mask = 0;
  bool single_attempt = false;
  absl::string_view chain;  // points into the text it was read from

  void Format(std::string* out) const {
    out->clear();
    AppendHex(epoch, out);
    out->push_back('-');
    AppendHex(seq, out);
    out->push_back('-');
    AppendHex(static_cast<uint64_t>(absl::ToUnixMillis(time)), out);
    out->push_back('-');
    AppendHex(exclude_mask, out);
    out->append(single_attempt ? "-1~" : "-0~");
    out->append(chain.data(), chain.size());
  }

  static bool Parse(absl::string_view text, DecisionId* out) {
    uint64_t fields[5];
    for (int i = 0; i < 5; ++i) {
      if (!TakeHex(&text, i < 4 ? '-' : '~', &fields[i])) return false;
    }
    if (text.empty()) return false;  // no chain
    out->epoch = static_cast<uint32_t>(fields[0]);
    out->seq = fields[1];
    out->time = absl::FromUnixMillis(static_cast<int64_t>(fields[2]));
    out->exclude_mask = fields[3];
    out->single_attempt = (fields[4] & 1) != 0;
    out->chain = text;
    return true;
  }

 private:
  static void AppendHex(uint64_t v, std::string* out) {
    char digits[16];
    char* p = digits + sizeof(digits);
    do {
      *--p = "0123456789abcdef"[v & 0xf];
      v >>= 4;
    } while (v != 0);
    out->append(p, digits + sizeof(digits) - p);
  }
  // Reads 1 to 16 hex digits and the `stop` after them off the front of `text`.
  static bool TakeHex(absl::string_view* text, char stop, uint64_t* out) {
    uint64_t v = 0;
    size_t i = 0;
    for (; i < text->size() && (*text)[i] != stop; ++i) {
      const char c = (*text)[i];
      int digit;
      if (c >= '0' && c <= '9') {
        digit = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        digit = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        digit = c - 'A' + 10;
      } else {
        return false;
      }
      v = v << 4 | static_cast<uint64_t>(digit);
    }
    if (i == 0 || i > 16 || i == text->size()) return false;
    text->remove_prefix(i + 1);
    *out = v;
    return true;
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
