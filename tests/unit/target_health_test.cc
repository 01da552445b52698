// The health state machine of one target, on a hand-driven clock; and
// failoverd's own clock, whose spans ignore steps of the wall clock.
#include "server/engine/target_health.h"

#include "common/clock.h"

#include "gtest/gtest.h"

namespace failover {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

HealthSettings Settings() {
  HealthSettings s;
  s.jitter = 0;
  return s;
}

TEST(TargetHealthTest, TripsOnTheNthFailureInsideTheWindowOnly) {
  HealthSettings s = Settings();
  s.trip_errors = 2;
  s.trip_window = absl::Seconds(30);
  TargetHealth h;
  HealthTransition tr;
  EXPECT_FALSE(h.OnFailure(s, kT0, "500", 1, &tr));
  // Exactly one window later the first failure is outside: no trip.
  EXPECT_FALSE(h.OnFailure(s, kT0 + absl::Seconds(30), "500", 1, &tr));
  EXPECT_NE(h.state(), HealthState::kDown);
  // Just inside the window of the second failure: trip.
  EXPECT_TRUE(h.OnFailure(s, kT0 + absl::Seconds(59), "500", 1, &tr));
  EXPECT_EQ(h.state(), HealthState::kDown);
  EXPECT_EQ(tr.to, HealthState::kDown);
  EXPECT_NE(tr.reason.find("2 failures within 30s"), std::string::npos) << tr.reason;
}

TEST(TargetHealthTest, ASuccessClearsTheFailureWindow) {
  HealthSettings s = Settings();
  s.trip_errors = 2;
  TargetHealth h;
  HealthTransition tr;
  h.OnFailure(s, kT0, "500", 1, &tr);
  h.OnPass(s, kT0 + absl::Seconds(1), true, &tr);
  EXPECT_FALSE(h.OnFailure(s, kT0 + absl::Seconds(2), "500", 1, &tr));
  EXPECT_EQ(h.state(), HealthState::kHealthy);
}

TEST(TargetHealthTest, RecoversAfterConsecutivePassesAndFallsBackOnAFailureOnTheLastProbe) {
  HealthSettings s = Settings();
  s.recovery_probes = 3;
  TargetHealth h;
  HealthTransition tr;
  ASSERT_TRUE(h.OnFailure(s, kT0, "503", 1, &tr));
  // A liveness pass moves DOWN to RECOVERING but is not a recovery pass.
  ASSERT_TRUE(h.OnPass(s, kT0 + absl::Seconds(15), /*strong=*/false, &tr));
  EXPECT_EQ(h.state(), HealthState::kRecovering);
  EXPECT_EQ(h.recovery_passes(), 0u);
  EXPECT_FALSE(h.OnPass(s, kT0 + absl::Seconds(16), true, &tr));
  EXPECT_FALSE(h.OnPass(s, kT0 + absl::Seconds(17), true, &tr));
  EXPECT_EQ(h.recovery_passes(), 2u);
  // The third probe fails: back to DOWN.
  ASSERT_TRUE(h.OnFailure(s, kT0 + absl::Seconds(18), "503", 1, &tr));
  EXPECT_EQ(h.state(), HealthState::kDown);
  // Start again: three strong passes make it HEALTHY.
  ASSERT_TRUE(h.OnPass(s, kT0 + absl::Seconds(40), true, &tr));
  EXPECT_FALSE(h.OnPass(s, kT0 + absl::Seconds(41), true, &tr));
  ASSERT_TRUE(h.OnPass(s, kT0 + absl::Seconds(42), true, &tr));
  EXPECT_EQ(h.state(), HealthState::kHealthy);
}

TEST(TargetHealthTest, TargetWithoutHealthCheckComesBackAfterMinDwell) {
  HealthSettings s = Settings();
  s.has_health_check = false;
  s.min_dwell = absl::Seconds(60);
  TargetHealth h;
  HealthTransition tr;
  ASSERT_TRUE(h.OnFailure(s, kT0, "500", 1, &tr));
  EXPECT_FALSE(h.OnTimePassed(s, kT0 + absl::Seconds(59), &tr));
  EXPECT_TRUE(h.OnTimePassed(s, kT0 + absl::Seconds(60), &tr));
  EXPECT_EQ(h.state(), HealthState::kHealthy);
}

TEST(TargetHealthTest, TargetWithoutHealthCheckComesBackAtOnceOnARealSuccess) {
  HealthSettings s = Settings();
  s.has_health_check = false;
  TargetHealth h;
  HealthTransition tr;
  ASSERT_TRUE(h.OnFailure(s, kT0, "500", 1, &tr));
  ASSERT_TRUE(h.OnPass(s, kT0 + absl::Seconds(1), true, &tr));
  EXPECT_EQ(h.state(), HealthState::kHealthy);
}

TEST(TargetHealthTest, GoClawBackoffGrowsOneFiveTwentyFiveMinutesThenCapsAtAnHour) {
  HealthSettings s = Settings();
  s.probe_interval = absl::Seconds(60);
  s.backoff_factor = 5;
  s.backoff_steps = 3;
  s.backoff_max = absl::Hours(1);
  EXPECT_EQ(TargetHealth::Cooldown(s, 1, 7), absl::Minutes(1));
  EXPECT_EQ(TargetHealth::Cooldown(s, 2, 7), absl::Minutes(5));
  EXPECT_EQ(TargetHealth::Cooldown(s, 3, 7), absl::Minutes(25));
  EXPECT_EQ(TargetHealth::Cooldown(s, 4, 7), absl::Hours(1));  // 125m capped
  EXPECT_EQ(TargetHealth::Cooldown(s, 9, 7), absl::Hours(1));
}

TEST(TargetHealthTest, DefaultBackoffProbesEveryInterval) {
  HealthSettings s = Settings();
  EXPECT_EQ(TargetHealth::Cooldown(s, 1, 7), absl::Seconds(15));
  EXPECT_EQ(TargetHealth::Cooldown(s, 5, 7), absl::Seconds(15));
}

TEST(TargetHealthTest, JitterStaysWithinTenPercentAndVaries) {
  HealthSettings s = Settings();
  s.jitter = 0.1;
  s.probe_interval = absl::Seconds(100);
  absl::Duration lo = absl::InfiniteDuration(), hi = absl::ZeroDuration();
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const absl::Duration d = TargetHealth::Cooldown(s, 1, seed);
    EXPECT_GE(d, absl::Seconds(90));
    EXPECT_LE(d, absl::Seconds(110));
    lo = std::min(lo, d);
    hi = std::max(hi, d);
  }
  EXPECT_GT(hi - lo, absl::Seconds(10));  // it actually spreads
}

