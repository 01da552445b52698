// The three health-check rules of DESIGN 3.1 and 3.6 through the real binary:
// failures on a DOWN target do not hold back its health check, a probe result
// from before an admin change is ignored, and chains must agree on a shared
// target's health settings (or the target sets its own).
#include <fstream>

#include "gmock/gmock.h"
#include "tests/support/api_test.h"

namespace failover::testing {
namespace {

using ::testing::HasSubstr;

class HealthCheckTest : public ApiTest {
 protected:
  void SetUp() override { StartServer(); }

  // Chain ch = [a, b], probed every `interval` with the given backoff factor.
  void ApplyChain(int64_t interval_ms, double backoff_factor) {
    v1::ApplyRequest req;
    AddTarget(&req, "a");
    AddTarget(&req, "b");
    v1::Chain* chain = AddChain(&req, "ch", {"a", "b"});
    v1::Policy* p = chain->mutable_policy();
    *p->mutable_probe()->mutable_interval() = Millis(interval_ms);
    p->mutable_backoff()->set_factor(backoff_factor);
    grpc::Status s = Apply(req);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  v1::ProbeResponse Probe(std::vector<v1::ProbeResult> results = {}) {
    v1::ProbeRequest req;
    req.set_prober_id("test-prober");
    for (auto& r : results) *req.add_results() = std::move(r);
    v1::ProbeResponse resp;
    grpc::Status s = decide_->Probe(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }
  static const v1::ProbeTask* TaskFor(const v1::ProbeResponse& r, const std::string& target) {
    for (const auto& t : r.tasks()) {
      if (t.target() == target) return &t;
    }
    return nullptr;
  }
  static v1::ProbeResult Failed(const std::string& lease, uint32_t status) {
    v1::ProbeResult r;
    r.set_lease_id(lease);
    r.set_outcome(v1::PROBE_OUTCOME_FAIL);
    r.mutable_failure()->set_http_status(status);
    return r;
  }
  void Fail(const std::string& target) {
    v1::PickTargetResponse pick = Pick("ch");
    Report(pick.decision_id(), target, 503, "upstream down");
  }
};

// Both targets down, callers keep trying both (DEGRADED). Before the fix each
// failure was a new trip that pushed a's cooldown out (x4 each time), so no
// health check was ever offered while the failures went on.
TEST_F(HealthCheckTest, ATargetThatCallersKeepTryingStillGetsItsHealthCheck) {
  ApplyChain(/*interval_ms=*/300, /*backoff_factor=*/4);
  Fail("a");
  Fail("b");
  ASSERT_EQ(Chain("ch").status().state(), v1::CHAIN_STATE_DEGRADED);
  // Take the first round of checks (both targets were unjudged at apply).
  Probe();
  bool offered = Eventually([&] {
    Fail("a");
    return TaskFor(Probe(), "a") != nullptr;
  });
  EXPECT_TRUE(offered) << "no health check for a while its failures go on";
  EXPECT_EQ(Target("a").status().health(), v1::HEALTH_STATE_DOWN);
}

// A lease handed out while a is manually failed over, answered after the
// failover was cancelled and triggered again, no longer fits: ignored.
TEST_F(HealthCheckTest, AProbeResultFromBeforeAnAdminChangeIsIgnored) {
  StartServer({"--metrics-listen", "127.0.0.1:0"});
  ApplyChain(/*interval_ms=*/60'000, /*backoff_factor=*/1);
  const std::string probed_metric = "failover_target_last_probe_timestamp_seconds{target=\"a\"}";
  auto admin = [&](bool trigger) {
    grpc::Status s;
    v1::TargetView view;
    if (trigger) {
      v1::TriggerFailoverRequest req;
      req.set_target("a");
      req.set_reason("maintenance");
      s = admin_->TriggerFailover(Ctx().get(), req, &view);
    } else {
      v1::CancelFailoverRequest req;
      req.set_target("a");
      s = admin_->CancelFailover(Ctx().get(), req, &view);
    }
    ASSERT_TRUE(s.ok()) << s.error_message();
  };
  admin(true);
  const v1::ProbeResponse first = Probe();
  const v1::ProbeTask* task = TaskFor(first, "a");
  ASSERT_NE(task, nullptr);
  const std::string old_lease = task->lease_id();
  admin(false);
  admin(true);
  v1::ProbeResponse stale = Probe({Failed(old_lease, 500)});
  EXPECT_EQ(stale.results_ignored(), 1u);
  EXPECT_EQ(stale.results_accepted(), 0u);
  EXPECT_EQ(Target("a").status().last_error(), "");
  EXPECT_THAT(HttpGet(proc_->MetricsPort(), "/metrics"), ::testing::Not(HasSubstr(probed_metric)));
  // A check under the current state is offered at once, and its result counts.
  const v1::ProbeTask* fresh = TaskFor(stale, "a");
  ASSERT_NE(fresh, nullptr);
  v1::ProbeResponse used = Probe({Failed(fresh->lease_id(), 502)});
  EXPECT_EQ(used.results_accepted(), 1u);
  EXPECT_THAT(Target("a").status().last_error(), HasSubstr("502"));
  EXPECT_THAT(HttpGet(proc_->MetricsPort(), "/metrics"), HasSubstr(probed_metric));
}

// Through failoverctl, as an operator meets it: chains that give a shared
// target different health settings are refused (dry run too); the target's
// own settings make them fine, and read back.
TEST_F(HealthCheckTest, ChainsMustAgreeOnASharedTargetsHealthUnlessItSetsItsOwn) {
  TempDir config;
  const std::string chains =
      "chains:\n"
      "  - name: chat\n    targets: [shared, chat-backup]\n    policy: {trip: {errors: 1}}\n"
      "  - name: batch\n    targets: [shared, batch-backup]\n    policy: {trip: {errors: 5}}\n";
  std::ofstream(config.path() + "/c.yaml")
      << "targets:\n  - name: shared\n  - name: chat-backup\n  - name: batch-backup\n" << chains;
  auto ctl = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {FailoverctlBinary(), "--server", proc_->address()});
    return RunCommand(args);
  };
  for (bool dry_run : {true, false}) {
    std::vector<std::string> args = {"apply", "-f", config.path()};
    if (dry_run) args.push_back("--dry-run");
    CommandResult refused = ctl(args);
    EXPECT_NE(refused.exit_code, 0);
    EXPECT_THAT(refused.err, HasSubstr("c.yaml:9: chains[1].policy.trip.errors"));
    EXPECT_THAT(refused.err, HasSubstr("chains \"batch\" and \"chat\" both list target \"shared\""));
  }
  EXPECT_EQ(ctl({"get", "targets"}).out.find("shared"), std::string::npos);  // nothing saved

  std::ofstream(config.path() + "/c.yaml")
      << "targets:\n  - name: shared\n    health: {trip: {errors: 3}}\n  - name: chat-backup\n"
         "  - name: batch-backup\n"
      << chains;
  CommandResult applied = ctl({"apply", "-f", config.path()});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  EXPECT_EQ(Target("shared").config().health().trip().errors(), 3u);
  // Two failures do not trip it (neither chain's value applies), the third does.
  for (int i = 0; i < 2; ++i) Report("", "shared", 503);
  EXPECT_NE(Target("shared").status().health(), v1::HEALTH_STATE_DOWN);
  Report("", "shared", 503);
  EXPECT_EQ(Target("shared").status().health(), v1::HEALTH_STATE_DOWN);
}

}  // namespace
}  // namespace failover::testing
