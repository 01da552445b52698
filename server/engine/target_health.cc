#include "server/engine/target_health.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace failover {
namespace {

// A well-mixed 64-bit value from a seed (splitmix64), so jitter is
// deterministic for a given target and trip: tests can predict it.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}


// "33.3%": one decimal is enough to read a rate.
std::string Percent(double v) { return absl::StrFormat("%.3g%%", v); }

}  // namespace

int64_t OutcomeWindow::IndexOf(absl::Duration window, absl::Time now) {
  // Integer nanoseconds: this runs on every tallied report.
  const int64_t width = std::max<int64_t>(absl::ToInt64Nanoseconds(window) / kSlices, 1);
  const int64_t t = absl::ToUnixNanos(now);
  return t >= 0 ? t / width : (t - width + 1) / width;
}

void OutcomeWindow::Add(absl::Duration window, absl::Time now, bool failed, bool slow) {
  const int64_t index = IndexOf(window, now);
  Slice& slice = slices_[static_cast<size_t>(((index % kSlices) + kSlices) % kSlices)];
  if (slice.index != index) slice = Slice{index, {}};
  ++slice.totals.calls;
  slice.totals.failures += failed;
  slice.totals.slow += slow;
}

OutcomeWindow::Totals OutcomeWindow::Sum(absl::Duration window, absl::Time now) const {
  const int64_t index = IndexOf(window, now);
  Totals t;
  for (const Slice& s : slices_) {
    if (s.index > index - kSlices && s.index <= index) {
      t.calls += s.totals.calls;
      t.failures += s.totals.failures;
      t.slow += s.totals.slow;
    }
  }
  return t;
}

HealthSettings HealthSettings::From(const HealthPolicy& p, const TargetConfig& t, double jitter) {
  HealthSettings s;
  s.trip_errors = p.trip_errors;
  s.trip_window = p.trip_window;
  s.trip_failure_rate = p.trip_failure_rate;
  s.trip_min_calls = p.trip_min_calls;
  s.slow_call_duration = p.trip_slow_call_duration;
  s.slow_call_rate = p.trip_slow_call_rate;
  s.recovery_probes = p.recovery_probes;
  s.min_dwell = p.recovery_min_dwell;
  s.probe_interval = p.probe_interval;
  s.probe_timeout = p.probe_timeout;
  s.backoff_factor = p.backoff_factor;
  s.backoff_steps = p.backoff_steps;
  s.backoff_max = p.backoff_max;
  s.backoff_reset_after = p.backoff_reset_after;
  s.rate_limit_hold = p.rate_limit_hold;
  s.rate_limit_max_hold = p.rate_limit_max_hold;
  s.has_health_check = t.HasHealthCheck();
  s.jitter = jitter;
  return s;
}

absl::Duration TargetHealth::Cooldown(const HealthSettings& s, uint32_t n, uint64_t seed) {
  const uint32_t exponent = std::min(n == 0 ? 0 : n - 1, s.backoff_steps);
  double seconds = absl::ToDoubleSeconds(s.probe_interval) * std::pow(s.backoff_factor, exponent);
  seconds = std::min(seconds, absl::ToDoubleSeconds(s.backoff_max));
  if (s.jitter > 0) {
    // Uniform in [-jitter, +jitter].
    const double unit = static_cast<double>(Mix(seed) >> 11) / static_cast<double>(1ull << 53);
    seconds *= 1.0 + s.jitter * (2.0 * unit - 1.0);
  }
  return absl::Seconds(seconds);
}

void TargetHealth::Set(HealthState to, absl::Time now, std::string reason, HealthTransition* out) {
  if (to != HealthState::kDown) limited_until_ = absl::InfinitePast();
  out->from = state_;
  out->to = to;
  out->reason = std::move(reason);
  state_ = to;
  since_ = now;
}

bool TargetHealth::OnFailure(const HealthSettings& s, absl::Time now, const std::string& summary,
                             uint64_t seed, HealthTransition* out, HealthMode mode) {
  return Fail(s, now, summary, seed, /*check=*/false, out, mode);
}

bool TargetHealth::OnFailedCheck(const HealthSettings& s, absl::Time now, const std::string& summary,
                                 uint64_t seed, HealthTransition* out, HealthMode mode) {
  return Fail(s, now, summary, seed, /*check=*/true, out, mode);
}

