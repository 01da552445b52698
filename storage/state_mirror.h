// The sum of Changes (common/change.h) as storage would read it back, held in
// memory. failoverd keeps one beside its engine so a FollowState stream can
// start from exactly the state its published Changes add up to, then carry on
// with the Changes after it (DESIGN 3.13); cluster mode takes its snapshots
// and resets from the same sum.
//
// It is a second copy of every config and record, so it keeps each one in
// storage's own encoding (records.proto, a few hundred bytes where the
// decoded objects take kilobytes) and decodes only when State() is asked for.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "common/change.h"

namespace failover {

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
  void Put(const std::vector<TargetConfig>& targets, const std::vector<ChainConfig>& chains,
           const std::vector<TargetStateRecord>& health, const std::vector<ChainStateRecord>& chain_states);

  // One object's config and state record, each serialized in storage's
  // encoding (TargetRecord and HealthRecord, or ChainRecord and
  // ChainStateRecord) after a byte that says what the bytes hold, or ""
  // for none (state_mirror.cc). Together, so an object costs one map entry,
  // not two.
  struct Encoded {
    std::string config;
    std::string state;
  };

  // B-trees: a std::map node costs 64 bytes beside each entry (a third of
  // the entry), tens of thousands of times over.
  using Entries = absl::btree_map<std::string, Encoded>;

  uint64_t generation_ = 0;
  Entries targets_;
  Entries chains_;
  std::map<std::string, std::string> pins_;
  std::map<std::string, RestoredManual> manual_;
  uint64_t next_sequence_ = 1;
  uint64_t log_index_ = 0;
};

}  // namespace failover
