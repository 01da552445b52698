#include "storage/state_mirror.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "storage/records.h"

namespace failover {
namespace {

// One config or record in storage's encoding.
template <typename Record, typename Model>
std::string Encode(const Model& in, void (*encode)(const Model&, Record*)) {
  Record r;
  encode(in, &r);
  std::string out;
  r.SerializeToString(&out);
  return out;
}

// Decodes the `part` (config or state) of every entry of `from` that has one
// onto `out`. A record this mirror encoded itself always decodes; one that
// does not is a bug in records.cc, and a state missing it would be served as
// exact: stop.
template <typename Entries, typename Entry, typename Record, typename Model>
void DecodeAll(const Entries& from, std::optional<std::string> Entry::*part,
               bool (*decode)(const Record&, Model*), const char* what, std::vector<Model>* out) {
  out->reserve(from.size());
  for (const auto& [name, entry] : from) {
    const std::optional<std::string>& bytes = entry.*part;
    if (!bytes.has_value()) continue;
    Record r;
    out->emplace_back();
    if (!r.ParseFromString(*bytes) || !decode(r, &out->back())) {
      fprintf(stderr, "state mirror: the %s record of \"%s\" does not decode\n", what, name.c_str());
      abort();
    }
    out->back().name = name;  // keyed by name, as in the data dir
  }
}

}  // namespace

StateMirror::StateMirror(const RestoredState& start)
    : generation_(start.generation),
      pins_(start.pins),
      manual_(start.manual),
      next_sequence_(start.next_sequence),
      log_index_(start.log_index) {
  Put(start.targets, start.chains, start.health, start.chain_states);
}

void StateMirror::Put(const std::vector<TargetConfig>& targets, const std::vector<ChainConfig>& chains,
                      const std::vector<TargetStateRecord>& health,
                      const std::vector<ChainStateRecord>& chain_states) {
  for (const TargetConfig& t : targets) targets_[t.name].config = Encode(t, storage::EncodeTarget);
  for (const ChainConfig& c : chains) chains_[c.name].config = Encode(c, storage::EncodeChain);
  for (const TargetStateRecord& r : health) targets_[r.name].state = Encode(r, storage::EncodeHealth);
  for (const ChainStateRecord& r : chain_states) chains_[r.name].state = Encode(r, storage::EncodeChainState);
}

void StateMirror::Apply(const Change& change) {
  if (change.config_generation != 0) {
    Put(change.put_targets, change.put_chains, {}, {});
    for (const std::string& name : change.deleted_targets) {
      targets_.erase(name);
      manual_.erase(name);
    }
    for (const std::string& name : change.deleted_chains) {
      chains_.erase(name);
      pins_.erase(name);
    }
    generation_ = change.config_generation;
  }
  for (const PinRecord& p : change.pins) {
    if (p.target.empty()) {
      pins_.erase(p.chain);
    } else {
      pins_[p.chain] = p.target;
    }
  }
  for (const ManualFailoverRecord& m : change.manual) {
    if (m.active) {
      manual_[m.target] = RestoredManual{m.reason, m.since};
    } else {
      manual_.erase(m.target);
    }
  }
  Put({}, {}, change.targets, change.chains);
  next_sequence_ = std::max(next_sequence_, change.next_sequence);
  log_index_ = std::max(log_index_, change.log_index);
}

RestoredState StateMirror::State() const {
  RestoredState s;
  s.generation = generation_;
  DecodeAll(targets_, &Encoded::config, storage::DecodeTarget, "target", &s.targets);
  DecodeAll(chains_, &Encoded::config, storage::DecodeChain, "chain", &s.chains);
  s.pins = pins_;
  s.manual = manual_;
  DecodeAll(targets_, &Encoded::state, storage::DecodeHealth, "health", &s.health);
  DecodeAll(chains_, &Encoded::state, storage::DecodeChainState, "chain state", &s.chain_states);
  s.next_sequence = next_sequence_;
  s.log_index = log_index_;
  return s;
}

}  // namespace failover
