// failoverd plus the real probe agent (failoverctl probe-agent) against a
// fake OpenAI-compatible upstream: the primary goes down when the fake fails,
// stays down while it fails, and comes back after the recovery probes and
// the dwell once the fake recovers.
#include "gmock/gmock.h"
#include "tests/support/api_test.h"
#include "tests/support/fake_upstream.h"

namespace failover::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

class ProbeIntegrationTest : public ApiTest {
 protected:
  void SetUp() override {
    StartServer();
    v1::ApplyRequest req;
    v1::Target* primary = AddTarget(&req, "primary");
    primary->set_upstream_model("gpt-test");
    (*primary->mutable_labels())["base_url"] = upstream_.base_url();
    (*primary->mutable_labels())["api_key_env"] = "FAKE_UPSTREAM_KEY";
    AddTarget(&req, "fallback", v1::TARGET_KIND_LOCAL);  // not warm: never probed
    v1::Chain* chain = req.add_chains();
    chain->set_name("ch");
    chain->add_targets("primary");
    chain->add_targets("fallback");
    v1::Policy* p = chain->mutable_policy();
    *p->mutable_probe()->mutable_interval() = Millis(100);
    *p->mutable_probe()->mutable_timeout() = Millis(500);
    p->mutable_recovery()->set_probes(2);
    *p->mutable_recovery()->mutable_min_dwell() = Millis(300);
    ASSERT_TRUE(Apply(req).ok());
  }
  std::unique_ptr<ChildProcess> Agent(const std::string& id) {
    return std::make_unique<ChildProcess>(
        std::vector<std::string>{FailoverctlBinary(), "--server", proc_->address(), "probe-agent", "--id", id,
                                 "--max-wait", "0.05"},
        std::vector<std::string>{"FAKE_UPSTREAM_KEY=sk-test"});
  }
  v1::TargetStatus Primary() { return Target("primary").status(); }

  FakeUpstream upstream_{"gpt-test"};
};

TEST_F(ProbeIntegrationTest, TheAgentTakesThePrimaryDownKeepsItDownAndBringsItBack) {
  auto agent = Agent("agent-1");
  ASSERT_TRUE(Eventually([&] { return Primary().health() == v1::HEALTH_STATE_HEALTHY; })) << agent->Stderr();
  EXPECT_EQ(upstream_.last_authorization(), "Bearer sk-test");
  EXPECT_THAT(Primary().last_check(), MatchesRegex("passed in [0-9.]+(us|ms|s)"));  // the agent times its checks

  upstream_.set_mode(FakeUpstream::Mode::kServerError);
  ASSERT_TRUE(Eventually([&] { return Primary().health() == v1::HEALTH_STATE_DOWN; }));
  EXPECT_EQ(Chain("ch").status().active_target(), "fallback");
  EXPECT_THAT(Primary().last_error(), HasSubstr("500"));
  EXPECT_THAT(Primary().last_check(), MatchesRegex("failed in [0-9.]+(us|ms|s): 500.*"));
  // It stays down while the upstream keeps failing: more probes, still DOWN.
  const int seen = upstream_.requests();
  ASSERT_TRUE(Eventually([&] { return upstream_.requests() >= seen + 3; }));
  EXPECT_EQ(Primary().health(), v1::HEALTH_STATE_DOWN);

  upstream_.set_mode(FakeUpstream::Mode::kOk);
  ASSERT_TRUE(Eventually([&] { return Primary().health() == v1::HEALTH_STATE_HEALTHY; }));
  ASSERT_TRUE(Eventually([&] { return Chain("ch").status().active_target() == "primary"; }));
  bool saw_probe_source = false;
  for (const auto& e : Events("ch")) {
    saw_probe_source |= e.has_target_state() && e.target_state().source() == v1::TRANSITION_SOURCE_PROBE &&
                        e.target_state().to_state() == v1::HEALTH_STATE_DOWN;
  }
  EXPECT_TRUE(saw_probe_source);
  EXPECT_EQ(Chain("ch").status().targets(1).last_probe().seconds(), 0);  // the cold local target is never probed
}

TEST_F(ProbeIntegrationTest, AMissingModelFailsAndThrottlingChangesNothing) {
  auto agent = Agent("agent-1");
  ASSERT_TRUE(Eventually([&] { return Primary().health() == v1::HEALTH_STATE_HEALTHY; }));
  upstream_.set_mode(FakeUpstream::Mode::kRateLimited);
  const int seen = upstream_.requests();
  ASSERT_TRUE(Eventually([&] { return upstream_.requests() >= seen + 3; }));
  EXPECT_EQ(Primary().health(), v1::HEALTH_STATE_HEALTHY);  // 429 is neither a pass nor a failure
  upstream_.set_mode(FakeUpstream::Mode::kDropModel);
  ASSERT_TRUE(Eventually([&] { return Primary().health() == v1::HEALTH_STATE_DOWN; }));
  EXPECT_THAT(Primary().last_error(), HasSubstr("gpt-test is not listed"));
}

TEST_F(ProbeIntegrationTest, AHangingUpstreamTimesOutAndTwoAgentsNeverProbeTogether) {
  auto one = Agent("agent-1");
  auto two = Agent("agent-2");
  ASSERT_TRUE(Eventually([&] { return Primary().health() == v1::HEALTH_STATE_HEALTHY; }));
  const int seen = upstream_.requests();
  ASSERT_TRUE(Eventually([&] { return upstream_.requests() >= seen + 6; }));
  EXPECT_EQ(upstream_.max_in_flight(), 1);  // one lease per target across both agents
  upstream_.set_mode(FakeUpstream::Mode::kHang);
  ASSERT_TRUE(Eventually([&] { return Primary().health() == v1::HEALTH_STATE_DOWN; }));
  EXPECT_THAT(Primary().last_error(), HasSubstr("timeout"));
  upstream_.set_mode(FakeUpstream::Mode::kOk);  // release the hung requests
}

TEST_F(ProbeIntegrationTest, ProbeNowOverFailoverctl) {
  CommandResult r = RunCommand({FailoverctlBinary(), "--server", proc_->address(), "probe", "now"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("probes due now: primary"));
  CommandResult cold = RunCommand({FailoverctlBinary(), "--server", proc_->address(), "probe", "now", "fallback"});
  EXPECT_EQ(cold.exit_code, 1);
  EXPECT_THAT(cold.err, HasSubstr("no health check"));
}

}  // namespace
}  // namespace failover::testing
