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
