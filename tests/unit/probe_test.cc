// Probe scheduling and leases (DESIGN 3.6) on a hand-driven clock.
#include <functional>
#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/engine.h"

namespace failover {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

class ProbeTest : public ::testing::Test {
 protected:
  ProbeTest() : engine_(Options()) {}
  static EngineOptions Options() {
    EngineOptions o;
    o.probe_jitter = 0;
    o.lease_grace = absl::Seconds(5);
    return o;
  }
  void SetUp() override {
    Policy p;
    p.probe_interval = absl::Seconds(15);
    p.probe_timeout = absl::Seconds(5);
    p.recovery_probes = 2;
    p.backoff_factor = 2;
    ConfigChange c;
    TargetConfig remote;
    remote.name = "remote";
    TargetConfig warm;
    warm.name = "warm-local";
    warm.kind = TargetKind::kLocal;
    warm.warm = true;
    TargetConfig cold;
    cold.name = "cold-local";
    cold.kind = TargetKind::kLocal;
    c.targets = {remote, warm, cold};
    ChainConfig chain;
    chain.name = "ch";
    chain.targets = {"remote", "warm-local", "cold-local"};
    chain.policy = p;
    c.chains = {chain};
    ASSERT_TRUE(engine_.Apply(c, ApplyOptions{}, now_).ok());
  }

  ProbeResponse Call(std::vector<ProbeResult> results = {}, uint32_t max_tasks = 16,
                     const std::string& prober = "p") {
    ProbeRequest req;
    req.prober_id = prober;
    req.max_tasks = max_tasks;
    req.results = std::move(results);
    ProbeResponse resp;
    Events events;
    EXPECT_TRUE(engine_.Probe(req, now_, &resp, &events).ok());
    events_.insert(events_.end(), events.begin(), events.end());
    return resp;
  }
  static std::map<std::string, ProbeTask> ByTarget(const ProbeResponse& r) {
    std::map<std::string, ProbeTask> out;
    for (const auto& t : r.tasks) out[t.target->config->name] = t;
    return out;
  }
  static ProbeResult Result(const ProbeTask& t, ProbeOutcome o, uint32_t status = 0) {
    ProbeResult r;
    r.lease_id = t.lease_id;
    r.outcome = o;
    r.facts.http_status = status;
    return r;
  }
  HealthState Health(const std::string& t) { return engine_.GetTarget(t)->status.health; }
  ProbeTask TaskFor(const std::string& target) {
    auto tasks = ByTarget(Call());
    EXPECT_TRUE(tasks.count(target)) << "no task for " << target;
    return tasks[target];
  }

