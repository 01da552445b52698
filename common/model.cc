#include "common/model.h"

#include <map>
#include <string>
#include <tuple>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace failover {

const char* HealthStateName(HealthState s) {
  switch (s) {
    case HealthState::kUnknown: return "unknown";
    case HealthState::kHealthy: return "healthy";
    case HealthState::kDown: return "down";
    case HealthState::kRecovering: return "recovering";
    case HealthState::kDisabled: return "disabled";
    case HealthState::kManual: return "manual";
  }
  return "unknown";
}

const char* ChainStateName(ChainState s) {
  switch (s) {
    case ChainState::kPrimary: return "primary";
    case ChainState::kFallback: return "fallback";
    case ChainState::kDegraded: return "degraded";
    case ChainState::kPinned: return "pinned";
  }
  return "primary";
}

const char* SourceName(Source s) {
  switch (s) {
    case Source::kAuto: return "auto";
    case Source::kProbe: return "probe";
    case Source::kManual: return "manual";
    case Source::kConfig: return "config";
  }
  return "auto";
}

const char* SwitchReasonName(SwitchReason r) {
  switch (r) {
    case SwitchReason::kInitial: return "initial";
    case SwitchReason::kTrip: return "trip";
    case SwitchReason::kRecovery: return "recovery";
    case SwitchReason::kPin: return "pin";
    case SwitchReason::kUnpin: return "unpin";
    case SwitchReason::kManual: return "manual";
    case SwitchReason::kCancel: return "cancel";
    case SwitchReason::kConfig: return "config";
  }
  return "initial";
}

namespace {
constexpr std::array<const char*, kReasonCount> kReasonNames = {
    "none",           "network",        "timeout",   "overloaded",       "server_error",
    "rate_limit",     "auth",           "billing",   "model_not_found",  "capability_gap",
    "admission",      "context_overflow", "client_error", "cancelled",   "unknown",
    "retry_budget"};
}  // namespace

const char* ReasonName(Reason r) { return kReasonNames[static_cast<int>(r)]; }

const char* StrategyName(Strategy s) {
  switch (s) {
    case Strategy::kRoundRobin: return "round_robin";
    case Strategy::kLowestCost: return "lowest_cost";
    case Strategy::kLeastLatency: return "least_latency";
    case Strategy::kFailover: break;
  }
  return "failover";
}

bool ParseReason(const std::string& name, Reason* out) {
  // Only classifications: kNone and kRetryBudget name no kind of failure.
  for (int i = 1; i <= static_cast<int>(Reason::kUnknown); ++i) {
    if (name == kReasonNames[i]) {
      *out = static_cast<Reason>(i);
      return true;
    }
  }
  return false;
}

bool Policy::operator==(const Policy& o) const {
  auto tie = [](const Policy& p) {
    return std::tie(p.probe_interval, p.probe_timeout, p.trip_errors, p.trip_window, p.trip_failure_rate,
                    p.trip_min_calls, p.trip_slow_call_duration, p.trip_slow_call_rate, p.recovery_probes,
                    p.recovery_min_dwell, p.backoff_factor, p.backoff_steps, p.backoff_max,
                    p.backoff_reset_after, p.rate_limit_on, p.rate_limit_hold, p.rate_limit_max_hold, p.max_attempts, p.latency_explore,
                    p.retry_budget_ratio, p.retry_budget_min_per_second, p.hedge_after,
                    p.max_replay_bytes, p.retry_on_statuses, p.retry_on_errors, p.same_target_retries);
  };
  return tie(*this) == tie(o);
}

HealthPolicy HealthPolicy::Of(const Policy& p) {
  HealthPolicy h;
  h.probe_interval = p.probe_interval;
  h.probe_timeout = p.probe_timeout;
  h.trip_errors = p.trip_errors;
  h.trip_window = p.trip_window;
  h.trip_failure_rate = p.trip_failure_rate;
  h.trip_min_calls = p.trip_min_calls;
  h.trip_slow_call_duration = p.trip_slow_call_duration;
  h.trip_slow_call_rate = p.trip_slow_call_rate;
  h.recovery_probes = p.recovery_probes;
  h.recovery_min_dwell = p.recovery_min_dwell;
  h.backoff_factor = p.backoff_factor;
  h.backoff_steps = p.backoff_steps;
  h.backoff_max = p.backoff_max;
  h.backoff_reset_after = p.backoff_reset_after;
  h.rate_limit_hold = p.rate_limit_hold;
  h.rate_limit_max_hold = p.rate_limit_max_hold;
  return h;
}

