#include "server/api/metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace failover::api {

void ChainCounters::Add(const std::string& chain) { Count(chain, nullptr); }

void ChainCounters::Remove(const std::string& chain) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  chains_.erase(chain);
}

// Counted under the lock: a chain removed meanwhile frees its counts.
void ChainCounters::Count(const std::string& chain, std::atomic<uint64_t> Counts::*field) {
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    if (auto it = chains_.find(chain); it != chains_.end()) {
      if (field != nullptr) ((*it->second).*field).fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  std::unique_lock<std::shared_mutex> lock(mu_);
  std::unique_ptr<Counts>& counts = chains_[chain];
  if (counts == nullptr) counts = std::make_unique<Counts>();
  if (field != nullptr) ((*counts).*field).fetch_add(1, std::memory_order_relaxed);
}

void ChainCounters::OnPick(const std::string& chain, bool known, bool ok) {
  if (!known) {
    (ok ? unknown_.ok : unknown_.error).fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Count(chain, ok ? &Counts::ok : &Counts::error);
}

void ChainCounters::OnBudgetRefusal(const std::string& chain) { Count(chain, &Counts::budget_refusals); }

std::vector<prometheus::MetricFamily> ChainCounters::Collect() const {
  prometheus::MetricFamily decisions{"failover_decisions_total", "PickTarget calls by chain and result (ok or error).",
                                     prometheus::MetricType::Counter, {}};
  prometheus::MetricFamily refusals{"failover_retry_budget_refusals_total",
                                    "Retries refused (verdict FAIL) because the chain's retry budget was spent.",
                                    prometheus::MetricType::Counter, {}};
  auto add = [](prometheus::MetricFamily* family, std::vector<prometheus::ClientMetric::Label> labels,
                const std::atomic<uint64_t>& value) {
    prometheus::ClientMetric& m = family->metric.emplace_back();
    m.label = std::move(labels);
    m.counter.value = static_cast<double>(value.load(std::memory_order_relaxed));
  };
  std::shared_lock<std::shared_mutex> lock(mu_);
  decisions.metric.reserve(2 * chains_.size() + 2);
  refusals.metric.reserve(chains_.size());
  for (const auto& [chain, counts] : chains_) {
    add(&decisions, {{"chain", chain}, {"result", "error"}}, counts->error);
    add(&decisions, {{"chain", chain}, {"result", "ok"}}, counts->ok);
    add(&refusals, {{"chain", chain}}, counts->budget_refusals);
  }
  if (unknown_.error.load(std::memory_order_relaxed) > 0) {
    add(&decisions, {{"chain", "(unknown)"}, {"result", "error"}}, unknown_.error);
  }
  if (unknown_.ok.load(std::memory_order_relaxed) > 0) {
    add(&decisions, {{"chain", "(unknown)"}, {"result", "ok"}}, unknown_.ok);
  }
  return {std::move(decisions), std::move(refusals)};
}

Metrics::Metrics(prometheus::Registry& r)
    : switches_(prometheus::BuildCounter()
                    .Name("failover_switches_total")
                    .Help("Changes of a chain's active target, by reason.")
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
                        .Add({})),
      health_watchers_(prometheus::BuildGauge()
                           .Name("failover_health_watchers")
                           .Help("Open grpc.health.v1 Watch streams.")
                           .Register(r)
                           .Add({})),
      watch_resyncs_(prometheus::BuildCounter()
                         .Name("failover_watch_resyncs_total")
                         .Help("WatchEvents streams that fell behind, lost their queue and got a fresh snapshot.")
                         .Register(r)
                         .Add({})),
      watchers_dropped_(prometheus::BuildCounter()
                            .Name("failover_watchers_dropped_total")
                            .Help("WatchEvents streams dropped because their client stopped reading "
                                  "(a write stuck past --watch-stall-timeout).")
                            .Register(r)
                            .Add({})),
      config_ok_(prometheus::BuildGauge()
                     .Name("failover_config_last_reload_ok")
                     .Help("1 when the last load of the config files was applied, 0 when it was rejected.")
                     .Register(r)
                     .Add({})),
      config_applied_at_(prometheus::BuildGauge()
                             .Name("failover_config_last_reload_success_timestamp_seconds")
                             .Help("When the config files were last applied (Unix time).")
                             .Register(r)
                             .Add({})),
      config_reloads_(prometheus::BuildCounter()
                          .Name("failover_config_reloads_total")
                          .Help("Loads of the config files (at start, on SIGHUP, on a change), by result.")
                          .Register(r)),
      config_accepted_(config_reloads_.Add({{"result", "accepted"}})),
      config_rejected_(config_reloads_.Add({{"result", "rejected"}})),
      upstream_latency_(prometheus::BuildHistogram()
                            .Name("failover_upstream_latency_seconds")
                            .Help("Latency of successful attempts as callers report it, by target.")
                            .Register(r)),
      hedges_(prometheus::BuildCounter()
                  .Name("failover_hedges_total")
                  .Help("Hedged attempts reported: started beside a slow first attempt.")
                  .Register(r)
                  .Add({})),
      rpcs_(prometheus::BuildCounter()
                .Name("failover_grpc_requests_total")
                .Help("Unary gRPC calls answered, by method and status code (the HTTP port's calls included).")
                .Register(r)),
      rpc_seconds_(prometheus::BuildHistogram()
                       .Name("failover_grpc_request_duration_seconds")
                       .Help("Time to answer a unary gRPC call, by method.")
                       .Register(r)) {
  // Every verdict and reason up front (64 series): counted without a lock.
  auto& verdicts = prometheus::BuildCounter()
                       .Name("failover_verdicts_total")
                       .Help("ReportOutcome verdicts by verdict and reason (none = success).")
                       .Register(r);
  for (int v = 0; v < kVerdicts; ++v) {
    for (int reason = 0; reason < kReasonCount; ++reason) {
      verdicts_[v][reason] = &verdicts.Add({{"verdict", VerdictName(static_cast<Verdict>(v))},
                                            {"reason", ReasonName(static_cast<Reason>(reason))}});
    }
  }
}

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
  // State sets, as kube-state-metrics writes them: every state of every
  // object, 1 for the current one and 0 for the others, so a query can
  // compare states without knowing which series exist.
  constexpr int kHealthStates = static_cast<int>(HealthState::kManual) + 1;
  constexpr int kChainStates = static_cast<int>(ChainState::kPinned) + 1;
  prometheus::MetricFamily target_state =
      GaugeFamily("failover_target_state", "Per target and health state: 1 for the current state, else 0.",
                  snap->targets.size() * kHealthStates);
  prometheus::MetricFamily chain_state =
      GaugeFamily("failover_chain_state", "Per chain and state: 1 for the current state, else 0.",
                  snap->chains.size() * kChainStates);
  prometheus::MetricFamily last_probe =
      GaugeFamily("failover_target_last_probe_timestamp_seconds",
                  "When the target's last health check result came in (Unix seconds); absent before the first.",
                  snap->targets.size());
  for (const TargetEntry& t : snap->targets) {
    absl::Time probed;
    {
      std::lock_guard<SmallMutex> lock(t.rt->mu);
      probed = t.rt->occasional().last_probe;
    }
    if (probed != absl::InfinitePast()) {
      AddGauge(&last_probe, {{"target", t.config->name}}, static_cast<double>(absl::ToUnixMicros(probed)) / 1e6);
    }
    const HealthState health = t.rt->Effective();
    const bool usable = health == HealthState::kHealthy || health == HealthState::kUnknown;
    AddGauge(&up, {{"target", t.config->name}}, usable ? 1 : 0);
    for (int s = 0; s < kHealthStates; ++s) {
      const auto state = static_cast<HealthState>(s);
      AddGauge(&target_state, {{"state", HealthStateName(state)}, {"target", t.config->name}}, state == health);
    }
  }
  for (const ChainEntry& c : snap->chains) {
    ChainState state;
    {
      std::lock_guard<SmallMutex> lock(c.rt->mu);
      state = c.rt->state;
    }
    for (int s = 0; s < kChainStates; ++s) {
      const auto each = static_cast<ChainState>(s);
      AddGauge(&chain_state, {{"chain", c.config->name}, {"state", ChainStateName(each)}}, each == state);
    }
  }
  return {std::move(up), std::move(target_state), std::move(chain_state), std::move(last_probe)};
}

std::vector<prometheus::MetricFamily> ShadowCollector::Collect() const {
  const std::vector<ShadowStatus> runs = shadows_->Status();
  auto family = [&](const char* name, const char* help, prometheus::MetricType type, size_t per_run = 1) {
    prometheus::MetricFamily f = GaugeFamily(name, help, runs.size() * per_run);
    f.type = type;
    return f;
  };
  using prometheus::MetricType;
  prometheus::MetricFamily trips = family("failover_shadow_trips_total",
                                          "Targets the shadow policy would have taken out of service.",
                                          MetricType::Counter);
  prometheus::MetricFamily recoveries = family(
      "failover_shadow_recoveries_total", "Targets the shadow policy would have brought back.", MetricType::Counter);
  prometheus::MetricFamily switches = family("failover_shadow_switches_total",
                                             "Chain switches the shadow policy would have made.", MetricType::Counter);
  prometheus::MetricFamily flaps =
      family("failover_shadow_flaps_total",
             "Switches away from a target the chain had come back to within the live recovery.min_dwell.",
             MetricType::Counter);
  constexpr int kChainStates = static_cast<int>(ChainState::kPinned) + 1;
  prometheus::MetricFamily state =
      family("failover_shadow_chain_state",
             "Per chain, shadow policy and state: 1 for the state the chain would be in, else 0.", MetricType::Gauge,
             kChainStates);
  auto counter = [](prometheus::MetricFamily* f, const ShadowStatus& r, uint64_t value) {
    prometheus::ClientMetric& m = f->metric.emplace_back();
    m.label = {{"chain", r.chain}, {"shadow", r.shadow}};
    m.counter.value = static_cast<double>(value);
  };
  for (const ShadowStatus& r : runs) {
    counter(&trips, r, r.trips);
    counter(&recoveries, r, r.recoveries);
    counter(&switches, r, r.switches);
    counter(&flaps, r, r.flaps);
    for (int s = 0; s < kChainStates; ++s) {
      const auto each = static_cast<ChainState>(s);
      AddGauge(&state, {{"chain", r.chain}, {"shadow", r.shadow}, {"state", ChainStateName(each)}}, each == r.state);
    }
  }
  return {std::move(trips), std::move(recoveries), std::move(switches), std::move(flaps), std::move(state)};
}

std::vector<prometheus::MetricFamily> ProcessCollector::Collect() const {
  std::vector<prometheus::MetricFamily> out;
  auto gauge = [&](const char* name, const char* help, double value, prometheus::MetricType type) {
    prometheus::MetricFamily f = GaugeFamily(name, help, 1);
    f.type = type;
    prometheus::ClientMetric& m = f.metric.emplace_back();
    if (type == prometheus::MetricType::Counter) {
      m.counter.value = value;
    } else {
      m.gauge.value = value;
    }
    out.push_back(std::move(f));
  };
  // /proc/self/stat: fields after the command name, which may hold spaces.
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close != std::string::npos) {
    std::vector<std::string> f = absl::StrSplit(stat.substr(close + 2), ' ');
    // f[0] is field 3 (state): utime is field 14, stime 15, starttime 22, vsize 23, rss 24.
    auto field = [&](size_t n) -> double {
      double v = 0;
      return n - 3 < f.size() && absl::SimpleAtod(f[n - 3], &v) ? v : 0;
    };
    const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
    const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
    gauge("process_cpu_seconds_total", "User and system CPU time spent, in seconds.",
          (field(14) + field(15)) / ticks, prometheus::MetricType::Counter);
    gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", field(23), prometheus::MetricType::Gauge);
    gauge("process_resident_memory_bytes", "Resident memory size in bytes.", field(24) * page,
          prometheus::MetricType::Gauge);
    std::ifstream uptime_file("/proc/uptime");
    double uptime = 0;
    uptime_file >> uptime;
    const double boot = static_cast<double>(absl::ToUnixMicros(absl::Now())) / 1e6 - uptime;
    gauge("process_start_time_seconds", "Start time of the process since the Unix epoch, in seconds.",
          boot + field(22) / ticks, prometheus::MetricType::Gauge);
  }
  size_t fds = 0;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (readdir(dir) != nullptr) ++fds;
    closedir(dir);
    fds -= 3;  // ".", ".." and the directory's own descriptor
  }
  gauge("process_open_fds", "Open file descriptors.", static_cast<double>(fds), prometheus::MetricType::Gauge);
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    gauge("process_max_fds", "The open descriptor limit.", static_cast<double>(limit.rlim_cur),
          prometheus::MetricType::Gauge);
  }
  return out;
}