TEST(TargetHealthTest, TripCountGrowsAndResetsAfterAQuietPeriod) {
  HealthSettings s = Settings();
  s.probe_interval = absl::Seconds(60);
  s.backoff_factor = 5;
  s.backoff_reset_after = absl::Minutes(10);
  TargetHealth h;
  HealthTransition tr;
  ASSERT_TRUE(h.OnFailure(s, kT0, "500", 1, &tr));
  EXPECT_EQ(h.probe_due(), kT0 + absl::Minutes(1));
  // The probe fails: the next cooldown is 5 minutes.
  h.OnFailedCheck(s, kT0 + absl::Minutes(1), "500", 1, &tr);
  EXPECT_EQ(h.trips(), 2u);
  EXPECT_EQ(h.probe_due(), kT0 + absl::Minutes(6));
  // Recover, then stay quiet for reset_after: the next trip starts at 1 minute again.
  h.OnPass(s, kT0 + absl::Minutes(6), true, &tr);
  h.OnPass(s, kT0 + absl::Minutes(6), true, &tr);
  h.OnPass(s, kT0 + absl::Minutes(6), true, &tr);
  ASSERT_EQ(h.state(), HealthState::kHealthy);
  const absl::Time later = kT0 + absl::Minutes(1) + absl::Minutes(10);
  ASSERT_TRUE(h.OnFailure(s, later, "500", 1, &tr));
  EXPECT_EQ(h.trips(), 1u);
  EXPECT_EQ(h.probe_due(), later + absl::Minutes(1));
}

