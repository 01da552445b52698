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

#include "absl/container/btree_set.h"
#include "absl/strings/string_view.h"
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

  // One object: its name, its config part and its state part, each part ""
  // or a tagged record in storage's encoding (state_mirror.cc), packed into
  // one string. An object then costs one allocation of exactly its size and
  // a 32-byte slot in a B-tree, where a name and two strings beside it cost
  // three allocations and a slot three times as large. The name inside never
  // changes, so the part after it may be rewritten in place.
  struct Entry {
    mutable std::string packed;
  };
  static absl::string_view NameOf(const Entry& e);
  struct ByName {
    using is_transparent = void;
    bool operator()(const Entry& a, const Entry& b) const { return NameOf(a) < NameOf(b); }
    bool operator()(const Entry& a, absl::string_view b) const { return NameOf(a) < b; }
    bool operator()(absl::string_view a, const Entry& b) const { return a < NameOf(b); }
  };
  using Entries = absl::btree_set<Entry, ByName>;
  enum class Part { kConfig, kState };
  static void SetPart(Entries* entries, absl::string_view name, Part part, std::string bytes);
  template <typename Record, typename Model>
  static void DecodeAll(const Entries& from, Part part, bool (*decode)(const Record&, Model*), const char* what,
                        std::vector<Model>* out);

  uint64_t generation_ = 0;
  Entries targets_;
  Entries chains_;
  std::map<std::string, std::string> pins_;
  std::map<std::string, RestoredManual> manual_;
  uint64_t next_sequence_ = 1;
  uint64_t log_index_ = 0;
};

}  // namespace failover
