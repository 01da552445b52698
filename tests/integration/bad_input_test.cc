// Bad input end to end (DESIGN 3.11): bytes that are not a request, names that
// are not UTF-8, messages past the size limit, every bound a caller controls,
// and reports or probe results that belong to nothing. Each gets a clear status
// naming the field or the bound, and the server's state is unchanged after.
#include <future>

#include "grpcpp/generic/generic_stub.h"

#include "gmock/gmock.h"
#include "tests/support/api_test.h"

namespace failover::testing {
namespace {

using ::testing::HasSubstr;

class BadInputTest : public ApiTest {
 protected:
  void SetUp() override {
    StartServer({"--max-message-bytes", "65536", "--max-watchers", "2", "--max-chains", "3"});
    v1::ApplyRequest config;
    AddTarget(&config, "a");
    AddTarget(&config, "b");
    AddChain(&config, "ch", {"a", "b"});
    ASSERT_TRUE(Apply(config).ok());
    before_ = Status();
    events_before_ = Events().size();
  }

  // Sends bytes as the request of `method`, bypassing the generated stubs.
  grpc::Status RawCall(const std::string& method, const std::string& bytes) {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1), response;
    auto ctx = Ctx();
    grpc::GenericStub stub(proc_->Channel());
    std::promise<grpc::Status> done;
    stub.UnaryCall(ctx.get(), method, grpc::StubOptions(), &request, &response,
                   [&](grpc::Status s) { done.set_value(std::move(s)); });
    return done.get_future().get();
  }

  v1::StatusResponse Status() {
    v1::StatusResponse status;
    EXPECT_TRUE(admin_->GetStatus(Ctx().get(), v1::GetStatusRequest(), &status).ok());
    return status;
  }

  // Nothing changed since SetUp: the same config generation, no new event,
  // and every chain's and target's status exactly as it was (but for the
  // next check: a Probe call hands checks out whatever results it carries).
  void ExpectUnchanged() {
    v1::StatusResponse now = Status();
    for (auto* status : {&now, &before_}) {
      for (auto& t : *status->mutable_targets()) t.clear_next_check();
      for (auto& c : *status->mutable_chains()) {
        for (auto& t : *c.mutable_targets()) t.clear_next_check();
      }
    }
    EXPECT_EQ(now.config_generation(), before_.config_generation());
    EXPECT_EQ(Events().size(), events_before_);
    ASSERT_EQ(now.targets_size(), before_.targets_size());
    for (int i = 0; i < now.targets_size(); ++i) {
      EXPECT_EQ(now.targets(i).SerializeAsString(), before_.targets(i).SerializeAsString())
          << now.targets(i).DebugString();
    }
    ASSERT_EQ(now.chains_size(), before_.chains_size());
    for (int i = 0; i < now.chains_size(); ++i) {
      EXPECT_EQ(now.chains(i).SerializeAsString(), before_.chains(i).SerializeAsString());
    }
  }

  v1::StatusResponse before_;
  size_t events_before_ = 0;
};

void ExpectError(const grpc::Status& s, grpc::StatusCode code, const std::string& message) {
  EXPECT_EQ(s.error_code(), code) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr(message));
}

TEST_F(BadInputTest, InvalidUtf8AndGarbageBytesNameTheFieldAndChangeNothing) {
  // PickTargetRequest.chain (field 1) = "a\xffb".
  ExpectError(RawCall("/failover.v1.DecisionService/PickTarget", std::string("\x0a\x03" "a\xff" "b", 5)),
              grpc::StatusCode::INVALID_ARGUMENT, "chain: is not valid UTF-8");
  // ApplyRequest.targets[1].name: the second Target message carries the bad name.
  const std::string good_target("\x0a\x03\x0a\x01z", 5);
  const std::string bad_target("\x0a\x05\x0a\x03x\xc3(", 7);
  ExpectError(RawCall("/failover.v1.AdminService/Apply", good_target + bad_target),
              grpc::StatusCode::INVALID_ARGUMENT, "targets[1].name: is not valid UTF-8");
  ExpectError(RawCall("/failover.v1.DecisionService/ReportOutcome", "\xff\xff\xff\xff"),
              grpc::StatusCode::INVALID_ARGUMENT, "request: is not a valid failover.v1.ReportOutcomeRequest");
  // A name that is UTF-8 but not a name is refused by validation, escaped in the message.
  v1::ApplyRequest accented;
  AddTarget(&accented, "caf\xc3\xa9");
  ExpectError(Apply(accented), grpc::StatusCode::INVALID_ARGUMENT, "targets[0].name: may only contain");
  ExpectUnchanged();
  // The complaint from libprotobuf went to failoverd's log, not raw to stderr.
  EXPECT_THAT(proc_->Stderr(), ::testing::Not(HasSubstr("[libprotobuf ERROR")));
}