Policy HealthPolicy::AsPolicy() const {
  Policy p;
  p.probe_interval = probe_interval;
  p.probe_timeout = probe_timeout;
  p.trip_errors = trip_errors;
  p.trip_window = trip_window;
  p.trip_failure_rate = trip_failure_rate;
  p.trip_min_calls = trip_min_calls;
  p.trip_slow_call_duration = trip_slow_call_duration;
  p.trip_slow_call_rate = trip_slow_call_rate;
  p.recovery_probes = recovery_probes;
  p.recovery_min_dwell = recovery_min_dwell;
  p.backoff_factor = backoff_factor;
  p.backoff_steps = backoff_steps;
  p.backoff_max = backoff_max;
  p.backoff_reset_after = backoff_reset_after;
  p.rate_limit_hold = rate_limit_hold;
  p.rate_limit_max_hold = rate_limit_max_hold;
  return p;
}

namespace {

std::string ShowSetting(const absl::Duration& v) { return absl::FormatDuration(v); }
std::string ShowSetting(const std::string& v) { return absl::StrCat("\"", v, "\""); }
std::string ShowSetting(bool v) { return v ? "true" : "false"; }
std::string ShowSetting(const std::vector<std::string>& v) { return absl::StrCat("[", absl::StrJoin(v, ", "), "]"); }
std::string ShowSetting(const std::map<std::string, std::string>& v) {
  return absl::StrCat("{", absl::StrJoin(v, ", ", absl::PairFormatter(": ")), "}");
}
std::string ShowSetting(const std::map<Reason, uint32_t>& v) {
  std::vector<std::string> parts;
  for (const auto& [reason, n] : v) parts.push_back(absl::StrCat(ReasonName(reason), ": ", n));
  return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
}
std::string ShowSetting(RateLimitMode v) { return v == RateLimitMode::kWait ? "wait" : "failover"; }
std::string ShowSetting(Strategy v) { return StrategyName(v); }
std::string ShowSetting(TargetKind v) { return v == TargetKind::kLocal ? "local" : "remote"; }
template <typename T>
std::string ShowSetting(const T& v) {
  return absl::StrCat(v);
}

// Collects the settings that differ, under their config-file names.
class DifferenceList {
 public:
  explicit DifferenceList(std::string prefix = "") : prefix_(std::move(prefix)) {}
  template <typename T>
  void Compare(const char* field, const T& mine, const T& theirs) {
    if (!(mine == theirs)) out_.push_back({absl::StrCat(prefix_, field), ShowSetting(mine), ShowSetting(theirs)});
  }
  void Add(std::vector<SettingDifference> more) {
    for (auto& d : more) out_.push_back({absl::StrCat(prefix_, d.field), std::move(d.mine), std::move(d.theirs)});
  }
  std::vector<SettingDifference> Take() { return std::move(out_); }

 private:
  std::string prefix_;
  std::vector<SettingDifference> out_;
};

}  // namespace

std::vector<HealthPolicy::Difference> HealthPolicy::Differences(const HealthPolicy& o) const {
  DifferenceList d;
  d.Compare("probe.interval", probe_interval, o.probe_interval);
  d.Compare("probe.timeout", probe_timeout, o.probe_timeout);
  d.Compare("trip.errors", trip_errors, o.trip_errors);
  d.Compare("trip.window", trip_window, o.trip_window);
  d.Compare("trip.failure_rate", trip_failure_rate, o.trip_failure_rate);
  d.Compare("trip.min_calls", trip_min_calls, o.trip_min_calls);
  d.Compare("trip.slow_call.duration", trip_slow_call_duration, o.trip_slow_call_duration);
  d.Compare("trip.slow_call.rate", trip_slow_call_rate, o.trip_slow_call_rate);
  d.Compare("recovery.probes", recovery_probes, o.recovery_probes);
  d.Compare("recovery.min_dwell", recovery_min_dwell, o.recovery_min_dwell);
  d.Compare("backoff.factor", backoff_factor, o.backoff_factor);
  d.Compare("backoff.steps", backoff_steps, o.backoff_steps);
  d.Compare("backoff.max", backoff_max, o.backoff_max);
  d.Compare("backoff.reset_after", backoff_reset_after, o.backoff_reset_after);
  d.Compare("rate_limit.hold", rate_limit_hold, o.rate_limit_hold);
  d.Compare("rate_limit.max_hold", rate_limit_max_hold, o.rate_limit_max_hold);
  return d.Take();
}

