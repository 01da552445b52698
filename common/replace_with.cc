#include "common/replace_with.h"

#include <algorithm>
#include <map>

namespace failover {

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

}  // namespace failover
