// Many threads pick, report and administer at once. Run under
// ThreadSanitizer (-DFAILOVERD_TSAN=ON) to check the locking; in a normal
// build it checks that plans stay well-formed while state churns.
#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/engine/engine.h"

namespace failover {
namespace {

TEST(EngineConcurrencyTest, PicksReportsAndAdminActionsInterleaveSafely) {
  Engine engine;
  const absl::Time t0 = absl::FromUnixSeconds(1'800'000'000);
  ConfigChange config;
  for (int i = 0; i < 6; ++i) {
    TargetConfig t;
    t.name = absl::StrCat("t", i);
    config.targets.push_back(t);
  }
  for (int c = 0; c < 4; ++c) {
    ChainConfig chain;
    chain.name = absl::StrCat("c", c);
    chain.strategy = c % 2 == 0 ? Strategy::kFailover : Strategy::kRoundRobin;
    chain.policy.Mutable().recovery_probes = 1;
    chain.policy.Mutable().recovery_min_dwell = absl::Milliseconds(5);
    for (int i = 0; i < 3; ++i) chain.targets.push_back(absl::StrCat("t", (c + i) % 6));
    config.chains.push_back(chain);
  }
  ASSERT_TRUE(engine.Apply(config, ApplyOptions{}, t0).ok());

  std::atomic<int> bad_plans{0};
  std::atomic<int64_t> clock_ms{0};
  auto now = [&] { return t0 + absl::Milliseconds(clock_ms.load()); };
  std::atomic<bool> admin_done{false};
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      // Reports go on a while after the last admin action, so what they did
      // last is what the checks below see.
      int after_admin = 0;
      for (int i = 0; i < 200000 && after_admin < 300; ++i) {
        if (i >= 3000 && admin_done.load()) ++after_admin;
        PickRequest pick;
        pick.chain = absl::StrCat("c", (w + i) % 4);
        pick.session_key = i % 3 == 0 ? absl::StrCat("s", i % 7) : "";
        Plan plan;
        Events events;
        if (!engine.Pick(pick, now(), &plan, &events).ok()) continue;
        if (plan.attempts.empty()) ++bad_plans;
        ReportRequest report;
        report.decision_id = plan.decision_id;
        report.target = plan.attempts[0].target->config->name;
        if (i % 4 == 0) {
          report.facts.http_status = 500;
        } else {
          report.facts.success = true;
        }
        ReportResult result;
        (void)engine.Report(report, now(), &result, &events);
        if (result.verdict == Verdict::kTryNext && result.next.target == nullptr) ++bad_plans;
        clock_ms.fetch_add(1);
      }
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; i < 300; ++i) {
      const std::string target = absl::StrCat("t", i % 6);
      (void)engine.TriggerManualFailover(target, "drill", now());
      (void)engine.Pin(absl::StrCat("c", i % 4), absl::StrCat("t", (i % 4 + 1) % 6), now());
      Events events;
      engine.Tick(now(), &events);
      (void)engine.CancelManualFailover(target, now());
      (void)engine.Unpin(absl::StrCat("c", i % 4), now());
      TargetConfig extra;
      extra.name = absl::StrCat("extra", i % 5);
      (void)engine.Apply(ConfigChange{{extra}, {}}, ApplyOptions{}, now());
      (void)engine.ListChains();
    }
    admin_done = true;
  });
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad_plans.load(), 0);
  // At rest, once the dwell has passed, every failover chain stands where its
  // targets' health puts it: on a usable target with nothing HEALTHY above it
  // (else DEGRADED), PRIMARY exactly when that is the first. A transition
  // whose chains were not re-evaluated, or re-evaluated against a stale
  // state, would leave a chain elsewhere.
  // Before any tick: a chain moves off a target the moment it stops being usable.
  for (const ChainView& v : engine.ListChains()) {
    if (v.config.strategy != Strategy::kFailover) continue;
    bool any_usable = false;
    HealthState on = HealthState::kUnknown;
    for (const TargetStatus& t : v.status.targets) {
      any_usable = any_usable || t.health == HealthState::kHealthy || t.health == HealthState::kUnknown;
      if (t.name == v.status.active_target) on = t.health;
    }
    EXPECT_TRUE(!any_usable || on == HealthState::kHealthy || on == HealthState::kUnknown)
        << v.config.name << " stays on " << v.status.active_target << ", which is " << HealthStateName(on);
  }
  clock_ms.fetch_add(1000);
  Events settled;
  engine.Tick(now(), &settled);
  for (const ChainView& v : engine.ListChains()) {
    if (v.config.strategy != Strategy::kFailover) continue;
    ASSERT_TRUE(v.status.pinned_target.empty()) << v.config.name;
    int active = -1;
    bool any_usable = false;
    for (size_t i = 0; i < v.status.targets.size(); ++i) {
      const HealthState h = v.status.targets[i].health;
      any_usable = any_usable || h == HealthState::kHealthy || h == HealthState::kUnknown;
      if (v.status.targets[i].name == v.status.active_target) active = static_cast<int>(i);
    }
    ASSERT_GE(active, 0) << v.config.name << " active " << v.status.active_target;
    if (!any_usable) {
      EXPECT_EQ(v.status.state, ChainState::kDegraded) << v.config.name;
      continue;
    }
    const HealthState on = v.status.targets[active].health;
    EXPECT_TRUE(on == HealthState::kHealthy || on == HealthState::kUnknown)
        << v.config.name << " stays on " << v.status.active_target << ", which is " << HealthStateName(on);
    for (int i = 0; i < active; ++i) {
      EXPECT_NE(v.status.targets[i].health, HealthState::kHealthy)
          << v.config.name << " stays on " << v.status.active_target << " below a healthy "
          << v.status.targets[i].name;
    }
    EXPECT_EQ(v.status.state, active == 0 ? ChainState::kPrimary : ChainState::kFallback) << v.config.name;
  }
}

