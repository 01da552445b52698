// The provider error corpus through the C++ client helper and the real
// binary: each raw reply becomes a Failure (FailureFromResponse), is reported
// over gRPC, and gets the reason, verdict, health and hold the corpus says.
// The Python and Node helpers run the same corpus (tests/client_helpers_test.sh).
#include "absl/strings/ascii.h"
#include "client/upstream_failure.h"
#include "gmock/gmock.h"
#include "tests/support/api_test.h"
#include "tests/support/provider_corpus.h"

namespace failover::testing {
namespace {

using ::testing::HasSubstr;

class ProviderErrorsIntegrationTest : public ApiTest {
 protected:
  void SetUp() override { StartServer(); }
};

TEST_F(ProviderErrorsIntegrationTest, EveryCorpusReplyIsDecidedAsTheCorpusSays) {
  // Reset times in the corpus are relative to now; the server's clock reads
  // the wall clock too, so holds are compared with a little slack.
  const absl::Time now = absl::Now();
  const std::vector<ProviderErrorCase> cases = LoadProviderErrors(now);
  v1::ApplyRequest config;
  for (const ProviderErrorCase& c : cases) {
    AddTarget(&config, c.name + "-a");
    AddTarget(&config, c.name + "-b");
    AddChain(&config, c.name, {c.name + "-a", c.name + "-b"});
  }
  ASSERT_TRUE(Apply(config).ok());
  for (const ProviderErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    const v1::PickTargetResponse plan = Pick(c.name);
    v1::ReportOutcomeRequest req;
    req.set_decision_id(plan.decision_id());
    req.set_target(c.name + "-a");
    *req.mutable_failure() = client::FailureFromResponse(c.status, c.headers, c.body);
    v1::ReportOutcomeResponse r;
    grpc::Status s = decide_->ReportOutcome(Ctx().get(), req, &r);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(v1::FailureReason_Name(r.reason()), "FAILURE_REASON_" + absl::AsciiStrToUpper(c.reason));
    EXPECT_EQ(v1::Verdict_Name(r.verdict()), "VERDICT_" + c.verdict);
    EXPECT_EQ(r.counted(), c.counted);
    EXPECT_EQ(v1::HealthState_Name(r.target_health()), "HEALTH_STATE_" + c.health);
    const v1::TargetStatus status = Target(c.name + "-a").status();
    if (c.hold) {
      const absl::Time held = absl::FromUnixSeconds(status.held_until().seconds());
      EXPECT_GE(held, now + *c.hold - absl::Seconds(3));
      EXPECT_LE(held, now + *c.hold + absl::Seconds(3));
    }
    if (c.down_for) {
      EXPECT_THAT(status.reason(), HasSubstr("rate limited until its limit resets in"));
    }
  }
}

}  // namespace
}  // namespace failover::testing
