#include "storage/records.h"

#include <cstdint>

namespace failover::storage {
namespace {

int64_t DurationToNanos(absl::Duration d) { return absl::ToInt64Nanoseconds(d); }
absl::Duration DurationFromNanos(int64_t n) { return absl::Nanoseconds(n); }

// Stores an engine enum as its value; reads it back only if it is one.
template <typename E>
int32_t EnumToInt(E e) {
  return static_cast<int32_t>(e);
}
template <typename E>
bool EnumFromInt(int32_t v, E last, E* out) {
  if (v < 0 || v > static_cast<int32_t>(last)) return false;
  *out = static_cast<E>(v);
  return true;
}

void EncodePolicy(const Policy& p, PolicyRecord* r) {
  r->set_probe_interval_nanos(DurationToNanos(p.probe_interval));
  r->set_probe_timeout_nanos(DurationToNanos(p.probe_timeout));
  r->set_trip_errors(p.trip_errors);
  r->set_trip_window_nanos(DurationToNanos(p.trip_window));
  r->set_trip_failure_rate(p.trip_failure_rate);
  r->set_trip_min_calls(p.trip_min_calls);
  r->set_trip_slow_call_duration_nanos(DurationToNanos(p.trip_slow_call_duration));
  r->set_trip_slow_call_rate(p.trip_slow_call_rate);
  r->set_recovery_probes(p.recovery_probes);
  r->set_recovery_min_dwell_nanos(DurationToNanos(p.recovery_min_dwell));
  r->set_backoff_factor(p.backoff_factor);
  r->set_backoff_steps(p.backoff_steps);
  r->set_backoff_max_nanos(DurationToNanos(p.backoff_max));
  r->set_backoff_reset_after_nanos(DurationToNanos(p.backoff_reset_after));
  r->set_rate_limit_on(EnumToInt(p.rate_limit_on));
  r->set_rate_limit_hold_nanos(DurationToNanos(p.rate_limit_hold));
  r->set_rate_limit_max_hold_nanos(DurationToNanos(p.rate_limit_max_hold));
  r->set_max_attempts(p.max_attempts);
  r->set_latency_explore(p.latency_explore);
  r->set_hedge_after_nanos(DurationToNanos(p.hedge_after));
  r->set_retry_budget_ratio(p.retry_budget_ratio);
  r->set_retry_budget_min_per_second(p.retry_budget_min_per_second);
  r->set_max_replay_bytes(p.max_replay_bytes);
  for (const std::string& s : p.retry_on_statuses) r->add_retry_on_statuses(s);
  for (const std::string& s : p.retry_on_errors) r->add_retry_on_errors(s);
  for (const auto& [reason, n] : p.same_target_retries) (*r->mutable_same_target_retries())[EnumToInt(reason)] = n;
}

bool DecodePolicy(const PolicyRecord& r, Policy* out) {
  Policy& p = *out;
  p.probe_interval = DurationFromNanos(r.probe_interval_nanos());
  p.probe_timeout = DurationFromNanos(r.probe_timeout_nanos());
  p.trip_errors = r.trip_errors();
  p.trip_window = DurationFromNanos(r.trip_window_nanos());
  p.trip_failure_rate = r.trip_failure_rate();
  if (r.trip_min_calls() != 0) p.trip_min_calls = r.trip_min_calls();
  p.trip_slow_call_duration = DurationFromNanos(r.trip_slow_call_duration_nanos());
  p.trip_slow_call_rate = r.trip_slow_call_rate();
  p.recovery_probes = r.recovery_probes();
  p.recovery_min_dwell = DurationFromNanos(r.recovery_min_dwell_nanos());
  p.backoff_factor = r.backoff_factor();
  p.backoff_steps = r.backoff_steps();
  p.backoff_max = DurationFromNanos(r.backoff_max_nanos());
  p.backoff_reset_after = DurationFromNanos(r.backoff_reset_after_nanos());
  if (!EnumFromInt(r.rate_limit_on(), RateLimitMode::kWait, &p.rate_limit_on)) return false;
  p.rate_limit_hold = DurationFromNanos(r.rate_limit_hold_nanos());
  if (r.rate_limit_max_hold_nanos() != 0) p.rate_limit_max_hold = DurationFromNanos(r.rate_limit_max_hold_nanos());
  p.max_attempts = r.max_attempts();
  if (r.has_latency_explore()) p.latency_explore = r.latency_explore();
  p.hedge_after = DurationFromNanos(r.hedge_after_nanos());
  p.retry_budget_ratio = r.retry_budget_ratio();
  if (r.has_retry_budget_min_per_second()) p.retry_budget_min_per_second = r.retry_budget_min_per_second();
  p.max_replay_bytes = r.max_replay_bytes();
  p.retry_on_statuses.assign(r.retry_on_statuses().begin(), r.retry_on_statuses().end());
  p.retry_on_errors.assign(r.retry_on_errors().begin(), r.retry_on_errors().end());
  p.same_target_retries.clear();
  for (const auto& [reason, n] : r.same_target_retries()) {
    Reason parsed;
    if (!EnumFromInt(reason, Reason::kUnknown, &parsed)) return false;
    p.same_target_retries[parsed] = n;
  }
  return true;
}

}  // namespace

int64_t TimeToNanos(absl::Time t) { return t == absl::InfinitePast() ? INT64_MIN : absl::ToUnixNanos(t); }
absl::Time TimeFromNanos(int64_t n) { return n == INT64_MIN ? absl::InfinitePast() : absl::FromUnixNanos(n); }

void EncodeTarget(const TargetConfig& in, TargetRecord* out) {
  out->set_name(in.name);
  out->set_kind(EnumToInt(in.kind));
  out->set_upstream_model(in.upstream_model);  // as declared, never the effective name
  out->set_warm(in.warm);
  out->set_weight(in.weight);
  out->set_cost(in.cost);
  out->set_timeout_nanos(DurationToNanos(in.timeout));
  out->set_max_retries(in.max_retries);
  out->set_limit_rpm(in.limit_rpm);
  out->mutable_labels()->insert(in.labels.begin(), in.labels.end());
  out->set_enabled(in.enabled);
  out->set_managed_by(in.managed_by);
  if (in.health) EncodePolicy(in.health->AsPolicy(), out->mutable_health());
}

bool DecodeTarget(const TargetRecord& in, TargetConfig* out) {
  out->name = in.name();
  if (!EnumFromInt(in.kind(), TargetKind::kLocal, &out->kind)) return false;
  out->upstream_model = in.upstream_model();
  out->warm = in.warm();
  out->weight = in.weight();
  out->cost = in.cost();
  out->timeout = DurationFromNanos(in.timeout_nanos());
  out->max_retries = in.max_retries();
  out->limit_rpm = in.limit_rpm();
  out->labels = std::map<std::string, std::string>(in.labels().begin(), in.labels().end());
  out->enabled = in.enabled();
  out->managed_by = in.managed_by();
  if (in.has_health()) {
    Policy health;
    if (!DecodePolicy(in.health(), &health)) return false;
    out->health = HealthPolicy::Of(health);
  }
  return true;
}

void EncodeChain(const ChainConfig& in, ChainRecord* out) {
  out->set_name(in.name);
  for (const std::string& t : in.targets) out->add_targets(t);
  out->set_strategy(EnumToInt(in.strategy));
  out->set_failover_enabled(in.failover_enabled);
  out->set_managed_by(in.managed_by);
  EncodePolicy(in.policy, out->mutable_policy());
  for (const ShadowPolicy& s : in.shadows) {
    ShadowPolicyRecord* r = out->add_shadows();
    r->set_name(s.name);
    EncodePolicy(s.policy, r->mutable_policy());
  }
}

bool DecodeChain(const ChainRecord& in, ChainConfig* out) {
  out->name = in.name();
  out->targets.assign(in.targets().begin(), in.targets().end());
  if (!EnumFromInt(in.strategy(), Strategy::kLeastLatency, &out->strategy)) return false;
  out->failover_enabled = in.failover_enabled();
  out->managed_by = in.managed_by();
  out->shadows.clear();
  for (const ShadowPolicyRecord& r : in.shadows()) {
    ShadowPolicy& s = out->shadows.emplace_back();
    s.name = r.name();
    Policy policy;
    if (!DecodePolicy(r.policy(), &policy)) return false;
    s.policy = std::move(policy);
  }
  Policy policy;
  if (!DecodePolicy(in.policy(), &policy)) return false;
  out->policy = std::move(policy);  // a default policy is the shared default
  return true;
}

void EncodeEvent(const Event& in, EventRecord* out) {
  out->set_kind(EnumToInt(in.kind));
  out->set_time_nanos(TimeToNanos(in.time));
  out->set_chain(in.chain);
  out->set_from_target(in.from_target);
  out->set_to_target(in.to_target);
  out->set_from_chain_state(EnumToInt(in.from_chain_state));
  out->set_to_chain_state(EnumToInt(in.to_chain_state));
  out->set_switch_reason(EnumToInt(in.switch_reason));
  out->set_detail(in.detail);
  out->set_target(in.target);
  out->set_from_health(EnumToInt(in.from_health));
  out->set_to_health(EnumToInt(in.to_health));
  out->set_source(EnumToInt(in.source));
  out->set_reason(in.reason);
  out->set_last_error(in.last_error);
  out->set_what(EnumToInt(in.what));
  out->set_change(EnumToInt(in.change));
  out->set_generation(in.generation);
  out->set_object_name(in.object_name);
  out->set_actor(in.actor);
}

bool DecodeEvent(const EventRecord& in, Event* out) {
  out->time = TimeFromNanos(in.time_nanos());
  out->chain = in.chain();
  out->from_target = in.from_target();
  out->to_target = in.to_target();
  out->detail = in.detail();
  out->target = in.target();
  out->reason = in.reason();
  out->last_error = in.last_error();
  out->generation = in.generation();
  out->object_name = in.object_name();
  out->actor = in.actor();
  return EnumFromInt(in.kind(), EventKind::kConfigChanged, &out->kind) &&
         EnumFromInt(in.from_chain_state(), ChainState::kPinned, &out->from_chain_state) &&
         EnumFromInt(in.to_chain_state(), ChainState::kPinned, &out->to_chain_state) &&
         EnumFromInt(in.switch_reason(), SwitchReason::kConfig, &out->switch_reason) &&
         EnumFromInt(in.from_health(), HealthState::kManual, &out->from_health) &&
         EnumFromInt(in.to_health(), HealthState::kManual, &out->to_health) &&
         EnumFromInt(in.source(), Source::kConfig, &out->source) &&
         EnumFromInt(in.what(), ConfigObject::kPin, &out->what) &&
         EnumFromInt(in.change(), ConfigChangeKind::kUnchanged, &out->change);
}

void EncodeHealth(const TargetStateRecord& in, HealthRecord* out) {
  out->set_automatic(EnumToInt(in.automatic));
  out->set_since_unix_nanos(TimeToNanos(in.since));
  out->set_trips(in.trips);
  out->set_recovery_passes(in.recovery_passes);
  out->set_source(EnumToInt(in.source));
  out->set_reason(in.reason);
  out->set_last_error(in.last_error);
  out->set_last_error_unix_nanos(TimeToNanos(in.last_error_time));
  out->set_last_probe_unix_nanos(TimeToNanos(in.last_probe));
  out->set_last_check(in.last_check);
  out->set_held_until_unix_nanos(TimeToNanos(in.held_until));
}

bool DecodeHealth(const HealthRecord& in, TargetStateRecord* out) {
  out->since = TimeFromNanos(in.since_unix_nanos());
  out->trips = in.trips();
  out->recovery_passes = in.recovery_passes();
  out->reason = in.reason();
  out->last_error = in.last_error();
  out->last_error_time = TimeFromNanos(in.last_error_unix_nanos());
  out->last_probe = TimeFromNanos(in.last_probe_unix_nanos());
  out->last_check = in.last_check();
  // 0: a record written before holds were stored (none).
  out->held_until =
      in.held_until_unix_nanos() == 0 ? absl::InfinitePast() : TimeFromNanos(in.held_until_unix_nanos());
  return EnumFromInt(in.automatic(), HealthState::kManual, &out->automatic) &&
         EnumFromInt(in.source(), Source::kConfig, &out->source);
}

void EncodeChainState(const failover::ChainStateRecord& in, storage::ChainStateRecord* out) {
  out->set_active(in.active);
  out->set_state(EnumToInt(in.state));
  out->set_active_since_unix_nanos(TimeToNanos(in.active_since));
  out->set_last_switch_unix_nanos(TimeToNanos(in.last_switch));
}

bool DecodeChainState(const storage::ChainStateRecord& in, failover::ChainStateRecord* out) {
  out->active = in.active();
  out->active_since = TimeFromNanos(in.active_since_unix_nanos());
  out->last_switch = TimeFromNanos(in.last_switch_unix_nanos());
  return EnumFromInt(in.state(), ChainState::kPinned, &out->state);
}

void EncodeTrace(const TraceEntry& in, TraceRecord* out) {
  out->set_time_nanos(TimeToNanos(in.at));
  out->set_chain(in.chain);
  out->set_target(in.target);
  out->set_count(in.count);
  out->set_classified(EnumToInt(in.classified));
  out->set_latency_nanos(DurationToNanos(in.latency));
  const OutcomeFacts& f = in.facts;
  out->set_success(f.success);
  out->set_http_status(f.http_status);
  out->set_grpc_code(f.grpc_code);
  out->set_transport(EnumToInt(f.transport));
  out->set_message(f.message);
  out->set_error_code(f.error_code);
  out->set_retry_after_nanos(DurationToNanos(f.retry_after));
  out->set_phase(EnumToInt(f.phase));
  out->set_admission_rejected(f.admission_rejected);
  out->set_cancelled(f.cancelled);
  out->set_source(EnumToInt(in.source));
  out->set_recovery_probe(in.recovery_probe);
}

bool DecodeTrace(const TraceRecord& in, TraceEntry* out) {
  out->at = TimeFromNanos(in.time_nanos());
  out->chain = in.chain();
  out->target = in.target();
  out->count = in.count();
  out->latency = DurationFromNanos(in.latency_nanos());
  OutcomeFacts& f = out->facts;
  f.success = in.success();
  f.http_status = in.http_status();
  f.grpc_code = in.grpc_code();
  f.message = in.message();
  f.error_code = in.error_code();
  f.retry_after = DurationFromNanos(in.retry_after_nanos());
  f.admission_rejected = in.admission_rejected();
  f.cancelled = in.cancelled();
  out->recovery_probe = in.recovery_probe();
  return in.count() > 0 && EnumFromInt(in.source(), TraceSource::kProbeNotLoaded, &out->source) && EnumFromInt(in.classified(), Reason::kRetryBudget, &out->classified) &&
         EnumFromInt(in.transport(), TransportError::kTimeout, &f.transport) &&
         EnumFromInt(in.phase(), Phase::kAfterSideEffect, &f.phase);
}

}  // namespace failover::storage
