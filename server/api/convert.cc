#include "server/api/convert.h"

#include <algorithm>
#include <map>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include "server/api/upstream_response.h"

namespace failover::api {
namespace {

absl::Status Invalid(absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

}  // namespace

absl::StatusOr<OutcomeFacts> FailureFromProto(const v1::Failure& f, absl::string_view path, absl::Time now) {
  OutcomeFacts out;
  if (f.http_status() != 0 && (f.http_status() < 100 || f.http_status() > 599)) {
    return Invalid(absl::StrCat(path, ".http_status"), absl::StrCat("must be 100..599 or 0, got ", f.http_status()));
  }
  out.http_status = f.http_status();
  if (f.grpc_code() < 0 || f.grpc_code() > 16) {
    return Invalid(absl::StrCat(path, ".grpc_code"), absl::StrCat("must be 0..16, got ", f.grpc_code()));
  }
  out.grpc_code = f.grpc_code();
  switch (f.transport_error()) {
    case v1::TRANSPORT_ERROR_UNSPECIFIED: out.transport = TransportError::kNone; break;
    case v1::TRANSPORT_ERROR_CONNECT_REFUSED: out.transport = TransportError::kConnectRefused; break;
    case v1::TRANSPORT_ERROR_DNS: out.transport = TransportError::kDns; break;
    case v1::TRANSPORT_ERROR_RESET: out.transport = TransportError::kReset; break;
    case v1::TRANSPORT_ERROR_TLS: out.transport = TransportError::kTls; break;
    case v1::TRANSPORT_ERROR_TIMEOUT: out.transport = TransportError::kTimeout; break;
    default:
      return Invalid(absl::StrCat(path, ".transport_error"), absl::StrCat("unknown value ", f.transport_error()));
  }
  constexpr size_t kMaxMessage = 4096;
  if (f.message().size() > kMaxMessage || f.error_code().size() > 256) {
    return Invalid(absl::StrCat(path, ".message"), "message at most 4096 bytes and error_code at most 256");
  }
  out.message = f.message();
  out.error_code = f.error_code();
  if (f.has_retry_after()) {
    ASSIGN_OR_RETURN(out.retry_after, DurationFromProto(f.retry_after(), absl::StrCat(path, ".retry_after")));
    if (out.retry_after < absl::ZeroDuration()) {
      return Invalid(absl::StrCat(path, ".retry_after"), "must not be negative");
    }
  }
  switch (f.phase()) {
    case v1::PHASE_UNSPECIFIED:
    case v1::PHASE_BEFORE_RESPONSE: out.phase = Phase::kBeforeResponse; break;
    case v1::PHASE_AFTER_FIRST_BYTE: out.phase = Phase::kAfterFirstByte; break;
    case v1::PHASE_AFTER_SIDE_EFFECT: out.phase = Phase::kAfterSideEffect; break;
    default: return Invalid(absl::StrCat(path, ".phase"), absl::StrCat("unknown phase ", f.phase()));
  }
  out.admission_rejected = f.admission_rejected();
  out.cancelled = f.cancelled();
  if (f.has_response()) {
    const v1::UpstreamResponse& r = f.response();
    constexpr int kMaxHeaders = 32;
    constexpr size_t kMaxHeaderBytes = 1024;
    constexpr size_t kMaxBody = 16 * 1024;
    if (r.headers_size() > kMaxHeaders) {
      return Invalid(absl::StrCat(path, ".response.headers"),
                     absl::StrCat("at most ", kMaxHeaders, " headers (send the ones with reset times), got ",
                                  r.headers_size()));
    }
    std::map<std::string, std::string> headers;
    for (const auto& [name, value] : r.headers()) {
      if (name.size() + value.size() > kMaxHeaderBytes) {
        return Invalid(absl::StrCat(path, ".response.headers[\"", SanitizeUtf8(name, 64), "\"]"),
                       absl::StrCat("name and value at most ", kMaxHeaderBytes, " bytes"));
      }
      headers[absl::AsciiStrToLower(name)] = value;
    }
    if (r.body().size() > kMaxBody) {
      return Invalid(absl::StrCat(path, ".response.body"),
                     absl::StrCat("at most ", kMaxBody, " bytes (cut a longer body), got ", r.body().size()));
    }
    UpstreamErrorFacts read = ReadUpstreamResponse(out.http_status, headers, r.body(), now);
    // What the caller set explicitly wins.
    if (out.error_code.empty()) out.error_code = std::move(read.error_code);
    if (out.message.empty()) out.message = std::move(read.message);
    if (!f.has_retry_after() && read.retry_after) out.retry_after = *read.retry_after;
  }
  return out;
}

v1::Verdict VerdictToProto(Verdict v) {
  switch (v) {
    case Verdict::kDone: return v1::VERDICT_DONE;
    case Verdict::kRetrySame: return v1::VERDICT_RETRY_SAME;
    case Verdict::kTryNext: return v1::VERDICT_TRY_NEXT;
    case Verdict::kFail: return v1::VERDICT_FAIL;
  }
  return v1::VERDICT_UNSPECIFIED;
}

void TargetStatusToProto(const TargetStatus& s, v1::TargetStatus* out) {
  out->set_name(s.name);
  out->set_health(HealthToProto(s.health));
  out->set_automatic_health(HealthToProto(s.automatic));
  out->set_source(SourceToProto(s.source));
  out->set_reason(s.reason);
  if (s.since != absl::InfinitePast()) TimeToProto(s.since, out->mutable_since());
  if (s.last_probe != absl::InfinitePast()) TimeToProto(s.last_probe, out->mutable_last_probe());
  out->set_last_check(s.last_check);
  out->set_last_error(s.last_error);
  if (s.last_error_time != absl::InfinitePast()) TimeToProto(s.last_error_time, out->mutable_last_error_time());
  if (s.held_until != absl::InfinitePast()) TimeToProto(s.held_until, out->mutable_held_until());
  out->set_enabled(s.enabled);
  out->set_recovery_passes(s.recovery_passes);
  if (s.latency >= absl::ZeroDuration()) DurationToProto(s.latency, out->mutable_latency());
  for (const auto& c : s.chains) out->add_chains(c);
  out->set_managed_by(s.managed_by);
  if (s.next_check != absl::InfiniteFuture()) TimeToProto(s.next_check, out->mutable_next_check());
  for (const TrafficMinute& m : s.traffic) {
    v1::TrafficMinute* minute = out->add_traffic();
    TimeToProto(m.start, minute->mutable_start());
    minute->set_requests(m.requests);
    minute->set_errors(m.errors);
    if (m.timed > 0) DurationToProto(m.latency_sum / static_cast<int64_t>(m.timed), minute->mutable_latency());
  }
}

void ChainStatusToProto(const ChainStatus& s, v1::ChainStatus* out) {
  out->set_name(s.name);
  out->set_state(ChainStateToProto(s.state));
  out->set_active_target(s.active_target);
  if (s.active_since != absl::InfinitePast()) TimeToProto(s.active_since, out->mutable_active_since());
  out->set_pinned_target(s.pinned_target);
  if (s.last_switch != absl::InfinitePast()) TimeToProto(s.last_switch, out->mutable_last_switch());
  for (const auto& t : s.targets) TargetStatusToProto(t, out->add_targets());
}

void AttemptToProto(const PlannedAttempt& a, v1::Attempt* out) {
  const TargetConfig& t = *a.target->config;
  out->set_target(t.name);
  out->set_upstream_model(t.UpstreamModel());
  if (!t.labels.empty()) out->mutable_labels()->insert(t.labels.begin(), t.labels.end());
  if (t.timeout > absl::ZeroDuration()) DurationToProto(t.timeout, out->mutable_timeout());
  out->set_max_retries(t.max_retries);
  out->set_position(a.position);
  out->set_health(HealthToProto(a.health));
}

void DiffToProto(const ConfigDiff& d, v1::ConfigDiff* out) {
  out->set_what(ObjectToProto(d.what));
  out->set_name(d.name);
  out->set_change(ChangeToProto(d.change));
  for (const auto& f : d.changed_fields) out->add_changed_fields(f);
  for (const auto& f : d.details) out->add_details(f);
}

void TraceEntryToProto(const TraceEntry& e, v1::TraceEntry* out) {
  out->set_number(e.number);
  TimeToProto(e.at, out->mutable_time());
  out->set_chain(e.chain);
  out->set_target(e.target);
  out->set_count(e.count);
  out->set_reason(ReasonToProto(e.classified));
  if (e.latency != absl::ZeroDuration()) DurationToProto(e.latency, out->mutable_latency());
  switch (e.source) {
    case TraceSource::kOutcome: break;
    case TraceSource::kProbePass: out->set_probe_outcome(v1::PROBE_OUTCOME_PASS); break;
    case TraceSource::kProbeFail: out->set_probe_outcome(v1::PROBE_OUTCOME_FAIL); break;
    case TraceSource::kProbeThrottled: out->set_probe_outcome(v1::PROBE_OUTCOME_THROTTLED); break;
    case TraceSource::kProbeNotLoaded: out->set_probe_outcome(v1::PROBE_OUTCOME_NOT_LOADED); break;
  }
  if (e.source != TraceSource::kOutcome) {
    out->set_probe_kind(e.recovery_probe ? v1::PROBE_KIND_RECOVERY : v1::PROBE_KIND_LIVENESS);
  }
  const OutcomeFacts& f = e.facts;
  if (f.success) {
    out->mutable_success();
    return;
  }
  v1::Failure* failure = out->mutable_failure();
  failure->set_http_status(f.http_status);
  failure->set_grpc_code(f.grpc_code);
  switch (f.transport) {
    case TransportError::kNone: failure->set_transport_error(v1::TRANSPORT_ERROR_UNSPECIFIED); break;
    case TransportError::kConnectRefused: failure->set_transport_error(v1::TRANSPORT_ERROR_CONNECT_REFUSED); break;
    case TransportError::kDns: failure->set_transport_error(v1::TRANSPORT_ERROR_DNS); break;
    case TransportError::kReset: failure->set_transport_error(v1::TRANSPORT_ERROR_RESET); break;
    case TransportError::kTls: failure->set_transport_error(v1::TRANSPORT_ERROR_TLS); break;
    case TransportError::kTimeout: failure->set_transport_error(v1::TRANSPORT_ERROR_TIMEOUT); break;
  }
  failure->set_message(f.message);
  failure->set_error_code(f.error_code);
  if (f.retry_after != absl::ZeroDuration()) DurationToProto(f.retry_after, failure->mutable_retry_after());
  switch (f.phase) {
    case Phase::kBeforeResponse: failure->set_phase(v1::PHASE_BEFORE_RESPONSE); break;
    case Phase::kAfterFirstByte: failure->set_phase(v1::PHASE_AFTER_FIRST_BYTE); break;
    case Phase::kAfterSideEffect: failure->set_phase(v1::PHASE_AFTER_SIDE_EFFECT); break;
  }
  failure->set_admission_rejected(f.admission_rejected);
  failure->set_cancelled(f.cancelled);
}

void SimulatedRunToProto(const ReplaySummary& run, const Policy& policy, v1::SimulatedRun* out) {
  // Bounded like the events: a week of a flapping chain trips many times.
  constexpr size_t kMaxListed = 1000;
  PolicyToProto(policy, out->mutable_policy());
  std::vector<absl::Duration> detection;
  for (const ReplayTrip& trip : run.trips) {
    detection.push_back(trip.detection);
    if (static_cast<size_t>(out->trips_size()) == kMaxListed) continue;
    v1::SimulatedTrip* t = out->add_trips();
    t->set_target(trip.target);
    TimeToProto(trip.at, t->mutable_time());
    DurationToProto(trip.detection, t->mutable_detection());
  }
  out->set_trip_count(static_cast<uint32_t>(run.trips.size()));
  if (!detection.empty()) {
    std::sort(detection.begin(), detection.end());
    DurationToProto(detection[detection.size() / 2], out->mutable_detection_median());
    DurationToProto(detection.back(), out->mutable_detection_max());
  }
  out->set_recoveries(run.recoveries);
  out->set_switches(run.switches);
  out->set_flaps(run.flaps);
  out->set_requests_to_failing(run.requests_to_failing);
  DurationToProto(run.in_fallback, out->mutable_in_fallback());
  DurationToProto(run.in_degraded, out->mutable_in_degraded());
  out->set_outcomes(run.outcomes);
  out->set_elsewhere(run.elsewhere);
  out->set_checks_used(run.checks_used);
  out->set_checks_unused(run.checks_unused);
  const size_t shown = std::min(run.events.size(), kMaxListed);
  for (size_t i = 0; i < shown; ++i) EventToProto(run.events[i], out->add_events());
  out->set_events_left_off(static_cast<uint32_t>(run.events.size() - shown));
}

}  // namespace failover::api
