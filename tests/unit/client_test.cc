// The client library's decision loop against the generated mock stub: every
// verdict, and the fail-static paths.
#include "client/client.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "failover/v1/decision_mock.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "google/protobuf/util/message_differencer.h"

namespace failover::client {
namespace {

using ::testing::_;
using ::testing::DoAll;
using ::testing::Invoke;
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

AttemptOutcome Ok() { return AttemptOutcome{true, {}, {}, {}}; }
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
    options.background_flush = false;  // every call on the test's thread, in order
    options.sleep = [this](absl::Duration d) { slept_.push_back(d); };
    options.now = [this] { return now_; };
    client_ = std::make_unique<Client>(stub_, options);
  }
  absl::Time now_ = absl::FromUnixSeconds(1'800'000'000);
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

// A request's messages are kept by its thread for the next request; a Run
// inside an attempt (an agent calling a tool that asks failoverd too) gets its
// own, and the outer request goes on with its plan.
TEST_F(ClientTest, ARunInsideAnAttemptLeavesTheOuterPlanAlone) {
  v1::PickTargetResponse outer_plan = Plan({"a", "b"});
  outer_plan.set_decision_id("d-outer");
  v1::PickTargetResponse inner_plan = Plan({"x", "y"});
  inner_plan.set_decision_id("d-inner");
  EXPECT_CALL(*stub_, PickTarget(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(outer_plan), Return(grpc::Status::OK)))
      .WillOnce(DoAll(SetArgPointee<2>(inner_plan), Return(grpc::Status::OK)));
  std::vector<std::string> reports;  // chain/target/decision id, in the order sent
  EXPECT_CALL(*stub_, ReportOutcome(_, _, _))
      .WillRepeatedly([&](auto*, const v1::ReportOutcomeRequest& r, v1::ReportOutcomeResponse* verdict) {
        reports.push_back(r.chain() + "/" + r.target() + "/" + r.decision_id());
        *verdict = r.has_failure() ? Verdict(v1::VERDICT_TRY_NEXT, "b") : Verdict(v1::VERDICT_DONE);
        return grpc::Status::OK;
      });
  LoopResult inner;
  LoopResult outer = client_->Run("outer", [&](const v1::Attempt& a) {
    if (a.target() != "a") return Ok();
    inner = client_->Run("inner", [](const v1::Attempt&) { return Ok(); });
    return Fail(503);
  });
  EXPECT_EQ(inner.served_by, "x");
  EXPECT_TRUE(outer.ok);
  EXPECT_EQ(outer.served_by, "b");
  EXPECT_THAT(reports, ::testing::ElementsAre("inner/x/d-inner", "outer/a/d-outer", "outer/b/d-outer"));
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

// A fail-static run starts where the last request was served, and a plan
// failoverd gives later puts its own order back.
TEST_F(ClientTest, AFailStaticRunStartsWithTheTargetThatServedLast) {
  EXPECT_CALL(*stub_, PickTarget(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(Plan({"a", "b"})), Return(grpc::Status::OK)))
      .WillOnce(Return(kUnavailable))
      .WillOnce(DoAll(SetArgPointee<2>(Plan({"a", "b"})), Return(grpc::Status::OK)))
      .WillOnce(Return(kUnavailable));
  EXPECT_CALL(*stub_, ReportOutcome(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(Verdict(v1::VERDICT_TRY_NEXT, "b")), Return(grpc::Status::OK)))
      .WillRepeatedly(DoAll(SetArgPointee<2>(Verdict(v1::VERDICT_DONE)), Return(grpc::Status::OK)));
  EXPECT_EQ(client_->Run("ch", Attempt({{"a", {Fail(500)}}, {"b", {Ok()}}})).served_by, "b");
  called_.clear();
  LoopResult r = client_->Run("ch", Attempt({{"a", {Ok()}}, {"b", {Ok()}}}));
  EXPECT_TRUE(r.fail_static);
  EXPECT_EQ(called_, std::vector<std::string>{"b"});

  now_ += absl::Minutes(1);  // past the backoff: failoverd is asked again
  EXPECT_EQ(client_->Run("ch", Attempt({{"a", {Ok()}}})).served_by, "a");
  now_ += absl::Minutes(1);
  called_.clear();
  r = client_->Run("ch", Attempt({{"a", {Ok()}}, {"b", {Ok()}}}));
  EXPECT_TRUE(r.fail_static);
  EXPECT_EQ(called_, std::vector<std::string>{"a"});
}

// The order kept for fail-static runs is the latest plan, whatever field of
// an attempt changed (every field of Attempt, so a field added later is
// checked too).
TEST(ClientPlanCacheTest, AFailStaticRunGetsTheLatestPlansAttemptsWhicheverFieldChanged) {
  v1::Attempt base;
  base.set_target("a");
  base.set_upstream_model("m");
  (*base.mutable_labels())["k"] = "v";
  base.mutable_timeout()->set_seconds(1);
  base.set_max_retries(1);
  base.set_position(0);
  base.set_health(v1::HEALTH_STATE_HEALTHY);
  const google::protobuf::Descriptor* d = v1::Attempt::descriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    SCOPED_TRACE(f->name());
    v1::Attempt changed = base;
    const google::protobuf::Reflection* r = changed.GetReflection();
    if (f->is_map()) {
      ASSERT_EQ(f->name(), "labels");
      (*changed.mutable_labels())["k"] = "w";  // as many labels, one value changed
    } else if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_STRING) {
      r->SetString(&changed, f, r->GetString(base, f) + "2");
    } else if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_UINT32) {
      r->SetUInt32(&changed, f, r->GetUInt32(base, f) + 1);
    } else if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_ENUM) {
      r->SetEnumValue(&changed, f, r->GetEnumValue(base, f) + 1);
    } else if (f->message_type() == google::protobuf::Duration::descriptor()) {
      changed.mutable_timeout()->set_nanos(5);
    } else {
      FAIL() << "Attempt." << f->name() << " is of a kind this test cannot change yet";
    }
    auto stub = std::make_shared<v1::MockDecisionServiceStub>();
    ClientOptions options;
    options.background_flush = false;
    Client client(stub, options);
    v1::PickTargetResponse first, second;
    *first.add_attempts() = base;
    *second.add_attempts() = changed;
    EXPECT_CALL(*stub, PickTarget(_, _, _))
        .WillOnce(DoAll(SetArgPointee<2>(first), Return(grpc::Status::OK)))
        .WillOnce(DoAll(SetArgPointee<2>(second), Return(grpc::Status::OK)))
        .WillOnce(Return(kUnavailable));
    EXPECT_CALL(*stub, ReportOutcome(_, _, _))
        .WillRepeatedly(DoAll(SetArgPointee<2>(Verdict(v1::VERDICT_DONE)), Return(grpc::Status::OK)));
    v1::Attempt seen;
    auto attempt = [&seen](const v1::Attempt& a) {
      seen = a;
      return Ok();
    };
    ASSERT_TRUE(client.Run("ch", attempt).ok);
    ASSERT_TRUE(client.Run("ch", attempt).ok);
    seen.Clear();
    LoopResult served = client.Run("ch", attempt);
    EXPECT_TRUE(served.fail_static);
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(seen, changed)) << seen.DebugString();
  }
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
  // 4 made: the success goes first (the failures decide trips), though it is the newest.
  EXPECT_EQ(client_->buffered_reports(), 3u);
  EXPECT_EQ(client_->dropped_reports(), 1u);
  now_ += absl::Seconds(1);  // failoverd's backoff is over
  std::vector<std::string> delivered;
  EXPECT_CALL(*stub_, ReportOutcome(_, _, _))
      .Times(3)
      .WillRepeatedly([&](auto*, const v1::ReportOutcomeRequest& req, v1::ReportOutcomeResponse*) {
        delivered.push_back(req.target());
        return grpc::Status::OK;
      });
  EXPECT_EQ(client_->Flush(), 3u);
  EXPECT_EQ(delivered, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(client_->buffered_reports(), 0u);
}

