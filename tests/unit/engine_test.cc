// The decision engine on a hand-driven clock: plans, hysteresis, strategies,
// verdicts, pins, manual failover, validation and decisions.
#include "server/engine/engine.h"

#include <limits>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace failover {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

EngineOptions NoJitter() {
  EngineOptions o;
  o.probe_jitter = 0;
  return o;
}

TargetConfig Target(const std::string& name, TargetKind kind = TargetKind::kRemote) {
  TargetConfig t;
  t.name = name;
  t.kind = kind;
  return t;
}

ChainConfig Chain(const std::string& name, std::vector<std::string> targets, Policy policy = Policy()) {
  ChainConfig c;
  c.name = name;
  c.targets = std::move(targets);
  c.policy = std::move(policy);
  return c;
}

OutcomeFacts Http(uint32_t status, std::string message = "") {
  OutcomeFacts f;
  f.http_status = status;
  f.message = std::move(message);
  return f;
}

OutcomeFacts Success() {
  OutcomeFacts f;
  f.success = true;
  return f;
}

class EngineTest : public ::testing::Test {
 protected:
  void ApplyOk(std::vector<TargetConfig> targets, std::vector<ChainConfig> chains) {
    ConfigChange change{std::move(targets), std::move(chains)};
    auto r = engine_.Apply(change, ApplyOptions{}, now_);
    ASSERT_TRUE(r.ok()) << r.status();
    Record(r->events);
  }

  // The LocalAI two-target chain: remote first, local warm second.
  void TwoTargetChain(Policy policy = Policy()) {
    TargetConfig local = Target("gemma-local", TargetKind::kLocal);
    local.warm = true;
    ApplyOk({Target("argus-llm"), local}, {Chain("assistant-llm", {"argus-llm", "gemma-local"}, policy)});
  }

  Plan Pick(const std::string& chain, uint64_t body_bytes = 0, std::vector<std::string> exclude = {},
            const std::string& session = "") {
    PickRequest req;
    req.chain = chain;
    req.body_bytes = body_bytes;
    req.exclude_targets = std::move(exclude);
    req.session_key = session;
    Plan plan;
    Events events;
    absl::Status s = engine_.Pick(req, now_, &plan, &events);
    EXPECT_TRUE(s.ok()) << s;
    Record(events);
    return plan;
  }

  static std::vector<std::string> Names(const Plan& plan) {
    std::vector<std::string> out;
    for (const auto& a : plan.attempts) out.push_back(a.target->config->name);
    return out;
  }

  ReportResult Report(const std::string& decision, const std::string& target, OutcomeFacts facts,
                      const std::string& chain = "") {
    ReportRequest req;
    req.decision_id = decision;
    req.target = target;
    req.chain = chain;
    req.facts = std::move(facts);
    ReportResult r;
    Events events;
    absl::Status s = engine_.Report(req, now_, &r, &events);
    EXPECT_TRUE(s.ok()) << s;
    Record(events);
    return r;
  }

  // Reports a failure on `target` outside any decision (as real traffic would).
  void FailTarget(const std::string& chain, const std::string& target, uint32_t status = 500) {
    Report("", target, Http(status), chain);
  }
  void SucceedTarget(const std::string& chain, const std::string& target) {
    Report("", target, Success(), chain);
  }

  ChainStatus Status(const std::string& chain) {
    auto v = engine_.GetChain(chain);
    EXPECT_TRUE(v.ok()) << v.status();
    return v->status;
  }

  HealthState Health(const std::string& target) {
    auto v = engine_.GetTarget(target);
    EXPECT_TRUE(v.ok()) << v.status();
    return v->status.health;
  }

  void Record(const Events& events) { events_.insert(events_.end(), events.begin(), events.end()); }

  std::vector<Event> Switches(const std::string& chain) {
    std::vector<Event> out;
    for (const Event& e : events_) {
      if (e.kind == EventKind::kChainSwitched && e.chain == chain) out.push_back(e);
    }
    return out;
  }

  std::vector<Event> TargetEvents(const std::string& target) {
    std::vector<Event> out;
    for (const Event& e : events_) {
      if (e.kind == EventKind::kTargetState && e.target == target) out.push_back(e);
    }
    return out;
  }

  void Tick() {
    Events events;
    engine_.Tick(now_, &events);
    Record(events);
  }

  absl::Time now_ = absl::FromUnixSeconds(1'800'000'000);
  Engine engine_{NoJitter()};
  Events events_;
};

// --- the active target and hysteresis (DESIGN 3.3) --------------------------

TEST_F(EngineTest, NewChainStartsPrimaryWithAnInitialEvent) {
  TwoTargetChain();
  EXPECT_EQ(Status("assistant-llm").state, ChainState::kPrimary);
  EXPECT_EQ(Status("assistant-llm").active_target, "argus-llm");
  auto sw = Switches("assistant-llm");
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].switch_reason, SwitchReason::kInitial);
  EXPECT_EQ(sw[0].to_target, "argus-llm");
  EXPECT_THAT(Names(Pick("assistant-llm")), ElementsAre("argus-llm", "gemma-local"));
}

// The times kept per target and per chain are CompactTimes: what goes in
// comes back, the infinities included (a target never probed shows no last
// probe, a hold without end stays one), and they order as the times do.
TEST(CompactTimeTest, ATimeComesBackAsItWentInAndTheInfinitiesStayInfinite) {
  const absl::Time t = absl::FromUnixSeconds(1796000000) + absl::Nanoseconds(123456789);
  EXPECT_EQ(absl::Time(CompactTime(t)), t);
  EXPECT_EQ(absl::Time(CompactTime(absl::InfinitePast())), absl::InfinitePast());
  EXPECT_EQ(absl::Time(CompactTime(absl::InfiniteFuture())), absl::InfiniteFuture());
  EXPECT_EQ(absl::Time(CompactTime()), absl::InfinitePast());
  EXPECT_EQ(absl::Time(CompactTime(absl::UnixEpoch())), absl::UnixEpoch());
  EXPECT_EQ(absl::Time(CompactTime(absl::UnixEpoch() - absl::Seconds(5))), absl::UnixEpoch() - absl::Seconds(5));
  EXPECT_TRUE(CompactTime(t) < CompactTime(t + absl::Nanoseconds(1)));
  EXPECT_TRUE(CompactTime(absl::InfinitePast()) < CompactTime(absl::UnixEpoch() - absl::Hours(1e5)));
  EXPECT_TRUE(CompactTime(t) < CompactTime(absl::InfiniteFuture()));
  EXPECT_GT(absl::Time(CompactTime(t)) + absl::Seconds(1), t);  // reads as an absl::Time
}

// Chains restored or applied one by one bring equal policies as copies of
// their own; the snapshot keeps one of each (memory per chain,
// bench/README.md). An edit of one chain's policy must leave the chains that
// shared it as they were.
TEST_F(EngineTest, ChainsWithEqualPoliciesShareOneAndAnEditChangesOnlyItsOwnChain) {
  Policy three;
  three.trip_errors = 3;
  ApplyOk({Target("a"), Target("b"), Target("c"), Target("d"), Target("e"), Target("f")},
          {Chain("c1", {"a", "b"}, three), Chain("c2", {"c", "d"}, three), Chain("c3", {"e", "f"})});
  auto snap = engine_.snapshot();
  EXPECT_EQ(snap->FindChain("c1")->config->policy.shared(), snap->FindChain("c2")->config->policy.shared());
  EXPECT_EQ(snap->FindChain("c3")->config->policy.shared(), Shared<Policy>().shared());

  ChainConfig edited = *snap->FindChain("c1")->config;
  edited.policy.Mutable().trip_errors = 1;
  ApplyOk({}, {edited});
  snap = engine_.snapshot();
  EXPECT_EQ(snap->FindChain("c1")->config->policy->trip_errors, 1u);
  EXPECT_EQ(snap->FindChain("c2")->config->policy->trip_errors, 3u);
  EXPECT_EQ(edited.policy->trip_errors, 1u);
  // And as callers see it: one failure still leaves c2's first target up.
  FailTarget("c2", "c");
  EXPECT_EQ(Pick("c2").active_target, "c");
  FailTarget("c1", "a");
  EXPECT_EQ(Pick("c1").active_target, "b");
}

// An apply copies only what it changes: the next snapshot holds the very
// configs of the objects it leaves alone (a change of one chain among ten
// thousand is not ten thousand copies), and a chain added later joins the
// policy its equals already share.
TEST_F(EngineTest, AnApplySharesTheConfigsItLeavesAloneWithTheSnapshotBefore) {
  Policy three;
  three.trip_errors = 3;
  ApplyOk({Target("a"), Target("b"), Target("c"), Target("e")}, {Chain("c1", {"a", "b"}, three), Chain("c2", {"c", "e"})});
  const auto before = engine_.snapshot();

  // (c0 sorts before c1: the new chain's equal policy must not displace c1's.)
  ApplyOk({Target("d"), Target("f")}, {Chain("c0", {"d", "f"}, three)});
  const auto after = engine_.snapshot();
  EXPECT_EQ(after->FindTarget("a")->config, before->FindTarget("a")->config);
  EXPECT_EQ(after->FindChain("c1")->config, before->FindChain("c1")->config);
  EXPECT_EQ(after->FindChain("c2")->config, before->FindChain("c2")->config);
  EXPECT_EQ(after->FindChain("c0")->config->policy.shared(), after->FindChain("c1")->config->policy.shared());

  // Restating an object as it is keeps its config too; changing it does not.
  TargetConfig b = Target("b");
  b.labels["tier"] = "2";
  ApplyOk({Target("a"), b}, {Chain("c1", {"a", "b"}, three)});
  const auto restated = engine_.snapshot();
  EXPECT_EQ(restated->FindTarget("a")->config, before->FindTarget("a")->config);
  EXPECT_EQ(restated->FindChain("c1")->config, before->FindChain("c1")->config);
  EXPECT_NE(restated->FindTarget("b")->config, before->FindTarget("b")->config);
  EXPECT_EQ(restated->FindTarget("b")->config->labels.at("tier"), "2");
  EXPECT_TRUE(before->FindTarget("b")->config->labels.empty()) << "the snapshot before keeps its own config";
}

// Each target knows the chains that list it (one array for all targets in
// the snapshot): its status names them in name order, a delete is refused
// naming them, and a chain dropped from the config drops out of the list.
TEST_F(EngineTest, ATargetKnowsEveryChainThatListsItInNameOrder) {
  ApplyOk({Target("a"), Target("b"), Target("c"), Target("d")},
          {Chain("z", {"b", "a"}), Chain("m", {"a", "c"}), Chain("q", {"c", "d"}), Chain("b2", {"d", "a"})});
  auto a = engine_.GetTarget("a");
  ASSERT_TRUE(a.ok());
  EXPECT_THAT(a->status.chains, ElementsAre("b2", "m", "z"));
  EXPECT_THAT(engine_.GetTarget("b")->status.chains, ElementsAre("z"));
  EXPECT_THAT(engine_.GetTarget("c")->status.chains, ElementsAre("m", "q"));
  EXPECT_THAT(engine_.GetTarget("d")->status.chains, ElementsAre("b2", "q"));
  auto refused = engine_.DeleteTarget("a", now_, "test");
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("listed by chain(s) b2, m, z;"));

  ASSERT_TRUE(engine_.DeleteChain("m", now_, "test").ok());
  EXPECT_THAT(engine_.GetTarget("a")->status.chains, ElementsAre("b2", "z"));
  EXPECT_THAT(engine_.GetTarget("c")->status.chains, ElementsAre("q"));
}

