#include "proto/model_convert.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace failover::api {
namespace {

constexpr int64_t kMaxDurationSeconds = 315'576'000'000;  // google.protobuf.Duration's range

absl::Status Invalid(absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

// Reads an optional Duration field: unset keeps `fallback`.
template <typename Msg>
absl::StatusOr<absl::Duration> OptionalDuration(bool has, const Msg& d, absl::Duration fallback,
                                                absl::string_view path) {
  if (!has) return fallback;
  return DurationFromProto(d, path);
}

}  // namespace

absl::StatusOr<Policy> PolicyFromProto(const v1::Policy& p, absl::string_view path) {
  Policy out;
  const std::string probe = absl::StrCat(path, ".probe");
  ASSIGN_OR_RETURN(out.probe_interval, OptionalDuration(p.probe().has_interval(), p.probe().interval(),
                                                        out.probe_interval, probe + ".interval"));
  ASSIGN_OR_RETURN(out.probe_timeout, OptionalDuration(p.probe().has_timeout(), p.probe().timeout(),
                                                       out.probe_timeout, probe + ".timeout"));
  out.trip_failure_rate = p.trip().failure_rate();
  if (p.trip().min_calls() != 0) out.trip_min_calls = p.trip().min_calls();
  ASSIGN_OR_RETURN(out.trip_slow_call_duration,
                   OptionalDuration(p.trip().slow_call().has_duration(), p.trip().slow_call().duration(),
                                    out.trip_slow_call_duration, absl::StrCat(path, ".trip.slow_call.duration")));
  out.trip_slow_call_rate = p.trip().slow_call().rate();
  // errors unset: 1, or off when a rate trips the target instead.
  if (p.trip().errors() != 0) {
    out.trip_errors = p.trip().errors();
  } else if (out.HasRateTrip()) {
    out.trip_errors = 0;
  }
  ASSIGN_OR_RETURN(out.trip_window, OptionalDuration(p.trip().has_window(), p.trip().window(), out.trip_window,
                                                     absl::StrCat(path, ".trip.window")));
  if (p.recovery().probes() != 0) out.recovery_probes = p.recovery().probes();
  ASSIGN_OR_RETURN(out.recovery_min_dwell,
                   OptionalDuration(p.recovery().has_min_dwell(), p.recovery().min_dwell(), out.recovery_min_dwell,
                                    absl::StrCat(path, ".recovery.min_dwell")));
  if (p.backoff().factor() != 0) out.backoff_factor = p.backoff().factor();
  if (p.backoff().has_steps()) out.backoff_steps = p.backoff().steps();
  ASSIGN_OR_RETURN(out.backoff_max, OptionalDuration(p.backoff().has_max(), p.backoff().max(), out.backoff_max,
                                                     absl::StrCat(path, ".backoff.max")));
  ASSIGN_OR_RETURN(out.backoff_reset_after,
                   OptionalDuration(p.backoff().has_reset_after(), p.backoff().reset_after(),
                                    out.backoff_reset_after, absl::StrCat(path, ".backoff.reset_after")));
  switch (p.rate_limit().on()) {
    case v1::RATE_LIMIT_MODE_UNSPECIFIED:
    case v1::RATE_LIMIT_MODE_FAILOVER: out.rate_limit_on = RateLimitMode::kFailover; break;
    case v1::RATE_LIMIT_MODE_WAIT: out.rate_limit_on = RateLimitMode::kWait; break;
    default:
      return Invalid(absl::StrCat(path, ".rate_limit.on"), absl::StrCat("unknown mode ", p.rate_limit().on()));
  }
  ASSIGN_OR_RETURN(out.rate_limit_hold,
                   OptionalDuration(p.rate_limit().has_hold(), p.rate_limit().hold(), out.rate_limit_hold,
                                    absl::StrCat(path, ".rate_limit.hold")));
  ASSIGN_OR_RETURN(out.rate_limit_max_hold,
                   OptionalDuration(p.rate_limit().has_max_hold(), p.rate_limit().max_hold(),
                                    out.rate_limit_max_hold, absl::StrCat(path, ".rate_limit.max_hold")));
  out.max_attempts = p.max_attempts();
  if (p.least_latency().has_explore()) out.latency_explore = p.least_latency().explore();
  ASSIGN_OR_RETURN(out.hedge_after, OptionalDuration(p.hedge().has_after(), p.hedge().after(), out.hedge_after,
                                                     absl::StrCat(path, ".hedge.after")));
  out.retry_budget_ratio = p.retry_budget().ratio();
  if (p.retry_budget().has_min_per_second()) out.retry_budget_min_per_second = p.retry_budget().min_per_second();
  if (p.has_max_replay_bytes()) out.max_replay_bytes = p.max_replay_bytes();
  out.retry_on_statuses.assign(p.retry_on_statuses().begin(), p.retry_on_statuses().end());
  out.retry_on_errors.assign(p.retry_on_errors().begin(), p.retry_on_errors().end());
  for (const auto& [name, retries] : p.same_target_retries()) {
    Reason reason;
    if (!ParseReason(name, &reason) || reason == Reason::kNone) {
      return Invalid(absl::StrCat(path, ".same_target_retries[\"", name, "\"]"),
                     "unknown reason (use network, timeout, overloaded, server_error, rate_limit, auth, billing, "
                     "model_not_found, capability_gap, admission, context_overflow, client_error, cancelled, "
                     "unknown)");
    }
    out.same_target_retries[reason] = retries;
  }
  return out;
}

void PolicyToProto(const Policy& p, v1::Policy* out) {
  DurationToProto(p.probe_interval, out->mutable_probe()->mutable_interval());
  DurationToProto(p.probe_timeout, out->mutable_probe()->mutable_timeout());
  out->mutable_trip()->set_errors(p.trip_errors);
  DurationToProto(p.trip_window, out->mutable_trip()->mutable_window());
  // Rate settings appear only when set, so a chain without them reads as before.
  out->mutable_trip()->set_failure_rate(p.trip_failure_rate);
  if (p.HasRateTrip() || p.trip_min_calls != Policy().trip_min_calls) {
    out->mutable_trip()->set_min_calls(p.trip_min_calls);
  }
  if (p.trip_slow_call_duration > absl::ZeroDuration() || p.trip_slow_call_rate > 0) {
    DurationToProto(p.trip_slow_call_duration, out->mutable_trip()->mutable_slow_call()->mutable_duration());
    out->mutable_trip()->mutable_slow_call()->set_rate(p.trip_slow_call_rate);
  }
  out->mutable_recovery()->set_probes(p.recovery_probes);
  DurationToProto(p.recovery_min_dwell, out->mutable_recovery()->mutable_min_dwell());
  out->mutable_backoff()->set_factor(p.backoff_factor);
  out->mutable_backoff()->set_steps(p.backoff_steps);
  DurationToProto(p.backoff_max, out->mutable_backoff()->mutable_max());
  DurationToProto(p.backoff_reset_after, out->mutable_backoff()->mutable_reset_after());
  out->mutable_rate_limit()->set_on(p.rate_limit_on == RateLimitMode::kWait ? v1::RATE_LIMIT_MODE_WAIT
                                                                            : v1::RATE_LIMIT_MODE_FAILOVER);
  DurationToProto(p.rate_limit_hold, out->mutable_rate_limit()->mutable_hold());
  DurationToProto(p.rate_limit_max_hold, out->mutable_rate_limit()->mutable_max_hold());
  out->set_max_attempts(p.max_attempts);
  if (p.latency_explore != Policy().latency_explore) out->mutable_least_latency()->set_explore(p.latency_explore);
  if (p.hedge_after > absl::ZeroDuration()) DurationToProto(p.hedge_after, out->mutable_hedge()->mutable_after());
  if (p.retry_budget_ratio > 0) {
    out->mutable_retry_budget()->set_ratio(p.retry_budget_ratio);
    out->mutable_retry_budget()->set_min_per_second(p.retry_budget_min_per_second);
  }
  out->set_max_replay_bytes(p.max_replay_bytes);
  for (const auto& s : p.retry_on_statuses) out->add_retry_on_statuses(s);
  for (const auto& s : p.retry_on_errors) out->add_retry_on_errors(s);
  for (const auto& [reason, retries] : p.same_target_retries) {
    (*out->mutable_same_target_retries())[ReasonName(reason)] = retries;
  }
}

namespace {

// A target's health settings are read and written as the health part of a
// chain policy, so both spell every field alike.
absl::StatusOr<HealthPolicy> HealthPolicyFromProto(const v1::HealthPolicy& h, absl::string_view path) {
  if (h.rate_limit().on() != v1::RATE_LIMIT_MODE_UNSPECIFIED) {
    return Invalid(absl::StrCat(path, ".rate_limit.on"),
                   "is a chain setting (set it in the chain's policy); a target sets only rate_limit.hold");
  }
  v1::Policy p;
  *p.mutable_probe() = h.probe();
  *p.mutable_trip() = h.trip();
  *p.mutable_recovery() = h.recovery();
  *p.mutable_backoff() = h.backoff();
  *p.mutable_rate_limit() = h.rate_limit();
  ASSIGN_OR_RETURN(Policy policy, PolicyFromProto(p, path));
  return HealthPolicy::Of(policy);
}

void HealthPolicyToProto(const HealthPolicy& h, v1::HealthPolicy* out) {
  v1::Policy p;
  PolicyToProto(h.AsPolicy(), &p);
  p.mutable_rate_limit()->clear_on();
  *out->mutable_probe() = p.probe();
  *out->mutable_trip() = p.trip();
  *out->mutable_recovery() = p.recovery();
  *out->mutable_backoff() = p.backoff();
  *out->mutable_rate_limit() = p.rate_limit();
}

}  // namespace

v1::TransitionSource SourceToProto(Source s) {
  switch (s) {
    case Source::kAuto: return v1::TRANSITION_SOURCE_AUTO;
    case Source::kProbe: return v1::TRANSITION_SOURCE_PROBE;
    case Source::kManual: return v1::TRANSITION_SOURCE_MANUAL;
    case Source::kConfig: return v1::TRANSITION_SOURCE_CONFIG;
  }
  return v1::TRANSITION_SOURCE_UNSPECIFIED;
}

v1::SwitchReason SwitchReasonToProto(SwitchReason r) {
  switch (r) {
    case SwitchReason::kInitial: return v1::SWITCH_REASON_INITIAL;
    case SwitchReason::kTrip: return v1::SWITCH_REASON_TRIP;
    case SwitchReason::kRecovery: return v1::SWITCH_REASON_RECOVERY;
    case SwitchReason::kPin: return v1::SWITCH_REASON_PIN;
    case SwitchReason::kUnpin: return v1::SWITCH_REASON_UNPIN;
    case SwitchReason::kManual: return v1::SWITCH_REASON_MANUAL;
    case SwitchReason::kCancel: return v1::SWITCH_REASON_CANCEL;
    case SwitchReason::kConfig: return v1::SWITCH_REASON_CONFIG;
  }
  return v1::SWITCH_REASON_UNSPECIFIED;
}

v1::ConfigObjectKind ObjectToProto(ConfigObject o) {
  switch (o) {
    case ConfigObject::kTarget: return v1::CONFIG_OBJECT_KIND_TARGET;
    case ConfigObject::kChain: return v1::CONFIG_OBJECT_KIND_CHAIN;
    case ConfigObject::kPin: return v1::CONFIG_OBJECT_KIND_PIN;
  }
  return v1::CONFIG_OBJECT_KIND_UNSPECIFIED;
}

v1::ConfigChange ChangeToProto(ConfigChangeKind c) {
  switch (c) {
    case ConfigChangeKind::kCreated: return v1::CONFIG_CHANGE_CREATED;
    case ConfigChangeKind::kUpdated: return v1::CONFIG_CHANGE_UPDATED;
    case ConfigChangeKind::kDeleted: return v1::CONFIG_CHANGE_DELETED;
    case ConfigChangeKind::kUnchanged: return v1::CONFIG_CHANGE_UNCHANGED;
  }
  return v1::CONFIG_CHANGE_UNSPECIFIED;
}


absl::StatusOr<absl::Duration> DurationFromProto(const google::protobuf::Duration& d, absl::string_view path) {
  const bool bad_sign = (d.seconds() > 0 && d.nanos() < 0) || (d.seconds() < 0 && d.nanos() > 0);
  if (d.seconds() > kMaxDurationSeconds || d.seconds() < -kMaxDurationSeconds || d.nanos() <= -1'000'000'000 ||
      d.nanos() >= 1'000'000'000 || bad_sign) {
    return Invalid(path, absl::StrCat("malformed duration (seconds ", d.seconds(), ", nanos ", d.nanos(), ")"));
  }
  return absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
}

void DurationToProto(absl::Duration d, google::protobuf::Duration* out) {
  const int64_t seconds = absl::IDivDuration(d, absl::Seconds(1), &d);
  out->set_seconds(seconds);
  out->set_nanos(static_cast<int32_t>(absl::ToInt64Nanoseconds(d)));
}

void TimeToProto(absl::Time t, google::protobuf::Timestamp* out) {
  if (t == absl::InfinitePast() || t == absl::InfiniteFuture()) return;
  const int64_t nanos = absl::ToUnixNanos(t);
  out->set_seconds(nanos / 1'000'000'000);
  out->set_nanos(static_cast<int32_t>(nanos % 1'000'000'000));
}

absl::Time TimeFromProto(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return absl::InfinitePast();
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

namespace {
// The engine's enums start where the API's start after UNSPECIFIED.
template <typename EngineEnum>
EngineEnum FromApiEnum(int value) {
  return static_cast<EngineEnum>(value > 0 ? value - 1 : 0);
}
}  // namespace

Event EventFromProto(const v1::Event& in) {
  Event e;
  e.sequence = in.sequence();
  e.actor = in.actor();
  e.time = TimeFromProto(in.time());
  if (in.has_chain_switched()) {
    const auto& s = in.chain_switched();
    e.kind = EventKind::kChainSwitched;
    e.chain = s.chain();
    e.from_target = s.from_target();
    e.to_target = s.to_target();
    e.from_chain_state = FromApiEnum<ChainState>(s.from_state());
    e.to_chain_state = FromApiEnum<ChainState>(s.to_state());
    e.switch_reason = FromApiEnum<SwitchReason>(s.reason());
    e.detail = s.detail();
  } else if (in.has_target_state()) {
    const auto& s = in.target_state();
    e.kind = EventKind::kTargetState;
    e.target = s.target();
    e.from_health = FromApiEnum<HealthState>(s.from_state());
    e.to_health = FromApiEnum<HealthState>(s.to_state());
    e.source = FromApiEnum<Source>(s.source());
    e.reason = s.reason();
    e.last_error = s.last_error();
  } else if (in.has_config_changed()) {
    const auto& s = in.config_changed();
    e.kind = EventKind::kConfigChanged;
    e.what = FromApiEnum<ConfigObject>(s.what());
    e.object_name = s.name();
    e.change = FromApiEnum<ConfigChangeKind>(s.change());
    e.generation = s.generation();
  }
  return e;
}

absl::StatusOr<TargetConfig> TargetFromProto(const v1::Target& t, absl::string_view path) {
  TargetConfig out;
  out.name = t.name();
  switch (t.kind()) {
    case v1::TARGET_KIND_UNSPECIFIED:
    case v1::TARGET_KIND_REMOTE: out.kind = TargetKind::kRemote; break;
    case v1::TARGET_KIND_LOCAL: out.kind = TargetKind::kLocal; break;
    default: return Invalid(absl::StrCat(path, ".kind"), absl::StrCat("unknown kind ", t.kind()));
  }
  out.upstream_model = t.upstream_model();
  out.warm = t.warm();
  out.weight = t.has_weight() ? t.weight() : 1;
  out.cost = t.cost();
  if (t.has_timeout()) {
    ASSIGN_OR_RETURN(out.timeout, DurationFromProto(t.timeout(), absl::StrCat(path, ".timeout")));
  }
  out.max_retries = t.max_retries();
  out.limit_rpm = t.limits().rpm();
  out.labels.insert(t.labels().begin(), t.labels().end());
  out.enabled = !t.has_enabled() || t.enabled();
  out.managed_by = t.managed_by();
  if (t.has_health()) {
    ASSIGN_OR_RETURN(out.health, HealthPolicyFromProto(t.health(), absl::StrCat(path, ".health")));
  }
  return out;
}

absl::StatusOr<ChainConfig> ChainFromProto(const v1::Chain& c, absl::string_view path) {
  ChainConfig out;
  out.name = c.name();
  out.targets.assign(c.targets().begin(), c.targets().end());
  switch (c.strategy()) {
    case v1::STRATEGY_UNSPECIFIED:
    case v1::STRATEGY_FAILOVER: out.strategy = Strategy::kFailover; break;
    case v1::STRATEGY_ROUND_ROBIN: out.strategy = Strategy::kRoundRobin; break;
    case v1::STRATEGY_LOWEST_COST: out.strategy = Strategy::kLowestCost; break;
    case v1::STRATEGY_LEAST_LATENCY: out.strategy = Strategy::kLeastLatency; break;
    default: return Invalid(absl::StrCat(path, ".strategy"), absl::StrCat("unknown strategy ", c.strategy()));
  }
  ASSIGN_OR_RETURN(out.policy, PolicyFromProto(c.policy(), absl::StrCat(path, ".policy")));
  out.failover_enabled = !c.has_failover_enabled() || c.failover_enabled();
  for (int i = 0; i < c.shadow_size(); ++i) {
    ShadowPolicy& s = out.shadows.emplace_back();
    s.name = c.shadow(i).name();
    ASSIGN_OR_RETURN(s.policy, PolicyFromProto(c.shadow(i).policy(), absl::StrCat(path, ".shadow[", i, "].policy")));
  }
  out.managed_by = c.managed_by();
  return out;
}

absl::StatusOr<ConfigChange> ConfigChangeFromProto(const v1::ApplyRequest& req) {
  ConfigChange change;
  for (int i = 0; i < req.targets_size(); ++i) {
    ASSIGN_OR_RETURN(TargetConfig t, TargetFromProto(req.targets(i), absl::StrCat("targets[", i, "]")));
    change.targets.push_back(std::move(t));
  }
  for (int i = 0; i < req.chains_size(); ++i) {
    ASSIGN_OR_RETURN(ChainConfig c, ChainFromProto(req.chains(i), absl::StrCat("chains[", i, "]")));
    change.chains.push_back(std::move(c));
  }
  return change;
}

void TargetToProto(const TargetConfig& t, v1::Target* out) {
  out->set_name(t.name);
  out->set_kind(t.kind == TargetKind::kLocal ? v1::TARGET_KIND_LOCAL : v1::TARGET_KIND_REMOTE);
  out->set_upstream_model(t.upstream_model);  // as declared: empty means the target name
  out->set_warm(t.warm);
  out->set_weight(t.weight);
  out->set_cost(t.cost);
  if (t.timeout > absl::ZeroDuration()) DurationToProto(t.timeout, out->mutable_timeout());
  out->set_max_retries(t.max_retries);
  out->mutable_limits()->set_rpm(t.limit_rpm);
  out->mutable_labels()->insert(t.labels.begin(), t.labels.end());
  out->set_enabled(t.enabled);
  out->set_managed_by(t.managed_by);
  if (t.health) HealthPolicyToProto(*t.health, out->mutable_health());
}

void ChainToProto(const ChainConfig& c, v1::Chain* out) {
  out->set_name(c.name);
  for (const auto& t : c.targets) out->add_targets(t);
  switch (c.strategy) {
    case Strategy::kFailover: out->set_strategy(v1::STRATEGY_FAILOVER); break;
    case Strategy::kRoundRobin: out->set_strategy(v1::STRATEGY_ROUND_ROBIN); break;
    case Strategy::kLowestCost: out->set_strategy(v1::STRATEGY_LOWEST_COST); break;
    case Strategy::kLeastLatency: out->set_strategy(v1::STRATEGY_LEAST_LATENCY); break;
  }
  PolicyToProto(c.policy, out->mutable_policy());
  out->set_failover_enabled(c.failover_enabled);
  for (const ShadowPolicy& s : c.shadows) {
    v1::ShadowPolicy* p = out->add_shadow();
    p->set_name(s.name);
    PolicyToProto(s.policy, p->mutable_policy());
  }
  out->set_managed_by(c.managed_by);
}

v1::HealthState HealthToProto(HealthState s) {
  switch (s) {
    case HealthState::kUnknown: return v1::HEALTH_STATE_UNKNOWN;
    case HealthState::kHealthy: return v1::HEALTH_STATE_HEALTHY;
    case HealthState::kDown: return v1::HEALTH_STATE_DOWN;
    case HealthState::kRecovering: return v1::HEALTH_STATE_RECOVERING;
    case HealthState::kDisabled: return v1::HEALTH_STATE_DISABLED;
    case HealthState::kManual: return v1::HEALTH_STATE_MANUAL;
  }
  return v1::HEALTH_STATE_UNSPECIFIED;
}

v1::ChainState ChainStateToProto(ChainState s) {
  switch (s) {
    case ChainState::kPrimary: return v1::CHAIN_STATE_PRIMARY;
    case ChainState::kFallback: return v1::CHAIN_STATE_FALLBACK;
    case ChainState::kDegraded: return v1::CHAIN_STATE_DEGRADED;
    case ChainState::kPinned: return v1::CHAIN_STATE_PINNED;
  }
  return v1::CHAIN_STATE_UNSPECIFIED;
}

v1::FailureReason ReasonToProto(Reason r) {
  // The enums share their order; kNone is UNSPECIFIED.
  return static_cast<v1::FailureReason>(static_cast<int>(r));
}

void EventToProto(const Event& e, v1::Event* out) {
  out->set_sequence(e.sequence);
  out->set_actor(e.actor);
  TimeToProto(e.time, out->mutable_time());
  switch (e.kind) {
    case EventKind::kChainSwitched: {
      auto* s = out->mutable_chain_switched();
      s->set_chain(e.chain);
      s->set_from_target(e.from_target);
      s->set_to_target(e.to_target);
      s->set_from_state(ChainStateToProto(e.from_chain_state));
      s->set_to_state(ChainStateToProto(e.to_chain_state));
      s->set_reason(SwitchReasonToProto(e.switch_reason));
      s->set_detail(e.detail);
      break;
    }
    case EventKind::kTargetState: {
      auto* s = out->mutable_target_state();
      s->set_target(e.target);
      s->set_from_state(HealthToProto(e.from_health));
      s->set_to_state(HealthToProto(e.to_health));
      s->set_source(SourceToProto(e.source));
      s->set_reason(e.reason);
      s->set_last_error(e.last_error);
      break;
    }
    case EventKind::kConfigChanged: {
      auto* s = out->mutable_config_changed();
      s->set_what(ObjectToProto(e.what));
      s->set_name(e.object_name);
      s->set_change(ChangeToProto(e.change));
      s->set_generation(e.generation);
      break;
    }
  }
}

}  // namespace failover::api

// ReasonToProto relies on the two enums sharing their order.
static_assert(static_cast<int>(failover::Reason::kNetwork) == failover::v1::FAILURE_REASON_NETWORK);
static_assert(static_cast<int>(failover::Reason::kAdmission) == failover::v1::FAILURE_REASON_ADMISSION);
static_assert(static_cast<int>(failover::Reason::kUnknown) == failover::v1::FAILURE_REASON_UNKNOWN);
static_assert(static_cast<int>(failover::Reason::kRetryBudget) == failover::v1::FAILURE_REASON_RETRY_BUDGET);
static_assert(static_cast<int>(failover::HealthState::kManual) + 1 == failover::v1::HEALTH_STATE_MANUAL);
static_assert(static_cast<int>(failover::ChainState::kPinned) + 1 == failover::v1::CHAIN_STATE_PINNED);
static_assert(static_cast<int>(failover::Source::kConfig) + 1 == failover::v1::TRANSITION_SOURCE_CONFIG);
static_assert(static_cast<int>(failover::SwitchReason::kConfig) + 1 == failover::v1::SWITCH_REASON_CONFIG);
static_assert(static_cast<int>(failover::ConfigObject::kPin) + 1 == failover::v1::CONFIG_OBJECT_KIND_PIN);
static_assert(static_cast<int>(failover::ConfigChangeKind::kUnchanged) + 1 == failover::v1::CONFIG_CHANGE_UNCHANGED);
