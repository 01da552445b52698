// The decision engine through a real failoverd over gRPC: the LocalAI,
// GoModel and MinusPod scenarios, with short policy durations and waits that
// end on a condition or a deadline.
#include <algorithm>
#include <chrono>
#include <thread>
#include <tuple>

#include "failover/v1/admin.grpc.pb.h"
#include "failover/v1/decision.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/api_test.h"

namespace failover::testing {
namespace {

using ::testing::HasSubstr;

class DecisionIntegrationTest : public ApiTest {
 protected:
  void SetUp() override { StartServer(); }
};

TEST_F(DecisionIntegrationTest, LocalAiChainFailsOverStaysOnTheFallbackWhileRecoveringThenMovesBack) {
  v1::ApplyRequest req;
  AddTarget(&req, "argus-llm")->set_upstream_model("gemma-3-12b");
  v1::Target* local = AddTarget(&req, "gemma-local", v1::TARGET_KIND_LOCAL);
  local->set_warm(true);
  v1::Chain* chain = req.add_chains();
  chain->set_name("assistant-llm");
  chain->add_targets("argus-llm");
  chain->add_targets("gemma-local");
  chain->mutable_policy()->mutable_recovery()->set_probes(2);
  // Short, so the move back happens within the test; that the chain waits out
  // the dwell is shown on the simulated clock (EngineTest.MovesBackUpOnlyAfterRecoveryAndMinDwell).
  *chain->mutable_policy()->mutable_recovery()->mutable_min_dwell() = Millis(200);
  ASSERT_TRUE(Apply(req).ok());

  v1::PickTargetResponse plan = Pick("assistant-llm");
  ASSERT_EQ(plan.attempts_size(), 2);
  EXPECT_EQ(plan.attempts(0).target(), "argus-llm");
  EXPECT_EQ(plan.attempts(0).upstream_model(), "gemma-3-12b");
  EXPECT_EQ(plan.chain_state(), v1::CHAIN_STATE_PRIMARY);

  // The primary fails before the response started: move to the next target now.
  v1::ReportOutcomeResponse verdict = Report(plan.decision_id(), "argus-llm", 500, "upstream exploded");
  EXPECT_EQ(verdict.verdict(), v1::VERDICT_TRY_NEXT);
  EXPECT_EQ(verdict.reason(), v1::FAILURE_REASON_SERVER_ERROR);
  EXPECT_EQ(verdict.next_attempt().target(), "gemma-local");
  EXPECT_EQ(verdict.chain_state(), v1::CHAIN_STATE_FALLBACK);
  EXPECT_EQ(Report(plan.decision_id(), "gemma-local", 0).verdict(), v1::VERDICT_DONE);

  // Later requests stay on the fallback.
  v1::PickTargetResponse next = Pick("assistant-llm");
  ASSERT_EQ(next.attempts_size(), 1);
  EXPECT_EQ(next.attempts(0).target(), "gemma-local");

  // The primary recovers (two passes); once the dwell has passed the chain moves back up.
  Report("", "argus-llm", 0);
  Report("", "argus-llm", 0);
  EXPECT_EQ(Chain("assistant-llm").status().targets(0).health(), v1::HEALTH_STATE_HEALTHY);
  EXPECT_TRUE(Eventually([&] { return Pick("assistant-llm").attempts(0).target() == "argus-llm"; }));
  EXPECT_EQ(Chain("assistant-llm").status().state(), v1::CHAIN_STATE_PRIMARY);

  auto switches = Switches("assistant-llm");
  ASSERT_EQ(switches.size(), 3u);
  EXPECT_EQ(switches[0].reason(), v1::SWITCH_REASON_INITIAL);
  EXPECT_EQ(switches[1].reason(), v1::SWITCH_REASON_TRIP);
  EXPECT_THAT(switches[1].detail(), HasSubstr("upstream exploded"));
  EXPECT_EQ(switches[2].reason(), v1::SWITCH_REASON_RECOVERY);
  EXPECT_EQ(switches[2].to_target(), "argus-llm");
  // The failover is in failoverd's log as one line naming the cause.
  EXPECT_THAT(proc_->Stderr(), HasSubstr("chain assistant-llm: argus-llm -> gemma-local (trip: argus-llm 500"));
}

TEST_F(DecisionIntegrationTest, GoModelPolicyKeepsServing429sAndCapsAttempts) {
  v1::ApplyRequest req;
  AddTarget(&req, "kimicode/kimi-k2");
  AddTarget(&req, "openai/gpt-4o");
  AddTarget(&req, "ollama/qwen3:8b");
  v1::Chain* chain = req.add_chains();
  chain->set_name("resilient-chat");
  chain->set_strategy(v1::STRATEGY_FAILOVER);
  for (const char* t : {"kimicode/kimi-k2", "openai/gpt-4o", "ollama/qwen3:8b"}) chain->add_targets(t);
  v1::Policy* policy = chain->mutable_policy();
  policy->set_max_attempts(1);
  policy->add_retry_on_statuses("408");
  policy->add_retry_on_statuses("5xx");
  policy->add_retry_on_errors("model not found");
  policy->add_retry_on_errors("overloaded");
  policy->mutable_trip()->set_errors(10);
  (*policy->mutable_same_target_retries())["overloaded"] = 0;
  ASSERT_TRUE(Apply(req).ok());

  v1::PickTargetResponse plan = Pick("resilient-chat");
  ASSERT_EQ(plan.attempts_size(), 2);  // first + max_attempts 1
  v1::ReportOutcomeResponse r429 = Report(plan.decision_id(), "kimicode/kimi-k2", 429);
  EXPECT_EQ(r429.verdict(), v1::VERDICT_FAIL);  // 429 is not in retry_on_statuses
  EXPECT_EQ(r429.reason(), v1::FAILURE_REASON_RATE_LIMIT);

  plan = Pick("resilient-chat");
  v1::ReportOutcomeResponse r400 = Report(plan.decision_id(), plan.attempts(0).target(), 400,
                                          "The model 'kimi-k2' was not found");
  EXPECT_EQ(r400.verdict(), v1::VERDICT_TRY_NEXT);  // phrase match
  v1::ReportOutcomeResponse r502 = Report(plan.decision_id(), r400.next_attempt().target(), 502);
  EXPECT_EQ(r502.verdict(), v1::VERDICT_FAIL);
  EXPECT_THAT(r502.error(), HasSubstr("max_attempts (1) reached"));
}

TEST_F(DecisionIntegrationTest, MinusPodManualFailoverTriggerRepeatAndCancel) {
  v1::ApplyRequest req;
  AddTarget(&req, "llm-a");
  AddTarget(&req, "llm-failover");
  AddTarget(&req, "lonely");
  v1::Chain* chain = req.add_chains();
  chain->set_name("ad-detection");
  chain->add_targets("llm-a");
  chain->add_targets("llm-failover");
  ASSERT_TRUE(Apply(req).ok());

  v1::TriggerFailoverRequest trigger;
  trigger.set_target("llm-a");
  trigger.set_reason("testing the failover provider");
  v1::TargetView view;
  ASSERT_TRUE(admin_->TriggerFailover(Ctx().get(), trigger, &view).ok());
  EXPECT_EQ(view.status().health(), v1::HEALTH_STATE_MANUAL);
  EXPECT_EQ(view.status().source(), v1::TRANSITION_SOURCE_MANUAL);
  EXPECT_EQ(view.status().reason(), "testing the failover provider");
  EXPECT_EQ(Pick("ad-detection").attempts(0).target(), "llm-failover");
  const size_t events_after_trigger = Events().size();

  // Repeating an applied action succeeds without a second event.
  ASSERT_TRUE(admin_->TriggerFailover(Ctx().get(), trigger, &view).ok());
  EXPECT_EQ(Events().size(), events_after_trigger);

  v1::CancelFailoverRequest cancel;
  cancel.set_target("llm-a");
  ASSERT_TRUE(admin_->CancelFailover(Ctx().get(), cancel, &view).ok());
  EXPECT_EQ(Pick("ad-detection").attempts(0).target(), "llm-a");
  auto switches = Switches("ad-detection");
  ASSERT_GE(switches.size(), 3u);
  EXPECT_EQ(switches[switches.size() - 2].reason(), v1::SWITCH_REASON_MANUAL);
  EXPECT_EQ(switches.back().reason(), v1::SWITCH_REASON_CANCEL);

  // A target that no chain can fail over from is refused.
  trigger.set_target("lonely");
  grpc::Status refused = admin_->TriggerFailover(Ctx().get(), trigger, &view);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(refused.error_message(), HasSubstr("lonely"));
}

TEST_F(DecisionIntegrationTest, BadInputGetsTheFieldPathAndChangesNothing) {
  v1::ApplyRequest good;
  AddTarget(&good, "a");
  AddTarget(&good, "b");
  v1::ApplyResponse applied;
  ASSERT_TRUE(Apply(good, &applied).ok());
  // What a change would move: the generation, the event log, a's state.
  auto state = [&] {
    v1::GetTargetRequest a;
    a.set_name("a");
    v1::TargetView view;
    EXPECT_TRUE(admin_->GetTarget(Ctx().get(), a, &view).ok());
    const std::vector<v1::Event> events = Events();
    return std::make_tuple(view.config().DebugString(), view.status().health(), view.status().last_error(),
                           events.empty() ? uint64_t{0} : events.back().sequence());
  };
  const auto before = state();

  v1::ApplyRequest bad;
  AddTarget(&bad, "c");
  v1::Chain* chain = bad.add_chains();
  chain->set_name("ch");
  chain->add_targets("a");
  chain->add_targets("b");
  *chain->mutable_policy()->mutable_trip()->mutable_window() = Millis(-5);
  grpc::Status s = Apply(bad);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("chains[0].policy.trip.window"));
  // Nothing partly saved: target c was not created.
  v1::GetTargetRequest get;
  get.set_name("c");
  v1::TargetView view;
  EXPECT_EQ(admin_->GetTarget(Ctx().get(), get, &view).error_code(), grpc::StatusCode::NOT_FOUND);

