#include "server/api/metrics.h"

namespace failover::api {

Metrics::Metrics(prometheus::Registry& r)
    : switches_(prometheus::BuildCounter()
                    .Name("failover_switches_total")
                    .Help("Changes of a chain's active target, by reason.")
                    .Register(r)),
      budget_refusals_(prometheus::BuildCounter()
                           .Name("failover_retry_budget_refusals_total")
                           .Help("Retries refused (verdict FAIL) because the chain's retry budget was spent.")
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

namespace {

prometheus::MetricFamily GaugeFamily(std::string name, std::string help, size_t size) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = prometheus::MetricType::Gauge;
  family.metric.reserve(size);
  return family;
}

// Labels in name order, as prometheus-cpp's own families print them.
void AddGauge(prometheus::MetricFamily* family, std::vector<prometheus::ClientMetric::Label> labels, double value) {
  prometheus::ClientMetric& m = family->metric.emplace_back();
  m.label = std::move(labels);
  m.gauge.value = value;
}

}  // namespace

std::vector<prometheus::MetricFamily> StateCollector::Collect() const {
  const std::shared_ptr<const Snapshot> snap = engine_->snapshot();
  prometheus::MetricFamily up = GaugeFamily(
      "failover_target_up", "1 when the target is usable (healthy or not yet judged), else 0.", snap->targets.size());
  prometheus::MetricFamily target_state = GaugeFamily(
      "failover_target_state", "1, labelled with the target's current health state.", snap->targets.size());
  prometheus::MetricFamily chain_state =
      GaugeFamily("failover_chain_state", "1, labelled with the chain's current state.", snap->chains.size());
  for (const TargetEntry& t : snap->targets) {
    const HealthState health = t.rt->Effective();
    const bool usable = health == HealthState::kHealthy || health == HealthState::kUnknown;
    AddGauge(&up, {{"target", t.config.name}}, usable ? 1 : 0);
    AddGauge(&target_state, {{"state", HealthStateName(health)}, {"target", t.config.name}}, 1);
  }
  for (const ChainEntry& c : snap->chains) {
    ChainState state;
    {
      std::lock_guard<std::mutex> lock(c.rt->mu);
      state = c.rt->state;
    }
    AddGauge(&chain_state, {{"chain", c.config.name}, {"state", ChainStateName(state)}}, 1);
  }
  return {std::move(up), std::move(target_state), std::move(chain_state)};
}

void Metrics::Forget(const std::string& name) {
  if (auto it = counters_of_.find(name); it != counters_of_.end()) {
    for (prometheus::Counter* c : it->second) {
      switches_.Remove(c);
      budget_refusals_.Remove(c);
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
  std::unique_lock<std::shared_mutex> lock(mu_);
  for (const Event& e : events) {
    switch (e.kind) {
      case EventKind::kChainSwitched: {
        // Only real changes of target: a state-only change (FALLBACK to
        // DEGRADED on the same target, a pin of the active one) is not a switch.
        if (e.switch_reason == SwitchReason::kInitial || e.from_target == e.to_target) break;
        prometheus::Counter& c = switches_.Add({{"chain", e.chain},
                                                {"from", e.from_target},
                                                {"to", e.to_target},
                                                {"reason", SwitchReasonName(e.switch_reason)}});
        c.Increment();
        auto& list = counters_of_[e.chain];
        if (std::find(list.begin(), list.end(), &c) == list.end()) list.push_back(&c);
        break;
      }
      case EventKind::kTargetState: break;  // StateCollector reads states at scrape time
      case EventKind::kConfigChanged:
        if (e.change == ConfigChangeKind::kDeleted) Forget(e.object_name);
        break;
    }
  }
}

void Metrics::OnRetryBudgetRefusal(const std::string& chain) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  prometheus::Counter& c = budget_refusals_.Add({{"chain", chain}});
  auto& list = counters_of_[chain];
  if (std::find(list.begin(), list.end(), &c) == list.end()) list.push_back(&c);
  c.Increment();
}

void Metrics::OnPick(const std::string& chain, bool known, bool ok, absl::Duration latency) {
  decision_seconds_.Observe(absl::ToDoubleSeconds(latency));
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    const auto& cache = ok ? decision_ok_ : decision_error_;
    if (auto it = cache.find(chain); it != cache.end()) {
      it->second->Increment();
      return;
    }
  }
  std::unique_lock<std::shared_mutex> lock(mu_);
  // Unknown chains are counted under one label so a caller cannot grow the label set.
  if (!known) {
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
    std::shared_lock<std::shared_mutex> lock(mu_);
    if (auto it = outcome_.find(target); it != outcome_.end() && it->second[r] != nullptr) {
      it->second[r]->Increment();
      return;
    }
  }
  std::unique_lock<std::shared_mutex> lock(mu_);
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