TEST_F(BadInputTest, AMessagePastTheSizeLimitIsRefusedWhole) {
  v1::ApplyRequest huge;
  for (int i = 0; i < 2000; ++i) AddTarget(&huge, "target-with-a-long-enough-name-" + std::to_string(i));
  ASSERT_GT(huge.ByteSizeLong(), 65536u);
  ExpectError(Apply(huge), grpc::StatusCode::RESOURCE_EXHAUSTED, "65536");
  ExpectUnchanged();
}

// An error that quotes 50 KB of the caller's input reaches it as that error
// (quoted in part), not as RESOURCE_EXHAUSTED on gRPC's metadata.
TEST_F(BadInputTest, WhatAnErrorQuotesOfTheInputIsBounded) {
  v1::ApplyRequest config;
  AddTarget(&config, "a");
  AddTarget(&config, "b");
  AddChain(&config, "ch", {"a", "b"});
  ASSERT_TRUE(Apply(config).ok());
  v1::PickTargetRequest pick;
  pick.set_chain("ch");
  pick.add_exclude_targets(std::string(50 * 1024, 'x'));  // under this fixture's 64 KiB request limit
  v1::PickTargetResponse resp;
  const grpc::Status s = decide_->PickTarget(Ctx().get(), pick, &resp);
  ExpectError(s, grpc::StatusCode::INVALID_ARGUMENT, "exclude_targets[0]: \"xxxx");
  EXPECT_LE(s.error_message().size(), 2048u);
}

TEST_F(BadInputTest, EveryCallerControlledBoundNamesItself) {
  v1::ApplyRequest long_name;
  AddTarget(&long_name, std::string(129, 'n'));
  ExpectError(Apply(long_name), grpc::StatusCode::INVALID_ARGUMENT, "targets[0].name: must be at most 128 characters");

  v1::ApplyRequest labels;
  v1::Target* labelled = AddTarget(&labels, "c");
  for (int i = 0; i < 65; ++i) (*labelled->mutable_labels())["k" + std::to_string(i)] = "v";
  ExpectError(Apply(labels), grpc::StatusCode::INVALID_ARGUMENT, "at most 64 labels, got 65");

  v1::ApplyRequest wide;
  v1::Chain* chain = wide.add_chains();
  chain->set_name("wide");
  for (int i = 0; i < 65; ++i) {
    AddTarget(&wide, "w" + std::to_string(i));
    chain->add_targets("w" + std::to_string(i));
  }
  ExpectError(Apply(wide), grpc::StatusCode::INVALID_ARGUMENT, "chains[0].targets: a chain needs 2..64 targets, got 65");

  v1::ApplyRequest too_many;  // --max-chains 3, one exists
  for (const std::string name : {"c1", "c2", "c3"}) {
    v1::Chain* c = too_many.add_chains();
    c->set_name(name);
    c->add_targets("a");
    c->add_targets("b");
  }
  ExpectError(Apply(too_many), grpc::StatusCode::RESOURCE_EXHAUSTED,
              "chains: at most 3 chains in all (--max-chains); this change would make 4");

  v1::ApplyRequest endless;
  AddTarget(&endless, "slow")->mutable_timeout()->set_seconds(1000 * 3600);
  ExpectError(Apply(endless), grpc::StatusCode::INVALID_ARGUMENT, "targets[0].timeout: must be at most 720h, got 1000h");

  v1::PickTargetRequest pick;
  pick.set_chain("ch");
  for (int i = 0; i < 65; ++i) pick.add_exclude_targets("a");
  v1::PickTargetResponse plan;
  ExpectError(decide_->PickTarget(Ctx().get(), pick, &plan), grpc::StatusCode::INVALID_ARGUMENT,
              "exclude_targets: at most 64 entries, got 65");

  v1::ProbeRequest probe;
  for (int i = 0; i < 1025; ++i) probe.add_results()->set_outcome(v1::PROBE_OUTCOME_PASS);
  v1::ProbeResponse tasks;
  ExpectError(decide_->Probe(Ctx().get(), probe, &tasks), grpc::StatusCode::INVALID_ARGUMENT,
              "results: at most 1024 results per call, got 1025");
  v1::ProbeRequest backwards;
  v1::ProbeResult* timed = backwards.add_results();
  timed->set_outcome(v1::PROBE_OUTCOME_PASS);
  timed->mutable_latency()->set_seconds(-2);
  ExpectError(decide_->Probe(Ctx().get(), backwards, &tasks), grpc::StatusCode::INVALID_ARGUMENT,
              "results[0].latency: must not be negative, got -2s");
  ExpectUnchanged();
}

