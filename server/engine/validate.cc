#include "server/engine/validate.h"

#include <cmath>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "server/engine/classify.h"
#include "common/status_macros.h"
#include "common/utf8.h"

namespace failover {
namespace {

absl::Status Invalid(absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

absl::Status AtMostMax(absl::Duration d, absl::string_view path) {
  if (d > kMaxDuration) {
    return Invalid(path, absl::StrCat("must be at most ", absl::FormatDuration(kMaxDuration), ", got ",
                                      absl::FormatDuration(d)));
  }
  return absl::OkStatus();
}

absl::Status Positive(absl::Duration d, absl::string_view path) {
  if (d <= absl::ZeroDuration()) {
    return Invalid(path, absl::StrCat("must be a positive duration, got ", absl::FormatDuration(d)));
  }
  return AtMostMax(d, path);
}

absl::Status NonNegative(absl::Duration d, absl::string_view path) {
  if (d < absl::ZeroDuration()) {
    return Invalid(path, absl::StrCat("must not be negative, got ", absl::FormatDuration(d)));
  }
  return AtMostMax(d, path);
}

bool NameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == ':' || c == '/' || c == '@' || c == '-';
}

}  // namespace

absl::Status ValidateName(absl::string_view name, absl::string_view path) {
  if (name.empty()) return Invalid(path, "must not be empty");
  if (name.size() > kMaxNameLength) {
    return Invalid(path, absl::StrCat("must be at most ", kMaxNameLength, " characters, got ", name.size()));
  }
  for (char c : name) {
    if (!NameChar(c)) {
      return Invalid(path, absl::StrCat("may only contain A-Za-z0-9._:/@-, got \"", absl::CHexEscape(name), "\""));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateTarget(const TargetConfig& t, absl::string_view path) {
  RETURN_IF_ERROR(ValidateName(t.name, absl::StrCat(path, ".name")));
  if (t.upstream_model.size() > 256) {
    return Invalid(absl::StrCat(path, ".upstream_model"), "must be at most 256 characters");
  }
  if (!IsValidUtf8(t.upstream_model)) return Invalid(absl::StrCat(path, ".upstream_model"), "is not valid UTF-8");
  if (!(t.cost >= 0 && std::isfinite(t.cost))) {
    return Invalid(absl::StrCat(path, ".cost"), absl::StrCat("must be >= 0, got ", t.cost));
  }
  RETURN_IF_ERROR(NonNegative(t.timeout, absl::StrCat(path, ".timeout")));
  if (t.weight > 1000000) {
    return Invalid(absl::StrCat(path, ".weight"), absl::StrCat("must be at most 1000000, got ", t.weight));
  }
  if (t.max_retries > 100) {
    return Invalid(absl::StrCat(path, ".max_retries"), absl::StrCat("must be at most 100, got ", t.max_retries));
  }
  if (t.labels.size() > kMaxLabels) {
    return Invalid(absl::StrCat(path, ".labels"),
                   absl::StrCat("at most ", kMaxLabels, " labels, got ", t.labels.size()));
  }
  size_t index = 0;
  for (const auto& [k, v] : t.labels) {
    if (!IsValidUtf8(k)) {
      return Invalid(absl::StrCat(path, ".labels (key ", index, ")"),
                     absl::StrCat("is not valid UTF-8: \"", absl::CHexEscape(k.substr(0, 64)), "\""));
    }
    if (!IsValidUtf8(v)) return Invalid(absl::StrCat(path, ".labels[\"", k, "\"]"), "is not valid UTF-8");
    ++index;
    if (k.empty() || k.size() + v.size() > kMaxLabelBytes) {
      return Invalid(absl::StrCat(path, ".labels[\"", k, "\"]"),
                     absl::StrCat("key must be non-empty and key+value at most ", kMaxLabelBytes, " bytes"));
    }
  }
  // The same bounds as a chain policy's health fields.
  if (t.health) RETURN_IF_ERROR(ValidatePolicy(t.health->AsPolicy(), absl::StrCat(path, ".health")));
  return absl::OkStatus();
}

absl::Status ValidatePolicy(const Policy& p, absl::string_view path) {
  RETURN_IF_ERROR(Positive(p.probe_interval, absl::StrCat(path, ".probe.interval")));
  RETURN_IF_ERROR(Positive(p.probe_timeout, absl::StrCat(path, ".probe.timeout")));
  if (p.trip_errors > 10000 || (p.trip_errors < 1 && !p.HasRateTrip())) {
    return Invalid(absl::StrCat(path, ".trip.errors"),
                   absl::StrCat("must be 1..10000 (0 only with trip.failure_rate or trip.slow_call), got ",
                                p.trip_errors));
  }
  RETURN_IF_ERROR(Positive(p.trip_window, absl::StrCat(path, ".trip.window")));
  auto percent = [&](double v, const char* field) -> absl::Status {
    if (!(v >= 0 && v <= 100)) {  // also refuses NaN
      return Invalid(absl::StrCat(path, field), absl::StrCat("must be a percentage 0..100 (0 = off), got ", v));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(percent(p.trip_failure_rate, ".trip.failure_rate"));
  RETURN_IF_ERROR(percent(p.trip_slow_call_rate, ".trip.slow_call.rate"));
  if (p.trip_min_calls < 1 || p.trip_min_calls > 1000000) {
    return Invalid(absl::StrCat(path, ".trip.min_calls"),
                   absl::StrCat("must be 1..1000000, got ", p.trip_min_calls));
  }
  RETURN_IF_ERROR(NonNegative(p.trip_slow_call_duration, absl::StrCat(path, ".trip.slow_call.duration")));
  if ((p.trip_slow_call_duration > absl::ZeroDuration()) != (p.trip_slow_call_rate > 0)) {
    return Invalid(absl::StrCat(path, p.trip_slow_call_rate > 0 ? ".trip.slow_call.duration" : ".trip.slow_call.rate"),
                   "trip.slow_call needs both duration and rate");
  }
  if (p.recovery_probes < 1 || p.recovery_probes > 100) {
    return Invalid(absl::StrCat(path, ".recovery.probes"),
                   absl::StrCat("must be 1..100, got ", p.recovery_probes));
  }
  RETURN_IF_ERROR(NonNegative(p.recovery_min_dwell, absl::StrCat(path, ".recovery.min_dwell")));
  if (!(p.backoff_factor >= 1.0 && p.backoff_factor <= 100.0)) {
    return Invalid(absl::StrCat(path, ".backoff.factor"), absl::StrCat("must be 1..100, got ", p.backoff_factor));
  }
  if (p.backoff_steps > 64) {
    return Invalid(absl::StrCat(path, ".backoff.steps"), absl::StrCat("must be 0..64, got ", p.backoff_steps));
  }
  RETURN_IF_ERROR(Positive(p.backoff_max, absl::StrCat(path, ".backoff.max")));
  RETURN_IF_ERROR(Positive(p.backoff_reset_after, absl::StrCat(path, ".backoff.reset_after")));
  RETURN_IF_ERROR(Positive(p.rate_limit_hold, absl::StrCat(path, ".rate_limit.hold")));
  RETURN_IF_ERROR(Positive(p.rate_limit_max_hold, absl::StrCat(path, ".rate_limit.max_hold")));
  if (p.rate_limit_hold > p.rate_limit_max_hold) {
    return Invalid(absl::StrCat(path, ".rate_limit.hold"),
                   absl::StrCat("must not exceed rate_limit.max_hold (", absl::FormatDuration(p.rate_limit_max_hold),
                                "), got ", absl::FormatDuration(p.rate_limit_hold)));
  }
  if (!(p.latency_explore >= 0 && p.latency_explore <= 50)) {
    return Invalid(absl::StrCat(path, ".least_latency.explore"),
                   absl::StrCat("must be a percentage 0..50, got ", p.latency_explore));
  }
  RETURN_IF_ERROR(NonNegative(p.hedge_after, absl::StrCat(path, ".hedge.after")));
  if (p.hedge_after > absl::Hours(1)) {
    return Invalid(absl::StrCat(path, ".hedge.after"),
                   absl::StrCat("must be at most 1h, got ", absl::FormatDuration(p.hedge_after)));
  }
  if (!(p.retry_budget_ratio >= 0 && p.retry_budget_ratio <= 10)) {
    return Invalid(absl::StrCat(path, ".retry_budget.ratio"),
                   absl::StrCat("must be 0..10 (0 = no budget), got ", p.retry_budget_ratio));
  }
  if (!(p.retry_budget_min_per_second >= 0 && p.retry_budget_min_per_second <= 100000)) {
    return Invalid(absl::StrCat(path, ".retry_budget.min_per_second"),
                   absl::StrCat("must be 0..100000, got ", p.retry_budget_min_per_second));
  }
  if (p.max_attempts > kMaxChainTargets) {
    return Invalid(absl::StrCat(path, ".max_attempts"),
                   absl::StrCat("must be 0..", kMaxChainTargets, ", got ", p.max_attempts));
  }
  if (p.retry_on_statuses.size() > kMaxPhrases || p.retry_on_errors.size() > kMaxPhrases) {
    return Invalid(path, absl::StrCat("retry_on_statuses and retry_on_errors take at most ", kMaxPhrases, " entries"));
  }
  for (const auto& [reason, retries] : p.same_target_retries) {
    if (retries > 10) {
      return Invalid(absl::StrCat(path, ".same_target_retries[\"", ReasonName(reason), "\"]"),
                     absl::StrCat("must be 0..10, got ", retries));
    }
  }
  return FailoverRules::Compile(p, path).status();
}

absl::Status ValidateChain(const ChainConfig& c, absl::string_view path,
                           const std::function<std::string(const std::string&)>& kind_of) {
  RETURN_IF_ERROR(ValidateName(c.name, absl::StrCat(path, ".name")));
  if (c.targets.size() < kMinChainTargets || c.targets.size() > kMaxChainTargets) {
    return Invalid(absl::StrCat(path, ".targets"),
                   absl::StrCat("a chain needs ", kMinChainTargets, "..", kMaxChainTargets, " targets, got ",
                                c.targets.size()));
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < c.targets.size(); ++i) {
    const std::string& ref = c.targets[i];
    const std::string ref_path = absl::StrCat(path, ".targets[", i, "]");
    RETURN_IF_ERROR(ValidateName(ref, ref_path));
    if (ref == c.name) return Invalid(ref_path, absl::StrCat("a chain cannot list itself (\"", ref, "\")"));
    if (!seen.insert(ref).second) return Invalid(ref_path, absl::StrCat("\"", ref, "\" is listed twice"));
    const std::string kind = kind_of(ref);
    if (kind == "chain") return Invalid(ref_path, absl::StrCat("\"", ref, "\" is a chain; chains do not nest"));
    if (kind != "target") return Invalid(ref_path, absl::StrCat("unknown target \"", ref, "\""));
  }
  RETURN_IF_ERROR(ValidatePolicy(c.policy, absl::StrCat(path, ".policy")));
  if (c.shadows.size() > kMaxShadowPolicies) {
    return Invalid(absl::StrCat(path, ".shadow"),
                   absl::StrCat("at most ", kMaxShadowPolicies, " shadow policies, got ", c.shadows.size()));
  }
  std::set<std::string> shadow_names;
  for (size_t i = 0; i < c.shadows.size(); ++i) {
    const std::string shadow_path = absl::StrCat(path, ".shadow[", i, "]");
    RETURN_IF_ERROR(ValidateName(c.shadows[i].name, absl::StrCat(shadow_path, ".name")));
    if (!shadow_names.insert(c.shadows[i].name).second) {
      return Invalid(absl::StrCat(shadow_path, ".name"), absl::StrCat("\"", c.shadows[i].name, "\" is used twice"));
    }
    RETURN_IF_ERROR(ValidatePolicy(c.shadows[i].policy, absl::StrCat(shadow_path, ".policy")));
  }
  return absl::OkStatus();
}

}  // namespace failover