  v1::PickTargetRequest pick;
  pick.set_chain("missing");
  v1::PickTargetResponse resp;
  grpc::Status nf = decide_->PickTarget(Ctx().get(), pick, &resp);
  EXPECT_EQ(nf.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(nf.error_message(), HasSubstr("\"missing\""));

  v1::ReportOutcomeRequest report;
  report.set_target("a");
  v1::ReportOutcomeResponse rresp;
  grpc::Status noresult = decide_->ReportOutcome(Ctx().get(), report, &rresp);
  EXPECT_EQ(noresult.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(noresult.error_message(), HasSubstr("result"));
  report.mutable_failure()->set_http_status(42);
  grpc::Status badstatus = decide_->ReportOutcome(Ctx().get(), report, &rresp);
  EXPECT_EQ(badstatus.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(badstatus.error_message(), HasSubstr("failure.http_status"));

  v1::ApplyRequest dry = good;
  dry.mutable_targets(0)->set_cost(2.5);
  dry.set_dry_run(true);
  v1::ApplyResponse dry_resp;
  ASSERT_TRUE(Apply(dry, &dry_resp).ok());
  ASSERT_EQ(dry_resp.changes_size(), 2);
  EXPECT_EQ(dry_resp.changes(0).change(), v1::CONFIG_CHANGE_UPDATED);
  EXPECT_EQ(dry_resp.changes(0).changed_fields(0), "cost");
  get.set_name("a");
  ASSERT_TRUE(admin_->GetTarget(Ctx().get(), get, &view).ok());
  EXPECT_EQ(view.config().cost(), 0);
  // Every refusal above, and the dry run, left the state as it was.
  EXPECT_EQ(state(), before);
  v1::ApplyResponse again;
  ASSERT_TRUE(Apply(good, &again).ok());
  EXPECT_EQ(again.generation(), applied.generation()) << "a refused or dry-run apply moved the generation";
}

TEST_F(DecisionIntegrationTest, ASingleNodeLeasesPartsOfAnRpmCapToClientsAndPlansTheRest) {
  if (cluster_leader_ != nullptr) GTEST_SKIP() << "a single node's books; cluster_test has the leader's";
  v1::ApplyRequest config;
  AddTarget(&config, "a")->mutable_limits()->set_rpm(10);
  AddTarget(&config, "b");
  AddChain(&config, "ch", {"a", "b"});
  ASSERT_TRUE(Apply(config).ok());
  auto lease = [&](const std::string& requester, int64_t minute, uint32_t want, v1::LeaseRpmResponse* resp) {
    v1::LeaseRpmRequest req;
    req.set_requester(requester);
    v1::RpmAsk* ask = req.add_asks();
    ask->set_target("a");
    ask->set_minute(minute);
    ask->set_want(want);
    resp->Clear();
    return decide_->LeaseRpm(Ctx().get(), req, resp);
  };
  auto planned_a = [&](int picks) {
    int n = 0;
    for (int i = 0; i < picks; ++i) n += Pick("ch").attempts(0).target() == "a";
    return n;
  };
  ASSERT_TRUE(AwaitEarlyInAMinute(50));
  const int64_t minute = absl::ToUnixSeconds(absl::Now()) / 60;
  v1::LeaseRpmResponse resp;
  ASSERT_TRUE(lease("client-1", minute, 6, &resp).ok());
  ASSERT_EQ(resp.grants_size(), 1);
  EXPECT_EQ(resp.grants(0).requests(), 6u);
  // failoverd plans what its clients did not take: 4 of 10, where it planned 10 before.
  EXPECT_EQ(planned_a(8), 4);
  ASSERT_TRUE(lease("client-2", minute, 5, &resp).ok());
  EXPECT_EQ(resp.grants(0).requests(), 0u) << "the cap is spent";
  ASSERT_TRUE(lease("client-1", minute, 6, &resp).ok());
  EXPECT_EQ(resp.grants(0).requests(), 6u) << "an ask sent again keeps its share and takes nothing more";

  // Bad asks name the field and change nothing.
  grpc::Status refused = lease("client-2", minute + 5, 1, &resp);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("asks[0].minute"));
  refused = lease("", minute, 1, &resp);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("requester"));
  refused = lease(std::string(300, 'r'), minute, 1, &resp);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("requester: at most 256 bytes"));
}

TEST_F(DecisionIntegrationTest, PinAndStatus) {
  v1::ApplyRequest req;
  AddTarget(&req, "a");
  AddTarget(&req, "b");
  v1::Chain* chain = req.add_chains();
  chain->set_name("ch");
  chain->add_targets("a");
  chain->add_targets("b");
  ASSERT_TRUE(Apply(req).ok());
  v1::PinChainRequest pin;
  pin.set_chain("ch");
  pin.set_target("b");
  v1::ChainView view;
  ASSERT_TRUE(admin_->PinChain(Ctx().get(), pin, &view).ok());
  EXPECT_EQ(view.status().state(), v1::CHAIN_STATE_PINNED);
  EXPECT_EQ(view.status().pinned_target(), "b");
  v1::PickTargetResponse plan = Pick("ch");
  ASSERT_EQ(plan.attempts_size(), 1);
  EXPECT_EQ(plan.attempts(0).target(), "b");

  v1::StatusResponse status;
  ASSERT_TRUE(admin_->GetStatus(Ctx().get(), v1::GetStatusRequest(), &status).ok());
  ASSERT_EQ(status.chains_size(), 1);
  EXPECT_EQ(status.chains(0).active_target(), "b");
  EXPECT_EQ(status.targets_size(), 2);
  EXPECT_GT(status.config_generation(), 0u);
}

}  // namespace
}  // namespace failover::testing

