// Every row of the DESIGN 3.5 classification table, the gRPC code mapping,
// phase overrides and each policy override.
#include "server/engine/classify.h"

#include "common/utf8.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace failover {
namespace {

OutcomeFacts Http(uint32_t status, std::string message = "") {
  OutcomeFacts f;
  f.http_status = status;
  f.message = std::move(message);
  return f;
}

OutcomeFacts Grpc(int code) {
  OutcomeFacts f;
  f.grpc_code = code;
  return f;
}

OutcomeFacts Transport(TransportError t) {
  OutcomeFacts f;
  f.transport = t;
  return f;
}

struct Row {
  const char* name;
  OutcomeFacts facts;
  Reason reason;
  bool moves_on;
  bool counts;
  uint32_t retries;
};

void PrintTo(const Row& row, std::ostream* os) { *os << row.name; }

class ClassifyTableTest : public ::testing::TestWithParam<Row> {};

TEST_P(ClassifyTableTest, MatchesTheDesignTable) {
  const Row& row = GetParam();
  const Classification c = FailoverRules().Classify(row.facts);
  EXPECT_EQ(ReasonName(c.reason), std::string(ReasonName(row.reason)));
  EXPECT_EQ(c.moves_on, row.moves_on);
  EXPECT_EQ(c.counts, row.counts);
  EXPECT_EQ(c.same_target_retries, row.retries);
}

OutcomeFacts Flag(bool admission, bool cancelled) {
  OutcomeFacts f;
  f.admission_rejected = admission;
  f.cancelled = cancelled;
  return f;
}

INSTANTIATE_TEST_SUITE_P(
    Rows, ClassifyTableTest,
    ::testing::Values(
        Row{"connect_refused", Transport(TransportError::kConnectRefused), Reason::kNetwork, true, true, 1},
        Row{"dns", Transport(TransportError::kDns), Reason::kNetwork, true, true, 1},
        Row{"reset", Transport(TransportError::kReset), Reason::kNetwork, true, true, 1},
        Row{"tls", Transport(TransportError::kTls), Reason::kNetwork, true, true, 1},
        Row{"transport_timeout", Transport(TransportError::kTimeout), Reason::kTimeout, true, true, 0},
        Row{"http408", Http(408), Reason::kTimeout, true, true, 0},
        Row{"http503", Http(503), Reason::kOverloaded, true, true, 2},
        Row{"http529", Http(529), Reason::kOverloaded, true, true, 2},
        Row{"overloaded_phrase", Http(500, "Server is overloaded"), Reason::kOverloaded, true, true, 2},
        Row{"capacity_phrase", OutcomeFacts{false, 0, 0, TransportError::kNone, "no capacity left", "", {},
                                            Phase::kBeforeResponse, false, false},
            Reason::kOverloaded, true, true, 2},
        Row{"http500", Http(500), Reason::kServerError, true, true, 0},
        Row{"http502", Http(502), Reason::kServerError, true, true, 0},
        Row{"http429", Http(429), Reason::kRateLimit, true, false, 0},
        Row{"rate_limit_phrase", Http(400, "Rate limit reached"), Reason::kRateLimit, true, false, 0},
        Row{"too_many_requests_phrase", Http(400, "Too Many Requests"), Reason::kRateLimit, true, false, 0},
        Row{"http401", Http(401), Reason::kAuth, true, true, 0},
        Row{"http403", Http(403), Reason::kAuth, true, true, 0},
        Row{"http402", Http(402), Reason::kBilling, true, true, 0},
        Row{"quota_400", Http(400, "quota exceeded for this month"), Reason::kBilling, true, true, 0},
        Row{"insufficient_credit", Http(400, "Insufficient credit"), Reason::kBilling, true, true, 0},
        Row{"http404", Http(404), Reason::kModelNotFound, true, true, 0},
        Row{"model_not_found_400", Http(400, "The model 'gpt-9' was not found"), Reason::kModelNotFound, true,
            true, 0},
        Row{"does_not_exist", Http(400, "model does not exist"), Reason::kModelNotFound, true, true, 0},
        Row{"http501", Http(501), Reason::kCapabilityGap, true, false, 0},
        Row{"admission", Flag(true, false), Reason::kAdmission, true, false, 0},
        Row{"context_code", OutcomeFacts{false, 400, 0, TransportError::kNone, "too long",
                                         "context_length_exceeded", {}, Phase::kBeforeResponse, false, false},
            Reason::kContextOverflow, false, false, 0},
        Row{"context_message", Http(400, "This model's maximum context length is 8192 tokens"),
            Reason::kContextOverflow, false, false, 0},
        Row{"http400", Http(400, "bad parameter"), Reason::kClientError, false, false, 0},
        Row{"http422", Http(422), Reason::kClientError, false, false, 0},
        Row{"cancelled", Flag(false, true), Reason::kCancelled, false, false, 0},
        Row{"unknown", OutcomeFacts{false, 0, 0, TransportError::kNone, "something odd", "", {},
                                    Phase::kBeforeResponse, false, false},
            Reason::kUnknown, false, false, 0},
        Row{"upstream_failed_400", Http(400, "Upstream request failed"), Reason::kServerError, true, true, 0}),
    [](const ::testing::TestParamInfo<Row>& info) { return std::string(info.param.name); });

TEST(ClassifyTest, GrpcCodesMapAsDesigned) {
  const FailoverRules rules;
  EXPECT_EQ(rules.Classify(Grpc(14)).reason, Reason::kNetwork);           // UNAVAILABLE
  EXPECT_EQ(rules.Classify(Grpc(4)).reason, Reason::kTimeout);            // DEADLINE_EXCEEDED
  EXPECT_EQ(rules.Classify(Grpc(13)).reason, Reason::kServerError);       // INTERNAL
  EXPECT_EQ(rules.Classify(Grpc(2)).reason, Reason::kServerError);        // UNKNOWN
  EXPECT_EQ(rules.Classify(Grpc(8)).reason, Reason::kRateLimit);          // RESOURCE_EXHAUSTED
  EXPECT_EQ(rules.Classify(Grpc(12)).reason, Reason::kCapabilityGap);     // UNIMPLEMENTED
  EXPECT_EQ(rules.Classify(Grpc(3)).reason, Reason::kClientError);        // INVALID_ARGUMENT
  EXPECT_EQ(rules.Classify(Grpc(9)).reason, Reason::kClientError);        // FAILED_PRECONDITION
  EXPECT_EQ(rules.Classify(Grpc(16)).reason, Reason::kAuth);              // UNAUTHENTICATED
  EXPECT_EQ(rules.Classify(Grpc(7)).reason, Reason::kAuth);               // PERMISSION_DENIED
  EXPECT_EQ(rules.Classify(Grpc(5)).reason, Reason::kModelNotFound);      // NOT_FOUND
  EXPECT_EQ(rules.Classify(Grpc(1)).reason, Reason::kCancelled);          // CANCELLED
  EXPECT_FALSE(rules.Classify(Grpc(12)).counts);
}

TEST(ClassifyTest, FailureAfterFirstByteOrSideEffectIsNeverReplayedButStillCounts) {
  const FailoverRules rules;
  for (Phase phase : {Phase::kAfterFirstByte, Phase::kAfterSideEffect}) {
    OutcomeFacts f = Http(503);
    f.phase = phase;
    const Classification c = rules.Classify(f);
    EXPECT_EQ(c.reason, Reason::kOverloaded);
    EXPECT_FALSE(c.moves_on);
    EXPECT_TRUE(c.counts);
    EXPECT_EQ(c.same_target_retries, 0u);
  }
}

absl::StatusOr<FailoverRules> Compile(std::vector<std::string> statuses, std::vector<std::string> errors) {
  Policy p;
  p.retry_on_statuses = std::move(statuses);
  p.retry_on_errors = std::move(errors);
  return FailoverRules::Compile(p, "chains[0].policy");
}

TEST(ClassifyTest, RetryOnStatusesReplacesTheDefaults) {
  // GoModel's example: timeouts move on, 429 is returned to the client.
  auto rules = Compile({"408", "5xx"}, {"model not found", "overloaded"});
  ASSERT_TRUE(rules.ok()) << rules.status();
  EXPECT_TRUE(rules->Classify(Http(408)).moves_on);
  EXPECT_TRUE(rules->Classify(Http(502)).moves_on);
  EXPECT_FALSE(rules->Classify(Http(429)).moves_on);
  EXPECT_FALSE(rules->Classify(Http(401)).moves_on);
  // The phrase list still moves a 400 on.
  EXPECT_TRUE(rules->Classify(Http(400, "Provider overloaded, try later")).moves_on);
  // And the reason is still classified for health.
  EXPECT_EQ(rules->Classify(Http(429)).reason, Reason::kRateLimit);
}

// The provider's code names the reason; a chain's own lists still decide
// whether the request moves on.
TEST(ClassifyTest, APolicysListsStillDecideWhetherAProviderErrorMovesOn) {
  OutcomeFacts quota = Http(429, "You exceeded your current quota, please check your plan and billing details.");
  quota.error_code = "insufficient_quota";
  EXPECT_EQ(FailoverRules().Classify(quota).reason, Reason::kBilling);
  EXPECT_TRUE(FailoverRules().Classify(quota).moves_on);
  auto rules = Compile({"408", "5xx"}, {});
  ASSERT_TRUE(rules.ok()) << rules.status();
  const Classification c = rules->Classify(quota);
  EXPECT_EQ(c.reason, Reason::kBilling);
  EXPECT_TRUE(c.counts);
  EXPECT_FALSE(c.moves_on);  // 429 is not on this chain's list: returned to the client
  auto phrases = Compile({"5xx"}, {"current quota"});
  ASSERT_TRUE(phrases.ok());
  EXPECT_TRUE(phrases->Classify(quota).moves_on);
}

TEST(ClassifyTest, PhraseNeedsEveryWordAndNumericWordsConstrainTheStatus) {
  auto rules = Compile({"5xx"}, {"404 deprecated", "upstream failed"});
  ASSERT_TRUE(rules.ok());
  EXPECT_TRUE(rules->Classify(Http(404, "this model is Deprecated")).moves_on);
  EXPECT_FALSE(rules->Classify(Http(400, "this model is deprecated")).moves_on);  // status constraint
  EXPECT_TRUE(rules->Classify(Http(400, "the UPSTREAM request FAILED")).moves_on);  // words, any order
  EXPECT_FALSE(rules->Classify(Http(400, "upstream is slow")).moves_on);            // one word missing
  auto classes = Compile({"5xx"}, {"4xx gone"});
  ASSERT_TRUE(classes.ok());
  EXPECT_TRUE(classes->Classify(Http(410, "gone")).moves_on);
  EXPECT_FALSE(classes->Classify(Http(200, "gone")).moves_on);
}

TEST(ClassifyTest, SameTargetRetriesCanBeOverriddenPerReason) {
  Policy p;
  p.same_target_retries[Reason::kNetwork] = 0;
  p.same_target_retries[Reason::kServerError] = 3;
  auto rules = FailoverRules::Compile(p, "policy");
  ASSERT_TRUE(rules.ok());
  EXPECT_EQ(rules->Classify(Transport(TransportError::kReset)).same_target_retries, 0u);
  EXPECT_EQ(rules->Classify(Http(500)).same_target_retries, 3u);
  EXPECT_EQ(rules->Classify(Http(503)).same_target_retries, 2u);  // untouched default
}

TEST(ClassifyTest, BadRulesNameTheFieldAndValue) {
  auto bad_status = Compile({"408", "6xx"}, {});
  ASSERT_FALSE(bad_status.ok());
  EXPECT_EQ(bad_status.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_status.status().message().find("chains[0].policy.retry_on_statuses[1]"), std::string::npos);
  EXPECT_NE(bad_status.status().message().find("6xx"), std::string::npos);
  auto bad_phrase = Compile({}, {"ok", "   "});
  ASSERT_FALSE(bad_phrase.ok());
  EXPECT_NE(bad_phrase.status().message().find("retry_on_errors[1]"), std::string::npos);
}

TEST(ClassifyTest, SummaryNamesStatusAndMessage) {
  EXPECT_EQ(FailoverRules::Summarize(Http(503, "overloaded")), "503 \"overloaded\"");
  EXPECT_EQ(FailoverRules::Summarize(Transport(TransportError::kConnectRefused)), "connect refused");
}

// An upstream's long error in Japanese (3 bytes a character) is cut on a
// character boundary: the summary goes into state and events, which must stay
// valid UTF-8 or every response carrying them becomes unreadable.
TEST(ClassifyTest, ALongMultiByteMessageIsCutOnACharacterBoundary) {
  std::string message;
  for (int i = 0; i < 100; ++i) message += "\xe3\x81\x82";  // U+3042, 300 bytes in all
  for (const std::string& m : {message, "x" + message, "xy" + message}) {
    const std::string summary = FailoverRules::Summarize(Http(503, m));
    EXPECT_TRUE(IsValidUtf8(summary)) << summary;
    EXPECT_THAT(summary, ::testing::EndsWith("...\""));
    EXPECT_LE(summary.size(), 220u);
  }
  // Bytes that are not UTF-8 are replaced, never passed on.
  EXPECT_EQ(FailoverRules::Summarize(Http(500, "caf\xe9")), "500 \"caf\xef\xbf\xbd\"");
}

// DESIGN 3.15: a quota stated for a period longer than rate_limit.max_hold is
// billing however the provider words it, unless the provider says when it
// resets (then the reset decides: a hold, or DOWN until it).
TEST(QuotaPeriodTest, ALongPeriodWithoutAResetIsBillingWhateverTheWording) {
  const FailoverRules rules;  // max_hold 60s
  for (const char* message : {
           "Quota exceeded for quota metric 'Generate Content API requests per day'",
           "You have reached your daily request limit",
           "Monthly usage limit exceeded for this API key",
           "You exceeded the 1000 requests/day allowance of your free tier",
           "Rate limit reached for gpt-4o on tokens per day (TPD): Limit 90000, Used 90000",
           "Hourly quota used up; try again next hour",
           "You have used up your plan's quota",
       }) {
    EXPECT_EQ(rules.Classify(Http(429, message)).reason, Reason::kBilling) << message;
  }
  for (const char* message : {
           "Rate limit reached for gpt-4o on requests per min (RPM): Limit 500, Used 500",
           "Too many requests: the limit is 10 requests per second",
           "Rate limit exceeded",
       }) {
    EXPECT_EQ(rules.Classify(Http(429, message)).reason, Reason::kRateLimit) << message;
  }
  // The provider says when it resets: the reset decides, whatever the period.
  OutcomeFacts with_reset = Http(429, "Rate limit reached for gpt-4o on tokens per day (TPD)");
  with_reset.retry_after = absl::Minutes(6);
  EXPECT_EQ(rules.Classify(with_reset).reason, Reason::kRateLimit);
  // A chain that holds up to two days takes a daily limit as a rate limit.
  Policy patient;
  patient.rate_limit_max_hold = absl::Hours(48);
  const FailoverRules holds_long = FailoverRules::Compile(patient, "policy").value();
  EXPECT_EQ(holds_long.Classify(Http(429, "You have reached your daily request limit")).reason, Reason::kRateLimit);
  EXPECT_EQ(holds_long.Classify(Http(429, "Monthly usage limit exceeded")).reason, Reason::kBilling);
}

}  // namespace
}  // namespace failover
