// Prometheus metrics (DESIGN 3.9). State gauges follow the events, so they
// cost nothing on the hot path; per-decision counters are cached per chain
// and target. Label sets of deleted chains and targets are removed, so
// cardinality stays bounded by the configured objects.
#pragma once

#include <array>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/engine/engine.h"

namespace failover::api {

class Metrics {
 public:
  explicit Metrics(prometheus::Registry& registry);

  // Sets every state gauge from the engine (at start).
  void Seed(const Engine& engine);
  // Follows switches, state changes and deletions.
  void OnEvents(const Events& events);
  void OnPick(const std::string& chain, bool ok, absl::Duration latency);
  void OnOutcome(const std::string& target, Reason reason);
  void SetWatchers(size_t n);
  void SetProbeLeases(size_t n);

 private:
  void SetTargetState(const std::string& target, HealthState state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetChainState(const std::string& chain, ChainState state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Forget(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  prometheus::Family<prometheus::Counter>& switches_;
  prometheus::Family<prometheus::Gauge>& target_up_;
  prometheus::Family<prometheus::Gauge>& target_state_;
  prometheus::Family<prometheus::Gauge>& chain_state_;
  prometheus::Family<prometheus::Counter>& decisions_;
  prometheus::Family<prometheus::Counter>& outcomes_;
  prometheus::Histogram& decision_seconds_;
  prometheus::Gauge& watchers_;
  prometheus::Gauge& probe_leases_;

  absl::Mutex mu_;
  // name -> its label sets, so a deleted object's series can be removed.
  absl::flat_hash_map<std::string, std::vector<prometheus::Counter*>> counters_of_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::vector<prometheus::Gauge*>> gauges_of_ ABSL_GUARDED_BY(mu_);
  // Hot-path counters, created once per label set and then only read (reader
  // lock) so picks and reports do not serialize on a global lock.
  absl::flat_hash_map<std::string, prometheus::Counter*> decision_ok_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, prometheus::Counter*> decision_error_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::array<prometheus::Counter*, kReasonCount>> outcome_ ABSL_GUARDED_BY(mu_);
  prometheus::Counter* unknown_chain_ok_ = nullptr;
  prometheus::Counter* unknown_chain_error_ = nullptr;
};

}  // namespace failover::api
