// The automatic health state machine of one target (DESIGN 3.2). Not
// thread-safe: the engine guards each target's instance with its own mutex.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "common/compact_time.h"
#include "common/model.h"

namespace failover {

// The settings that govern one target's health: its HealthPolicy (its own,
// or the one its chains agree on), plus what its config says about checks.
struct HealthSettings {
  uint32_t trip_errors = 1;  // 0 = off
  absl::Duration trip_window = absl::Seconds(30);
  double trip_failure_rate = 0;  // percent; 0 = off
  uint32_t trip_min_calls = 10;
  absl::Duration slow_call_duration = absl::ZeroDuration();
  double slow_call_rate = 0;  // percent; 0 = off
  uint32_t recovery_probes = 3;
  absl::Duration min_dwell = absl::Seconds(60);
  absl::Duration probe_interval = absl::Seconds(15);
  absl::Duration probe_timeout = absl::Seconds(5);
  double backoff_factor = 1.0;
  uint32_t backoff_steps = 3;
  absl::Duration backoff_max = absl::Hours(1);
  absl::Duration backoff_reset_after = absl::Minutes(10);
  absl::Duration rate_limit_hold = absl::Seconds(10);
  absl::Duration rate_limit_max_hold = absl::Seconds(60);
  bool has_health_check = true;
  // Fraction of the cooldown added or removed at random (0.1 = +-10%).
  double jitter = 0.1;

  static HealthSettings From(const HealthPolicy& policy, const TargetConfig& target, double jitter);
  // Whether callers' outcomes are tallied for a failure-rate or slow-call trip.
  bool TracksRates() const { return trip_failure_rate > 0 || slow_call_rate > 0; }

