// Many threads pick, report and administer at once. Run under
// ThreadSanitizer (-DFAILOVERD_TSAN=ON) to check the locking; in a normal
// build it checks that plans stay well-formed while state churns.
#include <atomic>
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
    chain.policy.recovery_probes = 1;
    chain.policy.recovery_min_dwell = absl::Milliseconds(5);
    for (int i = 0; i < 3; ++i) chain.targets.push_back(absl::StrCat("t", (c + i) % 6));
    config.chains.push_back(chain);
  }
  ASSERT_TRUE(engine.Apply(config, ApplyOptions{}, t0).ok());

  std::atomic<int> bad_plans{0};
  std::atomic<int64_t> clock_ms{0};
  auto now = [&] { return t0 + absl::Milliseconds(clock_ms.load()); };
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < 3000; ++i) {
        PickRequest pick;
        pick.chain = absl::StrCat("c", (w + i) % 4);
        pick.session_key = i % 3 == 0 ? absl::StrCat("s", i % 7) : "";
        Plan plan;
        Events events;
        if (!engine.Pick(pick, now(), &plan, &events).ok()) continue;
        if (plan.attempts.empty()) ++bad_plans;
        ReportRequest report;
        report.decision_id = plan.decision_id;
        report.target = plan.attempts[0].target->config.name;
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
  });
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad_plans.load(), 0);
  for (const ChainView& v : engine.ListChains()) {
    EXPECT_NE(std::find(v.config.targets.begin(), v.config.targets.end(), v.status.active_target),
              v.config.targets.end())
        << v.config.name << " active " << v.status.active_target;
  }
}

}  // namespace
}  // namespace failover