void Metrics::Forget(const std::string& name) {
  if (auto it = counters_of_.find(name); it != counters_of_.end()) {
    for (prometheus::Counter* c : it->second) {
      switches_.Remove(c);
      outcomes_.Remove(c);
    }
    counters_of_.erase(it);
  }
  chain_counters_->Remove(name);
  outcome_.erase(name);
  if (auto it = latency_of_.find(name); it != latency_of_.end()) {
    upstream_latency_.Remove(it->second);
    latency_of_.erase(it);
  }
}

void Metrics::OnEvents(const Events& events) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  for (const Event& e : events) {
    switch (e.kind) {
      case EventKind::kChainSwitched: {
        // Only real changes of target: a state-only change (FALLBACK to
        // DEGRADED on the same target, a pin of the active one) is not a switch.
        if (e.switch_reason == SwitchReason::kInitial || e.from_target == e.to_target) break;
        ChainCounterLocked(switches_, e.chain,
                           {{"chain", e.chain},
                            {"from", e.from_target},
                            {"to", e.to_target},
                            {"reason", SwitchReasonName(e.switch_reason)}})
            .Increment();
        break;
      }
      case EventKind::kTargetState: break;  // StateCollector reads states at scrape time
      case EventKind::kConfigChanged:
        if (e.change == ConfigChangeKind::kDeleted) Forget(e.object_name);
        if (e.change == ConfigChangeKind::kCreated && e.what == ConfigObject::kChain) {
          chain_counters_->Add(e.object_name);
        }
        break;
    }
  }
}

