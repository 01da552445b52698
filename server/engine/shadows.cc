#include "server/engine/shadows.h"

#include <algorithm>
#include <iterator>
#include <set>

namespace failover {
namespace {

std::vector<TargetConfig> TargetsOf(const ChainEntry& chain) {
  std::vector<TargetConfig> out;
  out.reserve(chain.slots.size());
  for (const ChainSlot& slot : chain.slots) out.push_back(*slot.target->config);
  return out;
}

}  // namespace

void ShadowPolicies::Configure(const Snapshot& snapshot, absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (configured_ && snapshot.generation == generation_) return;
  configured_ = true;
  generation_ = snapshot.generation;
  std::set<Key> wanted;
  for (const ChainEntry& chain : snapshot.chains) {
    if (chain.config->shadows.empty()) continue;
    const std::vector<TargetConfig> targets = TargetsOf(chain);
    for (const ShadowPolicy& shadow : chain.config->shadows) {
      const Key key{chain.config->name, shadow.name};
      wanted.insert(key);
      ReplayInput setup;
      setup.chain = *chain.config;
      setup.chain.shadows.clear();
      setup.targets = targets;
      setup.from = now;
      // A flap is measured as simulate measures it: against the live dwell.
      setup.flap_window = chain.config->policy->recovery_min_dwell;
      setup = WithPolicy(std::move(setup), shadow.policy);
      auto it = runs_.find(key);
      // Unchanged by this generation (another chain, the live policy alone): the run goes on.
      if (it != runs_.end() && it->second.setup.chain == setup.chain && it->second.setup.targets == setup.targets &&
          it->second.setup.flap_window == setup.flap_window) {
        continue;
      }
      absl::StatusOr<std::unique_ptr<PolicyRun>> run = PolicyRun::Start(setup);
      if (!run.ok()) {  // validated as the chain's own policy is; nothing to run if the engine still refuses it
        if (it != runs_.end()) runs_.erase(it);
        continue;
      }
      Run& r = runs_[key];
      r.setup = std::move(setup);
      r.run = std::move(*run);
      r.status = ShadowStatus();
      r.status.chain = chain.config->name;
      r.status.shadow = shadow.name;
      r.status.since = now;
      Take(r, nullptr);  // the first pick's initial switch sets where the chain is
    }
  }
  for (auto it = runs_.begin(); it != runs_.end();) {
    it = wanted.count(it->first) ? std::next(it) : runs_.erase(it);
  }
}

std::vector<ShadowEvent> ShadowPolicies::Feed(absl::Span<const TraceEntry> entries, absl::Time now) {
  std::vector<ShadowEvent> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, r] : runs_) {
    const std::vector<std::string>& targets = r.setup.chain.targets;
    for (const TraceEntry& e : entries) {
      if (std::find(targets.begin(), targets.end(), e.target) != targets.end()) r.run->Feed(e);
    }
    r.run->AdvanceTo(now);
    Take(r, &out);
  }
  return out;
}

void ShadowPolicies::Take(Run& r, std::vector<ShadowEvent>* out) {
  for (Event& e : r.run->TakeEvents()) {
    if (e.kind == EventKind::kChainSwitched) {
      r.status.active = e.to_target;
      r.status.state = e.to_chain_state;
      if (e.switch_reason == SwitchReason::kInitial) continue;  // where a fresh run begins, not a decision
    }
    e.sequence = 0;  // the run's own numbering means nothing outside it
    if (out != nullptr) out->push_back(ShadowEvent{r.status.shadow, std::move(e)});
  }
  r.status.trips += r.run->TakeTrips().size();
  const ReplaySummary& summary = r.run->summary();
  r.status.recoveries = summary.recoveries;
  r.status.switches = summary.switches;
  r.status.flaps = summary.flaps;
}

std::vector<ShadowStatus> ShadowPolicies::Status() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ShadowStatus> out;
  out.reserve(runs_.size());
  for (const auto& [key, r] : runs_) out.push_back(r.status);
  return out;
}

bool ShadowPolicies::empty() const {
  std::lock_guard<std::mutex> lock(mu_);
  return runs_.empty();
}

}  // namespace failover