std::vector<SettingDifference> Policy::Differences(const Policy& o) const {
  DifferenceList d;
  d.Add(HealthPolicy::Of(*this).Differences(HealthPolicy::Of(o)));
  d.Compare("rate_limit.on", rate_limit_on, o.rate_limit_on);
  d.Compare("max_attempts", max_attempts, o.max_attempts);
  d.Compare("max_replay_bytes", max_replay_bytes, o.max_replay_bytes);
  d.Compare("retry_on_statuses", retry_on_statuses, o.retry_on_statuses);
  d.Compare("retry_on_errors", retry_on_errors, o.retry_on_errors);
  d.Compare("same_target_retries", same_target_retries, o.same_target_retries);
  d.Compare("least_latency.explore", latency_explore, o.latency_explore);
  d.Compare("retry_budget.ratio", retry_budget_ratio, o.retry_budget_ratio);
  d.Compare("retry_budget.min_per_second", retry_budget_min_per_second, o.retry_budget_min_per_second);
  d.Compare("hedge.after", hedge_after, o.hedge_after);
  return d.Take();
}

std::vector<SettingDifference> TargetConfig::Differences(const TargetConfig& o) const {
  DifferenceList d;
  d.Compare("kind", kind, o.kind);
  d.Compare("upstream_model", upstream_model, o.upstream_model);
  d.Compare("warm", warm, o.warm);
  d.Compare("weight", weight, o.weight);
  d.Compare("cost", cost, o.cost);
  d.Compare("timeout", timeout, o.timeout);
  d.Compare("max_retries", max_retries, o.max_retries);
  d.Compare("limits.rpm", limit_rpm, o.limit_rpm);
  d.Compare("labels", labels, o.labels);
  d.Compare("enabled", enabled, o.enabled);
  if (health.has_value() != o.health.has_value()) {
    d.Compare("health", std::string(health ? "set" : "unset (its chains' settings)"),
              std::string(o.health ? "set" : "unset (its chains' settings)"));
  } else if (health) {
    DifferenceList h("health.");
    h.Add(health->Differences(*o.health));
    d.Add(h.Take());
  }
  return d.Take();
}

std::vector<SettingDifference> ChainConfig::Differences(const ChainConfig& o) const {
  DifferenceList d;
  d.Compare("targets", targets, o.targets);
  d.Compare("strategy", strategy, o.strategy);
  DifferenceList p("policy.");
  p.Add(policy->Differences(*o.policy));
  d.Add(p.Take());
  d.Compare("failover_enabled", failover_enabled, o.failover_enabled);
  auto names = [](const std::vector<ShadowPolicy>& list) {
    std::vector<std::string> out;
    for (const ShadowPolicy& s : list) out.push_back(s.name);
    return out;
  };
  d.Compare("shadow", names(shadows), names(o.shadows));
  for (const ShadowPolicy& mine : shadows) {
    for (const ShadowPolicy& theirs : o.shadows) {
      if (mine.name != theirs.name) continue;
      DifferenceList s(absl::StrCat("shadow.", mine.name, ".policy."));
      s.Add(mine.policy->Differences(*theirs.policy));
      d.Add(s.Take());
    }
  }
  return d.Take();
}

bool TargetConfig::operator==(const TargetConfig& o) const {
  auto tie = [](const TargetConfig& t) {
    return std::tie(t.name, t.kind, t.upstream_model, t.warm, t.weight, t.cost, t.timeout, t.max_retries,
                    t.limit_rpm, t.labels, t.enabled, t.managed_by, t.health);
  };
  return tie(*this) == tie(o);
}

bool ChainConfig::operator==(const ChainConfig& o) const {
  auto tie = [](const ChainConfig& c) {
    return std::tie(c.name, c.targets, c.strategy, c.policy, c.failover_enabled, c.shadows, c.managed_by);
  };
  return tie(*this) == tie(o);
}

}  // namespace failover