TEST_F(EngineTest, FailureMovesDownAtOnceAndEmitsTrip) {
  TwoTargetChain();
  Plan plan = Pick("assistant-llm");
  ReportResult r = Report(plan.decision_id, "argus-llm", Http(500, "boom"));
  EXPECT_EQ(r.verdict, Verdict::kTryNext);
  ASSERT_TRUE(r.has_next);
  EXPECT_EQ(r.next.target->config->name, "gemma-local");
  EXPECT_EQ(r.target_health, HealthState::kDown);
  EXPECT_EQ(r.chain_state, ChainState::kFallback);
  EXPECT_EQ(r.active_target, "gemma-local");
  auto sw = Switches("assistant-llm");
  ASSERT_EQ(sw.size(), 2u);
  EXPECT_EQ(sw[1].switch_reason, SwitchReason::kTrip);
  EXPECT_EQ(sw[1].from_target, "argus-llm");
  EXPECT_EQ(sw[1].to_target, "gemma-local");
  EXPECT_THAT(sw[1].detail, HasSubstr("argus-llm 500 \"boom\""));
  // Later requests go to the fallback first and leave the DOWN target out.
  EXPECT_THAT(Names(Pick("assistant-llm")), ElementsAre("gemma-local"));
}

// A target's view says when its next check falls due (a DOWN target's back-off
// included) and which file declares it.
TEST_F(EngineTest, ATargetsViewSaysWhenItIsCheckedNextAndWhoDeclaresIt) {
  TwoTargetChain();
  EXPECT_EQ(engine_.GetTarget("argus-llm")->status.next_check, absl::UnixEpoch()) << "never checked: due at once";
  FailTarget("assistant-llm", "argus-llm");
  const absl::Time due = engine_.GetTarget("argus-llm")->status.next_check;
  EXPECT_GT(due, now_);
  EXPECT_LT(due, now_ + absl::Hours(1));
  // A check handed out is running: none due until its result.
  ProbeRequest probe;
  probe.prober_id = "p";
  ProbeResponse handed;
  Events events;
  now_ = due;
  ASSERT_TRUE(engine_.Probe(probe, now_, &handed, &events).ok());
  ASSERT_FALSE(handed.tasks.empty());
  EXPECT_EQ(engine_.GetTarget("argus-llm")->status.next_check, absl::InfiniteFuture());
  EXPECT_EQ(engine_.GetTarget("argus-llm")->status.managed_by, "");
  TargetConfig from_file = Target("filed");
  from_file.managed_by = "/etc/failoverd/targets.yaml";
  ApplyOptions options;
  options.from_files = true;
  ASSERT_TRUE(engine_.Apply(ConfigChange{{from_file}, {}}, options, now_).ok());
  EXPECT_EQ(engine_.GetTarget("filed")->status.managed_by, "/etc/failoverd/targets.yaml");
}

// A target's view carries its traffic per minute: requests, errors and the
// mean latency of timed successes, for the last ten minutes with any.
TEST_F(EngineTest, ATargetsViewCountsItsTrafficPerMinute) {
  Policy policy;
  policy.trip_errors = 100;  // stays up: this is about counting
  TwoTargetChain(policy);
  now_ = absl::FromUnixSeconds(1'800'000'040);  // minute 30,000,000 plus 40 s
  Report("", "argus-llm", Success(), "assistant-llm");
  ReportRequest timed;
  timed.target = "argus-llm";
  timed.chain = "assistant-llm";
  timed.facts = Success();
  ReportResult r;
  Events events;
  for (int ms : {100, 300}) {
    timed.latency = absl::Milliseconds(ms);
    ASSERT_TRUE(engine_.Report(timed, now_, &r, &events).ok());
  }
  FailTarget("assistant-llm", "argus-llm");
  now_ += absl::Seconds(30);  // the next minute
  FailTarget("assistant-llm", "argus-llm");
  std::vector<TrafficMinute> traffic = engine_.GetTarget("argus-llm")->status.traffic;
  ASSERT_EQ(traffic.size(), 2u);
  EXPECT_EQ(traffic[0].start, absl::FromUnixSeconds(1'800'000'000));
  EXPECT_EQ(traffic[0].requests, 4u);
  EXPECT_EQ(traffic[0].errors, 1u);
  EXPECT_EQ(traffic[0].timed, 2u);
  EXPECT_EQ(traffic[0].latency_sum, absl::Milliseconds(400));
  EXPECT_EQ(traffic[1].start - traffic[0].start, absl::Minutes(1));
  EXPECT_EQ(traffic[1].requests, 1u);
  EXPECT_EQ(traffic[1].errors, 1u);
  // Nine minutes on the first minute has left the ring (its slot is reused),
  // the second is still among the last ten.
  now_ += absl::Minutes(9);
  FailTarget("assistant-llm", "argus-llm");
  traffic = engine_.GetTarget("argus-llm")->status.traffic;
  ASSERT_EQ(traffic.size(), 2u);
  EXPECT_EQ(traffic[0].requests, 1u);
  EXPECT_EQ(traffic[1].start - traffic[0].start, absl::Minutes(9));
  EXPECT_TRUE(engine_.GetTarget("gemma-local")->status.traffic.empty());
}

TEST_F(EngineTest, MovesBackUpOnlyAfterRecoveryAndMinDwell) {
  Policy p;
  p.recovery_probes = 2;
  p.recovery_min_dwell = absl::Seconds(60);
  TwoTargetChain(p);
  const absl::Time tripped = now_;
  FailTarget("assistant-llm", "argus-llm");
  ASSERT_EQ(Status("assistant-llm").active_target, "gemma-local");

  now_ = tripped + absl::Seconds(10);
  SucceedTarget("assistant-llm", "argus-llm");  // RECOVERING, 1 pass
  EXPECT_EQ(Health("argus-llm"), HealthState::kRecovering);
  // RECOVERING comes after the usable fallback.
  EXPECT_THAT(Names(Pick("assistant-llm")), ElementsAre("gemma-local", "argus-llm"));
  SucceedTarget("assistant-llm", "argus-llm");  // HEALTHY
  EXPECT_EQ(Health("argus-llm"), HealthState::kHealthy);
  // Recovered, but the fallback has been active for only 10s.
  EXPECT_EQ(Status("assistant-llm").active_target, "gemma-local");

  now_ = tripped + absl::Seconds(60) - absl::Milliseconds(1);  // just before the dwell
  EXPECT_EQ(Pick("assistant-llm").attempts[0].target->config->name, "gemma-local");
  EXPECT_EQ(Status("assistant-llm").state, ChainState::kFallback);

  now_ = tripped + absl::Seconds(60);  // just after
  EXPECT_EQ(Pick("assistant-llm").attempts[0].target->config->name, "argus-llm");
  EXPECT_EQ(Status("assistant-llm").state, ChainState::kPrimary);
  auto sw = Switches("assistant-llm");
  EXPECT_EQ(sw.back().switch_reason, SwitchReason::kRecovery);
  EXPECT_EQ(sw.back().to_target, "argus-llm");
}

TEST_F(EngineTest, TickMovesBackUpWithoutTraffic) {
  Policy p;
  p.recovery_probes = 1;
  TwoTargetChain(p);
  FailTarget("assistant-llm", "argus-llm");
  SucceedTarget("assistant-llm", "argus-llm");
  now_ += absl::Seconds(61);
  Tick();
  EXPECT_EQ(Status("assistant-llm").active_target, "argus-llm");
}

TEST_F(EngineTest, AllDownIsDegradedAndEveryEnabledTargetIsTriedInOrder) {
  ApplyOk({Target("a"), Target("b"), Target("c")}, {Chain("ch", {"a", "b", "c"})});
  FailTarget("ch", "a");
  FailTarget("ch", "b");
  EXPECT_EQ(Status("ch").active_target, "c");
  FailTarget("ch", "c");
  ChainStatus s = Status("ch");
  EXPECT_EQ(s.state, ChainState::kDegraded);
  EXPECT_EQ(s.active_target, "c");  // kept
  Plan plan = Pick("ch");
  EXPECT_EQ(plan.state, ChainState::kDegraded);
  EXPECT_THAT(Names(plan), ElementsAre("a", "b", "c"));
}

TEST_F(EngineTest, LeavingDegradedGoesToTheFirstUsableTarget) {
  Policy p;
  p.recovery_probes = 1;
  ApplyOk({Target("a"), Target("b")}, {Chain("ch", {"a", "b"}, p)});
  FailTarget("ch", "a");
  FailTarget("ch", "b");
  ASSERT_EQ(Status("ch").state, ChainState::kDegraded);
  SucceedTarget("ch", "b");
  EXPECT_EQ(Status("ch").state, ChainState::kFallback);
  EXPECT_EQ(Status("ch").active_target, "b");
}

TEST_F(EngineTest, HealthIsSharedByEveryChainListingATarget) {
  ApplyOk({Target("a"), Target("b"), Target("c")}, {Chain("one", {"a", "b"}), Chain("two", {"a", "c"})});
  FailTarget("one", "a");
  EXPECT_EQ(Status("one").active_target, "b");
  EXPECT_EQ(Status("two").active_target, "c");
  EXPECT_THAT(Names(Pick("two")), ElementsAre("c"));
}

// DESIGN 3.1: a target's health settings belong to the target. Chains that
// share a target without settings of its own must agree on them.
TEST_F(EngineTest, ChainsThatShareATargetMustAgreeOnItsHealthSettings) {
  Policy strict;
  strict.trip_errors = 1;
  Policy lenient;
  lenient.trip_errors = 3;
  ConfigChange change;
  change.targets = {Target("a"), Target("b"), Target("c")};
  change.chains = {Chain("zulu", {"a", "c"}, strict), Chain("alpha", {"a", "b"}, lenient)};
  for (bool dry_run : {true, false}) {
    ApplyOptions options;
    options.dry_run = dry_run;
    auto r = engine_.Apply(change, options, now_);
    ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(r.status().message());
    EXPECT_THAT(message, HasSubstr("chains[1].policy.trip.errors"));
    EXPECT_THAT(message, HasSubstr("\"alpha\""));
    EXPECT_THAT(message, HasSubstr("\"zulu\""));
    EXPECT_THAT(message, HasSubstr("target \"a\""));
    EXPECT_THAT(message, HasSubstr("(3 vs 1)"));
  }
  EXPECT_EQ(engine_.GetTarget("a").status().code(), absl::StatusCode::kNotFound);  // nothing saved
  // Chains that differ only outside the health settings agree.
  Policy other = strict;
  other.max_attempts = 1;
  other.rate_limit_on = RateLimitMode::kWait;
  ApplyOk({Target("a"), Target("b"), Target("c")}, {Chain("zulu", {"a", "c"}, strict), Chain("alpha", {"a", "b"}, other)});
  // A later apply that changes one chain alone is refused too.
  auto r = engine_.Apply(ConfigChange{{}, {Chain("alpha", {"a", "b"}, lenient)}}, ApplyOptions{}, now_);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("chains[0].policy.trip.errors"));
}

TEST_F(EngineTest, ATargetsOwnHealthSettingsWinOverItsChains) {
  Policy strict;
  strict.trip_errors = 1;
  Policy lenient;
  lenient.trip_errors = 5;
  TargetConfig a = Target("a");
  a.health = HealthPolicy();
  a.health->trip_errors = 3;
  a.health->rate_limit_hold = absl::Seconds(20);
  // The chains disagree, but a has its own settings; b and c are each listed once.
  ApplyOk({a, Target("b"), Target("c")}, {Chain("zulu", {"a", "c"}, strict), Chain("alpha", {"a", "b"}, lenient)});
  FailTarget("zulu", "a");
  FailTarget("alpha", "a");
  EXPECT_NE(Health("a"), HealthState::kDown);  // 3 failures trip a, not zulu's 1
  FailTarget("zulu", "a");
  EXPECT_EQ(Health("a"), HealthState::kDown);
  // Removing a's own settings brings the disagreement back: refused.
  auto r = engine_.Apply(ConfigChange{{Target("a")}, {}}, ApplyOptions{}, now_);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("targets[0].health"));
}

// Adding or renaming an unrelated chain no longer changes how a shared
// target trips: every chain that lists it says the same.
TEST_F(EngineTest, AnUnrelatedChainDoesNotChangeASharedTargetsHealth) {
  Policy three;
  three.trip_errors = 3;
  ApplyOk({Target("a"), Target("b"), Target("c")}, {Chain("zulu", {"a", "c"}, three), Chain("mike", {"a", "b"}, three)});
  // A new chain that sorts first and lists a with the defaults is refused.
  auto r = engine_.Apply(ConfigChange{{}, {Chain("alpha", {"a", "b"})}}, ApplyOptions{}, now_);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  FailTarget("zulu", "a");
  FailTarget("zulu", "a");
  EXPECT_NE(Health("a"), HealthState::kDown);
  FailTarget("zulu", "a");
  EXPECT_EQ(Health("a"), HealthState::kDown);
}

TEST_F(EngineTest, LocalTargetWithoutHealthCheckIsUsableAgainAfterMinDwell) {
  ApplyOk({Target("remote"), Target("local", TargetKind::kLocal)}, {Chain("ch", {"local", "remote"})});
  FailTarget("ch", "local");
  EXPECT_EQ(Health("local"), HealthState::kDown);
  now_ += absl::Seconds(59);
  EXPECT_THAT(Names(Pick("ch")), ElementsAre("remote"));
  now_ += absl::Seconds(1);
  EXPECT_THAT(Names(Pick("ch")), ElementsAre("local", "remote"));
  EXPECT_EQ(Health("local"), HealthState::kHealthy);
}

// --- plans (DESIGN 3.4) -----------------------------------------------------

TEST_F(EngineTest, MaxAttemptsCapsFallbacksAfterTheFirst) {
  for (uint32_t max : {0u, 1u, 2u}) {
    Policy p;
    p.max_attempts = max;
    const std::string name = "ch" + std::to_string(max);
    ApplyOk({Target("a"), Target("b"), Target("c"), Target("d")}, {Chain(name, {"a", "b", "c", "d"}, p)});
    const size_t expected = max == 0 ? 4 : 1 + max;
    EXPECT_EQ(Pick(name).attempts.size(), expected) << "max_attempts " << max;
  }
}

TEST_F(EngineTest, MaxAttemptsCountsOnlyTargetsActuallyTried) {
  Policy p;
  p.max_attempts = 1;
  ApplyOk({Target("a"), Target("b"), Target("c")}, {Chain("ch", {"a", "b", "c"}, p)});
  FailTarget("ch", "b");  // b is DOWN: skipped without using an attempt
  Plan plan = Pick("ch");
  EXPECT_THAT(Names(plan), ElementsAre("a", "c"));
  ReportResult r1 = Report(plan.decision_id, "a", Http(500));
  ASSERT_EQ(r1.verdict, Verdict::kTryNext);
  EXPECT_EQ(r1.next.target->config->name, "c");
  ReportResult r2 = Report(plan.decision_id, "c", Http(500));
  EXPECT_EQ(r2.verdict, Verdict::kFail);
  EXPECT_THAT(r2.error, HasSubstr("max_attempts (1) reached"));
  EXPECT_THAT(r2.error, HasSubstr("a: 500"));
  EXPECT_THAT(r2.error, HasSubstr("c: 500"));
}

TEST_F(EngineTest, LargeBodyGetsOneAttemptAndNoReplay) {
  TwoTargetChain();
  EXPECT_EQ(Pick("assistant-llm", 32ull << 20).attempts.size(), 2u);  // exactly 32 MiB may be replayed
  Plan plan = Pick("assistant-llm", (32ull << 20) + 1);
  ASSERT_EQ(plan.attempts.size(), 1u);
  ReportResult r = Report(plan.decision_id, "argus-llm", Http(500));
  EXPECT_EQ(r.verdict, Verdict::kFail);
  EXPECT_THAT(r.error, HasSubstr("too large to replay"));
}

TEST_F(EngineTest, FailoverDisabledGivesOneAttempt) {
  ApplyOk({Target("a"), Target("b")}, {});
  ChainConfig c = Chain("ch", {"a", "b"});
  c.failover_enabled = false;
  c.policy.Mutable().trip_errors = 5;  // a stays usable, so its same-target retries apply
  ApplyOk({}, {c});
  Plan plan = Pick("ch");
  ASSERT_EQ(plan.attempts.size(), 1u);
  EXPECT_EQ(Report(plan.decision_id, "a", Http(503)).verdict, Verdict::kRetrySame);  // same-target retries stay
  Report(plan.decision_id, "a", Http(503));
  ReportResult r = Report(plan.decision_id, "a", Http(503));
  EXPECT_EQ(r.verdict, Verdict::kFail);
  EXPECT_THAT(r.error, HasSubstr("failover disabled"));
}

TEST_F(EngineTest, ExcludedTargetsAreLeftOutAndUnknownOnesAreRefused) {
  ApplyOk({Target("a"), Target("b"), Target("c")}, {Chain("ch", {"a", "b", "c"})});
  EXPECT_THAT(Names(Pick("ch", 0, {"a"})), ElementsAre("b", "c"));
  PickRequest req;
  req.chain = "ch";
  req.exclude_targets = {"a", "zz"};
  Plan plan;
  Events ev;
  absl::Status s = engine_.Pick(req, now_, &plan, &ev);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("exclude_targets[1]"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("zz"));
}

TEST_F(EngineTest, UnknownChainIsNotFoundNamingIt) {
  PickRequest req;
  req.chain = "nope";
  Plan plan;
  Events ev;
  absl::Status s = engine_.Pick(req, now_, &plan, &ev);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("\"nope\""));
}