TEST_F(BadInputTest, WatchersPastTheLimitAreRefused) {
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::Event>>> streams;
  for (int i = 0; i < 2; ++i) {
    contexts.push_back(Ctx());
    streams.push_back(decide_->WatchEvents(contexts.back().get(), v1::WatchEventsRequest()));
    v1::Event snapshot;
    ASSERT_TRUE(streams.back()->Read(&snapshot));
    EXPECT_TRUE(snapshot.has_snapshot());
  }
  auto ctx = Ctx();
  auto third = decide_->WatchEvents(ctx.get(), v1::WatchEventsRequest());
  v1::Event event;
  EXPECT_FALSE(third->Read(&event));
  ExpectError(third->Finish(), grpc::StatusCode::RESOURCE_EXHAUSTED,
              "watchers: at most 2 WatchEvents streams at once (--max-watchers)");
  // A watcher that leaves frees its place.
  contexts[0]->TryCancel();
  v1::Event drain;
  while (streams[0]->Read(&drain)) {
  }
  streams[0]->Finish();
  EXPECT_TRUE(Eventually([&] {
    auto c = Ctx();
    auto again = decide_->WatchEvents(c.get(), v1::WatchEventsRequest());
    v1::Event first;
    const bool ok = again->Read(&first);
    c->TryCancel();
    again->Finish();
    return ok;
  }));
  ExpectUnchanged();
}

TEST_F(BadInputTest, ReportsAndProbeResultsThatBelongToNothingChangeNothing) {
  v1::ReportOutcomeRequest forged;
  forged.set_decision_id("not-a-decision");
  forged.set_target("a");
  forged.mutable_failure()->set_http_status(503);
  v1::ReportOutcomeResponse verdict;
  ExpectError(decide_->ReportOutcome(Ctx().get(), forged, &verdict), grpc::StatusCode::INVALID_ARGUMENT,
              "decision_id: \"not-a-decision\" is not a decision id that PickTarget returned");

  v1::ReportOutcomeRequest stranger = forged;
  stranger.set_decision_id("");
  stranger.set_target("nobody");
  ExpectError(decide_->ReportOutcome(Ctx().get(), stranger, &verdict), grpc::StatusCode::NOT_FOUND,
              "target \"nobody\" not found");

  v1::ProbeRequest foreign;
  foreign.set_prober_id("agent-x");
  v1::ProbeResult* result = foreign.add_results();
  result->set_lease_id("lease-that-was-never-handed-out");
  result->set_outcome(v1::PROBE_OUTCOME_FAIL);
  result->mutable_failure()->set_http_status(500);
  v1::ProbeResponse probe;
  ASSERT_TRUE(decide_->Probe(Ctx().get(), foreign, &probe).ok());
  EXPECT_EQ(probe.results_accepted(), 0u);
  EXPECT_EQ(probe.results_ignored(), 1u);
  ExpectUnchanged();
}

}  // namespace
}  // namespace failover::testing
