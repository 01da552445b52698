// Shadow policies judged live (DESIGN 3.17): a real engine serves a chain
// under its own policy and records its trace as failoverd does; the shadow
// runs are fed that trace once a second, as the ticker feeds them.
#include "server/engine/shadows.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/engine.h"

namespace failover {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

ChainConfig Chat(int live_trip_errors) {
  ChainConfig chain;
  chain.name = "chat";
  chain.targets = {"a", "b"};
  chain.policy.Mutable().trip_errors = live_trip_errors;
  return chain;
}

ShadowPolicy Eager() {
  ShadowPolicy eager;
  eager.name = "eager";
  eager.policy.Mutable().trip_errors = 1;
  return eager;
}

std::vector<TargetConfig> Targets() {
  std::vector<TargetConfig> out(2);
  out[0].name = "a";
  out[1].name = "b";
  return out;
}

std::vector<std::string> Lines(const std::vector<ShadowEvent>& events) {
  std::vector<std::string> out;
  for (const ShadowEvent& s : events) {
    const Event& e = s.event;
    if (e.kind == EventKind::kTargetState) {
      out.push_back(absl::StrCat(s.shadow, ": ", e.target, " ", HealthStateName(e.from_health), "->",
                                 HealthStateName(e.to_health)));
    } else {
      out.push_back(absl::StrCat(s.shadow, ": ", e.chain, " ", e.from_target, "->", e.to_target, " ",
                                 SwitchReasonName(e.switch_reason)));
    }
  }
  return out;
}

class ShadowPoliciesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions options;
    options.probe_jitter = 0;
    engine_ = std::make_unique<Engine>(options);
    ChainConfig chain = Chat(5);
    chain.shadows = {Eager()};
    Apply(chain, kStart);
  }

  void Apply(const ChainConfig& chain, absl::Time now) {
    ASSERT_TRUE(engine_->Apply(ConfigChange{Targets(), {chain}}, ApplyOptions{}, now).ok());
    shadows_.Configure(*engine_->snapshot(), now);
  }

  // One failed request on `target` through the real engine; its trace entry
  // waits for the next second's feed.
  void Fail(const std::string& target, absl::Time now) {
    PickRequest pick;
    pick.chain = "chat";
    Plan plan;
    Events events;
    ASSERT_TRUE(engine_->Pick(pick, now, &plan, &events).ok());
    ReportRequest report;
    report.decision_id = plan.decision_id;
    report.target = target;
    report.facts.http_status = 503;
    ReportResult result;
    ASSERT_TRUE(engine_->Report(report, now, &result, &events).ok());
    waiting_.push_back(TraceEntry{0, now, "chat", target, 1, result.classified, absl::ZeroDuration(), report.facts});
  }

  std::vector<ShadowEvent> Second(absl::Time now) {
    std::vector<ShadowEvent> out = shadows_.Feed(waiting_, now);
    waiting_.clear();
    return out;
  }

  std::unique_ptr<Engine> engine_;
  ShadowPolicies shadows_;
  std::vector<TraceEntry> waiting_;
};

TEST_F(ShadowPoliciesTest, AShadowWithALowerThresholdTripsAndTheRealStateDoesNotChange) {
  Fail("a", kStart + absl::Milliseconds(300));
  EXPECT_THAT(Lines(Second(kStart + absl::Seconds(1))),
              ElementsAre("eager: a unknown->down", "eager: chat a->b trip"));

  const absl::StatusOr<ChainStatus> real = engine_->GetChainStatus("chat");
  ASSERT_TRUE(real.ok());
  EXPECT_EQ(real->active_target, "a");
  EXPECT_EQ(real->state, ChainState::kPrimary);
  EXPECT_EQ(engine_->GetTargetStatus("a")->health, HealthState::kUnknown);

  const std::vector<ShadowStatus> status = shadows_.Status();
  ASSERT_EQ(status.size(), 1u);
  EXPECT_EQ(status[0].chain, "chat");
  EXPECT_EQ(status[0].shadow, "eager");
  EXPECT_EQ(status[0].active, "b");
  EXPECT_EQ(status[0].state, ChainState::kFallback);
  EXPECT_EQ(status[0].trips, 1u);
  EXPECT_EQ(status[0].switches, 1u);
}

TEST_F(ShadowPoliciesTest, AnOutcomeOnATargetOutsideTheChainIsNotFed) {
  waiting_.push_back(TraceEntry{0, kStart, "other", "z", 1, Reason::kNone, absl::ZeroDuration(), {}});
  EXPECT_THAT(Second(kStart + absl::Seconds(1)), IsEmpty());
  EXPECT_EQ(shadows_.Status()[0].trips, 0u);
}

TEST_F(ShadowPoliciesTest, ARunGoesOnThroughOtherChangesAndStartsAfreshWhenItsPolicyChanges) {
  Fail("a", kStart + absl::Milliseconds(300));
  (void)Second(kStart + absl::Seconds(1));
  // The live policy alone changes: the shadow's run is what it was.
  ChainConfig chain = Chat(6);
  chain.shadows = {Eager()};
  Apply(chain, kStart + absl::Seconds(2));
  EXPECT_EQ(shadows_.Status()[0].since, kStart);
  EXPECT_EQ(shadows_.Status()[0].trips, 1u);
  // Its own policy changes: a fresh run, every target unknown again.
  chain.shadows[0].policy.Mutable().trip_errors = 2;
  Apply(chain, kStart + absl::Seconds(3));
  EXPECT_EQ(shadows_.Status()[0].since, kStart + absl::Seconds(3));
  EXPECT_EQ(shadows_.Status()[0].trips, 0u);
  EXPECT_EQ(shadows_.Status()[0].active, "a");
  // Removed: the run ends.
  chain.shadows.clear();
  Apply(chain, kStart + absl::Seconds(4));
  EXPECT_TRUE(shadows_.empty());
}

TEST(ShadowPolicyConfigTest, ABadShadowListIsRefusedByItsPath) {
  Engine engine;
  auto refused = [&](const std::vector<ShadowPolicy>& shadows) {
    ChainConfig chain = Chat(1);
    chain.shadows = shadows;
    absl::StatusOr<ApplyResult> applied = engine.Apply(ConfigChange{Targets(), {chain}}, ApplyOptions{}, kStart);
    return applied.ok() ? std::string("accepted") : std::string(applied.status().message());
  };
  ShadowPolicy rate = Eager();
  rate.name = "rate";
  rate.policy.Mutable().trip_failure_rate = 150;
  EXPECT_THAT(refused({Eager(), rate}), ::testing::StartsWith("chains[0].shadow[1].policy.trip.failure_rate: "));
  EXPECT_THAT(refused({Eager(), Eager()}), ::testing::StartsWith("chains[0].shadow[1].name: \"eager\" is used twice"));
  ShadowPolicy unnamed = Eager();
  unnamed.name = "";
  EXPECT_THAT(refused({unnamed}), ::testing::StartsWith("chains[0].shadow[0].name: "));
  std::vector<ShadowPolicy> many(kMaxShadowPolicies + 1, Eager());
  for (size_t i = 0; i < many.size(); ++i) many[i].name = absl::StrCat("s", i);
  EXPECT_THAT(refused(many), ::testing::StartsWith("chains[0].shadow: at most 4 shadow policies, got 5"));
  // Nothing was applied.
  EXPECT_EQ(engine.generation(), 0u);
}

}  // namespace
}  // namespace failover