// DESIGN 3.6: callers that keep trying a DOWN target (as in DEGRADED) must
// not keep it from its health check.
TEST(TargetHealthTest, FailuresOnADownTargetNeitherTripItAgainNorDelayItsHealthCheck) {
  for (double factor : {1.0, 2.0, 4.0, 5.0}) {
    SCOPED_TRACE(factor);
    HealthSettings s = Settings();
    s.probe_interval = absl::Milliseconds(500);
    s.backoff_factor = factor;
    TargetHealth h;
    HealthTransition tr;
    ASSERT_TRUE(h.OnFailure(s, kT0, "503", 1, &tr));
    const absl::Time due = kT0 + absl::Milliseconds(500);
    ASSERT_EQ(h.probe_due(), due);
    // A failure every 100 ms for 3 s, well past the cooldown.
    for (int i = 1; i <= 30; ++i) {
      EXPECT_FALSE(h.OnFailure(s, kT0 + absl::Milliseconds(100 * i), "503", 1, &tr));
    }
    EXPECT_EQ(h.state(), HealthState::kDown);
    EXPECT_EQ(h.trips(), 1u);
    EXPECT_EQ(h.probe_due(), due);
    EXPECT_EQ(h.since(), kT0);
  }
}

TEST(TargetHealthTest, FailedHealthChecksLengthenTheCooldownStepByStepEvenPastResetAfter) {
  HealthSettings s = Settings();
  s.probe_interval = absl::Seconds(60);
  s.backoff_factor = 5;
  s.backoff_steps = 3;
  s.backoff_reset_after = absl::Minutes(10);  // shorter than the 25 m and 1 h steps
  TargetHealth h;
  HealthTransition tr;
  ASSERT_TRUE(h.OnFailure(s, kT0, "500", 1, &tr));
  absl::Time now = kT0;
  for (absl::Duration want : {absl::Minutes(1), absl::Minutes(5), absl::Minutes(25), absl::Hours(1), absl::Hours(1)}) {
    ASSERT_EQ(h.probe_due(), now + want);
    now = h.probe_due();
    EXPECT_FALSE(h.OnFailedCheck(s, now, "connection refused", 1, &tr));
  }
  EXPECT_EQ(h.trips(), 6u);  // the trip and five failed checks
}

// Rate trips: failure_rate and slow_call with min_calls, on the same window.
HealthSettings RateSettings() {
  HealthSettings s = Settings();
  s.trip_errors = 0;  // rates only
  s.trip_window = absl::Seconds(10);
  s.trip_failure_rate = 50;
  s.trip_min_calls = 4;
  return s;
}

const CallOutcome kFast{absl::Milliseconds(100)};

TEST(RateTripTest, NoTripBeforeMinCallsEvenAtAHundredPercent) {
  HealthSettings s = RateSettings();
  TargetHealth h;
  HealthTransition tr;
  ASSERT_TRUE(h.OnCallSuccess(s, kT0, kFast, 1, &tr));  // UNKNOWN -> HEALTHY
  EXPECT_FALSE(h.OnFailure(s, kT0 + absl::Milliseconds(1), "503", 1, &tr));
  // A third outcome failing would be 2 of 3 (67%), but min_calls is 4.
  EXPECT_FALSE(h.OnFailure(s, kT0 + absl::Milliseconds(2), "503", 1, &tr, HealthMode::kDryRun));
  EXPECT_FALSE(h.OnFailure(s, kT0 + absl::Milliseconds(2), "503", 1, &tr));
  EXPECT_EQ(h.state(), HealthState::kHealthy);
  // The fourth outcome, a failure: 3 of 4 = 75% >= 50%.
  EXPECT_TRUE(h.OnFailure(s, kT0 + absl::Milliseconds(3), "503", 1, &tr, HealthMode::kDryRun));
  ASSERT_TRUE(h.OnFailure(s, kT0 + absl::Milliseconds(3), "503", 1, &tr));
  EXPECT_EQ(h.state(), HealthState::kDown);
  EXPECT_NE(tr.reason.find("failure rate 75% (3 of 4 calls within 10s) reached trip.failure_rate 50%"),
            std::string::npos)
      << tr.reason;
  EXPECT_NE(tr.reason.find("last: 503"), std::string::npos) << tr.reason;
}

