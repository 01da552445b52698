// The leader's books of leased rpm budgets, and what a replica asks for.
#include "server/engine/rpm_budgets.h"

#include <random>

#include "gtest/gtest.h"

namespace failover {
namespace {

RpmLedger::Ask AskFor(int64_t minute, uint32_t cap, uint32_t want, uint32_t held = 0, uint32_t used = 0) {
  return {"a", minute, cap, want, held, used};
}

RpmLedger::Ask GiveBack(int64_t minute, uint32_t cap, uint32_t used) {
  RpmLedger::Ask ask = AskFor(minute, cap, 0, 0, used);
  ask.give_back = true;
  return ask;
}

TEST(RpmLedgerTest, TheSharesOfAMinuteNeverPassTheCapWhoeverAsksHowever) {
  // Random asks from five replicas (wanting, holding and using anything up to
  // the cap): the minute's total stays within the cap unless what replicas
  // said they already used passes it, and each share only grows.
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    std::mt19937 rng(seed);
    RpmLedger ledger;
    const uint32_t cap = 1 + rng() % 50;
    std::map<std::string, uint32_t> shares;
    for (int step = 0; step < 100; ++step) {
      const std::string who = "r" + std::to_string(rng() % 5);
      const uint32_t before = shares[who];
      const uint32_t held = rng() % 3 == 0 ? before : 0;  // lost answers: it may hold less than the books say
      const uint32_t used = std::min<uint32_t>(held, rng() % (cap + 1));
      const uint32_t granted = ledger.Grant(who, AskFor(7, cap, rng() % (cap + 1), held, used));
      ASSERT_GE(granted, before) << "seed " << seed << ": a share shrank";
      shares[who] = granted;
      uint64_t total = 0;
      for (const auto& [name, share] : shares) total += share;
      ASSERT_EQ(ledger.Granted("a", 7), total) << "seed " << seed;
      ASSERT_LE(total, cap) << "seed " << seed;
    }
  }
}

TEST(RpmLedgerTest, ABusyReplicaGetsWhatTheIdleOnesLeaveAndAnAskSentAgainTakesNothingMore) {
  RpmLedger ledger;
  EXPECT_EQ(ledger.Grant("idle-1", AskFor(7, 12, 1)), 1u);
  EXPECT_EQ(ledger.Grant("idle-2", AskFor(7, 12, 1)), 1u);
  EXPECT_EQ(ledger.Grant("busy", AskFor(7, 12, 6)), 6u);
  EXPECT_EQ(ledger.Grant("busy", AskFor(7, 12, 6)), 6u);  // the answer was lost: asked again
  EXPECT_EQ(ledger.Grant("busy", AskFor(7, 12, 20, 6, 6)), 10u);  // the rest of the cap
  EXPECT_EQ(ledger.Grant("idle-1", AskFor(7, 12, 3, 1, 1)), 1u);  // nothing left
  EXPECT_EQ(ledger.Granted("a", 7), 12u);
  // The next minute starts from nothing.
  EXPECT_EQ(ledger.Grant("idle-1", AskFor(8, 12, 3)), 3u);
  // Other targets have books of their own.
  EXPECT_EQ(ledger.Grant("busy", {"b", 7, 4, 4, 0, 0}), 4u);
}

TEST(RpmLedgerTest, ANewLeaderRebuildsItsBooksFromWhatReplicasHoldAndUsed) {
  RpmLedger fresh;  // a leader elected mid-minute knows nothing of the old one's grants
  // A replica that holds 8 keeps it; one that planned 3 at its even part
  // without a grant has those counted; the cap's rest is all a third gets.
  EXPECT_EQ(fresh.Grant("r1", AskFor(7, 12, 9, /*held=*/8, /*used=*/5)), 9u);
  EXPECT_EQ(fresh.Grant("r2", AskFor(7, 12, 0, /*held=*/0, /*used=*/3)), 3u);
  EXPECT_EQ(fresh.Grant("r3", AskFor(7, 12, 5)), 0u);
  EXPECT_EQ(fresh.Granted("a", 7), 12u);
}

TEST(RpmLedgerTest, AClosingRequesterGivesBackWhatItDidNotUse) {
  RpmLedger ledger;
  EXPECT_EQ(ledger.Grant("closing", AskFor(7, 12, 8)), 8u);
  EXPECT_EQ(ledger.Grant("other", AskFor(7, 12, 10)), 4u);  // the cap's rest
  // It planned 3 of its 8: those stay counted, the other 5 go back.
  EXPECT_EQ(ledger.Grant("closing", GiveBack(7, 12, 3)), 3u);
  EXPECT_EQ(ledger.Granted("a", 7), 7u);
  EXPECT_EQ(ledger.Grant("closing", GiveBack(7, 12, 3)), 3u);  // sent again: nothing more
  EXPECT_EQ(ledger.Grant("other", AskFor(7, 12, 10, 4, 4)), 9u);
  EXPECT_EQ(ledger.Granted("a", 7), 12u);
  // One the books never knew (a new leader's) has what it planned counted.
  RpmLedger fresh;
  EXPECT_EQ(fresh.Grant("closing", GiveBack(7, 12, 2)), 2u);
  EXPECT_EQ(fresh.Granted("a", 7), 2u);
}

TEST(RpmLedgerTest, OldMinutesAreForgottenAndRequestersPerMinuteAreBounded) {
  RpmLedger ledger;
  ledger.Grant("r", AskFor(5, 10, 4));
  ledger.Grant("r", AskFor(6, 10, 4));
  ledger.Forget(6);
  EXPECT_EQ(ledger.Granted("a", 5), 0u);
  EXPECT_EQ(ledger.Granted("a", 6), 4u);
  for (size_t i = 1; i < RpmLedger::kMostRequesters; ++i) ledger.Grant("x" + std::to_string(i), AskFor(6, 100000, 1));
  EXPECT_EQ(ledger.Grant("one-too-many", AskFor(6, 100000, 1)), 0u);
  EXPECT_EQ(ledger.Grant("r", AskFor(6, 100000, 5)), 5u);  // one it keeps books for still gets more
}

Engine::RpmUse Use(uint32_t cap, uint32_t used, std::optional<uint32_t> granted, bool has_next_grant = false) {
  Engine::RpmUse use;
  use.target = "a";
  use.cap = cap;
  use.used = used;
  use.has_grant = granted.has_value();
  use.granted = granted.value_or(0);
  use.has_next_grant = has_next_grant;
  return use;
}

TEST(PlanRpmAsksTest, AReplicaAsksWhenItHoldsNothingOrItsGrantRunsLowAndForTheNextMinuteAheadOfTime) {
  const absl::Duration early = absl::Seconds(10);
  // An idle replica with no grant asks for a quarter of its even part (12 over 3: 1).
  auto asks = PlanRpmAsks({Use(12, 0, std::nullopt)}, 7, early, 3);
  ASSERT_EQ(asks.size(), 1u);
  EXPECT_EQ(asks[0].minute, 7);
  EXPECT_EQ(asks[0].want, 1u);
  // Holding enough for more than a second at its pace: no ask.
  EXPECT_TRUE(PlanRpmAsks({Use(600, 10, 100)}, 7, early, 3).empty());
  // 50 planned in 10 s (5 a second) of a grant of 52: it asks for two seconds more.
  asks = PlanRpmAsks({Use(600, 50, 52)}, 7, early, 3);
  ASSERT_EQ(asks.size(), 1u);
  EXPECT_EQ(asks[0].want, 50u + 2 * 50u);  // low water: a chunk of 600 / 12 = 50
  EXPECT_EQ(asks[0].held, 52u);
  EXPECT_EQ(asks[0].used, 50u);
  // Never beyond the cap, and no ask once the grant is the whole cap.
  EXPECT_EQ(PlanRpmAsks({Use(60, 59, 59)}, 7, early, 1)[0].want, 60u);
  EXPECT_TRUE(PlanRpmAsks({Use(60, 60, 60)}, 7, early, 1).empty());
  // From 45 s on: the next minute too, at twenty seconds of the pace.
  asks = PlanRpmAsks({Use(1200, 450, 1000)}, 7, absl::Seconds(45), 3);
  ASSERT_EQ(asks.size(), 1u);
  EXPECT_EQ(asks[0].minute, 8);
  EXPECT_EQ(asks[0].want, 200u);  // 10 a second for 20 s (more than a chunk, 100)
  EXPECT_TRUE(PlanRpmAsks({Use(1200, 450, 1000, /*has_next_grant=*/true)}, 7, absl::Seconds(50), 3).empty());
}

}  // namespace
}  // namespace failover