TEST_F(EngineTest, AllDisabledOrManualIsUnavailableNamingWhy) {
  ApplyOk({Target("a"), Target("b"), Target("c")}, {Chain("ch", {"a", "b"}), Chain("other", {"a", "c"})});
  ASSERT_TRUE(engine_.TriggerManualFailover("a", "maintenance", now_).ok());
  ASSERT_TRUE(engine_.SetTargetEnabled("b", false, now_).ok());
  PickRequest req;
  req.chain = "ch";
  Plan plan;
  Events ev;
  absl::Status s = engine_.Pick(req, now_, &plan, &ev);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), HasSubstr("a (manual)"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("b (disabled)"));
}

TEST_F(EngineTest, RpmCapSkipsASaturatedTargetWithoutTrippingIt) {
  TargetConfig a = Target("a");
  a.limit_rpm = 2;
  ApplyOk({a, Target("b")}, {Chain("ch", {"a", "b"})});
  EXPECT_EQ(Pick("ch").attempts[0].target->config->name, "a");
  EXPECT_EQ(Pick("ch").attempts[0].target->config->name, "a");
  EXPECT_THAT(Names(Pick("ch")), ElementsAre("b"));  // saturated: left out
  EXPECT_NE(Health("a"), HealthState::kDown);
  EXPECT_EQ(Status("ch").active_target, "a");  // the active target does not move
  now_ += absl::Minutes(1);
  EXPECT_EQ(Pick("ch").attempts[0].target->config->name, "a");
}

TEST_F(EngineTest, ReplicasSplitAnRpmCapSoThePartsAddUpToIt) {
  for (uint32_t cap : {1u, 2u, 7u, 60u, 1000u}) {
    for (uint32_t replicas : {1u, 2u, 3u, 5u, 64u}) {
      uint32_t sum = 0;
      for (uint32_t rank = 0; rank < replicas; ++rank) sum += Engine::RpmShare(cap, rank, replicas);
      EXPECT_EQ(sum, cap) << cap << " rpm over " << replicas << " replicas";
    }
  }
  TargetConfig a = Target("a");
  a.limit_rpm = 5;
  ApplyOk({a, Target("b")}, {Chain("ch", {"a", "b"})});
  engine_.SetRpmShare(1, 3);  // 5 over 3: ranks 0 and 1 plan 2, rank 2 plans 1
  EXPECT_EQ(Pick("ch").attempts[0].target->config->name, "a");
  EXPECT_EQ(Pick("ch").attempts[0].target->config->name, "a");
  EXPECT_THAT(Names(Pick("ch")), ElementsAre("b"));
  engine_.SetRpmShare(0, 6);  // a cap smaller than the cluster: rank 5 has none, rank 0 one
  EXPECT_THAT(Names(Pick("ch")), ElementsAre("b"));  // two this minute already
  now_ += absl::Minutes(1);
  EXPECT_EQ(Pick("ch").attempts[0].target->config->name, "a");
  EXPECT_THAT(Names(Pick("ch")), ElementsAre("b"));
  engine_.SetRpmShare(5, 6);
  now_ += absl::Minutes(1);
  EXPECT_THAT(Names(Pick("ch")), ElementsAre("b"));
}

TEST_F(EngineTest, ALeasedRpmCapPlansWhatTheLeaderGrantedForTheMinuteAndTheEvenPartWithoutAGrant) {
  TargetConfig a = Target("a");
  a.limit_rpm = 9;
  ApplyOk({a, Target("b")}, {Chain("ch", {"a", "b"})});
  engine_.SetRpmShare(0, 3);  // the even part: 3 of 9
  engine_.LeaseRpm(true);
  const int64_t minute = absl::ToUnixSeconds(now_) / 60;
  auto planned_a = [&](int picks) {
    int n = 0;
    for (int i = 0; i < picks; ++i) n += Pick("ch").attempts[0].target->config->name == "a";
    return n;
  };
  // Granted 7 for this minute (the other replicas were idle): 7, not 3.
  engine_.SetRpmGrant("a", minute, 7);
  EXPECT_EQ(planned_a(10), 7);
  // A grant raised within the minute takes effect at once.
  engine_.SetRpmGrant("a", minute, 8);
  EXPECT_EQ(planned_a(10), 1);
  // What it used and holds is what the replica tells the leader.
  std::vector<Engine::RpmUse> uses = engine_.RpmUses(minute);
  ASSERT_EQ(uses.size(), 1u);  // only the capped target
  EXPECT_EQ(uses[0].target, "a");
  EXPECT_EQ(uses[0].cap, 9u);
  EXPECT_EQ(uses[0].used, 8u);
  EXPECT_TRUE(uses[0].has_grant);
  EXPECT_EQ(uses[0].granted, 8u);
  EXPECT_FALSE(uses[0].has_next_grant);
  // The next minute was granted ahead of time: nothing of it (the others needed it all).
  engine_.SetRpmGrant("a", minute + 1, 0);
  EXPECT_TRUE(engine_.RpmUses(minute)[0].has_next_grant);
  now_ += absl::Minutes(1);
  EXPECT_EQ(planned_a(5), 0);
  // A minute with no grant (the leader could not be reached): the even part.
  now_ += absl::Minutes(1);
  EXPECT_EQ(planned_a(5), 3);
  // A grant for a target that is not configured is passed over.
  engine_.SetRpmGrant("gone", minute + 2, 5);
  EXPECT_EQ(engine_.RpmCap("gone"), 0u);
  EXPECT_EQ(engine_.RpmCap("a"), 9u);
  EXPECT_EQ(engine_.RpmCap("b"), 0u);
  // A client deciding locally plans none of a cap in a minute it holds no
  // grant for (its even part would be the whole cap).
  engine_.LeaseRpm(true, /*even_part_without_grant=*/false);
  now_ += absl::Minutes(1);
  EXPECT_EQ(planned_a(3), 0);
  engine_.SetRpmGrant("a", minute + 3, 2);
  EXPECT_EQ(planned_a(3), 2);
  // Not leased (a single node no client leased from, a client cut off from
  // failoverd): grants are not consulted.
  engine_.LeaseRpm(false);
  engine_.SetRpmShare(0, 1);
  engine_.SetRpmGrant("a", minute + 4, 1);
  now_ += absl::Minutes(1);
  EXPECT_EQ(planned_a(12), 9);
}

// --- strategies --------------------------------------------------------------