  absl::Time now_ = absl::FromUnixSeconds(1'800'000'000);
  Engine engine_;
  Events events_;
};

TEST_F(ProbeTest, UnjudgedTargetsWithAHealthCheckAreProbedAndAColdLocalOneNever) {
  auto tasks = ByTarget(Call());
  EXPECT_EQ(tasks.size(), 2u);
  EXPECT_TRUE(tasks.count("remote"));
  EXPECT_TRUE(tasks.count("warm-local"));
  EXPECT_EQ(tasks["remote"].kind, ProbeKind::kLiveness);
  EXPECT_EQ(tasks["remote"].timeout, absl::Seconds(5));
}

TEST_F(ProbeTest, OneLeasePerTargetAcrossProbersUntilItExpires) {
  ProbeTask first = TaskFor("remote");
  EXPECT_THAT(Call().tasks, IsEmpty());  // another prober: nothing, leases are out
  now_ += absl::Seconds(10);             // timeout 5s + grace 5s: just not yet expired
  EXPECT_THAT(Call().tasks, IsEmpty());
  now_ += absl::Milliseconds(1);
  ProbeTask again = TaskFor("remote");  // expired: offered again under a new lease
  EXPECT_NE(again.lease_id, first.lease_id);
  // The late result of the expired lease is ignored and counted.
  ProbeResponse late = Call({Result(first, ProbeOutcome::kFail, 500)});
  EXPECT_EQ(late.ignored, 1u);
  EXPECT_NE(Health("remote"), HealthState::kDown);
}

// A lease id is unguessable and answers only for the prober that took it.
TEST_F(ProbeTest, AnotherProbersResultForALeaseIsIgnored) {
  ProbeTask task = TaskFor("remote");
  EXPECT_THAT(task.lease_id, ::testing::Not(::testing::StartsWith("1:")));
  ProbeResponse foreign = Call({Result(task, ProbeOutcome::kFail, 500)}, 16, "someone-else");
  EXPECT_EQ(foreign.ignored, 1u);
  EXPECT_NE(Health("remote"), HealthState::kDown);
  ProbeResponse own = Call({Result(task, ProbeOutcome::kFail, 500)});
  EXPECT_EQ(own.accepted, 1u);
  EXPECT_EQ(Health("remote"), HealthState::kDown);
}

TEST_F(ProbeTest, UnknownLeasesAndStaleGenerationsAreIgnored) {
  ProbeResult bogus;
  bogus.lease_id = "999:nope";
  ProbeResponse first = Call({bogus});
  EXPECT_EQ(first.ignored, 1u);
  ProbeTask task = ByTarget(first)["remote"];
  // The target's config changes while the probe runs: its result is stale.
  TargetConfig edited;
  edited.name = "remote";
  edited.labels["base_url"] = "http://elsewhere/v1";
  ASSERT_TRUE(engine_.Apply(ConfigChange{{edited}, {}}, ApplyOptions{}, now_).ok());
  ProbeResponse r = Call({Result(task, ProbeOutcome::kFail, 500)});
  EXPECT_EQ(r.ignored, 1u);
  EXPECT_EQ(r.accepted, 0u);
  EXPECT_NE(Health("remote"), HealthState::kDown);
}

// DESIGN 3.6: a result answers the state its lease was issued under. After a
// manual failover is triggered or cancelled, or the target is enabled or
// disabled, an older lease's result is ignored (and counted), and a check can
// be handed out again at once.
TEST_F(ProbeTest, ALeaseIssuedBeforeAnAdminChangeIsIgnoredAndOneIssuedAfterIsUsed) {
  struct Case {
    const char* name;
    std::function<void()> before_lease;  // sets the scene
    std::function<void()> admin_change;  // happens while the probe runs
  };
  auto trigger = [&] { ASSERT_TRUE(engine_.TriggerManualFailover("remote", "maintenance", now_).ok()); };
  auto cancel = [&] { ASSERT_TRUE(engine_.CancelManualFailover("remote", now_).ok()); };
  auto enabled = [&](bool on) { ASSERT_TRUE(engine_.SetTargetEnabled("remote", on, now_).ok()); };
  const std::vector<Case> cases = {
      {"trigger", [] {}, trigger},
      {"cancel", trigger, cancel},
      {"cancel then trigger again", trigger, [&] { cancel(); trigger(); }},
      {"disable then enable", [] {}, [&] { enabled(false); enabled(true); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    SetUp();  // the same config again: no change, state carries over
    if (engine_.GetTarget("remote")->status.health == HealthState::kManual) cancel();
    now_ += absl::Minutes(5);  // whatever lease was out has expired
    c.before_lease();
    ProbeTask old_lease = TaskFor("remote");
    c.admin_change();
    ProbeResponse stale = Call({Result(old_lease, ProbeOutcome::kFail, 501)});
    EXPECT_EQ(stale.ignored, 1u);
    EXPECT_EQ(stale.accepted, 0u);
    EXPECT_THAT(engine_.GetTarget("remote")->status.last_error, ::testing::Not(::testing::HasSubstr("501")));
    // A check is offered again at once, and its result counts.
    auto again = ByTarget(stale);
    ASSERT_TRUE(again.count("remote"));
    EXPECT_NE(again["remote"].lease_id, old_lease.lease_id);
    ProbeResponse fresh = Call({Result(again["remote"], ProbeOutcome::kFail, 502)});
    EXPECT_EQ(fresh.accepted, 1u);
    EXPECT_THAT(engine_.GetTarget("remote")->status.last_error, ::testing::HasSubstr("502"));
  }
}

TEST_F(ProbeTest, AnUnrelatedConfigChangeDoesNotVoidAProbe) {
  ProbeTask task = TaskFor("remote");
  TargetConfig other;
  other.name = "other";
  ASSERT_TRUE(engine_.Apply(ConfigChange{{other}, {}}, ApplyOptions{}, now_).ok());
  EXPECT_EQ(Call({Result(task, ProbeOutcome::kPass)}).accepted, 1u);
  EXPECT_EQ(Health("remote"), HealthState::kHealthy);
}

TEST_F(ProbeTest, ThrottledChangesNothing) {
  ProbeTask task = TaskFor("remote");
  ProbeResponse r = Call({Result(task, ProbeOutcome::kThrottled, 429)});
  EXPECT_EQ(r.accepted, 1u);
  EXPECT_EQ(Health("remote"), HealthState::kUnknown);
}

// The probe agent relays a failed check's raw reply; failoverd classifies it.
TEST_F(ProbeTest, AFailedCheckThatMetARateLimitCountsAsThrottledButAnExhaustedQuotaFails) {
  ProbeResult limited = Result(TaskFor("remote"), ProbeOutcome::kFail, 429);
  limited.facts.message = "Rate limit reached for requests";
  EXPECT_EQ(Call({limited}).accepted, 1u);
  EXPECT_EQ(Health("remote"), HealthState::kUnknown);
  now_ += absl::Minutes(1);  // the next check is due
  ProbeResult quota = Result(TaskFor("remote"), ProbeOutcome::kFail, 429);
  quota.facts.error_code = "insufficient_quota";
  quota.facts.message = "You exceeded your current quota, please check your plan and billing details.";
  EXPECT_EQ(Call({quota}).accepted, 1u);
  EXPECT_EQ(Health("remote"), HealthState::kDown);
}

// What each check found is kept beside its time: a passing check's too.
TEST_F(ProbeTest, TheLastCheckSaysWhatItFoundAndHowLongItTook) {
  auto last_check = [&](const std::string& t) { return engine_.GetTarget(t)->status.last_check; };
  EXPECT_EQ(last_check("remote"), "");  // never checked
  std::map<std::string, ProbeTask> tasks = ByTarget(Call());
  ProbeResult pass = Result(tasks["remote"], ProbeOutcome::kPass);
  pass.latency = absl::Milliseconds(85.4);
  Call({pass, Result(tasks["warm-local"], ProbeOutcome::kNotLoaded)});
  EXPECT_EQ(last_check("remote"), "passed in 85ms");
  EXPECT_EQ(last_check("warm-local"), "answered; model not loaded");
  now_ += absl::Minutes(1);
  ProbeResult limited = Result(TaskFor("remote"), ProbeOutcome::kFail, 429);
  limited.facts.message = "Rate limit reached for requests";
  Call({limited});
  EXPECT_EQ(last_check("remote"), "rate limited (not judged)");  // no latency said
  now_ += absl::Minutes(1);
  ProbeResult failed = Result(TaskFor("remote"), ProbeOutcome::kFail, 503);
  failed.facts.message = "overloaded";
  failed.latency = absl::Microseconds(420);
  Call({failed});
  EXPECT_EQ(last_check("remote"), "failed in 420us: 503 \"overloaded\"");
}

TEST_F(ProbeTest, NotLoadedIsALivenessPassForAWarmLocalTarget) {
  ProbeTask task = TaskFor("warm-local");
  Call({Result(task, ProbeOutcome::kNotLoaded)});
  EXPECT_EQ(Health("warm-local"), HealthState::kHealthy);
}

TEST_F(ProbeTest, AHealthyTargetIsProbedOnlyAfterAQuietInterval) {
  Call({Result(TaskFor("remote"), ProbeOutcome::kPass)});
  now_ += absl::Seconds(14);
  EXPECT_FALSE(ByTarget(Call()).count("remote"));
  // Traffic counts as a check: a busy target is not probed.
  ReportRequest report;
  report.chain = "ch";
  report.target = "remote";
  report.facts.success = true;
  ReportResult rr;
  Events ev;
  ASSERT_TRUE(engine_.Report(report, now_, &rr, &ev).ok());
  now_ += absl::Seconds(14);
  EXPECT_FALSE(ByTarget(Call()).count("remote"));
  now_ += absl::Seconds(1);
  EXPECT_TRUE(ByTarget(Call()).count("remote"));
}

TEST_F(ProbeTest, ADownTargetGetsLivenessAfterItsCooldownThenRecoveryProbes) {
  ProbeTask t1 = TaskFor("remote");
  Call({Result(t1, ProbeOutcome::kFail, 503)});
  ASSERT_EQ(Health("remote"), HealthState::kDown);
  auto down_event = std::find_if(events_.begin(), events_.end(), [](const Event& e) {
    return e.kind == EventKind::kTargetState && e.target == "remote" && e.to_health == HealthState::kDown;
  });
  ASSERT_NE(down_event, events_.end());
  EXPECT_EQ(down_event->source, Source::kProbe);
  // Cooldown 15s (first trip).
  now_ += absl::Seconds(14);
  EXPECT_FALSE(ByTarget(Call()).count("remote"));
  now_ += absl::Seconds(1);
  ProbeTask t2 = TaskFor("remote");
  EXPECT_EQ(t2.kind, ProbeKind::kLiveness);
  // Still failing: the cooldown doubles (factor 2): 30s.
  Call({Result(t2, ProbeOutcome::kFail, 503)});
  now_ += absl::Seconds(29);
  EXPECT_FALSE(ByTarget(Call()).count("remote"));
  now_ += absl::Seconds(1);
  ProbeTask t3 = TaskFor("remote");
  Call({Result(t3, ProbeOutcome::kPass)});
  EXPECT_EQ(Health("remote"), HealthState::kRecovering);
  now_ += absl::Seconds(15);
  ProbeTask r1 = TaskFor("remote");
  EXPECT_EQ(r1.kind, ProbeKind::kRecovery);
  Call({Result(r1, ProbeOutcome::kPass)});
  now_ += absl::Seconds(15);
  ProbeTask r2 = TaskFor("remote");
  Call({Result(r2, ProbeOutcome::kPass)});
  EXPECT_EQ(Health("remote"), HealthState::kHealthy);  // recovery.probes = 2
}

TEST_F(ProbeTest, BackoffResetsAfterAQuietPeriod) {
  Call({Result(TaskFor("remote"), ProbeOutcome::kFail, 503)});
  now_ += absl::Seconds(15);
  Call({Result(TaskFor("remote"), ProbeOutcome::kFail, 503)});  // n = 2: 30s
  now_ += absl::Seconds(30);
  ProbeTask p = TaskFor("remote");
  Call({Result(p, ProbeOutcome::kPass)});
  now_ += absl::Seconds(15);
  Call({Result(TaskFor("remote"), ProbeOutcome::kPass)});
  now_ += absl::Seconds(15);
  Call({Result(TaskFor("remote"), ProbeOutcome::kPass)});
  ASSERT_EQ(Health("remote"), HealthState::kHealthy);
  now_ += absl::Minutes(11);  // longer than reset_after (10m) since the last failure
  Call({Result(TaskFor("remote"), ProbeOutcome::kFail, 503)});
  ASSERT_EQ(Health("remote"), HealthState::kDown);
  now_ += absl::Seconds(15);  // back to the first step, not 60s
  EXPECT_TRUE(ByTarget(Call()).count("remote"));
}

TEST_F(ProbeTest, ProbeNowMakesChecksDueAtOnce) {
  Call({Result(TaskFor("remote"), ProbeOutcome::kPass)});
  EXPECT_FALSE(ByTarget(Call()).count("remote"));
  auto due = engine_.ProbeNow("remote");
  ASSERT_TRUE(due.ok());
  EXPECT_THAT(*due, ElementsAre("remote"));
  EXPECT_TRUE(ByTarget(Call()).count("remote"));
  EXPECT_EQ(engine_.ProbeNow("cold-local").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(engine_.ProbeNow("nope").status().code(), absl::StatusCode::kNotFound);
  auto all = engine_.ProbeNow("");
  ASSERT_TRUE(all.ok());
  EXPECT_THAT(*all, ElementsAre("remote", "warm-local"));
}

TEST_F(ProbeTest, MaxTasksAndNextCall) {
  ProbeResponse r = Call({}, 1);
  EXPECT_EQ(r.tasks.size(), 1u);
  EXPECT_EQ(r.next_call_after, absl::ZeroDuration());  // more are due now
  ProbeResponse rest = Call({Result(r.tasks[0], ProbeOutcome::kPass)});
  ASSERT_EQ(rest.tasks.size(), 1u);
  ProbeResponse none = Call({Result(rest.tasks[0], ProbeOutcome::kPass)});
  EXPECT_TRUE(none.tasks.empty());
  EXPECT_EQ(none.next_call_after, absl::Seconds(15));
  EXPECT_EQ(engine_.OutstandingLeases(now_), 0u);
}

// A chain that trips on the failure rate alone (examples/config/
// traffic-policies.yaml): one failed health check still takes an UNKNOWN or a
// HEALTHY target DOWN, under the single writer, with its events. This crashed
// failoverd when the lock-free pre-check and the mutation disagreed.
TEST(ProbeRateOnlyTest, AFailedCheckTakesARateOnlyTargetDownWithItsEvents) {
  EngineOptions o;
  o.probe_jitter = 0;
  Engine engine(o);
  std::vector<Change> changes;
  engine.SetChangeSink([&](Change&& c) { changes.push_back(std::move(c)); });
  absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  Policy p;
  p.trip_errors = 0;
  p.trip_failure_rate = 50;
  p.trip_min_calls = 10;
  ConfigChange c;
  for (const char* name : {"a", "b"}) {
    TargetConfig t;
    t.name = name;
    c.targets.push_back(t);
  }
  ChainConfig chain;
  chain.name = "ch";
  chain.targets = {"a", "b"};
  chain.policy = p;
  c.chains = {chain};
  ASSERT_TRUE(engine.Apply(c, ApplyOptions{}, now).ok());
  // "b" becomes HEALTHY through a caller's success; "a" stays UNKNOWN.
  ReportRequest ok;
  ok.chain = "ch";
  ok.target = "b";
  ok.facts.success = true;
  ReportResult ignored;
  Events events;
  ASSERT_TRUE(engine.Report(ok, now, &ignored, &events).ok());
  ASSERT_EQ(engine.GetTarget("b")->status.health, HealthState::kHealthy);

  // A quiet HEALTHY target is checked once its probe interval has passed.
  now += p.probe_interval;
  ProbeRequest req;
  req.prober_id = "p";
  ProbeResponse first;
  ASSERT_TRUE(engine.Probe(req, now, &first, &events).ok());
  ASSERT_EQ(first.tasks.size(), 2u);
  req.results.clear();
  for (const ProbeTask& task : first.tasks) {
    ProbeResult r;
    r.lease_id = task.lease_id;
    r.outcome = ProbeOutcome::kFail;
    r.facts.http_status = 503;
    req.results.push_back(r);
  }
  events.clear();
  const size_t changes_before = changes.size();
  ProbeResponse second;
  ASSERT_TRUE(engine.Probe(req, now + absl::Seconds(1), &second, &events).ok());
  EXPECT_EQ(second.accepted, 2u);
  EXPECT_EQ(engine.GetTarget("a")->status.health, HealthState::kDown);
  EXPECT_EQ(engine.GetTarget("b")->status.health, HealthState::kDown);
  // Both transitions left as numbered events in a Change, and the chain with them.
  int target_events = 0;
  for (const Event& e : events) {
    EXPECT_GT(e.sequence, 0u);
    target_events += e.kind == EventKind::kTargetState && e.to_health == HealthState::kDown;
  }
  EXPECT_EQ(target_events, 2);
  ASSERT_GT(changes.size(), changes_before);
  EXPECT_EQ(engine.GetChain("ch")->status.state, ChainState::kDegraded);
}

}  // namespace
}  // namespace failover
