#include "common/state_mirror.h"

#include <algorithm>

namespace failover {

StateMirror::StateMirror(const RestoredState& start)
    : generation_(start.generation),
      pins_(start.pins),
      manual_(start.manual),
      next_sequence_(start.next_sequence),
      log_index_(start.log_index) {
  for (const TargetConfig& t : start.targets) targets_[t.name] = t;
  for (const ChainConfig& c : start.chains) chains_[c.name] = c;
  for (const TargetStateRecord& r : start.health) health_[r.name] = r;
  for (const ChainStateRecord& r : start.chain_states) chain_states_[r.name] = r;
}

void StateMirror::Apply(const Change& change) {
  if (change.config_generation != 0) {
    for (const TargetConfig& t : change.put_targets) targets_[t.name] = t;
    for (const ChainConfig& c : change.put_chains) chains_[c.name] = c;
    for (const std::string& name : change.deleted_targets) {
      targets_.erase(name);
      health_.erase(name);
      manual_.erase(name);
    }
    for (const std::string& name : change.deleted_chains) {
      chains_.erase(name);
      chain_states_.erase(name);
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
  for (const TargetStateRecord& r : change.targets) health_[r.name] = r;
  for (const ChainStateRecord& r : change.chains) chain_states_[r.name] = r;
  next_sequence_ = std::max(next_sequence_, change.next_sequence);
  log_index_ = std::max(log_index_, change.log_index);
}

Change ReplaceWith(const RestoredState& to, const std::set<std::string>& targets_now,
                   const std::set<std::string>& chains_now) {
  Change full;
  std::set<std::string> targets;
  std::set<std::string> chains;
  for (const TargetConfig& t : to.targets) targets.insert(t.name);
  for (const ChainConfig& c : to.chains) chains.insert(c.name);
  for (const std::string& name : targets_now) {
    if (targets.count(name) == 0) full.deleted_targets.push_back(name);
  }
  for (const std::string& name : chains_now) {
    if (chains.count(name) == 0) full.deleted_chains.push_back(name);
  }
  if (!targets.empty() || !chains.empty() || !targets_now.empty() || !chains_now.empty()) {
    full.config_generation = std::max<uint64_t>(to.generation, 1);
  }
  full.put_targets = to.targets;
  full.put_chains = to.chains;
  std::map<std::string, const TargetStateRecord*> health;
  for (const TargetStateRecord& r : to.health) health[r.name] = &r;
  for (const TargetConfig& t : to.targets) {
    auto m = to.manual.find(t.name);
    full.manual.push_back(m == to.manual.end() ? ManualFailoverRecord{t.name, false, "", absl::InfinitePast()}
                                               : ManualFailoverRecord{t.name, true, m->second.reason, m->second.since});
    auto h = health.find(t.name);
    TargetStateRecord fresh;
    fresh.name = t.name;
    full.targets.push_back(h == health.end() ? fresh : *h->second);
  }
  for (const ChainConfig& c : to.chains) {
    auto p = to.pins.find(c.name);
    full.pins.push_back(PinRecord{c.name, p == to.pins.end() ? "" : p->second});
  }
  full.chains = to.chain_states;
  full.next_sequence = to.next_sequence;
  full.log_index = to.log_index;
  return full;
}

RestoredState StateMirror::State() const {
  RestoredState s;
  s.generation = generation_;
  for (const auto& [_, t] : targets_) s.targets.push_back(t);
  for (const auto& [_, c] : chains_) s.chains.push_back(c);
  s.pins = pins_;
  s.manual = manual_;
  for (const auto& [_, r] : health_) s.health.push_back(r);
  for (const auto& [_, r] : chain_states_) s.chain_states.push_back(r);
  s.next_sequence = next_sequence_;
  s.log_index = log_index_;
  return s;
}

}  // namespace failover