TEST_F(EngineTest, WeightedRoundRobinFollowsTheWeights) {
  TargetConfig a = Target("a");
  a.weight = 3;
  TargetConfig b = Target("b");
  b.weight = 1;
  ChainConfig c = Chain("rr", {"a", "b"});
  c.strategy = Strategy::kRoundRobin;
  ApplyOk({a, b}, {c});
  std::map<std::string, int> firsts;
  for (int i = 0; i < 400; ++i) {
    Plan plan = Pick("rr");
    ++firsts[plan.attempts[0].target->config->name];
    ASSERT_EQ(plan.attempts.size(), 2u);  // the other follows
  }
  EXPECT_EQ(firsts["a"], 300);
  EXPECT_EQ(firsts["b"], 100);
}

TEST_F(EngineTest, RoundRobinCountersSurviveAReload) {
  ChainConfig c = Chain("rr", {"a", "b"});
  c.strategy = Strategy::kRoundRobin;
  ApplyOk({Target("a"), Target("b")}, {c});
  EXPECT_EQ(Pick("rr").attempts[0].target->config->name, "a");
  // An unrelated config change (a new target) reloads the snapshot.
  ApplyOk({Target("x")}, {});
  EXPECT_EQ(Pick("rr").attempts[0].target->config->name, "b");  // continues, does not restart at a
}

TEST_F(EngineTest, RoundRobinSessionsStickWhileTheirTargetIsUsable) {
  ChainConfig c = Chain("rr", {"a", "b", "c"});
  c.strategy = Strategy::kRoundRobin;
  ApplyOk({Target("a"), Target("b"), Target("c")}, {c});
  const std::string first = Pick("rr", 0, {}, "user-1").attempts[0].target->config->name;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Pick("rr", 0, {}, "user-1").attempts[0].target->config->name, first);
  FailTarget("rr", first);
  EXPECT_NE(Pick("rr", 0, {}, "user-1").attempts[0].target->config->name, first);
}

TEST_F(EngineTest, LowestCostPicksTheCheapestUsableTargetThenDeclaredOrder) {
  TargetConfig a = Target("a");
  a.cost = 3;
  TargetConfig b = Target("b");
  b.cost = 1;
  TargetConfig c = Target("c");
  c.cost = 2;
  ChainConfig ch = Chain("cheap", {"a", "b", "c"});
  ch.strategy = Strategy::kLowestCost;
  ApplyOk({a, b, c}, {ch});
  EXPECT_THAT(Names(Pick("cheap")), ElementsAre("b", "a", "c"));
  FailTarget("cheap", "b");
  EXPECT_THAT(Names(Pick("cheap")), ElementsAre("c", "a"));
}

// least_latency: three targets whose reported success latencies are 300, 100
// and 200 ms; exploration every 10th first attempt (explore 10%).
class LeastLatencyTest : public EngineTest {
 protected:
  void SetUp() override {
    ChainConfig ch = Chain("fast", {"a", "b", "c"});
    ch.strategy = Strategy::kLeastLatency;
    ch.policy.Mutable().latency_explore = 10;
    ch.policy.Mutable().trip_errors = 1;
    ApplyOk({Target("a"), Target("b"), Target("c")}, {ch});
  }
  void Succeed(const std::string& target, absl::Duration latency) {
    ReportRequest req;
    req.chain = "fast";
    req.target = target;
    req.facts = Success();
    req.latency = latency;
    ReportResult r;
    Events events;
    ASSERT_TRUE(engine_.Report(req, now_, &r, &events).ok());
  }
  void Measure() {
    Succeed("a", absl::Milliseconds(300));
    Succeed("b", absl::Milliseconds(100));
    Succeed("c", absl::Milliseconds(200));
  }
  // The first attempt of `n` picks, counted by target.
  std::map<std::string, int> Firsts(int n) {
    std::map<std::string, int> out;
    for (int i = 0; i < n; ++i) ++out[Pick("fast").attempts.front().target->config->name];
    return out;
  }
};

TEST_F(LeastLatencyTest, AnUnmeasuredTargetGoesFirstSoItIsMeasured) {
  EXPECT_EQ(Names(Pick("fast")).front(), "a");
  Succeed("a", absl::Milliseconds(300));
  EXPECT_EQ(Names(Pick("fast")).front(), "b");
  Succeed("b", absl::Milliseconds(100));
  EXPECT_EQ(Names(Pick("fast")).front(), "c");
}

TEST_F(LeastLatencyTest, TheFastestGoesFirstTheRestInDeclaredOrderAndExplorationTakesItsShareInTurn) {
  Measure();
  // Exploration takes the 10th, 20th, ... first attempts, alternating a and c.
  Plan ninth;
  for (int i = 0; i < 8; ++i) Pick("fast");
  ninth = Pick("fast");
  EXPECT_THAT(Names(ninth), ElementsAre("b", "a", "c"));
  EXPECT_THAT(Names(Pick("fast")), ElementsAre("a", "b", "c"));  // the 10th: explores
  const auto firsts = Firsts(180);                               // picks 11..190
  EXPECT_EQ(firsts.at("b"), 162);
  EXPECT_EQ(firsts.at("a"), 9);
  EXPECT_EQ(firsts.at("c"), 9);
}