// Several threads flush at once when failoverd comes back: each report is
// sent exactly once and nothing crashes (each used to copy the front report
// and pop, popping an emptied deque).
TEST_F(ClientTest, ThreadsFlushingAtOnceSendEachReportOnce) {
  ClientOptions options;
  options.max_buffered_reports = 1000;
  options.background_flush = false;  // only the test's threads flush
  options.sleep = [](absl::Duration) {};
  options.now = [this] { return now_; };
  Client client(stub_, options);
  client.SetDeclaredOrder("ch", {A("a")});
  EXPECT_CALL(*stub_, PickTarget(_, _, _)).WillRepeatedly(Return(kUnavailable));
  EXPECT_CALL(*stub_, ReportOutcome(_, _, _)).WillRepeatedly(Return(kUnavailable));
  // Failures: each is a report of its own (successes would be sent together).
  for (int i = 0; i < 400; ++i) client.Run("ch", Attempt({{"a", {Fail(500)}}}));
  ASSERT_EQ(client.buffered_reports(), 400u);
  now_ += absl::Seconds(1);
  std::mutex mu;
  int total = 0;
  EXPECT_CALL(*stub_, ReportOutcome(_, _, _)).WillRepeatedly([&](auto*, const v1::ReportOutcomeRequest&, auto*) {
    std::lock_guard<std::mutex> lock(mu);
    ++total;
    return grpc::Status::OK;
  });
  std::vector<std::thread> threads;
  std::atomic<size_t> delivered{0};
  for (int t = 0; t < 8; ++t) threads.emplace_back([&] { delivered += client.Flush(); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(total, 400);
  EXPECT_EQ(delivered.load(), 400u);
  EXPECT_EQ(client.buffered_reports(), 0u);
}

// Buffered successes on one target travel as one report with a count (and
// their mean latency); a failure between them keeps its place in the order.
TEST_F(ClientTest, BufferedSuccessesOnATargetAreSentTogetherInOrder) {
  ClientOptions options;
  options.background_flush = false;
  options.now = [this] { return now_; };
  Client client(stub_, options);
  client.SetDeclaredOrder("ch", {A("a")});
  EXPECT_CALL(*stub_, PickTarget(_, _, _)).WillRepeatedly(Return(kUnavailable));
  EXPECT_CALL(*stub_, ReportOutcome(_, _, _)).WillRepeatedly(Return(kUnavailable));
  auto timed = [](AttemptOutcome o, int ms) {
    o.latency = absl::Milliseconds(ms);
    return o;
  };
  client.Run("ch", Attempt({{"a", {timed(Ok(), 10)}}}));
  client.Run("ch", Attempt({{"a", {timed(Ok(), 20)}}}));
  client.Run("ch", Attempt({{"a", {timed(Fail(500), 5)}}}));
  client.Run("ch", Attempt({{"a", {timed(Ok(), 30)}}}));
  EXPECT_EQ(client.buffered_reports(), 4u);
  ::testing::Mock::VerifyAndClearExpectations(stub_.get());
  now_ += absl::Seconds(1);
  std::vector<std::string> sent;
  EXPECT_CALL(*stub_, ReportOutcome(_, _, _)).WillRepeatedly([&](auto*, const v1::ReportOutcomeRequest& r, auto*) {
    sent.push_back(absl::StrCat(r.has_success() ? "ok" : "fail", " x", std::max<uint32_t>(r.count(), 1), " ",
                                absl::ToInt64Milliseconds(absl::Seconds(r.latency().seconds()) +
                                                          absl::Nanoseconds(r.latency().nanos())),
                                "ms"));
    return grpc::Status::OK;
  });
  EXPECT_EQ(client.Flush(), 4u);
  EXPECT_THAT(sent, ::testing::ElementsAre("ok x2 15ms", "fail x1 5ms", "ok x1 30ms"));
}

// A failoverd that does not answer costs one deadline, not one per request:
// for the backoff after it, requests go fail-static without calling it; the
// backoff doubles while it stays silent and ends when it answers.
TEST_F(ClientTest, AfterFailoverdFailedToAnswerRequestsSkipItForABackoff) {
  client_->SetDeclaredOrder("ch", {A("a"), A("b")});
  const grpc::Status hung(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded");
  EXPECT_CALL(*stub_, PickTarget(_, _, _)).Times(1).WillRepeatedly(Return(hung));
  EXPECT_CALL(*stub_, ReportOutcome(_, _, _)).Times(1).WillRepeatedly(Return(hung));
  auto ok_on_a = Attempt({{"a", {Ok()}}});
  EXPECT_TRUE(client_->Run("ch", ok_on_a).fail_static);  // PickTarget: no answer
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(client_->Run("ch", ok_on_a).fail_static);  // no call
  now_ += absl::Seconds(1);
  // Tries again (flushing a buffered report): still no answer, so the backoff
  // doubles to 2 s and this request does not wait for PickTarget either.
  EXPECT_TRUE(client_->Run("ch", ok_on_a).fail_static);
  now_ += absl::Seconds(1);
  EXPECT_TRUE(client_->Run("ch", ok_on_a).fail_static);  // no call
  ::testing::Mock::VerifyAndClearExpectations(stub_.get());
  // Back: it answers, the buffered reports go out, the next request runs normally.
  now_ += absl::Seconds(1);
  EXPECT_CALL(*stub_, PickTarget(_, _, _))
      .WillRepeatedly(DoAll(SetArgPointee<2>(Plan({"a", "b"})), Return(grpc::Status::OK)));
  EXPECT_CALL(*stub_, ReportOutcome(_, _, _))
      .WillRepeatedly(DoAll(SetArgPointee<2>(Verdict(v1::VERDICT_DONE)), Return(grpc::Status::OK)));
  LoopResult back = client_->Run("ch", ok_on_a);
  EXPECT_FALSE(back.fail_static);
  EXPECT_EQ(client_->buffered_reports(), 0u);
}

TEST_F(ClientTest, AnEmptyPlanIsAnErrorNotACrash) {
  v1::PickTargetResponse empty;
  empty.set_decision_id("d1");
  EXPECT_CALL(*stub_, PickTarget(_, _, _)).WillOnce(DoAll(SetArgPointee<2>(empty), Return(grpc::Status::OK)));
  LoopResult r = client_->Run("ch", Attempt({}));
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.error, HasSubstr("empty plan"));
}

// RunOptions reach PickTarget, and the result says per attempt what
// failoverd made of it and how long it took.
TEST_F(ClientTest, RunOptionsReachThePickAndEachAttemptKeepsItsReasonAndLatency) {
  v1::PickTargetRequest seen;
  EXPECT_CALL(*stub_, PickTarget(_, _, _)).WillOnce([&](auto*, const v1::PickTargetRequest& req, auto* resp) {
    seen = req;
    *resp = Plan({"a", "b"});
    return grpc::Status::OK;
  });
  v1::ReportOutcomeResponse next = Verdict(v1::VERDICT_TRY_NEXT, "b");
  next.set_reason(v1::FAILURE_REASON_SERVER_ERROR);
  EXPECT_CALL(*stub_, ReportOutcome(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(next), Return(grpc::Status::OK)))
      .WillOnce(DoAll(SetArgPointee<2>(Verdict(v1::VERDICT_DONE)), Return(grpc::Status::OK)));
  RunOptions options;
  options.session_key = "user-7";
  options.request_id = "req-42";
  options.exclude_targets = {"c"};
  LoopResult r = client_->Run(
      "ch",
      [](const v1::Attempt& a, const AttemptContext&) {
        AttemptOutcome o = a.target() == "a" ? Fail(500) : Ok();
        o.latency = a.target() == "a" ? absl::Milliseconds(30) : absl::Milliseconds(120);
        o.response = a.target() == "a" ? "error page" : "{\"choices\": []}";
        return o;
      },
      options);
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.response, "{\"choices\": []}");
  EXPECT_EQ(seen.session_key(), "user-7");
  EXPECT_EQ(seen.request_id(), "req-42");
  EXPECT_THAT(seen.exclude_targets(), ::testing::ElementsAre("c"));
  ASSERT_EQ(r.attempts.size(), 2u);
  EXPECT_EQ(r.attempts[0].reason, v1::FAILURE_REASON_SERVER_ERROR);
  EXPECT_EQ(r.attempts[0].latency, absl::Milliseconds(30));
  EXPECT_EQ(r.attempts[1].reason, v1::FAILURE_REASON_UNSPECIFIED);
  EXPECT_EQ(r.attempts[1].latency, absl::Milliseconds(120));
}

TEST_F(ClientTest, ARetryDelayPastTheDeadlineAndACancelledRequestStopTheLoop) {
  v1::ReportOutcomeResponse retry = Verdict(v1::VERDICT_RETRY_SAME);
  retry.mutable_retry_delay()->set_seconds(2);
  EXPECT_CALL(*stub_, PickTarget(_, _, _))
      .WillRepeatedly(DoAll(SetArgPointee<2>(Plan({"a", "b"})), Return(grpc::Status::OK)));
  EXPECT_CALL(*stub_, ReportOutcome(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(retry), Return(grpc::Status::OK)))
      .WillOnce(DoAll(SetArgPointee<2>(Verdict(v1::VERDICT_TRY_NEXT, "b")), Return(grpc::Status::OK)));
  RunOptions options;
  options.deadline = now_ + absl::Seconds(1);
  int calls = 0;
  auto fail = [&](const v1::Attempt&, const AttemptContext&) {
    ++calls;
    return Fail(503);
  };
  LoopResult late = client_->Run("ch", fail, options);
  EXPECT_FALSE(late.ok);
  EXPECT_THAT(late.error, HasSubstr("deadline comes before the retry delay (2s) ends"));
  EXPECT_TRUE(slept_.empty()) << "waited although the deadline would pass";
  EXPECT_EQ(calls, 1);

  std::atomic<bool> cancelled{false};
  RunOptions cancellable;
  cancellable.cancelled = &cancelled;
  calls = 0;
  LoopResult stopped = client_->Run(
      "ch",
      [&](const v1::Attempt& a, const AttemptContext& ctx) {
        cancelled = true;  // the caller gives up while the first attempt runs
        return fail(a, ctx);
      },
      cancellable);
  EXPECT_FALSE(stopped.ok);
  EXPECT_EQ(stopped.error, "cancelled by the caller");
  EXPECT_EQ(calls, 1);
}

// With a backlog, one request sends only flush_per_request of it (16) before
// its own pick; the rest follow with later requests or Flush.
TEST_F(ClientTest, ARequestSendsOnlyPartOfABacklogBeforeItsOwnPick) {
  ClientOptions options;
  options.max_buffered_reports = 1000;
  options.background_flush = false;
  options.now = [this] { return now_; };
  Client client(stub_, options);
  client.SetDeclaredOrder("ch", {A("a")});
  EXPECT_CALL(*stub_, PickTarget(_, _, _)).WillRepeatedly(Return(kUnavailable));
  EXPECT_CALL(*stub_, ReportOutcome(_, _, _)).WillRepeatedly(Return(kUnavailable));
  client.Run("ch", Attempt({{"a", {Fail(500)}}}));  // failoverd is down: the rest skip it
  for (int i = 0; i < 99; ++i) client.Run("ch", Attempt({{"a", {Fail(500)}}}));
  ASSERT_EQ(client.buffered_reports(), 100u);
  ::testing::Mock::VerifyAndClearExpectations(stub_.get());
  now_ += absl::Seconds(1);
  EXPECT_CALL(*stub_, ReportOutcome(_, _, _))
      .WillRepeatedly(DoAll(SetArgPointee<2>(Verdict(v1::VERDICT_DONE)), Return(grpc::Status::OK)));
  EXPECT_CALL(*stub_, PickTarget(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(Plan({"a"})), Return(grpc::Status::OK)));
  EXPECT_TRUE(client.Run("ch", Attempt({{"a", {Ok()}}})).ok);
  EXPECT_EQ(client.buffered_reports(), 84u);
  EXPECT_EQ(client.Flush(), 84u);
}

// Polls `done` until it holds or 10 s pass.
bool Eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// By default the backlog is the client's own thread's job: once failoverd
// answers again it goes out without any request (or Flush) sending it.
TEST(ClientBackgroundFlushTest, TheBacklogIsSentByTheClientsThreadNotByRequests) {
  // The mock's answers follow `up`; its expectations are set once, before the
  // client's thread calls it (gMock's are not to be changed while another
  // thread calls the mock, and this one asks failoverd again on its own).
  std::atomic<bool> up{false};
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> sent_by_caller{0}, sent_by_client{0};
  auto stub = std::make_shared<v1::MockDecisionServiceStub>();
  // A failoverd without the batch calls (the mock has no streams): one call per report.
  EXPECT_CALL(*stub, ReportOutcomes(_, _, _)).WillRepeatedly(Return(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "")));
  EXPECT_CALL(*stub, StreamOutcomesRaw(_, _)).WillRepeatedly(Return(nullptr));
  EXPECT_CALL(*stub, PickTarget(_, _, _)).WillRepeatedly([&](auto*, const v1::PickTargetRequest&, auto* plan) {
    if (!up.load()) return kUnavailable;
    *plan = Plan({"a"});
    return grpc::Status::OK;
  });
  EXPECT_CALL(*stub, ReportOutcome(_, _, _))
      .WillRepeatedly([&](auto*, const v1::ReportOutcomeRequest& req, v1::ReportOutcomeResponse* resp) {
        if (!up.load()) return kUnavailable;
        (std::this_thread::get_id() == caller ? sent_by_caller : sent_by_client) += std::max<uint32_t>(req.count(), 1);
        *resp = Verdict(v1::VERDICT_DONE);
        return grpc::Status::OK;
      });
  std::atomic<absl::Time> now{absl::FromUnixSeconds(1'800'000'000)};
  ClientOptions options;
  options.flush_interval = absl::Milliseconds(5);
  options.now = [&] { return now.load(); };
  Client client(stub, options);
  client.SetDeclaredOrder("ch", {A("a")});
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(client.Run("ch", [](const v1::Attempt&) { return Ok(); }).fail_static);
  ASSERT_EQ(client.buffered_reports(), 5u);

  up = true;
  now = now.load() + absl::Seconds(1);  // the backoff is over
  EXPECT_TRUE(client.Run("ch", [](const v1::Attempt&) { return Ok(); }).ok);
  // Delivery is asynchronous: wait (with a deadline) for all five to arrive.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (sent_by_client.load() < 6 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // The backlog and the request's own success (whose verdict is always DONE),
  // all by the client's thread; the five successes on a in one report.
  EXPECT_EQ(sent_by_client.load(), 6);
  EXPECT_EQ(sent_by_caller.load(), 0);
  EXPECT_EQ(client.buffered_reports(), 0u);
}

// A request that finds failoverd gone hands the asking-again to the client's
// thread at once: failoverd is asked again after down_backoff, not after the
// thread's current wait for flush_interval (an hour here) runs out.
TEST(ClientBackgroundFlushTest, AFailoverdFoundGoneIsAskedAgainAfterTheBackoffNotTheFlushInterval) {
  std::atomic<bool> up{true};
  auto stub = std::make_shared<v1::MockDecisionServiceStub>();
  EXPECT_CALL(*stub, PickTarget(_, _, _)).WillRepeatedly([&](auto*, const v1::PickTargetRequest&, auto* plan) {
    if (!up.load()) return kUnavailable;
    *plan = Plan({"a"});
    return grpc::Status::OK;
  });
  EXPECT_CALL(*stub, ReportOutcome(_, _, _)).WillRepeatedly(Return(grpc::Status::OK));
  EXPECT_CALL(*stub, ReportOutcomes(_, _, _)).WillRepeatedly(Return(grpc::Status::OK));
  EXPECT_CALL(*stub, StreamOutcomesRaw(_, _)).WillRepeatedly(Return(nullptr));  // asked again with PickTarget
  ClientOptions options;
  options.flush_interval = absl::Hours(1);
  options.down_backoff = options.max_down_backoff = absl::Milliseconds(5);
  Client client(stub, options);
  auto run = [&] { return client.Run("ch", [](const v1::Attempt&) { return Ok(); }); };
  ASSERT_FALSE(run().fail_static);
  up = false;
  EXPECT_TRUE(run().fail_static);
  up = true;
  EXPECT_TRUE(Eventually([&] { return !run().fail_static; }));
}

// The client's thread sends the backlog in one ReportOutcomes call, each
// report with an id of its own. A failoverd from before that call (it answers
// UNIMPLEMENTED) is asked once, then sent the reports another way (here one
// call each, the mock having no streams) until a minute has passed.
TEST(ClientBackgroundFlushTest, TheBacklogGoesInOneReportOutcomesCallAndAnOlderFailoverdIsAskedOnce) {
  // The mock's answers follow this state; its expectations are set once,
  // before the client's thread calls it (gMock's are not to be changed while
  // another thread calls the mock).
  std::mutex mu;
  bool up = false;             // whether failoverd answers PickTarget
  bool takes_batches = false;  // whether it takes ReportOutcomes
  std::vector<v1::ReportOutcomesRequest> batches;
  int one_by_one = 0;
  int received = 0;  // outcomes failoverd took, either way
  auto stub = std::make_shared<v1::MockDecisionServiceStub>();
  EXPECT_CALL(*stub, PickTarget(_, _, _)).WillRepeatedly([&](auto*, const v1::PickTargetRequest&, auto*) {
    std::lock_guard<std::mutex> lock(mu);
    return up ? grpc::Status::OK : kUnavailable;
  });
  EXPECT_CALL(*stub, ReportOutcomes(_, _, _))
      .WillRepeatedly([&](auto*, const v1::ReportOutcomesRequest& batch, v1::StreamOutcomesResponse* summary) {
        std::lock_guard<std::mutex> lock(mu);
        batches.push_back(batch);
        if (!takes_batches) return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "unknown method");
        received += batch.outcomes_size();
        summary->set_accepted(static_cast<uint32_t>(batch.outcomes_size()));
        return grpc::Status::OK;
      });
  EXPECT_CALL(*stub, ReportOutcome(_, _, _)).WillRepeatedly([&](auto*, const v1::ReportOutcomeRequest&, auto*) {
    std::lock_guard<std::mutex> lock(mu);
    ++one_by_one;
    ++received;
    return grpc::Status::OK;
  });
  EXPECT_CALL(*stub, StreamOutcomesRaw(_, _)).WillRepeatedly(Return(nullptr));  // a stub without streams
  std::atomic<absl::Time> now{absl::FromUnixSeconds(1'800'000'000)};
  ClientOptions options;
  options.flush_interval = absl::Milliseconds(5);
  options.down_backoff = options.max_down_backoff = absl::Milliseconds(5);
  options.now = [&] { return now.load(); };
  Client client(stub, options);
  client.SetDeclaredOrder("ch", {A("a")});
  // failoverd goes away; `n` failures are buffered (one report each).
  auto buffer_failures = [&](int n) {
    {
      std::lock_guard<std::mutex> lock(mu);
      up = false;
    }
    for (int i = 0; i < n; ++i) EXPECT_TRUE(client.Run("ch", [](const v1::Attempt&) { return Fail(500); }).fail_static);
    ASSERT_EQ(client.buffered_reports(), static_cast<size_t>(n));
  };
  // failoverd answers again, taking batches or not. Returns once it has taken
  // `total` outcomes in all (not once the backlog is empty: the client empties
  // it before its call is made).
  auto come_back = [&](bool batches_too, int total) {
    {
      std::lock_guard<std::mutex> lock(mu);
      takes_batches = batches_too;
      up = true;
    }
    EXPECT_TRUE(Eventually([&] {
      std::lock_guard<std::mutex> lock(mu);
      return received == total;
    })) << "failoverd took " << received << " outcomes, not " << total;
    EXPECT_EQ(client.buffered_reports(), 0u);
  };
  auto calls = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return std::make_pair(batches.size(), one_by_one);
  };

  ASSERT_NO_FATAL_FAILURE(buffer_failures(3));
  come_back(/*batches_too=*/true, 3);
  ASSERT_EQ(calls(), std::make_pair(size_t{1}, 0));
  std::set<uint64_t> sequences;
  for (const v1::ReportOutcomeRequest& r : batches[0].outcomes()) {
    EXPECT_FALSE(r.report_id().sender().empty());
    sequences.insert(r.report_id().sequence());
  }
  EXPECT_EQ(sequences.size(), 3u) << batches[0].ShortDebugString();

  ASSERT_NO_FATAL_FAILURE(buffer_failures(3));
  come_back(/*batches_too=*/false, 6);
  EXPECT_EQ(calls(), std::make_pair(size_t{2}, 3)) << "refused once, then one call per report";
  ASSERT_NO_FATAL_FAILURE(buffer_failures(2));
  come_back(/*batches_too=*/false, 8);
  EXPECT_EQ(calls(), std::make_pair(size_t{2}, 5)) << "not asked again within the minute";
  now = now.load() + absl::Minutes(1);
  ASSERT_NO_FATAL_FAILURE(buffer_failures(2));
  come_back(/*batches_too=*/true, 10);
  EXPECT_EQ(calls(), std::make_pair(size_t{3}, 5)) << "asked again a minute later";
}

TEST_F(ClientTest, ANonTransientPickErrorIsReturned) {
  EXPECT_CALL(*stub_, PickTarget(_, _, _))
      .WillOnce(Return(grpc::Status(grpc::StatusCode::NOT_FOUND, "chain \"ch\" not found")));
  LoopResult r = client_->Run("ch", Attempt({}));
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, "chain \"ch\" not found");
}

// --- hedging ------------------------------------------------------------------

v1::PickTargetResponse HedgedPlan(absl::Duration after) {
  v1::PickTargetResponse p = Plan({"a", "b", "c"});
  p.mutable_hedge_after()->set_seconds(absl::ToInt64Seconds(after));
  p.mutable_hedge_after()->set_nanos(static_cast<int32_t>(absl::ToInt64Nanoseconds(after) % 1'000'000'000));
  return p;
}

// A latch the attempts of one test wait on, each with a deadline.
class Signals {
 public:
  void Set(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    set_.push_back(name);
    cv_.notify_all();
  }
  bool Wait(const std::string& name, absl::Duration deadline = absl::Seconds(10)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, absl::ToChronoNanoseconds(deadline),
                        [&] { return std::find(set_.begin(), set_.end(), name) != set_.end(); });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> set_;
};

class HedgeTest : public ClientTest {
 protected:
  // Every report is kept and answered with `verdicts` in turn.
  void ExpectReports(std::vector<v1::ReportOutcomeResponse> verdicts) {
    EXPECT_CALL(*stub_, ReportOutcome(_, _, _))
        .Times(static_cast<int>(verdicts.size()))
        .WillRepeatedly([this, verdicts](auto*, const v1::ReportOutcomeRequest& req, v1::ReportOutcomeResponse* resp) {
          std::lock_guard<std::mutex> lock(reports_mu_);
          *resp = verdicts[reports_.size()];
          reports_.push_back(req);
          return grpc::Status::OK;
        });
  }
  std::mutex reports_mu_;
  std::vector<v1::ReportOutcomeRequest> reports_;
  Signals signals_;
};

// a does not answer; b starts after hedge_after and succeeds; a is told to
// stop and is reported as cancelled.
TEST_F(HedgeTest, ASlowFirstAttemptIsHedgedAndTheWinnerServesTheRequest) {
  EXPECT_CALL(*stub_, PickTarget(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(HedgedPlan(absl::Milliseconds(5))), Return(grpc::Status::OK)));
  ExpectReports({Verdict(v1::VERDICT_DONE), Verdict(v1::VERDICT_FAIL)});
  RunOptions options;
  options.idempotent = true;
  bool a_saw_cancel = false;
  LoopResult r = client_->Run(
      "ch",
      [&](const v1::Attempt& a, const AttemptContext& ctx) {
        if (a.target() == "b") {
          EXPECT_TRUE(ctx.hedged);
          EXPECT_EQ(ctx.number, 2u);
          AttemptOutcome o = Ok();
          o.response = "from b";
          return o;
        }
        // The slow one: waits until it is told to stop.
        for (int i = 0; i < 10000 && !ctx.Cancelled(); ++i) signals_.Wait("never", absl::Milliseconds(1));
        a_saw_cancel = ctx.Cancelled();
        return Fail(504);
      },
      options);
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.served_by, "b");
  EXPECT_EQ(r.response, "from b") << "the winner's reply comes out of Run";
  // a returns once told to stop and then reports itself.
  ASSERT_TRUE(Eventually([&] {
    std::lock_guard<std::mutex> lock(reports_mu_);
    return reports_.size() == 2;
  }));
  EXPECT_TRUE(a_saw_cancel);
  // The two attempts report on their own threads: in either order.
  const bool b_first = reports_[0].target() == "b";
  const v1::ReportOutcomeRequest& won = reports_[b_first ? 0 : 1];
  const v1::ReportOutcomeRequest& lost = reports_[b_first ? 1 : 0];
  EXPECT_EQ(won.target(), "b");
  EXPECT_TRUE(won.has_success());
  EXPECT_TRUE(won.hedged());
  EXPECT_EQ(lost.target(), "a");
  EXPECT_TRUE(lost.failure().cancelled()) << "the loser is cancelled, not a 504 against its target";
  EXPECT_FALSE(lost.hedged());
  ASSERT_EQ(r.attempts.size(), 2u);
  EXPECT_TRUE(r.attempts[0].hedged);
}

// b succeeds while a goes on ignoring the cancel: Run returns with b at once,
// a is reported (cancelled) from the pool when it finally returns.
TEST_F(HedgeTest, RunReturnsOnTheFirstSuccessWithoutWaitingForTheOther) {
  EXPECT_CALL(*stub_, PickTarget(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(HedgedPlan(absl::Milliseconds(1))), Return(grpc::Status::OK)));
  ExpectReports({Verdict(v1::VERDICT_DONE), Verdict(v1::VERDICT_FAIL)});
  RunOptions options;
  options.idempotent = true;
  auto signals = std::make_shared<Signals>();  // owned by the attempt too: a outlives Run
  LoopResult r = client_->Run(
      "ch",
      [signals](const v1::Attempt& a, const AttemptContext&) {
        if (a.target() == "b") return Ok();
        signals->Wait("Run returned");
        signals->Set("a returned");
        return Fail(504);
      },
      options);
  const bool a_still_running = !signals->Wait("a returned", absl::ZeroDuration());
  signals->Set("Run returned");
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.served_by, "b");
  EXPECT_TRUE(a_still_running) << "Run waited for the slower attempt";
  ASSERT_EQ(r.attempts.size(), 2u);
  EXPECT_EQ(r.attempts[1].target, "a");
  EXPECT_EQ(r.attempts[1].verdict, v1::VERDICT_UNSPECIFIED) << "not reported yet";
  ASSERT_TRUE(Eventually([&] {
    std::lock_guard<std::mutex> lock(reports_mu_);
    return reports_.size() == 2;
  }));
  EXPECT_EQ(reports_[0].target(), "b");
  EXPECT_EQ(reports_[1].target(), "a");
  EXPECT_TRUE(reports_[1].failure().cancelled());
}

// Hedged requests one after another reuse the pool's threads.
TEST_F(HedgeTest, HedgedAttemptsRunOnReusedThreads) {
  constexpr int kRequests = 20;
  EXPECT_CALL(*stub_, PickTarget(_, _, _))
      .WillRepeatedly(DoAll(SetArgPointee<2>(HedgedPlan(absl::Milliseconds(1))), Return(grpc::Status::OK)));
  EXPECT_CALL(*stub_, ReportOutcome(_, _, _)).WillRepeatedly(Return(grpc::Status::OK));
  RunOptions options;
  options.idempotent = true;
  auto tids = std::make_shared<std::pair<std::mutex, std::set<long>>>();
  for (int i = 0; i < kRequests; ++i) {
    LoopResult r = client_->Run(
        "ch",
        [tids](const v1::Attempt& a, const AttemptContext& ctx) {
          {
            std::lock_guard<std::mutex> lock(tids->first);
            tids->second.insert(static_cast<long>(syscall(SYS_gettid)));
          }
          if (a.target() == "b") return Ok();
          while (!ctx.Cancelled()) std::this_thread::sleep_for(std::chrono::microseconds(200));
          return Fail(504);
        },
        options);
    ASSERT_TRUE(r.ok);
  }
  std::lock_guard<std::mutex> lock(tids->first);
  // A thread per attempt would be 40 thread ids; kept threads are a handful.
  EXPECT_LE(tids->second.size(), 8u);
}

TEST_F(HedgeTest, AFirstAttemptThatAnswersInTimeIsNotHedged) {
  EXPECT_CALL(*stub_, PickTarget(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(HedgedPlan(absl::Hours(1))), Return(grpc::Status::OK)));
  ExpectReports({Verdict(v1::VERDICT_DONE)});
  RunOptions options;
  options.idempotent = true;
  LoopResult r = client_->Run(
      "ch", [&](const v1::Attempt& a, const AttemptContext&) { return a.target() == "a" ? Ok() : Fail(500); },
      options);
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.served_by, "a");
  ASSERT_EQ(reports_.size(), 1u);
  EXPECT_FALSE(reports_[0].hedged());
}

