// The per-chain counters written out at scrape time (api::ChainCounters).
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/api/metrics.h"

namespace failover::api {
namespace {

// (chain, result) -> value of failover_decisions_total, as a scrape shows it.
std::map<std::pair<std::string, std::string>, double> Decisions(const ChainCounters& counters) {
  std::map<std::pair<std::string, std::string>, double> out;
  for (const prometheus::MetricFamily& f : counters.Collect()) {
    if (f.name != "failover_decisions_total") continue;
    EXPECT_EQ(f.type, prometheus::MetricType::Counter);
    for (const prometheus::ClientMetric& m : f.metric) {
      EXPECT_EQ(m.label.size(), 2u);
      out[{m.label[0].value, m.label[1].value}] = m.counter.value;
    }
  }
  return out;
}

TEST(ChainCountersTest, ACreatedChainShowsZeroAndADeletedOneNothing) {
  ChainCounters counters;
  counters.Add("ch");
  using Key = std::pair<std::string, std::string>;
  EXPECT_THAT(Decisions(counters), ::testing::ElementsAre(::testing::Pair(Key{"ch", "error"}, 0),
                                                          ::testing::Pair(Key{"ch", "ok"}, 0)));
  counters.OnPick("ch", true, true);
  counters.OnPick("ch", true, true);
  counters.OnPick("nope", false, false);
  EXPECT_EQ((Decisions(counters)[Key{"ch", "ok"}]), 2);
  EXPECT_EQ((Decisions(counters)[Key{"(unknown)", "error"}]), 1);
  counters.Remove("ch");
  EXPECT_EQ(Decisions(counters).count(Key{"ch", "ok"}), 0u);
}

// Picks go on while their chain is deleted and created again: a count never
// lands in freed memory (ASan and TSan run this).
TEST(ChainCountersTest, PicksDuringADeletionCountSafely) {
  ChainCounters counters;
  std::atomic<bool> stop{false};
  std::vector<std::thread> pickers;
  for (int i = 0; i < 2; ++i) {
    pickers.emplace_back([&] {
      while (!stop.load()) {
        counters.OnPick("ch", true, true);
        counters.OnBudgetRefusal("ch");
      }
    });
  }
  for (int i = 0; i < 20000; ++i) {
    counters.Remove("ch");
    counters.Add("ch");
  }
  stop = true;
  for (std::thread& t : pickers) t.join();
  EXPECT_EQ(Decisions(counters).size(), 2u);
}

}  // namespace
}  // namespace failover::api