TEST_F(LeastLatencyTest, ExploreZeroNeverExploresAndTheAverageFollowsNewLatencies) {
  ChainConfig ch = Chain("fast", {"a", "b", "c"});
  ch.strategy = Strategy::kLeastLatency;
  ch.policy.Mutable().latency_explore = 0;
  ApplyOk({Target("a"), Target("b"), Target("c")}, {ch});
  Measure();
  EXPECT_EQ(Firsts(50).at("b"), 50);
  // b slows down to 1 s: a new value weighs a fifth, so one slow success
  // (100ms -> 280ms) puts it behind c (200ms), and two behind a too.
  Succeed("b", absl::Seconds(1));
  EXPECT_THAT(Names(Pick("fast")), ElementsAre("c", "a", "b"));
  auto b = engine_.GetTarget("b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->status.latency, absl::Milliseconds(280));
  Succeed("b", absl::Seconds(1));
  Succeed("c", absl::Seconds(1));  // c: 200ms -> 360ms, behind a
  EXPECT_THAT(Names(Pick("fast")), ElementsAre("a", "b", "c"));
}

TEST_F(LeastLatencyTest, ATargetTakenOutIsMeasuredAfreshWhenItIsBack) {
  Measure();
  FailTarget("fast", "b");
  ASSERT_EQ(Health("b"), HealthState::kDown);
  EXPECT_EQ(Names(Pick("fast")).front(), "c");
  auto b = engine_.GetTarget("b");
  ASSERT_TRUE(b.ok());
  EXPECT_LT(b->status.latency, absl::ZeroDuration()) << "a DOWN target keeps no latency";
  // Back (a real success on RECOVERING, then passes): unmeasured, so first.
  for (int i = 0; i < 3; ++i) Succeed("b", absl::ZeroDuration());
  ASSERT_EQ(Health("b"), HealthState::kHealthy);
  EXPECT_EQ(Names(Pick("fast")).front(), "b");
}

TEST_F(EngineTest, AnUpdateSaysWhichSettingsChangedFromWhatToWhat) {
  ApplyOk({Target("a"), Target("b")}, {Chain("ch", {"a", "b"})});
  TargetConfig a = Target("a");
  a.weight = 3;
  a.labels["region"] = "eu";
  ChainConfig ch = Chain("ch", {"a", "b"});
  ch.policy.Mutable().trip_errors = 3;
  ch.policy.Mutable().max_attempts = 1;
  ch.policy.Mutable().hedge_after = absl::Seconds(2);
  auto r = engine_.Apply(ConfigChange{{a, Target("b")}, {ch}}, ApplyOptions{}, now_);
  ASSERT_TRUE(r.ok()) << r.status();
  std::map<std::string, std::vector<std::string>> details;
  for (const ConfigDiff& d : r->changes) details[d.name] = d.details;
  EXPECT_THAT(details["a"], ElementsAre("weight: 1 -> 3", "labels: {} -> {region: eu}"));
  EXPECT_THAT(details["b"], ::testing::IsEmpty());
  EXPECT_THAT(details["ch"], ElementsAre("policy.trip.errors: 1 -> 3", "policy.max_attempts: 0 -> 1",
                                         "policy.hedge.after: 0 -> 2s"));
}

// --- verdicts (DESIGN 3.5) ----------------------------------------------------

// Retry budget: ratio 0.5 with a floor of 0.2/s (2 retries per 10 s window).
// Targets answer 500 (server_error: no same-target retry) and do not trip,
// so each failure asks for a retry on the next target (TRY_NEXT).
class RetryBudgetTest : public EngineTest {
 protected:
  void SetUp() override {
    Policy p;
    p.trip_errors = 1000;
    p.same_target_retries[Reason::kServerError] = 0;
    p.retry_budget_ratio = 0.5;
    p.retry_budget_min_per_second = 0.2;
    ApplyOk({Target("a"), Target("b"), Target("c")}, {Chain("ch", {"a", "b", "c"}, p)});
  }
};

TEST_F(RetryBudgetTest, TheFloorAllowsRetriesWithoutTrafficThenTheVerdictIsFailNamingTheBudget) {
  // Reports outside any decision: no first attempts, so only the floor (2).
  EXPECT_EQ(Report("", "a", Http(500), "ch").verdict, Verdict::kTryNext);
  EXPECT_EQ(Report("", "a", Http(500), "ch").verdict, Verdict::kTryNext);
  ReportResult third = Report("", "a", Http(500), "ch");
  EXPECT_EQ(third.verdict, Verdict::kFail);
  EXPECT_EQ(third.reason, Reason::kRetryBudget);
  EXPECT_EQ(third.classified, Reason::kServerError);
  EXPECT_FALSE(third.has_next);
  EXPECT_THAT(third.error, HasSubstr("chain \"ch\": retry budget spent: 2 retries for 0 first attempts in the "
                                     "last 10s (retry_budget.ratio 0.5, min_per_second 0.2); last: a: "));
  // The window slides: 10 s later the floor is available again.
  now_ += absl::Seconds(10);
  EXPECT_EQ(Report("", "a", Http(500), "ch").verdict, Verdict::kTryNext);
}

TEST_F(RetryBudgetTest, FirstAttemptsBuyRetriesAtTheRatio) {
  // 10 first attempts: 5 retries allowed (above the floor of 2).
  for (int i = 0; i < 10; ++i) Pick("ch");
  int retries = 0;
  for (int i = 0; i < 6; ++i) retries += Report("", "a", Http(500), "ch").verdict == Verdict::kTryNext;
  EXPECT_EQ(retries, 5);
  // Each new request buys half a retry: two more picks, one more retry.
  Pick("ch");
  Pick("ch");
  EXPECT_EQ(Report("", "a", Http(500), "ch").verdict, Verdict::kTryNext);
  EXPECT_EQ(Report("", "a", Http(500), "ch").verdict, Verdict::kFail);
}

TEST_F(RetryBudgetTest, SameTargetRetriesSpendTheBudgetToo) {
  Policy p;
  p.trip_errors = 1000;
  p.retry_budget_ratio = 0.1;
  p.retry_budget_min_per_second = 0.1;  // 1 per window
  ApplyOk({Target("a"), Target("b"), Target("c")}, {Chain("ch", {"a", "b", "c"}, p)});
  // Overloaded (529) is retried on the same target, twice by default: the
  // first retry spends the one the budget has, the second is refused.
  Plan plan = Pick("ch");
  EXPECT_EQ(Report(plan.decision_id, "a", Http(529)).verdict, Verdict::kRetrySame);
  ReportResult second = Report(plan.decision_id, "a", Http(529));
  EXPECT_EQ(second.verdict, Verdict::kFail);
  EXPECT_EQ(second.reason, Reason::kRetryBudget);
  EXPECT_EQ(second.retry_delay, absl::ZeroDuration());
}

TEST_F(RetryBudgetTest, NoBudgetByDefault) {
  Policy p;
  p.trip_errors = 1000;
  p.same_target_retries[Reason::kServerError] = 0;
  ApplyOk({Target("a"), Target("b"), Target("c")}, {Chain("ch", {"a", "b", "c"}, p)});
  for (int i = 0; i < 50; ++i) ASSERT_EQ(Report("", "a", Http(500), "ch").verdict, Verdict::kTryNext) << i;
}


TEST_F(EngineTest, SuccessIsDone) {
  TwoTargetChain();
  Plan plan = Pick("assistant-llm");
  ReportResult r = Report(plan.decision_id, "argus-llm", Success());
  EXPECT_EQ(r.verdict, Verdict::kDone);
  EXPECT_TRUE(r.decision_known);
  EXPECT_EQ(r.target_health, HealthState::kHealthy);
}

TEST_F(EngineTest, OverloadedRetriesTheSameTargetTwiceThenMovesOn) {
  Policy p;
  p.trip_errors = 5;
  TwoTargetChain(p);
  Plan plan = Pick("assistant-llm");
  ReportResult r1 = Report(plan.decision_id, "argus-llm", Http(503));
  EXPECT_EQ(r1.verdict, Verdict::kRetrySame);
  EXPECT_EQ(r1.retry_delay, absl::Milliseconds(250));
  ReportResult r2 = Report(plan.decision_id, "argus-llm", Http(503));
  EXPECT_EQ(r2.verdict, Verdict::kRetrySame);
  EXPECT_EQ(r2.retry_delay, absl::Milliseconds(500));
  ReportResult r3 = Report(plan.decision_id, "argus-llm", Http(503));
  EXPECT_EQ(r3.verdict, Verdict::kTryNext);
  EXPECT_EQ(r3.next.target->config->name, "gemma-local");
}

// DESIGN 3.5: a report that takes its target out gets no same-target retry.
TEST_F(EngineTest, AFailureThatTripsItsTargetMovesOnInsteadOfRetryingIt) {
  TwoTargetChain();  // trip.errors 1: the first 503 trips
  Plan plan = Pick("assistant-llm");
  ReportResult r = Report(plan.decision_id, "argus-llm", Http(503));
  EXPECT_EQ(r.target_health, HealthState::kDown);
  EXPECT_EQ(r.verdict, Verdict::kTryNext);
  EXPECT_EQ(r.next.target->config->name, "gemma-local");
  // The fallback trips too: nothing is left.
  ReportResult last = Report(plan.decision_id, "gemma-local", Http(503));
  EXPECT_EQ(last.verdict, Verdict::kFail);
  EXPECT_THAT(last.error, HasSubstr("every target failed"));
}

TEST_F(EngineTest, ATrippedPinnedTargetFailsAtOnce) {
  TwoTargetChain();
  ASSERT_TRUE(engine_.Pin("assistant-llm", "argus-llm", now_).ok());
  Plan plan = Pick("assistant-llm");
  ReportResult r = Report(plan.decision_id, "argus-llm", Http(503));
  EXPECT_EQ(r.verdict, Verdict::kFail);
}

TEST_F(EngineTest, ATargetFailedOverMeanwhileIsNotRetried) {
  Policy p;
  p.trip_errors = 5;
  TwoTargetChain(p);
  Plan plan = Pick("assistant-llm");
  ASSERT_TRUE(engine_.TriggerManualFailover("argus-llm", "maintenance", now_).ok());
  ReportResult r = Report(plan.decision_id, "argus-llm", Http(503));
  EXPECT_EQ(r.target_health, HealthState::kManual);
  EXPECT_EQ(r.verdict, Verdict::kTryNext);
}

TEST_F(EngineTest, NetworkRetriesOnceAndHonoursRetryAfterAsTheDelay) {
  Policy p;
  p.trip_errors = 5;
  TwoTargetChain(p);
  Plan plan = Pick("assistant-llm");
  OutcomeFacts f;
  f.transport = TransportError::kConnectRefused;
  f.retry_after = absl::Seconds(2);
  ReportResult r1 = Report(plan.decision_id, "argus-llm", f);
  EXPECT_EQ(r1.verdict, Verdict::kRetrySame);
  EXPECT_EQ(r1.retry_delay, absl::Seconds(2));
  EXPECT_EQ(Report(plan.decision_id, "argus-llm", f).verdict, Verdict::kTryNext);
}

TEST_F(EngineTest, ClientErrorsFailWithoutCountingAgainstTheTarget) {
  TwoTargetChain();
  Plan plan = Pick("assistant-llm");
  ReportResult r = Report(plan.decision_id, "argus-llm", Http(400, "This model's maximum context length is 8k"));
  EXPECT_EQ(r.verdict, Verdict::kFail);
  EXPECT_EQ(r.reason, Reason::kContextOverflow);
  EXPECT_FALSE(r.counted);
  EXPECT_NE(Health("argus-llm"), HealthState::kDown);
  EXPECT_THAT(r.error, HasSubstr("maximum context length"));
}

TEST_F(EngineTest, FailureAfterTheFirstByteFailsAndStillTripsTheTarget) {
  TwoTargetChain();
  Plan plan = Pick("assistant-llm");
  OutcomeFacts f = Http(500);
  f.phase = Phase::kAfterFirstByte;
  ReportResult r = Report(plan.decision_id, "argus-llm", f);
  EXPECT_EQ(r.verdict, Verdict::kFail);
  EXPECT_EQ(Health("argus-llm"), HealthState::kDown);
  EXPECT_EQ(Status("assistant-llm").active_target, "gemma-local");  // the next request uses the next target
}

TEST_F(EngineTest, WhenEveryTargetFailsTheErrorNamesEachFailure) {
  ApplyOk({Target("a"), Target("b")}, {Chain("ch", {"a", "b"})});
  Plan plan = Pick("ch");
  ReportResult r1 = Report(plan.decision_id, "a", Http(500, "boom"));
  ASSERT_EQ(r1.verdict, Verdict::kTryNext);
  ReportResult r2 = Report(plan.decision_id, "b", Http(401, "bad key"));
  EXPECT_EQ(r2.verdict, Verdict::kFail);
  EXPECT_EQ(r2.error, "every target failed: a: 500 \"boom\"; b: 401 \"bad key\"");
}

TEST_F(EngineTest, TryNextIsRecomputedNowAndSkipsWhatWasTried) {
  ApplyOk({Target("a"), Target("b"), Target("c")}, {Chain("ch", {"a", "b", "c"})});
  Plan plan = Pick("ch");
  ASSERT_THAT(Names(plan), ElementsAre("a", "b", "c"));
  FailTarget("ch", "b");  // b goes down after the plan was made
  ReportResult r = Report(plan.decision_id, "a", Http(500));
  ASSERT_EQ(r.verdict, Verdict::kTryNext);
  EXPECT_EQ(r.next.target->config->name, "c");
}

TEST_F(EngineTest, RateLimitHoldsTheTargetWithoutTrippingIt) {
  TwoTargetChain();
  Plan plan = Pick("assistant-llm");
  OutcomeFacts f = Http(429);
  f.retry_after = absl::Seconds(20);
  ReportResult r = Report(plan.decision_id, "argus-llm", f);
  EXPECT_EQ(r.verdict, Verdict::kTryNext);
  EXPECT_FALSE(r.counted);
  EXPECT_EQ(Health("argus-llm"), HealthState::kUnknown);
  EXPECT_EQ(Status("assistant-llm").active_target, "argus-llm");  // hold does not move the active target
  EXPECT_THAT(Names(Pick("assistant-llm")), ElementsAre("gemma-local"));
  now_ += absl::Seconds(19);
  EXPECT_THAT(Names(Pick("assistant-llm")), ElementsAre("gemma-local"));
  now_ += absl::Seconds(1);
  EXPECT_THAT(Names(Pick("assistant-llm")), ElementsAre("argus-llm", "gemma-local"));
}

TEST_F(EngineTest, RateLimitHoldLastsUpToMaxHoldAndDefaultsToThePolicyHold) {
  TwoTargetChain();
  OutcomeFacts f = Http(429);
  f.retry_after = absl::Seconds(60);  // exactly rate_limit.max_hold: still a hold
  ReportResult r = Report(Pick("assistant-llm").decision_id, "argus-llm", f);
  EXPECT_EQ(r.target_health, HealthState::kUnknown);
  now_ += absl::Seconds(59);
  EXPECT_EQ(Pick("assistant-llm").attempts[0].target->config->name, "gemma-local");
  now_ += absl::Seconds(1);
  EXPECT_EQ(Pick("assistant-llm").attempts[0].target->config->name, "argus-llm");
  Report(Pick("assistant-llm").decision_id, "argus-llm", Http(429));  // no reset time: 10s
  now_ += absl::Seconds(10);
  EXPECT_EQ(Pick("assistant-llm").attempts[0].target->config->name, "argus-llm");
}

// DESIGN 3.2: a per-day quota is not retried every minute.
TEST_F(EngineTest, ARateLimitThatResetsAfterMaxHoldTakesTheTargetDownUntilTheReset) {
  for (RateLimitMode mode : {RateLimitMode::kFailover, RateLimitMode::kWait}) {
    Policy p;
    p.rate_limit_on = mode;
    const std::string chain = mode == RateLimitMode::kWait ? "waits" : "moves";
    ApplyOk({Target(chain + "-a"), Target(chain + "-b")}, {Chain(chain, {chain + "-a", chain + "-b"}, p)});
    OutcomeFacts f = Http(429, "You have reached your daily request limit");
    f.retry_after = absl::Hours(3);
    const absl::Time reported = now_;
    ReportResult r = Report(Pick(chain).decision_id, chain + "-a", f);
    EXPECT_EQ(r.reason, Reason::kRateLimit);
    EXPECT_FALSE(r.counted);
    EXPECT_EQ(r.target_health, HealthState::kDown);
    EXPECT_EQ(r.verdict, Verdict::kTryNext);  // never "wait three hours"
    EXPECT_THAT(engine_.GetTarget(chain + "-a")->status.reason, HasSubstr("resets in 3h"));
    // No health check before the reset; one right at it.
    auto offered = [&](absl::Time at) {
      ProbeRequest req;
      req.prober_id = "p";
      ProbeResponse resp;
      EXPECT_TRUE(engine_.Probe(req, at, &resp, nullptr).ok());
      for (const ProbeTask& t : resp.tasks) {
        if (t.target->config->name == chain + "-a") return true;
      }
      return false;
    };
    EXPECT_FALSE(offered(reported + absl::Hours(3) - absl::Seconds(1)));
    EXPECT_TRUE(offered(reported + absl::Hours(3)));
  }
}

TEST_F(EngineTest, ATargetCanAllowLongerRateLimitHolds) {
  TargetConfig a = Target("a");
  a.health = HealthPolicy();
  a.health->rate_limit_max_hold = absl::Hours(4);
  ApplyOk({a, Target("b")}, {Chain("ch", {"a", "b"})});
  OutcomeFacts f = Http(429);
  f.retry_after = absl::Hours(3);
  ReportResult r = Report(Pick("ch").decision_id, "a", f);
  EXPECT_EQ(r.target_health, HealthState::kUnknown);  // held, not down
  now_ += absl::Hours(3) - absl::Seconds(1);
  EXPECT_EQ(Pick("ch").attempts[0].target->config->name, "b");
  now_ += absl::Seconds(1);
  EXPECT_EQ(Pick("ch").attempts[0].target->config->name, "a");
}

TEST_F(EngineTest, RateLimitWaitModeRetriesTheSameTargetAfterTheHold) {
  Policy p;
  p.rate_limit_on = RateLimitMode::kWait;
  TwoTargetChain(p);
  Plan plan = Pick("assistant-llm");
  OutcomeFacts f = Http(429);
  f.retry_after = absl::Seconds(7);
  ReportResult r = Report(plan.decision_id, "argus-llm", f);
  EXPECT_EQ(r.verdict, Verdict::kRetrySame);
  EXPECT_EQ(r.retry_delay, absl::Seconds(7));
  EXPECT_FALSE(r.counted);
  // Other requests keep off the target while it is held, and come back to it
  // the moment the hold ends; it never tripped.
  now_ += absl::Seconds(7) - absl::Milliseconds(1);
  EXPECT_THAT(Names(Pick("assistant-llm")), ElementsAre("gemma-local"));
  now_ += absl::Milliseconds(1);
  EXPECT_THAT(Names(Pick("assistant-llm")), ElementsAre("argus-llm", "gemma-local"));
  EXPECT_EQ(Health("argus-llm"), HealthState::kUnknown);
  // Without a Retry-After the wait is the policy's rate_limit.hold (10s by
  // default), and a waiting request's retry is what ends its decision.
  ReportResult again = Report(Pick("assistant-llm").decision_id, "argus-llm", Http(429));
  EXPECT_EQ(again.verdict, Verdict::kRetrySame);
  EXPECT_EQ(again.retry_delay, Policy().rate_limit_hold);
}

// An id stamped in the future was not made by this process (its clock never
// runs backwards): the report counts, but nothing of a plan is assumed.
TEST_F(EngineTest, ADecisionIdFromTheFutureIsNotTakenAsKnown) {
  TwoTargetChain();
  Plan plan = Pick("assistant-llm");
  now_ -= absl::Minutes(1);
  ReportResult r = Report(plan.decision_id, "argus-llm", Success());
  EXPECT_FALSE(r.decision_known);
  now_ += absl::Minutes(2);
  plan = Pick("assistant-llm");
  EXPECT_TRUE(Report(plan.decision_id, "argus-llm", Success()).decision_known);
}

TEST_F(EngineTest, AReportWithADecisionIdFailoverdNeverIssuedIsRefusedAndCountsNothing) {
  TwoTargetChain();
  ReportRequest req;
  req.decision_id = "garbage";
  req.target = "argus-llm";
  req.chain = "assistant-llm";
  req.facts = Http(500);
  ReportResult r;
  Events events;
  absl::Status s = engine_.Report(req, now_, &r, &events);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("decision_id: \"garbage\" is not a decision id"));
  EXPECT_TRUE(events.empty());
  EXPECT_EQ(engine_.GetTarget("argus-llm")->status.last_error, "");
}

