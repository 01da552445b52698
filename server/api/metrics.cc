#include "server/api/metrics.h"

namespace failover::api {
namespace {

constexpr HealthState kHealthStates[] = {HealthState::kUnknown, HealthState::kHealthy,  HealthState::kDown,
                                         HealthState::kRecovering, HealthState::kDisabled, HealthState::kManual};
constexpr ChainState kChainStates[] = {ChainState::kPrimary, ChainState::kFallback, ChainState::kDegraded,
                                       ChainState::kPinned};

}  // namespace

Metrics::Metrics(prometheus::Registry& r)
    : switches_(prometheus::BuildCounter()
                    .Name("failover_switches_total")
                    .Help("Changes of a chain's active target or state, by reason.")
                    .Register(r)),
      target_up_(prometheus::BuildGauge()
                     .Name("failover_target_up")
                     .Help("1 when the target is usable (healthy or not yet judged), else 0.")
                     .Register(r)),
      target_state_(prometheus::BuildGauge()
                        .Name("failover_target_state")
                        .Help("1 for the target's current health state, 0 for the others.")
                        .Register(r)),
      chain_state_(prometheus::BuildGauge()
                       .Name("failover_chain_state")
                       .Help("1 for the chain's current state, 0 for the others.")
                       .Register(r)),
      decisions_(prometheus::BuildCounter()
                     .Name("failover_decisions_total")
                     .Help("PickTarget calls by chain and result (ok or error).")
                     .Register(r)),
      outcomes_(prometheus::BuildCounter()
                    .Name("failover_outcomes_total")
                    .Help("Reported outcomes by target and classified reason (none = success).")
                    .Register(r)),
      decision_seconds_(prometheus::BuildHistogram()
                            .Name("failover_decision_seconds")
                            .Help("Time to compute a PickTarget decision inside failoverd.")
                            .Register(r)
                            .Add({}, prometheus::Histogram::BucketBoundaries{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5,
                                                                             1e-4, 2.5e-4, 1e-3, 1e-2})),
      watchers_(prometheus::BuildGauge()
                    .Name("failover_watchers")
                    .Help("Open WatchEvents streams.")
                    .Register(r)
                    .Add({})),
      probe_leases_(prometheus::BuildGauge()
                        .Name("failover_probe_leases")
                        .Help("Outstanding probe leases.")
                        .Register(r)
                        .Add({})) {}

void Metrics::Seed(const Engine& engine) {
  absl::MutexLock lock(&mu_);
  for (const TargetView& t : engine.ListTargets()) SetTargetState(t.config.name, t.status.health);
  for (const ChainView& c : engine.ListChains()) SetChainState(c.config.name, c.status.state);
}

void Metrics::SetTargetState(const std::string& target, HealthState state) {
  auto& gauges = gauges_of_[target];
  const bool fresh = gauges.empty();
  if (fresh) gauges.push_back(&target_up_.Add({{"target", target}}));
  gauges[0]->Set(state == HealthState::kHealthy || state == HealthState::kUnknown ? 1 : 0);
  for (size_t i = 0; i < std::size(kHealthStates); ++i) {
    if (fresh) gauges.push_back(&target_state_.Add({{"target", target}, {"state", HealthStateName(kHealthStates[i])}}));
    gauges[i + 1]->Set(kHealthStates[i] == state ? 1 : 0);
  }
}

void Metrics::SetChainState(const std::string& chain, ChainState state) {
  auto& gauges = gauges_of_[chain];
  const bool fresh = gauges.empty();
  for (size_t i = 0; i < std::size(kChainStates); ++i) {
    if (fresh) gauges.push_back(&chain_state_.Add({{"chain", chain}, {"state", ChainStateName(kChainStates[i])}}));
    gauges[i]->Set(kChainStates[i] == state ? 1 : 0);
  }
}

void Metrics::Forget(const std::string& name) {
  if (auto it = gauges_of_.find(name); it != gauges_of_.end()) {
    for (prometheus::Gauge* g : it->second) {
      target_up_.Remove(g);
      target_state_.Remove(g);
      chain_state_.Remove(g);
    }
    gauges_of_.erase(it);
  }
  if (auto it = counters_of_.find(name); it != counters_of_.end()) {
    for (prometheus::Counter* c : it->second) {
      switches_.Remove(c);
      decisions_.Remove(c);
      outcomes_.Remove(c);
    }
    counters_of_.erase(it);
  }
  decision_ok_.erase(name);
  decision_error_.erase(name);
  outcome_.erase(name);
}

void Metrics::OnEvents(const Events& events) {
  absl::MutexLock lock(&mu_);
  for (const Event& e : events) {
    switch (e.kind) {
      case EventKind::kChainSwitched: {
        SetChainState(e.chain, e.to_chain_state);
        if (e.switch_reason == SwitchReason::kInitial) break;
        prometheus::Counter& c = switches_.Add({{"chain", e.chain},
                                                {"from", e.from_target},
                                                {"to", e.to_target},
                                                {"reason", SwitchReasonName(e.switch_reason)}});
        c.Increment();
        auto& list = counters_of_[e.chain];
        if (std::find(list.begin(), list.end(), &c) == list.end()) list.push_back(&c);
        break;
      }
      case EventKind::kTargetState: SetTargetState(e.target, e.to_health); break;
      case EventKind::kConfigChanged:
        if (e.change == ConfigChangeKind::kDeleted) Forget(e.object_name);
        break;
    }
  }
}

void Metrics::OnPick(const std::string& chain, bool ok, absl::Duration latency) {
  decision_seconds_.Observe(absl::ToDoubleSeconds(latency));
  {
    absl::ReaderMutexLock lock(&mu_);
    const auto& cache = ok ? decision_ok_ : decision_error_;
    if (auto it = cache.find(chain); it != cache.end()) {
      it->second->Increment();
      return;
    }
  }
  absl::MutexLock lock(&mu_);
  // Unknown chains are counted under one label so a caller cannot grow the label set.
  if (!gauges_of_.contains(chain)) {
    prometheus::Counter*& c = ok ? unknown_chain_ok_ : unknown_chain_error_;
    if (c == nullptr) c = &decisions_.Add({{"chain", "(unknown)"}, {"result", ok ? "ok" : "error"}});
    c->Increment();
    return;
  }
  auto& cache = ok ? decision_ok_ : decision_error_;
  auto [it, inserted] = cache.emplace(chain, nullptr);
  if (inserted) {
    it->second = &decisions_.Add({{"chain", chain}, {"result", ok ? "ok" : "error"}});
    counters_of_[chain].push_back(it->second);
  }
  it->second->Increment();
}

void Metrics::OnOutcome(const std::string& target, Reason reason) {
  const int r = static_cast<int>(reason);
  {
    absl::ReaderMutexLock lock(&mu_);
    if (auto it = outcome_.find(target); it != outcome_.end() && it->second[r] != nullptr) {
      it->second[r]->Increment();
      return;
    }
  }
  absl::MutexLock lock(&mu_);
  auto& slots = outcome_.try_emplace(target).first->second;
  if (slots[r] == nullptr) {
    slots[r] = &outcomes_.Add({{"target", target}, {"reason", ReasonName(reason)}});
    counters_of_[target].push_back(slots[r]);
  }
  slots[r]->Increment();
}

void Metrics::SetWatchers(size_t n) { watchers_.Set(static_cast<double>(n)); }
void Metrics::SetProbeLeases(size_t n) { probe_leases_.Set(static_cast<double>(n)); }

}  // namespace failover::api
