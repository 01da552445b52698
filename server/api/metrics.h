// Prometheus metrics (DESIGN 3.9). The per-target and per-chain state gauges
// are read from the engine when Prometheus scrapes (StateCollector), so they
// hold no memory per object and cost nothing on the hot path. Per-decision
// counters are cached per chain and target; the label sets of deleted chains
// and targets are removed, so cardinality stays bounded by the configured
// objects.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include <mutex>
#include <shared_mutex>

#include "absl/base/thread_annotations.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/engine/engine.h"
#include "server/engine/shadows.h"

namespace failover::api {

// failover_target_up, failover_target_state and failover_chain_state, built
// at each scrape from the engine's current snapshot.
class StateCollector final : public prometheus::Collectable {
 public:
  explicit StateCollector(const Engine* engine) : engine_(engine) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const Engine* engine_;
};

// failover_shadow_*: what each shadow policy would have done (DESIGN 3.17),
// by chain and shadow name, read from the runs at each scrape. A run that
// starts afresh (its policy changed) starts its counters at 0 again.
class ShadowCollector final : public prometheus::Collectable {
 public:
  explicit ShadowCollector(const ShadowPolicies* shadows) : shadows_(shadows) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const ShadowPolicies* shadows_;
};

// The standard process_* metrics (CPU, memory, descriptors, start time), read
// from /proc at each scrape; prometheus-cpp has none of its own.
class ProcessCollector final : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override;
};

// failover_decisions_total and failover_retry_budget_refusals_total: three
// atomics per chain, present at 0 from the chain's creation (so rate() counts
// the first decision and a panel shows 0, not "no data"), written out at each
// scrape. As prometheus-cpp series they cost about 1 KiB a chain.
class ChainCounters final : public prometheus::Collectable {
 public:
  void Add(const std::string& chain);
  void Remove(const std::string& chain);
  // `known`: the chain exists. Unknown names share the chain label
  // "(unknown)", so a caller cannot grow the label set; it appears once used.
  void OnPick(const std::string& chain, bool known, bool ok);
  void OnBudgetRefusal(const std::string& chain);
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  struct Counts {
    std::atomic<uint64_t> ok{0};
    std::atomic<uint64_t> error{0};
    std::atomic<uint64_t> budget_refusals{0};
  };
  // Adds one to the chain's `field` (none: only makes sure the chain has
  // counts), making them if missing (a chain seen before its creation event).
  void Count(const std::string& chain, std::atomic<uint64_t> Counts::*field);

  mutable std::shared_mutex mu_;
  // Read under the reader lock on the hot path; entries are never moved (unique_ptr).
  absl::flat_hash_map<std::string, std::unique_ptr<Counts>> chains_ ABSL_GUARDED_BY(mu_);
  Counts unknown_;
};

class Metrics {
 public:
  explicit Metrics(prometheus::Registry& registry);

  // Exposed beside the registry (the exposer keeps a weak pointer).
  std::shared_ptr<ChainCounters> chain_counters() const { return chain_counters_; }

  // Follows switches, creations and deletions.
  void OnEvents(const Events& events);
  // The chains failoverd starts with (restored or from the config files),
  // whose creation it saw no event of.
  void AddChains(const Snapshot& snapshot);
  // `known`: the chain exists (unknown names share one label).
  void OnPick(const std::string& chain, bool known, bool ok, absl::Duration latency);
  // A report's verdict, its target's outcome and, for a success, its latency.
  void OnOutcome(const std::string& target, const ReportResult& result, absl::Duration latency);
  // Rare (only once a chain's budget is spent), so it takes the writer lock.
  void OnRetryBudgetRefusal(const std::string& chain);
  void OnHedge() { hedges_.Increment(); }
  void SetWatchers(size_t n);
  void SetHealthWatchers(size_t n) { health_watchers_.Set(static_cast<double>(n)); }
  void OnWatchResync() { watch_resyncs_.Increment(); }
  void OnWatcherDropped() { watchers_dropped_.Increment(); }
  // A load-and-apply of the config files, accepted or rejected.
  void OnConfigReload(bool accepted);
  void SetProbeLeases(size_t n);
  // One answered unary RPC: counted by method and gRPC code, timed by method.
  // `method` is one of the services' own (a fixed set).
  void OnRpc(const std::string& method, int code, absl::Duration latency);

 private:
  void Forget(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  prometheus::Counter& ChainCounterLocked(prometheus::Family<prometheus::Counter>& family, const std::string& chain,
                                          const prometheus::Labels& labels) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  prometheus::Family<prometheus::Counter>& switches_;
  const std::shared_ptr<ChainCounters> chain_counters_ = std::make_shared<ChainCounters>();
  prometheus::Family<prometheus::Counter>& outcomes_;
  prometheus::Histogram& decision_seconds_;
  prometheus::Gauge& watchers_;
  prometheus::Gauge& probe_leases_;
  prometheus::Gauge& health_watchers_;
  prometheus::Counter& watch_resyncs_;
  prometheus::Counter& watchers_dropped_;
  prometheus::Gauge& config_ok_;
  prometheus::Gauge& config_applied_at_;
  prometheus::Family<prometheus::Counter>& config_reloads_;
  prometheus::Counter& config_accepted_;
  prometheus::Counter& config_rejected_;
  prometheus::Family<prometheus::Histogram>& upstream_latency_;
  prometheus::Counter& hedges_;
  prometheus::Family<prometheus::Counter>& rpcs_;
  prometheus::Family<prometheus::Histogram>& rpc_seconds_;
  struct RpcSeries {
    prometheus::Histogram* seconds = nullptr;
    std::array<prometheus::Counter*, 17> by_code{};  // gRPC codes 0..16, created on first use
  };
  std::mutex rpc_mu_;
  absl::flat_hash_map<std::string, RpcSeries> rpc_ ABSL_GUARDED_BY(rpc_mu_);
  static constexpr int kVerdicts = static_cast<int>(Verdict::kFail) + 1;
  std::array<std::array<prometheus::Counter*, kReasonCount>, kVerdicts> verdicts_{};

  std::shared_mutex mu_;
  // name -> its label sets, so a deleted object's series can be removed.
  absl::flat_hash_map<std::string, std::vector<prometheus::Counter*>> counters_of_ ABSL_GUARDED_BY(mu_);
  // Hot-path counters, created once per label set and then only read (reader
  // lock) so reports do not serialize on a global lock.
  absl::flat_hash_map<std::string, std::array<prometheus::Counter*, kReasonCount>> outcome_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, prometheus::Histogram*> latency_of_ ABSL_GUARDED_BY(mu_);
};

}  // namespace failover::api