// Decision ids keep their text across versions (an id issued before an
// upgrade and restart still counts), and one cut or bent anywhere is refused.
TEST_F(EngineTest, DecisionIdsKeepTheirFormatAndAMangledOneIsRefused) {
  TwoTargetChain();
  const std::string id = Pick("assistant-llm").decision_id;
  EXPECT_THAT(id, MatchesRegex("[0-9a-f]+-[0-9a-f]+-[0-9a-f]+-0-0~assistant-llm"));
  EXPECT_TRUE(Report(id, "argus-llm", Success()).decision_known);
  // Another process's id (epoch 1a2b, decision 7f, made in 2023, the second
  // target excluded, one attempt only) is read and counted, not known here.
  ReportResult other = Report("1a2b-7f-18b8a6c9e00-2-1~assistant-llm", "argus-llm", Http(500));
  EXPECT_FALSE(other.decision_known);
  EXPECT_EQ(Health("argus-llm"), HealthState::kDown);

  const std::string fields = id.substr(0, id.find('~'));
  const std::string epoch = id.substr(0, id.find('-')), rest = id.substr(id.find('-'));
  const std::vector<std::string> mangled = {
      fields + "~",                       // no chain
      fields + "-0~assistant-llm",        // a sixth number
      fields + "-assistant-llm",          // no ~
      rest.substr(1),                     // four numbers
      "x" + id,                           // not hex
      epoch + "g" + rest,                 // not hex inside a number
      epoch + "-" + rest,                 // an empty number
      "11112222333344445" + rest,         // 17 digits
  };
  for (const std::string& bad : mangled) {
    ReportRequest req;
    req.decision_id = bad;
    req.target = "gemma-local";
    req.facts = Http(500);
    ReportResult r;
    Events events;
    const absl::Status s = engine_.Report(req, now_, &r, &events);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(events.empty()) << bad;
  }
  EXPECT_EQ(Health("gemma-local"), HealthState::kUnknown);
}

TEST_F(EngineTest, ReportWithoutOrWithAnExpiredDecisionStillUpdatesHealthAndGetsAVerdict) {
  TwoTargetChain();
  ReportResult unknown = Report("", "argus-llm", Http(500), "assistant-llm");
  EXPECT_FALSE(unknown.decision_known);
  EXPECT_EQ(unknown.verdict, Verdict::kTryNext);
  EXPECT_EQ(unknown.next.target->config->name, "gemma-local");
  EXPECT_EQ(Health("argus-llm"), HealthState::kDown);

  Plan plan = Pick("assistant-llm");
  now_ += absl::Minutes(11);  // past the decision TTL
  ReportResult expired = Report(plan.decision_id, "gemma-local", Success(), "assistant-llm");
  EXPECT_FALSE(expired.decision_known);
  EXPECT_EQ(expired.verdict, Verdict::kDone);
  EXPECT_EQ(Health("gemma-local"), HealthState::kHealthy);
}

TEST_F(EngineTest, ReportForATargetOutsideTheChainIsRefused) {
  ApplyOk({Target("a"), Target("b"), Target("z")}, {Chain("ch", {"a", "b"})});
  ReportRequest req;
  req.decision_id = Pick("ch").decision_id;
  req.target = "z";
  req.facts = Success();
  ReportResult r;
  Events ev;
  absl::Status s = engine_.Report(req, now_, &r, &ev);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("\"z\" is not a target of chain \"ch\""));
}

// --- pins and manual failover (DESIGN 3.8) ----------------------------------------

TEST_F(EngineTest, PinForcesOneTargetEvenWhenDownAndUnpinReturnsToTheFirstUsable) {
  TwoTargetChain();
  FailTarget("assistant-llm", "gemma-local");
  ASSERT_TRUE(engine_.Pin("assistant-llm", "gemma-local", now_).ok());
  Plan plan = Pick("assistant-llm");
  EXPECT_EQ(plan.state, ChainState::kPinned);
  EXPECT_THAT(Names(plan), ElementsAre("gemma-local"));
  auto unpin = engine_.Unpin("assistant-llm", now_);
  ASSERT_TRUE(unpin.ok());
  ASSERT_EQ(unpin->size(), 1u);
  EXPECT_EQ((*unpin)[0].switch_reason, SwitchReason::kUnpin);
  EXPECT_EQ(Status("assistant-llm").state, ChainState::kPrimary);
}

TEST_F(EngineTest, AnAdminCallsActorIsOnEveryEventItCausesAndOnNoneOfFailoverdsOwn) {
  TwoTargetChain();
  std::vector<Change> changes;
  engine_.SetChangeSink([&](Change&& c) { changes.push_back(std::move(c)); });
  auto triggered = engine_.TriggerManualFailover("argus-llm", "maintenance", now_, "alice");
  ASSERT_TRUE(triggered.ok());
  ASSERT_EQ(triggered->size(), 2u);  // the target out, the chain switched
  for (const Event& e : *triggered) EXPECT_EQ(e.actor, "alice");
  ASSERT_EQ(changes.size(), 1u);
  for (const Event& e : changes[0].events) EXPECT_EQ(e.actor, "alice");  // what is stored and sent
  FailTarget("assistant-llm", "gemma-local");  // a trip: failoverd's own decision
  ASSERT_GE(changes.size(), 2u);
  for (const Event& e : changes.back().events) EXPECT_EQ(e.actor, "");
  ApplyOptions options;
  options.actor = "deploy-ci";
  auto applied = engine_.Apply(ConfigChange{{Target("extra")}, {}}, options, now_);
  ASSERT_TRUE(applied.ok());
  EXPECT_EQ(changes.back().events.at(0).actor, "deploy-ci");
}