TEST(RateTripTest, TripsExactlyAtTheRateAndNotJustBelow) {
  HealthSettings s = RateSettings();
  s.trip_min_calls = 10;
  s.trip_failure_rate = 20;
  {
    // 1 failure in 10 calls: 10% < 20%.
    TargetHealth h;
    HealthTransition tr;
    for (int i = 0; i < 9; ++i) h.OnCallSuccess(s, kT0 + absl::Milliseconds(i), kFast, 1, &tr);
    EXPECT_FALSE(h.OnFailure(s, kT0 + absl::Milliseconds(9), "503", 1, &tr));
    EXPECT_EQ(h.state(), HealthState::kHealthy);
    // The 11th and 12th outcomes fail: 3 of 12 = 25%.
    EXPECT_FALSE(h.OnFailure(s, kT0 + absl::Milliseconds(10), "503", 1, &tr));  // 2 of 11 = 18%
    EXPECT_TRUE(h.OnFailure(s, kT0 + absl::Milliseconds(11), "503", 1, &tr));
  }
  {
    // 2 failures in 10 calls: exactly 20%.
    TargetHealth h;
    HealthTransition tr;
    for (int i = 0; i < 8; ++i) h.OnCallSuccess(s, kT0 + absl::Milliseconds(i), kFast, 1, &tr);
    EXPECT_FALSE(h.OnFailure(s, kT0 + absl::Milliseconds(8), "503", 1, &tr));
    EXPECT_TRUE(h.OnFailure(s, kT0 + absl::Milliseconds(9), "503", 1, &tr));
    EXPECT_NE(tr.reason.find("failure rate 20% (2 of 10 calls"), std::string::npos) << tr.reason;
  }
}

TEST(RateTripTest, OutcomesLeaveTheWindowWithTheirSlice) {
  HealthSettings s = RateSettings();  // 10 s window in 1 s slices; 50%
  s.trip_min_calls = 5;
  TargetHealth h;
  HealthTransition tr;
  // Three failures at 0.5 s.
  h.OnCallSuccess(s, kT0, kFast, 1, &tr);
  for (int i = 0; i < 3; ++i) h.OnFailure(s, kT0 + absl::Milliseconds(500), "503", 1, &tr);
  // Before they leave, one more failure trips (4 of 5 would).
  EXPECT_TRUE(h.OnFailure(s, kT0 + absl::Milliseconds(9999), "503", 1, &tr, HealthMode::kDryRun));
  // One window after their slice began they are gone: a lone failure is 1 call.
  EXPECT_FALSE(h.OnFailure(s, kT0 + absl::Seconds(10), "503", 1, &tr, HealthMode::kDryRun));
  EXPECT_FALSE(h.OnFailure(s, kT0 + absl::Seconds(10), "503", 1, &tr));
  EXPECT_EQ(h.state(), HealthState::kHealthy);
}

TEST(RateTripTest, CountAndRateTripWhicheverComesFirst) {
  HealthSettings s = RateSettings();
  s.trip_errors = 3;
  s.trip_failure_rate = 90;
  s.trip_min_calls = 100;
  TargetHealth h;
  HealthTransition tr;
  h.OnCallSuccess(s, kT0, kFast, 1, &tr);
  EXPECT_FALSE(h.OnFailure(s, kT0 + absl::Milliseconds(1), "503", 1, &tr));
  EXPECT_FALSE(h.OnFailure(s, kT0 + absl::Milliseconds(2), "503", 1, &tr));
  EXPECT_TRUE(h.OnFailure(s, kT0 + absl::Milliseconds(3), "503", 1, &tr));
  EXPECT_NE(tr.reason.find("3 failures within 10s"), std::string::npos) << tr.reason;
}

TEST(RateTripTest, SlowSuccessesTripAtTheSlowRateAndALatencyEqualToTheThresholdIsNotSlow) {
  HealthSettings s = RateSettings();
  s.trip_failure_rate = 0;
  s.slow_call_duration = absl::Seconds(2);
  s.slow_call_rate = 50;
  TargetHealth h;
  HealthTransition tr;
  const CallOutcome at_threshold{absl::Seconds(2)};
  const CallOutcome slow{absl::Milliseconds(2001)};
  ASSERT_TRUE(h.OnCallSuccess(s, kT0, at_threshold, 1, &tr));  // UNKNOWN -> HEALTHY
  for (int i = 1; i < 4; ++i) EXPECT_FALSE(h.OnCallSuccess(s, kT0 + absl::Milliseconds(i), at_threshold, 1, &tr));
  EXPECT_EQ(h.state(), HealthState::kHealthy);  // 4 calls, none slow
  EXPECT_FALSE(h.OnCallSuccess(s, kT0 + absl::Milliseconds(5), slow, 1, &tr));  // 1 of 5
  EXPECT_FALSE(h.OnCallSuccess(s, kT0 + absl::Milliseconds(6), slow, 1, &tr));  // 2 of 6
  EXPECT_FALSE(h.OnCallSuccess(s, kT0 + absl::Milliseconds(7), slow, 1, &tr));  // 3 of 7
  EXPECT_TRUE(h.OnCallSuccess(s, kT0 + absl::Milliseconds(8), slow, 1, &tr, HealthMode::kDryRun));
  EXPECT_FALSE(h.OnCallSuccess(s, kT0 + absl::Milliseconds(8), at_threshold, 1, &tr, HealthMode::kDryRun));
  ASSERT_TRUE(h.OnCallSuccess(s, kT0 + absl::Milliseconds(8), slow, 1, &tr));  // 4 of 8 = 50%
  EXPECT_EQ(h.state(), HealthState::kDown);
  EXPECT_NE(tr.reason.find("slow calls 50% (4 of 8 calls slower than 2s within 10s) reached trip.slow_call.rate 50%"),
            std::string::npos)
      << tr.reason;
  // Down like any trip: its health check comes after the cooldown.
  EXPECT_EQ(h.probe_due(), kT0 + absl::Milliseconds(8) + s.probe_interval);
}

