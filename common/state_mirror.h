// The sum of Changes (common/change.h) kept as plain records: what storage
// would read back, held in memory. failoverd keeps one beside its engine so a
// FollowState stream can start from exactly the state its published Changes
// add up to, then carry on with the Changes after it (DESIGN 3.13).
#pragma once

#include <map>
#include <set>
#include <string>

#include "common/change.h"

namespace failover {

// The Change that turns a state holding `targets_now` and `chains_now` into
// exactly `to`: every object of `to` put with its records (a target without a
// health record gets a fresh one, an unpinned chain an unpin, a target without
// a manual failover a cancel), the rest deleted. Carries `to`'s next sequence
// and log index.
Change ReplaceWith(const RestoredState& to, const std::set<std::string>& targets_now,
                   const std::set<std::string>& chains_now);

class StateMirror {
 public:
  explicit StateMirror(const RestoredState& start = {});

  // Adds one Change, with the meaning storage gives it (Store::Write).
  void Apply(const Change& change);
  // The state as storage would restore it.
  RestoredState State() const;
  uint64_t next_sequence() const { return next_sequence_; }
  uint64_t log_index() const { return log_index_; }

 private:
  uint64_t generation_ = 0;
  std::map<std::string, TargetConfig> targets_;
  std::map<std::string, ChainConfig> chains_;
  std::map<std::string, std::string> pins_;
  std::map<std::string, RestoredManual> manual_;
  std::map<std::string, TargetStateRecord> health_;
  std::map<std::string, ChainStateRecord> chain_states_;
  uint64_t next_sequence_ = 1;
  uint64_t log_index_ = 0;
};

}  // namespace failover