TEST_F(EngineTest, PinRefusesATargetOutsideTheChain) {
  ApplyOk({Target("a"), Target("b"), Target("z")}, {Chain("ch", {"a", "b"})});
  absl::Status s = engine_.Pin("ch", "z", now_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_.Pin("nope", "a", now_).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(EngineTest, ManualFailoverTakesATargetOutUntilCancelledAndAutoNeverOverridesIt) {
  Policy p;
  p.recovery_probes = 1;
  TwoTargetChain(p);
  auto ev = engine_.TriggerManualFailover("argus-llm", "testing the failover provider", now_);
  ASSERT_TRUE(ev.ok()) << ev.status();
  Record(*ev);
  EXPECT_EQ(Health("argus-llm"), HealthState::kManual);
  EXPECT_EQ(Status("assistant-llm").active_target, "gemma-local");
  auto te = TargetEvents("argus-llm");
  ASSERT_FALSE(te.empty());
  EXPECT_EQ(te.back().source, Source::kManual);
  EXPECT_EQ(te.back().reason, "testing the failover provider");
  // Real successes do not bring it back.
  SucceedTarget("assistant-llm", "argus-llm");
  now_ += absl::Hours(1);
  EXPECT_THAT(Names(Pick("assistant-llm")), ElementsAre("gemma-local"));
  // Repeating the trigger succeeds without a second event.
  auto again = engine_.TriggerManualFailover("argus-llm", "again", now_);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->empty());
  // Cancel restores the route at once (no dwell for an admin action).
  auto cancel = engine_.CancelManualFailover("argus-llm", now_);
  ASSERT_TRUE(cancel.ok());
  Record(*cancel);
  EXPECT_EQ(Status("assistant-llm").active_target, "argus-llm");
  EXPECT_EQ(Switches("assistant-llm").back().switch_reason, SwitchReason::kCancel);
  auto cancel_again = engine_.CancelManualFailover("argus-llm", now_);
  ASSERT_TRUE(cancel_again.ok());
  EXPECT_TRUE(cancel_again->empty());
}

TEST_F(EngineTest, TriggeringAnAutomaticallyDownedTargetUpgradesItToManual) {
  Policy p;
  p.recovery_probes = 1;
  TwoTargetChain(p);
  FailTarget("assistant-llm", "argus-llm");
  ASSERT_EQ(Health("argus-llm"), HealthState::kDown);
  auto ev = engine_.TriggerManualFailover("argus-llm", "hold it", now_);
  ASSERT_TRUE(ev.ok());
  ASSERT_EQ(ev->size(), 1u);
  EXPECT_EQ((*ev)[0].from_health, HealthState::kDown);
  EXPECT_EQ((*ev)[0].to_health, HealthState::kManual);
  // Healthy probes no longer recover it.
  SucceedTarget("assistant-llm", "argus-llm");
  now_ += absl::Minutes(5);
  EXPECT_EQ(Health("argus-llm"), HealthState::kManual);
  EXPECT_EQ(Status("assistant-llm").active_target, "gemma-local");
}

TEST_F(EngineTest, ManualFailoverOfATargetNothingCanFailOverFromIsRefused) {
  ApplyOk({Target("a"), Target("b"), Target("lonely")}, {Chain("ch", {"a", "b"})});
  absl::Status s = engine_.TriggerManualFailover("lonely", "", now_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("lonely"));
  ChainConfig off = Chain("ch", {"a", "b"});
  off.failover_enabled = false;
  ApplyOk({}, {off});
  EXPECT_EQ(engine_.TriggerManualFailover("a", "", now_).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(engine_.TriggerManualFailover("nope", "", now_).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(EngineTest, DisablingATargetMovesTheChainAndEmitsEvents) {
  TwoTargetChain();
  auto ev = engine_.SetTargetEnabled("argus-llm", false, now_);
  ASSERT_TRUE(ev.ok());
  Record(*ev);
  EXPECT_EQ(Health("argus-llm"), HealthState::kDisabled);
  EXPECT_EQ(Status("assistant-llm").active_target, "gemma-local");
  EXPECT_EQ(Switches("assistant-llm").back().switch_reason, SwitchReason::kConfig);
  ASSERT_TRUE(engine_.SetTargetEnabled("argus-llm", true, now_).ok());
  EXPECT_EQ(Health("argus-llm"), HealthState::kUnknown);
}

// --- config validation (DESIGN 3.1) -----------------------------------------------

class ValidationTest : public EngineTest {
 protected:
  void SetUp() override { ApplyOk({Target("a"), Target("b")}, {Chain("ch", {"a", "b"})}); }
  // Applies and expects INVALID_ARGUMENT with `path` and `value` in the message,
  // and nothing saved.
  void ExpectRejected(ConfigChange change, const std::string& path, const std::string& value,
                      absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
    const uint64_t before = engine_.generation();
    const size_t targets = engine_.ListTargets().size();
    const size_t chains = engine_.ListChains().size();
    auto r = engine_.Apply(change, ApplyOptions{}, now_);
    ASSERT_FALSE(r.ok()) << "accepted; expected an error at " << path;
    EXPECT_EQ(r.status().code(), code) << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(path));
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(value));
    EXPECT_EQ(engine_.generation(), before);
    EXPECT_EQ(engine_.ListTargets().size(), targets);
    EXPECT_EQ(engine_.ListChains().size(), chains);
  }
  ConfigChange WithChainPolicy(std::function<void(Policy&)> edit) {
    Policy p;
    edit(p);
    return ConfigChange{{Target("new-ok")}, {Chain("ch2", {"a", "b"}, p)}};
  }
};

TEST_F(ValidationTest, ModelNamesWithSlashesAndColonsAreAccepted) {
  ApplyOk({Target("ollama/qwen3:8b"), Target("user@host.example-1_x")}, {});
  EXPECT_TRUE(engine_.GetTarget("ollama/qwen3:8b").ok());
}

TEST_F(ValidationTest, BadNames) {
  ExpectRejected({{Target("")}, {}}, "targets[0].name", "empty");
  ExpectRejected({{Target("ok"), Target("has space")}, {}}, "targets[1].name", "has space");
  ExpectRejected({{Target(std::string(129, 'x'))}, {}}, "targets[0].name", "129");
  ExpectRejected({{}, {Chain("bad!", {"a", "b"})}}, "chains[0].name", "bad!");
}

TEST_F(ValidationTest, BadTargetFields) {
  TargetConfig t = Target("t");
  t.cost = -1;
  ExpectRejected({{t}, {}}, "targets[0].cost", "-1");
  t.cost = std::numeric_limits<double>::infinity();
  ExpectRejected({{t}, {}}, "targets[0].cost", "inf");
  t = Target("t");
  t.labels["region"] = "caf\xe9";  // Latin-1
  ExpectRejected({{t}, {}}, "targets[0].labels[\"region\"]", "not valid UTF-8");
  t = Target("t");
  t.upstream_model = "caf\xe9";
  ExpectRejected({{t}, {}}, "targets[0].upstream_model", "not valid UTF-8");
  t = Target("t");
  t.timeout = absl::Seconds(-1);
  ExpectRejected({{t}, {}}, "targets[0].timeout", "-1s");
  t = Target("t");
  t.max_retries = 101;
  ExpectRejected({{t}, {}}, "targets[0].max_retries", "101");
  t = Target("t");
  for (int i = 0; i < 65; ++i) t.labels["k" + std::to_string(i)] = "v";
  ExpectRejected({{t}, {}}, "targets[0].labels", "65");
  ExpectRejected({{Target("t"), Target("t")}, {}}, "targets[1].name", "appears twice");
  ExpectRejected({{Target("ch")}, {}}, "targets[0].name", "name of a chain");
}

TEST_F(ValidationTest, BadChainTargetLists) {
  ExpectRejected({{}, {Chain("c", {"a"})}}, "chains[0].targets", "got 1");
  ExpectRejected({{}, {Chain("c", {"a", "a"})}}, "chains[0].targets[1]", "listed twice");
  ExpectRejected({{}, {Chain("c", {"a", "c"})}}, "chains[0].targets[1]", "itself");
  ExpectRejected({{}, {Chain("c", {"a", "ch"})}}, "chains[0].targets[1]", "chains do not nest");
  ExpectRejected({{}, {Chain("c", {"a", "ghost"})}}, "chains[0].targets[1]", "unknown target \"ghost\"");
  std::vector<std::string> many;
  std::vector<TargetConfig> targets;
  for (int i = 0; i < 65; ++i) {
    many.push_back("t" + std::to_string(i));
    targets.push_back(Target(many.back()));
  }
  ExpectRejected({targets, {Chain("c", many)}}, "chains[0].targets", "got 65");
  ExpectRejected({{}, {Chain("a", {"a", "b"})}}, "chains[0].name", "name of a target");
}

TEST_F(ValidationTest, BadPolicyFields) {
  ExpectRejected(WithChainPolicy([](Policy& p) { p.probe_interval = absl::ZeroDuration(); }),
                 "chains[0].policy.probe.interval", "0");
  ExpectRejected(WithChainPolicy([](Policy& p) { p.probe_timeout = absl::Seconds(-5); }),
                 "chains[0].policy.probe.timeout", "-5s");
  ExpectRejected(WithChainPolicy([](Policy& p) { p.trip_errors = 0; }), "chains[0].policy.trip.errors", "0");
  ExpectRejected(WithChainPolicy([](Policy& p) { p.trip_window = absl::ZeroDuration(); }),
                 "chains[0].policy.trip.window", "0");
  ExpectRejected(WithChainPolicy([](Policy& p) { p.recovery_probes = 0; }), "chains[0].policy.recovery.probes",
                 "0");
  ExpectRejected(WithChainPolicy([](Policy& p) { p.recovery_min_dwell = absl::Seconds(-1); }),
                 "chains[0].policy.recovery.min_dwell", "-1s");
  ExpectRejected(WithChainPolicy([](Policy& p) { p.backoff_factor = 0.5; }), "chains[0].policy.backoff.factor",
                 "0.5");
  ExpectRejected(WithChainPolicy([](Policy& p) { p.backoff_steps = 65; }), "chains[0].policy.backoff.steps", "65");
  ExpectRejected(WithChainPolicy([](Policy& p) { p.backoff_max = absl::ZeroDuration(); }),
                 "chains[0].policy.backoff.max", "0");
  ExpectRejected(WithChainPolicy([](Policy& p) { p.backoff_reset_after = absl::ZeroDuration(); }),
                 "chains[0].policy.backoff.reset_after", "0");
  ExpectRejected(WithChainPolicy([](Policy& p) { p.rate_limit_hold = absl::ZeroDuration(); }),
                 "chains[0].policy.rate_limit.hold", "0");
  ExpectRejected(WithChainPolicy([](Policy& p) { p.max_attempts = 65; }), "chains[0].policy.max_attempts", "65");
  ExpectRejected(WithChainPolicy([](Policy& p) { p.retry_on_statuses = {"5xx", "abc"}; }),
                 "chains[0].policy.retry_on_statuses[1]", "abc");
  ExpectRejected(WithChainPolicy([](Policy& p) { p.same_target_retries[Reason::kNetwork] = 11; }),
                 "chains[0].policy.same_target_retries[\"network\"]", "11");
}

TEST_F(ValidationTest, DryRunReportsTheDiffAndSavesNothing) {
  TargetConfig a = Target("a");
  a.weight = 5;
  ConfigChange change{{a, Target("new")}, {}};
  ApplyOptions dry;
  dry.dry_run = true;
  const uint64_t before = engine_.generation();
  auto r = engine_.Apply(change, dry, now_);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->changes.size(), 2u);
  EXPECT_EQ(r->changes[0].change, ConfigChangeKind::kUpdated);
  EXPECT_THAT(r->changes[0].changed_fields, ElementsAre("weight"));
  EXPECT_EQ(r->changes[1].change, ConfigChangeKind::kCreated);
  EXPECT_EQ(engine_.generation(), before);
  EXPECT_FALSE(engine_.GetTarget("new").ok());
  EXPECT_EQ(engine_.GetTarget("a")->config.weight, 1u);
}

TEST_F(ValidationTest, ReapplyingTheSameConfigChangesNothing) {
  const uint64_t before = engine_.generation();
  auto r = engine_.Apply(ConfigChange{{Target("a"), Target("b")}, {Chain("ch", {"a", "b"})}}, ApplyOptions{}, now_);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->generation, before);
  EXPECT_TRUE(r->events.empty());
}

TEST_F(ValidationTest, WarmOnARemoteTargetIsAcceptedWithAWarning) {
  TargetConfig t = Target("r");
  t.warm = true;
  auto r = engine_.Apply(ConfigChange{{t}, {}}, ApplyOptions{}, now_);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->warnings.size(), 1u);
  EXPECT_THAT(r->warnings[0], HasSubstr("targets[0].warm"));
}