void Metrics::AddChains(const Snapshot& snapshot) {
  for (const ChainEntry& c : snapshot.chains) chain_counters_->Add(c.config->name);
}

prometheus::Counter& Metrics::ChainCounterLocked(prometheus::Family<prometheus::Counter>& family,
                                                 const std::string& chain, const prometheus::Labels& labels) {
  prometheus::Counter& c = family.Add(labels);  // the existing one when the labels are taken
  auto& list = counters_of_[chain];
  if (std::find(list.begin(), list.end(), &c) == list.end()) list.push_back(&c);
  return c;
}

void Metrics::OnConfigReload(bool accepted) {
  config_ok_.Set(accepted ? 1 : 0);
  if (accepted) config_applied_at_.Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  (accepted ? config_accepted_ : config_rejected_).Increment();
}

namespace {
const char* GrpcCodeName(int code) {
  static const char* const kNames[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
                                       "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
                                       "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  return code >= 0 && code < 17 ? kNames[code] : "UNKNOWN";
}
}  // namespace

void Metrics::OnRpc(const std::string& method, int code, absl::Duration latency) {
  if (code < 0 || code > 16) code = 2;  // UNKNOWN
  prometheus::Histogram* seconds = nullptr;
  prometheus::Counter* counter = nullptr;
  {
    std::lock_guard<std::mutex> lock(rpc_mu_);
    RpcSeries& series = rpc_[method];
    if (series.seconds == nullptr) {
      static const prometheus::Histogram::BucketBoundaries kBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                                       0.01,   0.025,   0.05,   0.1,   0.25,   1};
      series.seconds = &rpc_seconds_.Add({{"method", method}}, kBuckets);
    }
    if (series.by_code[code] == nullptr) {
      series.by_code[code] = &rpcs_.Add({{"method", method}, {"code", GrpcCodeName(code)}});
    }
    seconds = series.seconds;
    counter = series.by_code[code];
  }
  counter->Increment();
  seconds->Observe(absl::ToDoubleSeconds(latency));
}

