#include "common/model.h"

#include <tuple>
#include <type_traits>

#include "absl/strings/str_cat.h"

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

std::vector<HealthPolicy::Difference> HealthPolicy::Differences(const HealthPolicy& o) const {
  std::vector<Difference> out;
  auto show = [](const auto& v) {
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, absl::Duration>) {
      return absl::FormatDuration(v);
    } else {
      return absl::StrCat(v);
    }
  };
  auto compare = [&](const char* field, const auto& mine, const auto& theirs) {
    if (mine != theirs) out.push_back(Difference{field, show(mine), show(theirs)});
  };
  compare("probe.interval", probe_interval, o.probe_interval);
  compare("probe.timeout", probe_timeout, o.probe_timeout);
  compare("trip.errors", trip_errors, o.trip_errors);
  compare("trip.window", trip_window, o.trip_window);
  compare("trip.failure_rate", trip_failure_rate, o.trip_failure_rate);
  compare("trip.min_calls", trip_min_calls, o.trip_min_calls);
  compare("trip.slow_call.duration", trip_slow_call_duration, o.trip_slow_call_duration);
  compare("trip.slow_call.rate", trip_slow_call_rate, o.trip_slow_call_rate);
  compare("recovery.probes", recovery_probes, o.recovery_probes);
  compare("recovery.min_dwell", recovery_min_dwell, o.recovery_min_dwell);
  compare("backoff.factor", backoff_factor, o.backoff_factor);
  compare("backoff.steps", backoff_steps, o.backoff_steps);
  compare("backoff.max", backoff_max, o.backoff_max);
  compare("backoff.reset_after", backoff_reset_after, o.backoff_reset_after);
  compare("rate_limit.hold", rate_limit_hold, o.rate_limit_hold);
  compare("rate_limit.max_hold", rate_limit_max_hold, o.rate_limit_max_hold);
  return out;
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
    return std::tie(c.name, c.targets, c.strategy, c.policy, c.failover_enabled, c.managed_by);
  };
  return tie(*this) == tie(o);
}

}  // namespace failover