TEST(RateTripTest, FailedCallsAreNotSlowAndUnreportedLatencyIsNotSlow) {
  HealthSettings s = RateSettings();
  s.trip_failure_rate = 0;
  s.slow_call_duration = absl::Seconds(1);
  s.slow_call_rate = 25;
  TargetHealth h;
  HealthTransition tr;
  h.OnCallSuccess(s, kT0, CallOutcome{}, 1, &tr);
  // Failures are counted calls but never slow; with trip_errors 0 they trip nothing.
  for (int i = 1; i < 10; ++i) EXPECT_FALSE(h.OnFailure(s, kT0 + absl::Milliseconds(i), "timeout", 1, &tr));
  for (int i = 10; i < 20; ++i) EXPECT_FALSE(h.OnCallSuccess(s, kT0 + absl::Milliseconds(i), CallOutcome{}, 1, &tr));
  EXPECT_EQ(h.state(), HealthState::kHealthy);
}

TEST(RateTripTest, AFreshWindowAfterRecoveryAndAFailedCheckStillTrips) {
  HealthSettings s = RateSettings();
  s.recovery_probes = 1;
  TargetHealth h;
  HealthTransition tr;
  h.OnCallSuccess(s, kT0, kFast, 1, &tr);
  for (int i = 1; i <= 3; ++i) h.OnFailure(s, kT0 + absl::Milliseconds(i), "503", 1, &tr);
  ASSERT_EQ(h.state(), HealthState::kDown);
  // Outcomes on a DOWN target are not tallied.
  for (int i = 0; i < 10; ++i) h.OnFailure(s, kT0 + absl::Milliseconds(10 + i), "503", 1, &tr);
  ASSERT_TRUE(h.OnPass(s, kT0 + absl::Seconds(1), /*strong=*/true, &tr));
  ASSERT_EQ(h.state(), HealthState::kHealthy);
  // Back HEALTHY with an empty window: one failure is one call of four needed.
  EXPECT_FALSE(h.OnFailure(s, kT0 + absl::Seconds(2), "503", 1, &tr));
  EXPECT_EQ(h.state(), HealthState::kHealthy);
  // An idle target's failed health check trips it although no rate is reached.
  EXPECT_TRUE(h.OnFailedCheck(s, kT0 + absl::Seconds(3), "connect refused", 1, &tr));
}

}  // namespace
}  // namespace failover

namespace failover {
namespace {

// The wall clock steps back an hour while ten seconds pass: a 10 s hold (or
// dwell, or cooldown) measured on failoverd's clock still ends after 10 s.
absl::Time g_wall = absl::FromUnixSeconds(1'800'000'000);
absl::Duration g_monotonic = absl::Seconds(5000);
absl::Time Wall() { return g_wall; }
absl::Duration Monotonic() { return g_monotonic; }

TEST(RealClockTest, AStepOfTheWallClockChangesNoSpan) {
  RealClock clock(&Wall, &Monotonic);
  const absl::Time held_from = clock.Now();
  EXPECT_EQ(held_from, absl::FromUnixSeconds(1'800'000'000));
  g_wall -= absl::Hours(1);
  g_monotonic += absl::Seconds(10);
  EXPECT_EQ(clock.Now() - held_from, absl::Seconds(10));
  g_wall += absl::Hours(5);
  EXPECT_EQ(clock.Now() - held_from, absl::Seconds(10));
}

}  // namespace
}  // namespace failover
