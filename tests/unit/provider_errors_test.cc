// Every reply in the provider error corpus (tests/data/provider_errors.json),
// read as the server reads a relayed reply and decided by the engine on a
// hand-driven clock: reason, verdict, counted, health, hold and reset.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/api/convert.h"
#include "tests/support/provider_corpus.h"

namespace failover {
namespace {

using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

class ProviderErrorsTest : public ::testing::TestWithParam<testing::ProviderErrorCase> {};

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

TEST_P(ProviderErrorsTest, IsClassifiedAndDecidedAsTheCorpusSays) {
  const testing::ProviderErrorCase& c = GetParam();
  EngineOptions options;
  options.probe_jitter = 0;
  Engine engine(options);
  TargetConfig a, b;
  a.name = "a";
  b.name = "b";
  ChainConfig chain;
  chain.name = "ch";
  chain.targets = {"a", "b"};
  ASSERT_TRUE(engine.Apply(ConfigChange{{a, b}, {chain}}, ApplyOptions{}, kT0).ok());
  // Probes the corpus does not care about come later.
  ProbeRequest first;
  ProbeResponse ignored;
  ASSERT_TRUE(engine.Probe(first, kT0, &ignored, nullptr).ok());

  v1::Failure failure;
  failure.set_http_status(c.status);
  for (const auto& [name, value] : c.headers) (*failure.mutable_response()->mutable_headers())[name] = value;
  failure.mutable_response()->set_body(c.body);
  auto facts = api::FailureFromProto(failure, "failure", kT0);
  ASSERT_TRUE(facts.ok()) << facts.status();

  Plan plan;
  PickRequest pick;
  pick.chain = "ch";
  ASSERT_TRUE(engine.Pick(pick, kT0, &plan, nullptr).ok());
  ReportRequest report;
  report.decision_id = plan.decision_id;
  report.target = "a";
  report.facts = *facts;
  ReportResult r;
  ASSERT_TRUE(engine.Report(report, kT0, &r, nullptr).ok());
  EXPECT_EQ(ReasonName(r.reason), c.reason);
  EXPECT_EQ(Upper(VerdictName(r.verdict)), c.verdict);
  EXPECT_EQ(r.counted, c.counted);
  EXPECT_EQ(Upper(HealthStateName(r.target_health)), c.health);

  const TargetStatus status = engine.GetTarget("a")->status;
  if (c.hold) {
    EXPECT_EQ(status.held_until, kT0 + *c.hold);
  } else {
    EXPECT_LE(status.held_until, kT0);
  }
  if (c.down_for) {
    EXPECT_THAT(status.reason, HasSubstr("rate limited until its limit resets"));
    // Its health check comes when the limit resets, not before.
    auto offered = [&](absl::Time at) {
      ProbeRequest req;
      ProbeResponse resp;
      EXPECT_TRUE(engine.Probe(req, at, &resp, nullptr).ok());
      for (const ProbeTask& t : resp.tasks) {
        if (t.target->config->name == "a") return true;
      }
      return false;
    };
    EXPECT_FALSE(offered(kT0 + *c.down_for - absl::Seconds(1)));
    EXPECT_TRUE(offered(kT0 + *c.down_for));
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, ProviderErrorsTest, ::testing::ValuesIn(testing::LoadProviderErrors(kT0)),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace failover