// Every operation decides first, from the state as it is, and only then
// mutates: a dry run stops between the two.
bool TargetHealth::Fail(const HealthSettings& s, absl::Time now, const std::string& summary, uint64_t seed,
                        bool check, HealthTransition* out, HealthMode mode) {
  const bool dry = mode == HealthMode::kDryRun;
  if (state_ == HealthState::kDown) {
    if (dry) return false;
    // A caller's failure is recorded (last error, metrics; still a failure
    // for reset_after) but is no trip and pushes no check out. A failed check
    // means still down after its cooldown: the next one is a step longer.
    last_failure_ = now;
    if (check) {
      ++trips_;
      probe_due_ = now + Cooldown(s, trips_, seed ^ trips_);
    }
    return false;
  }
  if (state_ == HealthState::kRecovering) {
    return dry || GoDown(s, now, absl::StrCat("failed while recovering: ", summary), seed, out);
  }
  // HEALTHY or UNKNOWN: this failure trips on the count or on the rate.
  const uint32_t errors = s.trip_errors > 0 ? s.trip_errors : (check ? 1 : 0);
  // A failure is inside the window while now - t < window.
  const bool count_trips = errors > 0 && failures_.CountAfter(now - s.trip_window) + 1 >= errors;
  const std::string rate = check || count_trips ? "" : RateTripReason(s, now, {1, 1, 0});
  if (dry) return count_trips || !rate.empty();

  if (now - last_failure_ >= s.backoff_reset_after) trips_ = 0;  // as in GoDown
  last_failure_ = now;
  recovery_passes_ = 0;
  if (count_trips) {
    return GoDown(s, now,
                  errors == 1 ? summary
                              : absl::StrCat(errors, " failures within ", absl::FormatDuration(s.trip_window),
                                             ", last: ", summary),
                  seed, out);
  }
  if (!rate.empty()) return GoDown(s, now, absl::StrCat(rate, ", last: ", summary), seed, out);
  if (!check && Tallies(s)) {
    if (!outcomes_) outcomes_ = std::make_unique<OutcomeWindow>();
    outcomes_->Add(s.trip_window, now, /*failed=*/true, /*slow=*/false);
  }
  if (errors > 0) {
    failures_.DropUpTo(now - s.trip_window);
    failures_.Add(now);
  }
  return false;
}

bool TargetHealth::GoDown(const HealthSettings& s, absl::Time now, std::string reason, uint64_t seed,
                          HealthTransition* out) {
  // n restarts once the target went reset_after without a failure while it
  // could be used; a long cooldown is not a quiet period.
  if (state_ != HealthState::kDown && now - last_failure_ >= s.backoff_reset_after) trips_ = 0;
  last_failure_ = now;
  recovery_passes_ = 0;
  ++trips_;
  failures_.Clear();
  outcomes_.reset();
  probe_due_ = now + Cooldown(s, trips_, seed ^ trips_);
  Set(HealthState::kDown, now, std::move(reason), out);
  return true;
}

std::string TargetHealth::RateTripReason(const HealthSettings& s, absl::Time now,
                                         OutcomeWindow::Totals extra) const {
  if (!Tallies(s)) return "";
  OutcomeWindow::Totals t = outcomes_ ? outcomes_->Sum(s.trip_window, now) : OutcomeWindow::Totals{};
  t.calls += extra.calls;
  t.failures += extra.failures;
  t.slow += extra.slow;
  if (t.calls == 0 || t.calls < s.trip_min_calls) return "";
  auto within = [&] { return absl::StrCat(" within ", absl::FormatDuration(s.trip_window)); };
  if (s.trip_failure_rate > 0 && t.failures * 100.0 >= s.trip_failure_rate * t.calls) {
    return absl::StrCat("failure rate ", Percent(t.failures * 100.0 / t.calls), " (", t.failures, " of ", t.calls,
                        " calls", within(), ") reached trip.failure_rate ", Percent(s.trip_failure_rate));
  }
  if (s.slow_call_rate > 0 && t.slow * 100.0 >= s.slow_call_rate * t.calls) {
    return absl::StrCat("slow calls ", Percent(t.slow * 100.0 / t.calls), " (", t.slow, " of ", t.calls,
                        " calls slower than ", absl::FormatDuration(s.slow_call_duration), within(),
                        ") reached trip.slow_call.rate ", Percent(s.slow_call_rate));
  }
  return "";
}

