// The client library's decision loop against the generated mock stub: every
// verdict, and the fail-static paths.
#include "client/client.h"

#include "failover/v1/decision_mock.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace failover::client {
namespace {

using ::testing::_;
using ::testing::DoAll;
using ::testing::HasSubstr;
using ::testing::Return;
using ::testing::SetArgPointee;

v1::Attempt A(const std::string& target) {
  v1::Attempt a;
  a.set_target(target);
  return a;
}

v1::PickTargetResponse Plan(std::vector<std::string> targets) {
  v1::PickTargetResponse p;
  p.set_decision_id("d1");
  for (const auto& t : targets) *p.add_attempts() = A(t);
  return p;
}

v1::ReportOutcomeResponse Verdict(v1::Verdict v, const std::string& next = "", const std::string& error = "") {
  v1::ReportOutcomeResponse r;
  r.set_verdict(v);
  if (!next.empty()) *r.mutable_next_attempt() = A(next);
  r.set_error(error);
  return r;
}

AttemptOutcome Ok() { return AttemptOutcome{true, {}, {}}; }
AttemptOutcome Fail(uint32_t status) {
  AttemptOutcome o;
  o.failure.set_http_status(status);
  return o;
}

const grpc::Status kUnavailable(grpc::StatusCode::UNAVAILABLE, "connection refused");

class ClientTest : public ::testing::Test {
 protected:
  ClientTest() {
    ClientOptions options;
    options.max_buffered_reports = 3;
    options.sleep = [this](absl::Duration d) { slept_.push_back(d); };
    client_ = std::make_unique<Client>(stub_, options);
  }
  std::shared_ptr<v1::MockDecisionServiceStub> stub_ = std::make_shared<v1::MockDecisionServiceStub>();
  std::unique_ptr<Client> client_;
  std::vector<absl::Duration> slept_;
  std::vector<std::string> called_;
  std::function<AttemptOutcome(const v1::Attempt&)> Attempt(std::map<std::string, std::vector<AttemptOutcome>> script) {
    return [this, script](const v1::Attempt& a) mutable {
      called_.push_back(a.target());
      auto& outcomes = script[a.target()];
      AttemptOutcome o = outcomes.front();
      if (outcomes.size() > 1) outcomes.erase(outcomes.begin());
      return o;
    };
  }
};

TEST_F(ClientTest, DoneOnTheFirstTarget) {
  EXPECT_CALL(*stub_, PickTarget(_, _, _)).WillOnce(DoAll(SetArgPointee<2>(Plan({"a", "b"})), Return(grpc::Status::OK)));
  EXPECT_CALL(*stub_, ReportOutcome(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(Verdict(v1::VERDICT_DONE)), Return(grpc::Status::OK)));
  LoopResult r = client_->Run("ch", Attempt({{"a", {Ok()}}}));
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.served_by, "a");
  EXPECT_FALSE(r.fail_static);
  ASSERT_EQ(r.attempts.size(), 1u);
  EXPECT_EQ(r.attempts[0].verdict, v1::VERDICT_DONE);
}

TEST_F(ClientTest, RetrySameWaitsTheDelayThenTriesTheSameTarget) {
  v1::ReportOutcomeResponse retry = Verdict(v1::VERDICT_RETRY_SAME);
  retry.mutable_retry_delay()->set_seconds(2);
  EXPECT_CALL(*stub_, PickTarget(_, _, _)).WillOnce(DoAll(SetArgPointee<2>(Plan({"a", "b"})), Return(grpc::Status::OK)));
  EXPECT_CALL(*stub_, ReportOutcome(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(retry), Return(grpc::Status::OK)))
      .WillOnce(DoAll(SetArgPointee<2>(Verdict(v1::VERDICT_DONE)), Return(grpc::Status::OK)));
  LoopResult r = client_->Run("ch", Attempt({{"a", {Fail(503), Ok()}}}));
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(called_, (std::vector<std::string>{"a", "a"}));
  EXPECT_EQ(slept_, std::vector<absl::Duration>{absl::Seconds(2)});
}

TEST_F(ClientTest, TryNextFollowsTheNextAttemptAndReportsAttemptNumbers) {
  std::vector<v1::ReportOutcomeRequest> reports;
  EXPECT_CALL(*stub_, PickTarget(_, _, _)).WillOnce(DoAll(SetArgPointee<2>(Plan({"a", "b"})), Return(grpc::Status::OK)));
  EXPECT_CALL(*stub_, ReportOutcome(_, _, _))
      .WillOnce([&](auto*, const v1::ReportOutcomeRequest& req, v1::ReportOutcomeResponse* resp) {
        reports.push_back(req);
        *resp = Verdict(v1::VERDICT_TRY_NEXT, "b");
        return grpc::Status::OK;
      })
      .WillOnce([&](auto*, const v1::ReportOutcomeRequest& req, v1::ReportOutcomeResponse* resp) {
        reports.push_back(req);
        *resp = Verdict(v1::VERDICT_DONE);
        return grpc::Status::OK;
      });
  LoopResult r = client_->Run("ch", Attempt({{"a", {Fail(500)}}, {"b", {Ok()}}}));
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.served_by, "b");
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].failure().http_status(), 500u);
  EXPECT_EQ(reports[0].decision_id(), "d1");
  EXPECT_EQ(reports[1].attempt(), 2u);
  EXPECT_TRUE(reports[1].has_success());
}

