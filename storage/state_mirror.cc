#include "storage/state_mirror.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "storage/records.h"

namespace failover {
namespace {

// A kept part (an object's config or state record) is one byte that says
// what follows, then the record in storage's encoding; "" keeps none. (A
// record can encode to no bytes at all.) A chain whose policy is the default
// leaves it out: a third of a chain's record, and most chains have it.
constexpr char kRecord = 'r';
constexpr char kChainWithDefaultPolicy = 'd';

template <typename Record>
std::string Tagged(char tag, const Record& r) {
  std::string out(1, tag);
  r.AppendToString(&out);
  return out;
}

template <typename Record, typename Model>
std::string Encode(const Model& in, void (*encode)(const Model&, Record*)) {
  Record r;
  encode(in, &r);
  return Tagged(kRecord, r);
}

std::string EncodeChainConfig(const ChainConfig& c) {
  storage::ChainRecord r;
  storage::EncodeChain(c, &r);
  if (*c.policy != Policy()) return Tagged(kRecord, r);
  r.clear_policy();
  return Tagged(kChainWithDefaultPolicy, r);
}

// What a part tagged kChainWithDefaultPolicy left out.
void PutBackDefaultPolicy(ChainConfig* c) { c->policy = Shared<Policy>(); }
template <typename Model>
void PutBackDefaultPolicy(Model*) {}

// Decodes the `part` (config or state) of every entry of `from` that has one
// onto `out`. A record this mirror encoded itself always decodes; one that
// does not is a bug in records.cc, and a state missing it would be served as
// exact: stop.
template <typename Entries, typename Entry, typename Record, typename Model>
void DecodeAll(const Entries& from, std::string Entry::*part, bool (*decode)(const Record&, Model*),
               const char* what, std::vector<Model>* out) {
  out->reserve(from.size());
  for (const auto& [name, entry] : from) {
    const std::string& bytes = entry.*part;
    if (bytes.empty()) continue;
    Record r;
    out->emplace_back();
    if (!r.ParseFromArray(bytes.data() + 1, static_cast<int>(bytes.size() - 1)) || !decode(r, &out->back())) {
      fprintf(stderr, "state mirror: the %s record of \"%s\" does not decode\n", what, name.c_str());
      abort();
    }
    if (bytes[0] == kChainWithDefaultPolicy) PutBackDefaultPolicy(&out->back());
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
  for (const ChainConfig& c : chains) chains_[c.name].config = EncodeChainConfig(c);
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
