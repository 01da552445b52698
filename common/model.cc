#include "common/model.h"

#include <tuple>

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
    "admission",      "context_overflow", "client_error", "cancelled",   "unknown"};
}  // namespace

const char* ReasonName(Reason r) { return kReasonNames[static_cast<int>(r)]; }

bool ParseReason(const std::string& name, Reason* out) {
  for (int i = 1; i < kReasonCount; ++i) {
    if (name == kReasonNames[i]) {
      *out = static_cast<Reason>(i);
      return true;
    }
  }
  return false;
}

bool Policy::operator==(const Policy& o) const {
  auto tie = [](const Policy& p) {
    return std::tie(p.probe_interval, p.probe_timeout, p.trip_errors, p.trip_window, p.recovery_probes,
                    p.recovery_min_dwell, p.backoff_factor, p.backoff_steps, p.backoff_max,
                    p.backoff_reset_after, p.rate_limit_on, p.rate_limit_hold, p.max_attempts,
                    p.max_replay_bytes, p.retry_on_statuses, p.retry_on_errors, p.same_target_retries);
  };
  return tie(*this) == tie(o);
}

bool TargetConfig::operator==(const TargetConfig& o) const {
  auto tie = [](const TargetConfig& t) {
    return std::tie(t.name, t.kind, t.upstream_model, t.warm, t.weight, t.cost, t.timeout, t.max_retries,
                    t.limit_rpm, t.labels, t.enabled, t.managed_by);
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