TEST_F(ClientTest, FailStopsWithFailoverdsError) {
  EXPECT_CALL(*stub_, PickTarget(_, _, _)).WillOnce(DoAll(SetArgPointee<2>(Plan({"a", "b"})), Return(grpc::Status::OK)));
  EXPECT_CALL(*stub_, ReportOutcome(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(Verdict(v1::VERDICT_FAIL, "", "a: 400 \"prompt too long\"")),
                      Return(grpc::Status::OK)));
  LoopResult r = client_->Run("ch", Attempt({{"a", {Fail(400)}}}));
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, "a: 400 \"prompt too long\"");
  EXPECT_EQ(called_.size(), 1u);
}

TEST_F(ClientTest, UnreachableWithNoKnownPlanFailsClearly) {
  EXPECT_CALL(*stub_, PickTarget(_, _, _)).WillOnce(Return(kUnavailable));
  LoopResult r = client_->Run("ch", Attempt({}));
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.error, HasSubstr("no plan known for chain ch"));
}

TEST_F(ClientTest, UnreachableServesFromTheDeclaredOrderAndBuffersReports) {
  client_->SetDeclaredOrder("ch", {A("a"), A("b")});
  EXPECT_CALL(*stub_, PickTarget(_, _, _)).WillOnce(Return(kUnavailable));
  EXPECT_CALL(*stub_, ReportOutcome(_, _, _)).Times(0);
  LoopResult r = client_->Run("ch", Attempt({{"a", {Fail(500)}}, {"b", {Ok()}}}));
  EXPECT_TRUE(r.ok);
  EXPECT_TRUE(r.fail_static);
  EXPECT_EQ(r.served_by, "b");
  EXPECT_EQ(client_->buffered_reports(), 2u);
}

TEST_F(ClientTest, UnreachableServesFromTheLastPlanSeen) {
  EXPECT_CALL(*stub_, PickTarget(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(Plan({"b", "a"})), Return(grpc::Status::OK)))
      .WillOnce(Return(kUnavailable));
  EXPECT_CALL(*stub_, ReportOutcome(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(Verdict(v1::VERDICT_DONE)), Return(grpc::Status::OK)));
  ASSERT_TRUE(client_->Run("ch", Attempt({{"b", {Ok()}}})).ok);
  LoopResult r = client_->Run("ch", Attempt({{"b", {Ok()}}}));
  EXPECT_TRUE(r.fail_static);
  EXPECT_EQ(r.served_by, "b");  // the cached order, not declared
}

TEST_F(ClientTest, ReportFailingMidLoopCarriesOnDownThePlan) {
  EXPECT_CALL(*stub_, PickTarget(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(Plan({"a", "b", "c"})), Return(grpc::Status::OK)));
  EXPECT_CALL(*stub_, ReportOutcome(_, _, _)).WillOnce(Return(kUnavailable));
  LoopResult r = client_->Run("ch", Attempt({{"a", {Fail(500)}}, {"b", {Fail(500)}}, {"c", {Ok()}}}));
  EXPECT_TRUE(r.ok);
  EXPECT_TRUE(r.fail_static);
  EXPECT_EQ(called_, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(client_->buffered_reports(), 3u);
}

TEST_F(ClientTest, EveryTargetFailingWhileUnreachableNamesEachFailure) {
  client_->SetDeclaredOrder("ch", {A("a"), A("b")});
  EXPECT_CALL(*stub_, PickTarget(_, _, _)).WillOnce(Return(kUnavailable));
  LoopResult r = client_->Run("ch", Attempt({{"a", {Fail(500)}}, {"b", {Fail(502)}}}));
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.error, HasSubstr("a: 500"));
  EXPECT_THAT(r.error, HasSubstr("b: 502"));
}

TEST_F(ClientTest, TheBufferIsBoundedAndFlushedWhenFailoverdIsBack) {
  client_->SetDeclaredOrder("ch", {A("a"), A("b"), A("c"), A("d")});
  EXPECT_CALL(*stub_, PickTarget(_, _, _)).WillOnce(Return(kUnavailable));
  client_->Run("ch", Attempt({{"a", {Fail(500)}}, {"b", {Fail(500)}}, {"c", {Fail(500)}}, {"d", {Ok()}}}));
  EXPECT_EQ(client_->buffered_reports(), 3u);  // 4 made, the oldest dropped
  std::vector<std::string> delivered;
  EXPECT_CALL(*stub_, ReportOutcome(_, _, _))
      .Times(3)
      .WillRepeatedly([&](auto*, const v1::ReportOutcomeRequest& req, v1::ReportOutcomeResponse*) {
        delivered.push_back(req.target());
        return grpc::Status::OK;
      });
  EXPECT_EQ(client_->Flush(), 3u);
  EXPECT_EQ(delivered, (std::vector<std::string>{"b", "c", "d"}));
  EXPECT_EQ(client_->buffered_reports(), 0u);
}

TEST_F(ClientTest, ANonTransientPickErrorIsReturned) {
  EXPECT_CALL(*stub_, PickTarget(_, _, _))
      .WillOnce(Return(grpc::Status(grpc::StatusCode::NOT_FOUND, "chain \"ch\" not found")));
  LoopResult r = client_->Run("ch", Attempt({}));
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, "chain \"ch\" not found");
}

}  // namespace
}  // namespace failover::client