TEST_F(HedgeTest, ARequestThatIsNotIdempotentIsNeverHedged) {
  EXPECT_CALL(*stub_, PickTarget(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(HedgedPlan(absl::Milliseconds(1))), Return(grpc::Status::OK)));
  ExpectReports({Verdict(v1::VERDICT_DONE)});
  std::vector<std::string> called;
  LoopResult r = client_->Run(
      "ch",
      [&](const v1::Attempt& a, const AttemptContext&) {
        called.push_back(a.target());
        // Long past hedge_after: a hedge would have started b by now.
        EXPECT_FALSE(signals_.Wait("b started", absl::Milliseconds(50)));
        return Ok();
      },
      RunOptions{});
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(called, std::vector<std::string>{"a"});
}

// Both fail: both are reported (neither cancelled) and the verdict on the
// one that finished last decides: here TRY_NEXT to c.
TEST_F(HedgeTest, WhenBothFailTheLastVerdictDecidesWhatFollows) {
  EXPECT_CALL(*stub_, PickTarget(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(HedgedPlan(absl::Milliseconds(1))), Return(grpc::Status::OK)));
  ExpectReports({Verdict(v1::VERDICT_TRY_NEXT, "b"), Verdict(v1::VERDICT_TRY_NEXT, "c"), Verdict(v1::VERDICT_DONE)});
  RunOptions options;
  options.idempotent = true;
  LoopResult r = client_->Run(
      "ch",
      [&](const v1::Attempt& a, const AttemptContext& ctx) {
        if (a.target() == "b") {
          signals_.Set("b started");
          return Fail(502);
        }
        if (a.target() == "a") {
          EXPECT_TRUE(signals_.Wait("b started"));
          EXPECT_FALSE(ctx.Cancelled());
          return Fail(500);
        }
        EXPECT_EQ(ctx.number, 3u);
        return Ok();
      },
      options);
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.served_by, "c");
  ASSERT_EQ(reports_.size(), 3u);
  EXPECT_FALSE(reports_[0].failure().cancelled());
  EXPECT_FALSE(reports_[1].failure().cancelled());
  EXPECT_EQ(reports_[2].target(), "c");
}

}  // namespace
}  // namespace failover::client