// The ordered change stream's property (DESIGN 2): reports, probe results,
// ticks and admin changes race on a few targets and chains while a watcher
// folds every event the sink receives. At quiescence the fold equals the
// engine's state of every target and chain, and the sequences the sink saw
// strictly increase without a gap. Fails if events are numbered outside the
// writer (two threads' transitions could then arrive in the reverse order).
TEST(EngineConcurrencyTest, FoldingEveryEventInSequenceOrderEndsOnTheEngineState) {
  Engine engine;
  std::mutex fold_mu;
  uint64_t last_sequence = 0;
  int gaps = 0;
  std::map<std::string, HealthState> folded_targets;
  std::map<std::string, std::pair<std::string, ChainState>> folded_chains;
  engine.SetChangeSink([&](Change&& change) {
    std::lock_guard<std::mutex> lock(fold_mu);
    for (const Event& e : change.events) {
      if (e.sequence != last_sequence + 1) ++gaps;
      last_sequence = e.sequence;
      if (e.kind == EventKind::kTargetState) folded_targets[e.target] = e.to_health;
      if (e.kind == EventKind::kChainSwitched) folded_chains[e.chain] = {e.to_target, e.to_chain_state};
    }
  });
  const absl::Time t0 = absl::FromUnixSeconds(1'800'000'000);
  ConfigChange config;
  for (int i = 0; i < 3; ++i) {
    TargetConfig t;
    t.name = absl::StrCat("t", i);
    config.targets.push_back(t);
  }
  for (int c = 0; c < 2; ++c) {
    ChainConfig chain;
    chain.name = absl::StrCat("c", c);
    chain.policy.Mutable().recovery_probes = 1;
    chain.policy.Mutable().recovery_min_dwell = absl::Milliseconds(3);
    chain.policy.Mutable().probe_interval = absl::Milliseconds(2);
    chain.policy.Mutable().backoff_reset_after = absl::Milliseconds(50);
    for (int i = 0; i < 3; ++i) chain.targets.push_back(absl::StrCat("t", (c + i) % 3));
    config.chains.push_back(chain);
  }
  ASSERT_TRUE(engine.Apply(config, ApplyOptions{}, t0).ok());

  std::atomic<int64_t> clock_ms{0};
  auto now = [&] { return t0 + absl::Milliseconds(clock_ms.load()); };
  std::vector<std::thread> threads;
  for (int w = 0; w < 3; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < 2000; ++i) {
        ReportRequest report;
        report.chain = absl::StrCat("c", (w + i) % 2);
        report.target = absl::StrCat("t", (w * 7 + i) % 3);
        if ((i + w) % 3 == 0) {
          report.facts.http_status = 503;
        } else {
          report.facts.success = true;
        }
        ReportResult result;
        Events events;
        (void)engine.Report(report, now(), &result, &events);
        clock_ms.fetch_add(1);
      }
    });
  }
  threads.emplace_back([&] {  // a prober
    for (int i = 0; i < 1500; ++i) {
      ProbeRequest req;
      ProbeResponse first;
      Events events;
      (void)engine.Probe(req, now(), &first, &events);
      ProbeRequest answer;
      for (const ProbeTask& task : first.tasks) {
        ProbeResult r;
        r.lease_id = task.lease_id;
        r.outcome = i % 4 == 0 ? ProbeOutcome::kFail : ProbeOutcome::kPass;
        answer.results.push_back(r);
      }
      ProbeResponse second;
      (void)engine.Probe(answer, now(), &second, &events);
    }
  });
  threads.emplace_back([&] {  // the ticker and an admin
    for (int i = 0; i < 400; ++i) {
      Events events;
      engine.Tick(now(), &events);
      const std::string target = absl::StrCat("t", i % 3);
      (void)engine.TriggerManualFailover(target, "drill", now());
      (void)engine.Pin(absl::StrCat("c", i % 2), absl::StrCat("t", (i + 1) % 3), now());
      engine.Tick(now(), &events);
      (void)engine.CancelManualFailover(target, now());
      (void)engine.Unpin(absl::StrCat("c", i % 2), now());
    }
  });
  for (auto& t : threads) t.join();

  std::lock_guard<std::mutex> lock(fold_mu);
  EXPECT_EQ(gaps, 0);
  EXPECT_GT(last_sequence, 100u) << "the run should have changed state often";
  for (const TargetView& t : engine.ListTargets()) {
    auto it = folded_targets.find(t.config.name);
    const HealthState folded = it == folded_targets.end() ? HealthState::kUnknown : it->second;
    EXPECT_EQ(folded, t.status.health) << t.config.name;
  }
  for (const ChainView& c : engine.ListChains()) {
    ASSERT_TRUE(folded_chains.count(c.config.name)) << c.config.name;
    EXPECT_EQ(folded_chains[c.config.name].first, c.status.active_target) << c.config.name;
    EXPECT_EQ(folded_chains[c.config.name].second, c.status.state) << c.config.name;
  }
}

}  // namespace
}  // namespace failover