void Metrics::OnRetryBudgetRefusal(const std::string& chain) { chain_counters_->OnBudgetRefusal(chain); }

void Metrics::OnPick(const std::string& chain, bool known, bool ok, absl::Duration latency) {
  decision_seconds_.Observe(absl::ToDoubleSeconds(latency));
  chain_counters_->OnPick(chain, known, ok);
}

void Metrics::OnOutcome(const std::string& target, const ReportResult& result, absl::Duration latency) {
  verdicts_[static_cast<int>(result.verdict)][static_cast<int>(result.reason)]->Increment();
  const int r = static_cast<int>(result.classified);
  const bool timed = result.classified == Reason::kNone && latency > absl::ZeroDuration();
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto it = outcome_.find(target);
    auto lat = timed ? latency_of_.find(target) : latency_of_.end();
    if (it != outcome_.end() && it->second[r] != nullptr && (!timed || lat != latency_of_.end())) {
      it->second[r]->Increment();
      if (timed) lat->second->Observe(absl::ToDoubleSeconds(latency));
      return;
    }
  }
  std::unique_lock<std::shared_mutex> lock(mu_);
  auto& slots = outcome_.try_emplace(target).first->second;
  if (slots[r] == nullptr) {
    slots[r] = &outcomes_.Add({{"target", target}, {"reason", ReasonName(result.classified)}});
    counters_of_[target].push_back(slots[r]);
  }
  slots[r]->Increment();
  if (timed) {
    prometheus::Histogram*& h = latency_of_[target];
    if (h == nullptr) {
      // Up to the longest timeouts targets use (a local model's ten minutes).
      static const prometheus::Histogram::BucketBoundaries kUpstreamBuckets = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
                                                                               10,   30,  60,   120, 300, 600};
      h = &upstream_latency_.Add({{"target", target}}, kUpstreamBuckets);
    }
    h->Observe(absl::ToDoubleSeconds(latency));
  }
}

void Metrics::SetWatchers(size_t n) { watchers_.Set(static_cast<double>(n)); }
void Metrics::SetProbeLeases(size_t n) { probe_leases_.Set(static_cast<double>(n)); }

}  // namespace failover::api