  // Equal settings are shared between targets (a snapshot interns them).
  auto Tie() const {
    return std::tie(trip_errors, trip_window, trip_failure_rate, trip_min_calls, slow_call_duration, slow_call_rate,
                    recovery_probes, min_dwell, probe_interval, probe_timeout,
                    backoff_factor, backoff_steps, backoff_max, backoff_reset_after, rate_limit_hold, rate_limit_max_hold, has_health_check,
                    jitter);
  }
  bool operator==(const HealthSettings& o) const { return Tie() == o.Tie(); }
  template <typename H>
  friend H AbslHashValue(H h, const HealthSettings& s) {
    return H::combine(std::move(h), s.Tie());
  }
};

// A change of automatic state, for the target.state event.
struct HealthTransition {
  HealthState from = HealthState::kUnknown;
  HealthState to = HealthState::kUnknown;
  std::string reason;
};

// The counted failures inside the trip window, oldest first. Allocates
// nothing until the first failure: most targets never fail, and a std::deque
// would take 576 bytes per target up front.
class FailureWindow {
 public:
  size_t size() const { return times_.size() - head_; }
  void Clear() {
    times_.clear();
    head_ = 0;
  }
  // Failures after `cutoff`, without forgetting any.
  size_t CountAfter(absl::Time cutoff) const {
    size_t n = 0;
    for (size_t i = head_; i < times_.size(); ++i) n += times_[i] > cutoff;
    return n;
  }
  // Forgets failures at or before `cutoff`.
  void DropUpTo(absl::Time cutoff) {
    while (head_ < times_.size() && times_[head_] <= cutoff) ++head_;
  }
  void Add(absl::Time t) {
    if (head_ > 0 && head_ * 2 >= times_.size()) {  // reclaim the dropped front now and then
      times_.erase(times_.begin(), times_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
    times_.push_back(t);
  }

 private:
  std::vector<absl::Time> times_;
  size_t head_ = 0;
};

// Callers' outcomes inside the trip window, tallied in ten slices of it so
// that memory does not grow with traffic: an outcome leaves the window
// between 0.9 and 1 window after it happened, when its slice does.
class OutcomeWindow {
 public:
  struct Totals {
    uint32_t calls = 0;  // successes and counted failures
    uint32_t failures = 0;
    uint32_t slow = 0;  // successes slower than slow_call.duration
  };
  static constexpr int kSlices = 10;

  void Add(absl::Duration window, absl::Time now, bool failed, bool slow);
  Totals Sum(absl::Duration window, absl::Time now) const;

 private:
  struct Slice {
    int64_t index = -1;  // now / slice width; -1 = empty
    Totals totals;
  };
  static int64_t IndexOf(absl::Duration window, absl::Time now);
  std::array<Slice, kSlices> slices_{};
};

// How a TargetHealth operation runs. kDryRun changes nothing and returns
// whether kApply would change the state: the engine's lock-free pre-check and
// the mutation it stands for are the same code, so they cannot disagree
// (DESIGN 3.14, invariant 5).
enum class HealthMode : uint8_t { kApply, kDryRun };

// One caller outcome as the rate trips see it.
struct CallOutcome {
  absl::Duration latency = absl::ZeroDuration();  // zero = not reported
};

class TargetHealth {
 public:
  HealthState state() const { return state_; }
  absl::Time since() const { return since_; }
  uint32_t recovery_passes() const { return recovery_passes_; }
  uint32_t trips() const { return trips_; }
  // When a DOWN target may next be probed (its cooldown end).
  absl::Time probe_due() const { return probe_due_; }
  size_t failures_in_window() const { return failures_.size(); }

  // Each operation below returns true and fills `out` when the state changed
  // (with kDryRun: would change; nothing is touched).
  //
  // A counted failure reported by a caller. On a target that is already DOWN
  // it changes nothing: callers that keep trying a DOWN target (DEGRADED)
  // neither add a trip nor push its health check out (DESIGN 3.6).
  bool OnFailure(const HealthSettings& s, absl::Time now, const std::string& summary, uint64_t seed,
                 HealthTransition* out, HealthMode mode = HealthMode::kApply);
  // A caller's success (real traffic): a strong pass that also counts toward
  // the rate trips, so a slow one can take a HEALTHY target DOWN (a fast one
  // never trips it).
  bool OnCallSuccess(const HealthSettings& s, absl::Time now, CallOutcome call, uint64_t seed,
                     HealthTransition* out, HealthMode mode = HealthMode::kApply);
  // Tallies a caller's outcome for the rate trips without changing state
  // (while state changes are refused).
  void Tally(const HealthSettings& s, absl::Time now, bool failed, CallOutcome call);
  // A failed health check. Like OnFailure, except that on a DOWN target it is
  // the next trip: the check was asked for when the cooldown ended, so the
  // cooldown starts again, one backoff step longer. With only rate trips
  // configured it still trips: an idle target has no traffic to take a rate of.
  bool OnFailedCheck(const HealthSettings& s, absl::Time now, const std::string& summary, uint64_t seed,
                     HealthTransition* out, HealthMode mode = HealthMode::kApply);
  // A rate limit that resets at `until`, later than rate_limit.max_hold: the
  // target is DOWN until then (a per-day quota is not worth a retry a minute).
  // Not a trip; on a target already DOWN it only keeps the check from coming
  // before the reset.
  bool OnLimitedUntil(absl::Time now, absl::Time until, const std::string& summary, HealthTransition* out,
                      HealthMode mode = HealthMode::kApply);
  // A pass. `strong` passes (real successes, recovery probes) count toward
  // recovery; a liveness pass only moves DOWN to RECOVERING.
  bool OnPass(const HealthSettings& s, absl::Time now, bool strong, HealthTransition* out,
              HealthMode mode = HealthMode::kApply);
  // When a DOWN target without a health check comes back (InfiniteFuture when
  // it is not such a target).
  absl::Time ComesBackAt(const HealthSettings& s) const;
  // Targets without a health check come back `min_dwell` after going down.
  bool OnTimePassed(const HealthSettings& s, absl::Time now, HealthTransition* out);
  // Makes a DOWN target due for a probe now (admin "probe now", restart).
  void MakeProbeDue(absl::Time now) { probe_due_ = now; }

  // Restores a persisted state (storage).
  void Restore(HealthState state, absl::Time since, uint32_t trips, uint32_t recovery_passes);

  // cooldown(n) = interval * factor^min(n-1, steps), capped at max, +-jitter.
  static absl::Duration Cooldown(const HealthSettings& s, uint32_t n, uint64_t seed);

 private:
  void Set(HealthState to, absl::Time now, std::string reason, HealthTransition* out);
  bool Fail(const HealthSettings& s, absl::Time now, const std::string& summary, uint64_t seed, bool check,
            HealthTransition* out, HealthMode mode);
  bool GoDown(const HealthSettings& s, absl::Time now, std::string reason, uint64_t seed, HealthTransition* out);
  // Why the tallied outcomes (plus one more, when given) trip the target, or
  // empty. Only HEALTHY and UNKNOWN targets tally.
  std::string RateTripReason(const HealthSettings& s, absl::Time now, OutcomeWindow::Totals extra) const;
  bool Tallies(const HealthSettings& s) const {
    return s.TracksRates() && (state_ == HealthState::kHealthy || state_ == HealthState::kUnknown);
  }
  static bool IsSlow(const HealthSettings& s, CallOutcome call) {
    return s.slow_call_rate > 0 && call.latency > s.slow_call_duration;
  }

  HealthState state_ = HealthState::kUnknown;
  CompactTime since_;
  FailureWindow failures_;  // at most trip_errors
  std::unique_ptr<OutcomeWindow> outcomes_;  // only once a rate trip tallies
  uint32_t recovery_passes_ = 0;
  uint32_t trips_ = 0;  // n of the backoff formula: trips and failed checks while DOWN
  CompactTime last_failure_;
  CompactTime probe_due_;
  CompactTime limited_until_;  // while DOWN for a rate limit
};

}  // namespace failover
