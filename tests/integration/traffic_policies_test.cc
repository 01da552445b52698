// Policies from real traffic through the real binary: rate trips (a target
// trips on the share of failed or slow calls once enough calls were seen, not
// on one failure) and the least_latency strategy.
#include <map>

#include "client/client.h"
#include "gmock/gmock.h"
#include "tests/support/api_test.h"

namespace failover::testing {
namespace {

using ::testing::HasSubstr;

class TrafficPolicyTest : public ApiTest {
 protected:
  void SetUp() override { StartServer(); }

  // Chain ch = [a, b] with the given trip settings.
  void ApplyChain(const v1::TripPolicy& trip) {
    v1::ApplyRequest req;
    AddTarget(&req, "a");
    AddTarget(&req, "b");
    *AddChain(&req, "ch", {"a", "b"})->mutable_policy()->mutable_trip() = trip;
    grpc::Status s = Apply(req);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  v1::ReportOutcomeResponse Succeed(absl::Duration latency) {
    v1::PickTargetResponse pick = Pick("ch");
    return SucceedOn(pick.decision_id(), pick.attempts(0).target(), latency);
  }
  v1::ReportOutcomeResponse SucceedOn(const std::string& decision, const std::string& target,
                                      absl::Duration latency) {
    v1::ReportOutcomeRequest req;
    req.set_decision_id(decision);
    req.set_target(target);
    req.mutable_success();
    req.mutable_latency()->set_seconds(absl::ToInt64Seconds(latency));
    req.mutable_latency()->set_nanos(static_cast<int32_t>(absl::ToInt64Nanoseconds(latency) % 1'000'000'000));
    v1::ReportOutcomeResponse resp;
    grpc::Status s = decide_->ReportOutcome(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }
  v1::ReportOutcomeResponse Fail() {
    v1::PickTargetResponse pick = Pick("ch");
    return Report(pick.decision_id(), pick.attempts(0).target(), 503, "upstream busy");
  }
};

// 15% errors is a target that works most of the time: with failure_rate 50
// and min_calls 4 it stays, where the default (one failure) took it out.
TEST_F(TrafficPolicyTest, AFailureRateTripsOnlyOnceEnoughCallsFailed) {
  v1::TripPolicy trip;
  trip.set_failure_rate(50);
  trip.set_min_calls(4);
  *trip.mutable_window() = Millis(60'000);
  ApplyChain(trip);
  // Read back as given; errors unset stays off rather than the default 1.
  const v1::TripPolicy stored = Chain("ch").config().policy().trip();
  EXPECT_EQ(stored.failure_rate(), 50);
  EXPECT_EQ(stored.min_calls(), 4u);
  EXPECT_EQ(stored.errors(), 0u);
  Succeed(absl::Milliseconds(20));
  Succeed(absl::Milliseconds(20));
  v1::ReportOutcomeResponse first = Fail();
  EXPECT_EQ(first.target_health(), v1::HEALTH_STATE_HEALTHY) << "one failure in three calls tripped the target";
  EXPECT_EQ(first.verdict(), v1::VERDICT_RETRY_SAME);
  // 2 of 4 calls failed: 50%.
  v1::ReportOutcomeResponse second = Fail();
  EXPECT_EQ(second.target_health(), v1::HEALTH_STATE_DOWN);
  EXPECT_EQ(second.verdict(), v1::VERDICT_TRY_NEXT);
  EXPECT_EQ(second.next_attempt().target(), "b");
  EXPECT_EQ(Chain("ch").status().active_target(), "b");
  EXPECT_THAT(Target("a").status().reason(),
              HasSubstr("failure rate 50% (2 of 4 calls within 1m) reached trip.failure_rate 50%"));
}

TEST_F(TrafficPolicyTest, SlowSuccessesTripTheTargetFromTheReportedLatency) {
  v1::TripPolicy trip;
  trip.set_min_calls(3);
  *trip.mutable_slow_call()->mutable_duration() = Millis(1000);
  trip.mutable_slow_call()->set_rate(60);
  ApplyChain(trip);
  Succeed(absl::Milliseconds(900));
  Succeed(absl::Milliseconds(1500));
  EXPECT_EQ(Target("a").status().health(), v1::HEALTH_STATE_HEALTHY);
  // 2 of 3 slower than 1s: 67% >= 60%. The success itself is served (DONE).
  v1::ReportOutcomeResponse third = Succeed(absl::Seconds(4));
  EXPECT_EQ(third.verdict(), v1::VERDICT_DONE);
  EXPECT_EQ(third.target_health(), v1::HEALTH_STATE_DOWN);
  EXPECT_EQ(Chain("ch").status().active_target(), "b");
  EXPECT_THAT(Target("a").status().reason(), HasSubstr("slow calls 66.7% (2 of 3 calls slower than 1s"));
}

TEST_F(TrafficPolicyTest, BadRateSettingsAndLatenciesAreRefusedWithTheirField) {
  v1::ApplyRequest req;
  AddTarget(&req, "a");
  AddTarget(&req, "b");
  AddChain(&req, "ch", {"a", "b"})->mutable_policy()->mutable_trip()->set_failure_rate(101);
  grpc::Status s = Apply(req);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("chains[0].policy.trip.failure_rate: must be a percentage 0..100"));

  v1::TripPolicy trip;
  trip.set_failure_rate(50);
  ApplyChain(trip);
  v1::PickTargetResponse pick = Pick("ch");
  v1::ReportOutcomeRequest report;
  report.set_decision_id(pick.decision_id());
  report.set_target("a");
  report.mutable_success();
  report.mutable_latency()->set_seconds(-2);
  v1::ReportOutcomeResponse resp;
  s = decide_->ReportOutcome(Ctx().get(), report, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("latency: must not be negative"));
}

// Callers report each success's latency; the next first attempts go to the
// fastest target, and every 4th (explore: 25) to another one in turn.
TEST_F(TrafficPolicyTest, LeastLatencySendsFirstAttemptsToTheFastestTargetAndExplores) {
  v1::ApplyRequest req;
  AddTarget(&req, "a");
  AddTarget(&req, "b");
  v1::Chain* chain = AddChain(&req, "ch", {"a", "b"});
  chain->set_strategy(v1::STRATEGY_LEAST_LATENCY);
  chain->mutable_policy()->mutable_least_latency()->set_explore(25);
  ASSERT_TRUE(Apply(req).ok());
  SucceedOn("", "a", absl::Milliseconds(900));
  SucceedOn("", "b", absl::Milliseconds(150));
  EXPECT_EQ(Target("b").status().latency().nanos(), 150'000'000);
  std::map<std::string, int> firsts;
  for (int i = 0; i < 40; ++i) {
    v1::PickTargetResponse pick = Pick("ch");
    ASSERT_EQ(pick.attempts_size(), 2);
    ++firsts[pick.attempts(0).target()];
  }
  EXPECT_EQ(firsts["b"], 30);
  EXPECT_EQ(firsts["a"], 10);
}

// Every target fails; the chain's retry budget (floor 0.1/s: one retry per
// 10 s) lets the first failure move on and refuses the next retry.
TEST_F(TrafficPolicyTest, ASpentRetryBudgetEndsTheRequestWithFailAndIsCounted) {
  StartServer({"--metrics-listen", "127.0.0.1:0"});
  v1::ApplyRequest req;
  AddTarget(&req, "a");
  AddTarget(&req, "b");
  v1::Chain* chain = AddChain(&req, "ch", {"a", "b"});
  chain->mutable_policy()->mutable_trip()->set_errors(100);
  chain->mutable_policy()->mutable_retry_budget()->set_ratio(0.01);
  chain->mutable_policy()->mutable_retry_budget()->set_min_per_second(0.1);
  ASSERT_TRUE(Apply(req).ok());
  v1::PickTargetResponse pick = Pick("ch");
  v1::ReportOutcomeResponse first = Report(pick.decision_id(), "a", 500, "boom");
  EXPECT_EQ(first.verdict(), v1::VERDICT_TRY_NEXT);
  v1::ReportOutcomeResponse second = Report(pick.decision_id(), "b", 500, "boom");
  EXPECT_EQ(second.verdict(), v1::VERDICT_FAIL);
  // Another request: its first failure would be a retry, and none is left.
  v1::PickTargetResponse next = Pick("ch");
  v1::ReportOutcomeResponse refused = Report(next.decision_id(), next.attempts(0).target(), 500, "boom");
  EXPECT_EQ(refused.verdict(), v1::VERDICT_FAIL);
  EXPECT_EQ(refused.reason(), v1::FAILURE_REASON_RETRY_BUDGET);
  EXPECT_THAT(refused.error(), HasSubstr("chain \"ch\": retry budget spent: 1 retries for 2 first attempts"));
  EXPECT_FALSE(refused.has_next_attempt());
  EXPECT_EQ(Chain("ch").config().policy().retry_budget().ratio(), 0.01);
  SucceedOn("", "a", absl::Milliseconds(300));
  const std::string metrics = HttpGet(proc_->MetricsPort(), "/metrics");
  EXPECT_THAT(metrics, HasSubstr("failover_retry_budget_refusals_total{chain=\"ch\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("failover_verdicts_total{reason=\"retry_budget\",verdict=\"fail\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("failover_upstream_latency_seconds_count{target=\"a\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("failover_upstream_latency_seconds_bucket{target=\"a\",le=\"0.25\"} 0"));
  EXPECT_THAT(metrics, HasSubstr("failover_upstream_latency_seconds_bucket{target=\"a\",le=\"0.5\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("failover_outcomes_total{reason=\"server_error\",target=\"a\"}"));
}

// A chain with hedge.after hands the delay out with its plans; the C++ client
// starts b beside a slow a, b serves, a is reported cancelled and not counted.
TEST_F(TrafficPolicyTest, HedgedRequestsThroughTheClientLibrary) {
  StartServer({"--metrics-listen", "127.0.0.1:0"});
  v1::ApplyRequest req;
  AddTarget(&req, "a");
  AddTarget(&req, "b");
  v1::Chain* chain = AddChain(&req, "ch", {"a", "b"});
  *chain->mutable_policy()->mutable_hedge()->mutable_after() = Millis(20);
  ASSERT_TRUE(Apply(req).ok());
  EXPECT_EQ(Pick("ch").hedge_after().nanos(), 20'000'000);

  client::Client client(v1::DecisionService::NewStub(proc_->Channel()));
  client::RunOptions options;
  options.idempotent = true;
  client::LoopResult r = client.Run(
      "ch",
      [](const v1::Attempt& a, const client::AttemptContext& ctx) {
        client::AttemptOutcome o;
        if (a.target() == "b") {
          o.ok = true;
          o.latency = absl::Milliseconds(40);
          return o;
        }
        // a hangs until it is told to stop (bounded, so a bug cannot hang the test).
        const absl::Time give_up = absl::Now() + absl::Seconds(10);
        while (!ctx.Cancelled() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
        o.failure.set_transport_error(v1::TRANSPORT_ERROR_TIMEOUT);
        return o;
      },
      options);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.served_by, "b");
  EXPECT_EQ(Target("a").status().health(), v1::HEALTH_STATE_UNKNOWN) << "a cancelled attempt counted against a";
  // The winner's success is reported from the client's thread.
  EXPECT_TRUE(Eventually(
      [&] { return HttpGet(proc_->MetricsPort(), "/metrics").find("failover_hedges_total 1") != std::string::npos; }));
}

}  // namespace
}  // namespace failover::testing