namespace failover::testing {
namespace {

// A client library's successes on one target arrive as one report with a
// count: each is counted; a count on a failure, or past the bound, is refused
// naming the field, and counts nothing.
TEST(ReportCountTest, ACountedReportCountsEachSuccessAndIsRefusedOtherwise) {
  TempDir data;
  FailoverdProcess proc(FailoverdProcess::Options{data.path(), {"--metrics-listen", "127.0.0.1:0"}});
  std::string error;
  ASSERT_TRUE(proc.Start(&error)) << error;
  ASSERT_TRUE(ApplyConfig(v1::AdminService::NewStub(proc.Channel()).get(), TwoTargetConfig()).ok());
  auto decide = v1::DecisionService::NewStub(proc.Channel());
  auto report = [&](uint32_t count, bool success) {
    v1::ReportOutcomeRequest req;
    req.set_chain("ch");
    req.set_target("b");
    req.set_count(count);
    if (success) {
      req.mutable_success();
    } else {
      req.mutable_failure()->set_http_status(500);
    }
    grpc::ClientContext ctx;
    v1::ReportOutcomeResponse resp;
    return decide->ReportOutcome(&ctx, req, &resp);
  };
  ASSERT_TRUE(report(5, true).ok());
  const grpc::Status on_failure = report(3, false);
  EXPECT_EQ(on_failure.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(on_failure.error_message(), ::testing::HasSubstr("count: 3"));
  const grpc::Status too_many = report(10001, true);
  EXPECT_EQ(too_many.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(too_many.error_message(), ::testing::HasSubstr("count: at most 10000"));
  const std::string metrics = HttpGet(proc.MetricsPort(), "/metrics");
  EXPECT_THAT(metrics, ::testing::HasSubstr("failover_outcomes_total{reason=\"none\",target=\"b\"} 5\n"));
  EXPECT_THAT(metrics, ::testing::Not(::testing::HasSubstr("reason=\"server_error\",target=\"b\"} 1")));
}

// Upstream latency buckets reach the longest timeouts targets use (ten
// minutes for a local model): a 400 s call is not lumped in with everything
// past a minute.
TEST(ReportCountTest, UpstreamLatencyBucketsReachTenMinutes) {
  TempDir data;
  FailoverdProcess proc(FailoverdProcess::Options{data.path(), {"--metrics-listen", "127.0.0.1:0"}});
  std::string error;
  ASSERT_TRUE(proc.Start(&error)) << error;
  ASSERT_TRUE(ApplyConfig(v1::AdminService::NewStub(proc.Channel()).get(), TwoTargetConfig()).ok());
  v1::ReportOutcomeRequest req;
  req.set_chain("ch");
  req.set_target("b");
  req.mutable_success();
  req.mutable_latency()->set_seconds(400);
  grpc::ClientContext ctx;
  v1::ReportOutcomeResponse resp;
  ASSERT_TRUE(v1::DecisionService::NewStub(proc.Channel())->ReportOutcome(&ctx, req, &resp).ok());
  const std::string metrics = HttpGet(proc.MetricsPort(), "/metrics");
  EXPECT_THAT(metrics, ::testing::HasSubstr("failover_upstream_latency_seconds_bucket{target=\"b\",le=\"300\"} 0\n"));
  EXPECT_THAT(metrics, ::testing::HasSubstr("failover_upstream_latency_seconds_bucket{target=\"b\",le=\"600\"} 1\n"));
}

// A chain's decision and retry-budget counters exist at 0 from its creation
// and after a restart, so rate() sees the first one and an alert on refusals
// has a series to compare before the first refusal.
TEST(ReportCountTest, AChainsCountersExistAtZeroBeforeTheirFirstUse) {
  TempDir data;
  const FailoverdProcess::Options options{data.path(), {"--metrics-listen", "127.0.0.1:0"}};
  const std::vector<std::string> at_zero = {R"(failover_decisions_total{chain="ch",result="ok"} 0)",
                                            R"(failover_decisions_total{chain="ch",result="error"} 0)",
                                            R"(failover_retry_budget_refusals_total{chain="ch"} 0)"};
  {
    FailoverdProcess proc(options);
    std::string error;
    ASSERT_TRUE(proc.Start(&error)) << error;
    ASSERT_TRUE(ApplyConfig(v1::AdminService::NewStub(proc.Channel()).get(), TwoTargetConfig()).ok());
    // (Created as the chain's creation is published, a moment after the answer.)
    EXPECT_TRUE(Eventually([&] {
      const std::string metrics = HttpGet(proc.MetricsPort(), "/metrics");
      return std::all_of(at_zero.begin(), at_zero.end(),
                         [&](const std::string& series) { return metrics.find(series + "\n") != std::string::npos; });
    })) << HttpGet(proc.MetricsPort(), "/metrics");
    proc.Stop(SIGTERM);
  }
  FailoverdProcess restarted(options);
  std::string error;
  ASSERT_TRUE(restarted.Start(&error)) << error;
  const std::string metrics = HttpGet(restarted.MetricsPort(), "/metrics");
  for (const std::string& series : at_zero) EXPECT_THAT(metrics, ::testing::HasSubstr(series + "\n"));
}

}  // namespace
}  // namespace failover::testing