TEST_F(ValidationTest, DeletingATargetThatAChainListsIsRefusedNamingTheChains) {
  absl::Status s = engine_.DeleteTarget("a", now_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("ch"));
  ASSERT_TRUE(engine_.DeleteChain("ch", now_).ok());
  EXPECT_TRUE(engine_.DeleteTarget("a", now_).ok());
  EXPECT_EQ(engine_.DeleteTarget("a", now_).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ValidationTest, ObjectsFromAConfigFileCannotBeChangedOverTheApi) {
  ApplyOptions file;
  file.from_files = true;
  ConfigChange declared{{Target("f1"), Target("f2")}, {Chain("fc", {"f1", "f2"})}};
  for (auto& t : declared.targets) t.managed_by = "/etc/failoverd/chains.yaml";
  for (auto& c : declared.chains) c.managed_by = "/etc/failoverd/chains.yaml";
  ASSERT_TRUE(engine_.Apply(declared, file, now_).ok());
  TargetConfig edit = Target("f1");
  edit.weight = 9;
  ExpectRejected({{edit}, {}}, "targets[0]", "/etc/failoverd/chains.yaml", absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(engine_.DeleteChain("fc", now_).status().code(), absl::StatusCode::kFailedPrecondition);
  // Restating them as the file has them (`failoverctl apply --dry-run` of the
  // same file) is no change, and no error.
  ConfigChange same{{Target("f1"), Target("f2")}, {Chain("fc", {"f1", "f2"})}};
  for (bool dry_run : {true, false}) {
    ApplyOptions api;
    api.dry_run = dry_run;
    auto restated = engine_.Apply(same, api, now_);
    ASSERT_TRUE(restated.ok()) << restated.status();
    for (const ConfigDiff& d : restated->changes) EXPECT_EQ(d.change, ConfigChangeKind::kUnchanged) << d.name;
    EXPECT_EQ(engine_.GetTarget("f1")->config.managed_by, "/etc/failoverd/chains.yaml");
  }
}

TEST_F(ValidationTest, AChainCannotDropItsPinnedTarget) {
  ApplyOk({Target("c")}, {});
  ASSERT_TRUE(engine_.Pin("ch", "b", now_).ok());
  ExpectRejected({{}, {Chain("ch", {"a", "c"})}}, "ch", "pinned", absl::StatusCode::kFailedPrecondition);
}

TEST_F(ValidationTest, AFileApplyRemovesFileObjectsItNoLongerDeclaresAndKeepsApiObjects) {
  ApplyOptions file;
  file.from_files = true;
  ConfigChange declared{{Target("f1"), Target("f2"), Target("f3")}, {Chain("fc", {"f1", "f2"})}};
  for (auto& t : declared.targets) t.managed_by = "a.yaml";
  for (auto& c : declared.chains) c.managed_by = "a.yaml";
  ASSERT_TRUE(engine_.Apply(declared, file, now_).ok());
  declared.targets.pop_back();  // f3 no longer declared
  auto r = engine_.Apply(declared, file, now_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(engine_.GetTarget("f3").ok());
  EXPECT_TRUE(engine_.GetTarget("a").ok());  // created over the API: untouched
  // A declared target still listed by a chain cannot disappear alone.
  ConfigChange broken = declared;
  broken.targets.pop_back();  // drop f2, keep chain fc listing it
  auto refused = engine_.Apply(broken, file, now_);
  // fc now names an unknown target: refused as a whole.
  EXPECT_FALSE(refused.ok());
  EXPECT_TRUE(engine_.GetTarget("f2").ok());
}

TEST_F(EngineTest, WhileChangesAreRefusedAdminActionsFailAndOutcomesDoNotTrip) {
  TwoTargetChain();
  ASSERT_TRUE(engine_.Pin("assistant-llm", "gemma-local", now_).ok());
  engine_.SetAcceptingChanges(false, "cannot write to data dir /x: No space left on device");
  const uint64_t generation = engine_.generation();
  const absl::Status refused = engine_.Apply(ConfigChange{{Target("x")}, {}}, ApplyOptions{}, now_).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(refused.message(), HasSubstr("No space left on device"));
  EXPECT_FALSE(engine_.GetTarget("x").ok());
  EXPECT_EQ(engine_.generation(), generation);
  EXPECT_EQ(engine_.TriggerManualFailover("argus-llm", "r", now_).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(Health("argus-llm"), HealthState::kManual);
  EXPECT_EQ(engine_.Unpin("assistant-llm", now_).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Status("assistant-llm").pinned_target, "gemma-local");
  // Decisions go on from memory; a failure is answered but trips nothing.
  ReportResult r = Report("", "argus-llm", Http(500), "assistant-llm");
  EXPECT_EQ(r.verdict, Verdict::kTryNext);
  EXPECT_EQ(Health("argus-llm"), HealthState::kUnknown);

  engine_.SetAcceptingChanges(true);
  ASSERT_TRUE(engine_.Unpin("assistant-llm", now_).ok());
  Report("", "argus-llm", Http(500), "assistant-llm");
  EXPECT_EQ(Health("argus-llm"), HealthState::kDown);
}

// A hold is cluster state like the target's health: one met while the data
// dir refuses writes keeps callers off the target at once and is written by
// the first tick that may write again, so a restart does not forget it.
TEST_F(EngineTest, AHoldMetWhileWritesAreRefusedIsSavedByTheFirstTickAfter) {
  std::vector<Change> changes;
  engine_.SetChangeSink([&](Change&& c) { changes.push_back(std::move(c)); });
  TwoTargetChain();
  engine_.SetAcceptingChanges(false, "cannot write to data dir /x: No space left on device");
  const size_t before = changes.size();
  OutcomeFacts f = Http(429);
  f.retry_after = absl::Seconds(30);
  Report("", "argus-llm", f, "assistant-llm");
  EXPECT_THAT(Names(Pick("assistant-llm")), ElementsAre("gemma-local"));
  EXPECT_EQ(changes.size(), before);
  EXPECT_FALSE(engine_.AllRecordsSaved());
  Events events;
  engine_.Tick(now_, &events);  // still refused: nothing to write yet
  EXPECT_EQ(changes.size(), before);

  engine_.SetAcceptingChanges(true);
  engine_.Tick(now_, &events);
  ASSERT_EQ(changes.size(), before + 1);
  ASSERT_EQ(changes.back().targets.size(), 1u);
  EXPECT_EQ(changes.back().targets[0].name, "argus-llm");
  EXPECT_EQ(changes.back().targets[0].held_until, now_ + absl::Seconds(30));
  EXPECT_TRUE(engine_.AllRecordsSaved());
  engine_.Tick(now_, &events);
  EXPECT_EQ(changes.size(), before + 1) << "a saved hold is not written again";
}

TEST_F(EngineTest, EveryStateChangeLeavesAsOneChangeNumberedInOrder) {
  std::vector<Change> changes;
  engine_.SetChangeSink([&](Change&& c) { changes.push_back(std::move(c)); });
  TwoTargetChain();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].config_generation, engine_.generation());
  EXPECT_EQ(changes[0].put_targets.size(), 2u);
  ASSERT_TRUE(engine_.Pin("assistant-llm", "gemma-local", now_).ok());
  ASSERT_EQ(changes.size(), 2u);
  ASSERT_EQ(changes[1].pins.size(), 1u);
  EXPECT_EQ(changes[1].pins[0].target, "gemma-local");
  ASSERT_EQ(changes[1].chains.size(), 1u);
  EXPECT_EQ(changes[1].chains[0].state, ChainState::kPinned);
  // A report that trips a target: its health record and event in one Change.
  Report("", "argus-llm", Http(500), "assistant-llm");
  ASSERT_EQ(changes.size(), 3u);
  ASSERT_EQ(changes[2].targets.size(), 1u);
  EXPECT_EQ(changes[2].targets[0].automatic, HealthState::kDown);
  // A report that changes nothing leaves no Change.
  Report("", "gemma-local", Success(), "assistant-llm");
  Report("", "gemma-local", Success(), "assistant-llm");
  ASSERT_EQ(changes.size(), 4u);  // the first success took gemma-local from UNKNOWN to HEALTHY
  ASSERT_TRUE(engine_.DeleteChain("assistant-llm", now_).ok());
  ASSERT_TRUE(engine_.DeleteTarget("argus-llm", now_).ok());
  EXPECT_EQ(changes.back().deleted_targets, std::vector<std::string>{"argus-llm"});
  // Sequences run on from one Change to the next, without a gap.
  uint64_t expected = 1;
  for (const Change& c : changes) {
    for (const Event& e : c.events) EXPECT_EQ(e.sequence, expected++);
    EXPECT_EQ(c.next_sequence, expected);
  }
}

TEST_F(EngineTest, RestoreBringsBackHealthChainStatePinsAndManual) {
  RestoredState state;
  state.generation = 7;
  state.targets = {Target("a"), Target("b"), Target("c")};
  state.chains = {Chain("ch", {"a", "b"}), Chain("other", {"a", "c"})};
  TargetStateRecord down;
  down.name = "a";
  down.automatic = HealthState::kDown;
  down.since = now_ - absl::Minutes(30);
  down.trips = 4;
  down.last_error = "server_error: 500";
  down.last_probe = now_ - absl::Minutes(2);
  down.last_check = "failed in 40ms: server_error: 500";
  state.health = {down};
  state.chain_states = {ChainStateRecord{"ch", "b", ChainState::kFallback, now_ - absl::Minutes(30), now_ - absl::Minutes(30)}};
  state.pins["other"] = "c";
  state.manual["c"] = RestoredManual{"maintenance", now_ - absl::Minutes(1)};
  auto settled = engine_.Restore(state, now_);
  ASSERT_TRUE(settled.ok()) << settled.status();
  // Only the chain without stored state settles (pinned); "ch" is as it was.
  ASSERT_EQ(settled->size(), 1u);
  EXPECT_EQ((*settled)[0].chain, "other");
  EXPECT_EQ((*settled)[0].to_chain_state, ChainState::kPinned);
  EXPECT_EQ(engine_.generation(), 7u);
  auto a = engine_.GetTarget("a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->status.health, HealthState::kDown);
  EXPECT_EQ(a->status.trips, 4u);
  EXPECT_EQ(a->status.last_error, "server_error: 500");
  EXPECT_EQ(a->status.last_probe, now_ - absl::Minutes(2));
  EXPECT_EQ(a->status.last_check, "failed in 40ms: server_error: 500");
  EXPECT_EQ(Health("c"), HealthState::kManual);
  auto c = engine_.GetTarget("c");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->status.reason, "maintenance");
  EXPECT_EQ(c->status.since, now_ - absl::Minutes(1));
  EXPECT_EQ(Status("other").state, ChainState::kPinned);
  EXPECT_EQ(Status("other").active_target, "c");
  ChainStatus ch = Status("ch");
  EXPECT_EQ(ch.active_target, "b");
  EXPECT_EQ(ch.active_since, now_ - absl::Minutes(30));
}

// A stored chain state that no longer holds (its active target went DOWN)
// settles as a Change on a single node. A cluster replica restores before it
// follows the log and may not write: settling is the leader's job, so its
// restore keeps the replicated state and submits nothing (a Change it cannot
// write used to fail its start, again on every start).
TEST_F(EngineTest, RestoreSettlesAStaleChainOnlyWhenItMayWrite) {
  RestoredState state;
  state.targets = {Target("a"), Target("b")};
  state.chains = {Chain("ch", {"a", "b"})};
  TargetStateRecord down;
  down.name = "a";
  down.automatic = HealthState::kDown;
  down.since = now_ - absl::Minutes(1);
  state.health = {down};
  state.chain_states = {ChainStateRecord{"ch", "a", ChainState::kPrimary, now_ - absl::Hours(1), now_ - absl::Hours(1)}};
  for (const bool accepting : {true, false}) {
    Engine engine;
    std::vector<Change> changes;
    engine.SetChangeSink([&](Change&& c) { changes.push_back(std::move(c)); });
    engine.SetAcceptingChanges(accepting, "this replica is not the cluster's leader yet");
    auto settled = engine.Restore(state, now_);
    ASSERT_TRUE(settled.ok()) << settled.status();
    auto ch = engine.GetChain("ch");
    ASSERT_TRUE(ch.ok());
    if (accepting) {
      EXPECT_EQ(changes.size(), 1u);
      EXPECT_EQ(ch->status.active_target, "b");
    } else {
      EXPECT_TRUE(changes.empty()) << "a replica's restore submitted a Change it cannot write";
      EXPECT_TRUE(settled->empty());
      EXPECT_EQ(ch->status.active_target, "a") << "the replicated state, until the leader settles it";
    }
  }
}

// DESIGN 3.13: an engine that makes no transitions itself (a caller's local
// copy, a cluster follower) answers the verdict failoverd answers for the same
// state and report. A failure that trips its target moves on at once; it used
// to be retried on the dying target by a local copy.
TEST_F(EngineTest, AnEngineThatMakesNoTransitionsGivesTheSameVerdict) {
  for (uint32_t status : {503u, 500u, 401u}) {
    Engine deciding;
    Engine copy;
    ConfigChange change{{Target("a"), Target("b")}, {Chain("ch", {"a", "b"})}};
    ASSERT_TRUE(deciding.Apply(change, ApplyOptions{}, now_).ok());
    ASSERT_TRUE(copy.Apply(change, ApplyOptions{}, now_).ok());
    copy.SetAcceptingChanges(false, "a local copy");  // from here on it decides nothing itself
    ReportRequest req;
    req.chain = "ch";
    req.target = "a";
    req.facts = Http(status);
    ReportResult theirs, mine;
    Events events;
    ASSERT_TRUE(deciding.Report(req, now_, &theirs, &events).ok());
    ASSERT_TRUE(copy.Report(req, now_, &mine, &events).ok());
    EXPECT_EQ(theirs.target_health, HealthState::kDown) << status;
    EXPECT_EQ(VerdictName(mine.verdict), VerdictName(theirs.verdict)) << status;
    ASSERT_EQ(mine.has_next, theirs.has_next) << status;
    if (theirs.has_next) {
      EXPECT_EQ(mine.next.target->config->name, theirs.next.target->config->name) << status;
    }
    EXPECT_EQ(copy.GetTargetStatus("a")->health, HealthState::kUnknown) << "the copy made the transition itself";
  }
}

TEST(TargetConfigTest, ItsOwnHealthSettingsAreCopiedWholeComparedByValueAndCostAPointerUnset) {
  TargetConfig a;
  a.name = "a";
  EXPECT_EQ(sizeof(a.health), sizeof(void*));  // what 20,000 targets without their own settings pay
  TargetConfig b = a;
  EXPECT_EQ(a, b);
  b.health = HealthPolicy();
  b.health->trip_errors = 4;
  EXPECT_FALSE(a.health.has_value());
  EXPECT_NE(a, b);
  TargetConfig c = b;  // a copy of its own: changing it leaves b alone
  c.health->trip_errors = 5;
  EXPECT_EQ(b.health->trip_errors, 4u);
  EXPECT_NE(b, c);
  c.health->trip_errors = 4;
  EXPECT_EQ(b, c);
  ASSERT_EQ(b.Differences(a).size(), 1u);
  EXPECT_EQ(b.Differences(a)[0].field, "health");
  c.health = std::nullopt;
  EXPECT_EQ(a, c);
}

}  // namespace
}  // namespace failover