void TargetHealth::Tally(const HealthSettings& s, absl::Time now, bool failed, CallOutcome call) {
  if (!Tallies(s)) return;
  if (!outcomes_) outcomes_ = std::make_unique<OutcomeWindow>();
  outcomes_->Add(s.trip_window, now, failed, !failed && IsSlow(s, call));
}

bool TargetHealth::OnCallSuccess(const HealthSettings& s, absl::Time now, CallOutcome call, uint64_t seed,
                                 HealthTransition* out, HealthMode mode) {
  // Only a slow success can trip: a fast one lowers every share (the failure
  // rate is judged at the next failure), and skipping the sum keeps the
  // common report cheap.
  const bool tallies = Tallies(s);
  const std::string rate = tallies && IsSlow(s, call) ? RateTripReason(s, now, {1, 0, 1}) : "";
  if (mode == HealthMode::kDryRun) return !rate.empty() || OnPass(s, now, /*strong=*/true, out, mode);
  if (!rate.empty()) return GoDown(s, now, rate, seed, out);
  if (tallies) Tally(s, now, /*failed=*/false, call);
  return OnPass(s, now, /*strong=*/true, out, mode);
}

bool TargetHealth::OnLimitedUntil(absl::Time now, absl::Time until, const std::string& summary,
                                  HealthTransition* out, HealthMode mode) {
  if (mode == HealthMode::kDryRun) return state_ != HealthState::kDown;
  probe_due_ = std::max<absl::Time>(probe_due_, until);
  limited_until_ = std::max<absl::Time>(limited_until_, until);
  if (state_ == HealthState::kDown) return false;
  failures_.Clear();
  outcomes_.reset();
  recovery_passes_ = 0;
  Set(HealthState::kDown, now,
      absl::StrCat("rate limited until its limit resets in ", absl::FormatDuration(until - now), ": ", summary), out);
  return true;
}

bool TargetHealth::OnPass(const HealthSettings& s, absl::Time now, bool strong, HealthTransition* out,
                          HealthMode mode) {
  HealthState to = state_;
  const char* reason = "";
  uint32_t passes = recovery_passes_;
  switch (state_) {
    case HealthState::kUnknown:
      to = HealthState::kHealthy;
      reason = "passed";
      break;
    case HealthState::kDown:
      if (!s.has_health_check) {
        // Nothing probes it; a real success is proof enough.
        to = HealthState::kHealthy;
        reason = "request succeeded";
        break;
      }
      passes = strong ? 1 : 0;
      to = passes >= s.recovery_probes ? HealthState::kHealthy : HealthState::kRecovering;
      reason = to == HealthState::kHealthy ? "recovered" : strong ? "request succeeded" : "liveness check passed";
      break;
    case HealthState::kRecovering:
      if (strong && ++passes >= s.recovery_probes) to = HealthState::kHealthy;
      break;
    default:
      break;
  }
  if (mode == HealthMode::kDryRun) return to != state_;
  failures_.Clear();
  recovery_passes_ = passes;
  if (to == state_) return false;
  Set(to, now,
      state_ == HealthState::kRecovering ? absl::StrCat("recovered after ", passes, " passes") : std::string(reason),
      out);
  return true;
}

absl::Time TargetHealth::ComesBackAt(const HealthSettings& s) const {
  if (state_ != HealthState::kDown || s.has_health_check) return absl::InfiniteFuture();
  return std::max<absl::Time>(since_ + s.min_dwell, limited_until_);
}

bool TargetHealth::OnTimePassed(const HealthSettings& s, absl::Time now, HealthTransition* out) {
  if (ComesBackAt(s) > now) return false;
  Set(HealthState::kHealthy, now, absl::StrCat("usable again after ", absl::FormatDuration(s.min_dwell),
                                               " (no health check)"),
      out);
  return true;
}

void TargetHealth::Restore(HealthState state, absl::Time since, uint32_t trips, uint32_t recovery_passes) {
  state_ = state;
  since_ = since;
  trips_ = trips;
  recovery_passes_ = recovery_passes;
  failures_.Clear();
  outcomes_.reset();
}

}  // namespace failover
