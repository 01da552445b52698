// Local decisions (DESIGN 3.13) against a real failoverd: a client's copy of
// the state, kept by FollowState, plans exactly as failoverd does through
// every kind of change; a trip reported by one caller reaches another's local
// decisions; decisions go on from the copy while failoverd is away, and the
// copy says how stale it is; without a copy decisions are failoverd's.
#include <signal.h>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/local_decisions.h"
#include "gmock/gmock.h"
#include "tests/support/api_test.h"

namespace failover::testing {
namespace {

// A deadline for the copy's first load, not a speed: a ThreadSanitizer build
// under load has been seen to take over 10 s to connect the first time.
constexpr absl::Duration kFirstLoad = absl::Seconds(120);

using ::testing::ElementsAreArray;

client::AttemptOutcome Answer(bool ok) {
  client::AttemptOutcome o;
  o.ok = ok;
  if (!ok) o.failure.set_http_status(500);
  return o;
}

class LocalDecisionsTest : public ApiTest {
 protected:
  void SetUp() override { StartServer(); }

  std::unique_ptr<client::LocalDecisions> Follow() {
    return std::make_unique<client::LocalDecisions>(v1::DecisionService::NewStub(proc_->Channel()),
                                                    client::ConnectionOptions());
  }

  // failoverd's next event sequence: its newest event's, plus one.
  uint64_t NextSequence() {
    std::vector<v1::Event> events = Events();
    return events.empty() ? 1 : events.back().sequence() + 1;
  }

  static std::vector<std::string> Targets(const v1::PickTargetResponse& plan) {
    std::vector<std::string> out;
    for (const v1::Attempt& a : plan.attempts()) out.push_back(a.target());
    return out;
  }

  // The copy has caught up with failoverd, and plans each chain as it does.
  void ExpectSamePlans(client::LocalDecisions& local, const std::vector<std::string>& chains) {
    ASSERT_TRUE(local.WaitForSequence(NextSequence(), absl::Seconds(10))) << local.last_error();
    for (const std::string& chain : chains) {
      SCOPED_TRACE(chain);
      v1::PickTargetRequest req;
      req.set_chain(chain);
      v1::PickTargetResponse remote, mine;
      const grpc::Status rs = decide_->PickTarget(Ctx().get(), req, &remote);
      const grpc::Status ls = local.Pick(req, &mine);
      ASSERT_EQ(ls.error_code(), rs.error_code()) << ls.error_message() << " vs " << rs.error_message();
      EXPECT_EQ(ls.error_message(), rs.error_message());
      if (!rs.ok()) continue;
      EXPECT_THAT(Targets(mine), ElementsAreArray(Targets(remote)));
      EXPECT_EQ(mine.chain_state(), remote.chain_state());
      EXPECT_EQ(mine.active_target(), remote.active_target());
      EXPECT_EQ(mine.config_generation(), remote.config_generation());
    }
  }

  grpc::Status Admin(const std::function<grpc::Status(grpc::ClientContext*)>& call) {
    return call(Ctx().get());
  }
};

TEST_F(LocalDecisionsTest, CopyPlansAsFailoverdDoesThroughEveryKindOfChange) {
  v1::ApplyRequest config;
  for (const char* t : {"a", "b", "c"}) AddTarget(&config, t);
  AddChain(&config, "x", {"a", "b", "c"});
  AddChain(&config, "y", {"c", "b"});
  ASSERT_TRUE(Apply(config).ok());
  std::unique_ptr<client::LocalDecisions> local = Follow();
  ASSERT_TRUE(local->WaitReady(kFirstLoad)) << local->last_error();
  EXPECT_EQ(local->Staleness(), absl::ZeroDuration());
  const std::vector<std::string> chains = {"x", "y"};
  ExpectSamePlans(*local, chains);

  Report("", "a", 503);  // trips a (trip.errors 1): x falls back to b
  ExpectSamePlans(*local, chains);
  v1::PickTargetRequest x;
  x.set_chain("x");
  v1::PickTargetResponse plan;
  ASSERT_TRUE(local->Pick(x, &plan).ok());
  EXPECT_EQ(plan.active_target(), "b");

  ASSERT_TRUE(Admin([&](grpc::ClientContext* ctx) {
                v1::PinChainRequest req;
                req.set_chain("y");
                req.set_target("b");
                v1::ChainView view;
                return admin_->PinChain(ctx, req, &view);
              }).ok());
  ExpectSamePlans(*local, chains);
  ASSERT_TRUE(Admin([&](grpc::ClientContext* ctx) {
                v1::SetTargetEnabledRequest req;
                req.set_target("c");
                req.set_enabled(false);
                v1::TargetView view;
                return admin_->SetTargetEnabled(ctx, req, &view);
              }).ok());
  ExpectSamePlans(*local, chains);

  // Every usable target failed over by hand: UNAVAILABLE here as there.
  for (const char* t : {"a", "b"}) {
    ASSERT_TRUE(Admin([&](grpc::ClientContext* ctx) {
                  v1::TriggerFailoverRequest req;
                  req.set_target(t);
                  req.set_reason("maintenance");
                  v1::TargetView view;
                  return admin_->TriggerFailover(ctx, req, &view);
                }).ok());
  }
  ExpectSamePlans(*local, {"x"});
  EXPECT_EQ(local->Pick(x, &plan).error_code(), grpc::StatusCode::UNAVAILABLE);

  // Config edits: a chain reordered and a new target; a chain deleted.
  v1::ApplyRequest edit;
  AddTarget(&edit, "d");
  AddChain(&edit, "x", {"d", "a", "b"});
  ASSERT_TRUE(Apply(edit).ok());
  ExpectSamePlans(*local, chains);
  ASSERT_TRUE(Admin([&](grpc::ClientContext* ctx) {
                v1::DeleteChainRequest req;
                req.set_name("y");
                v1::DeleteResponse resp;
                return admin_->DeleteChain(ctx, req, &resp);
              }).ok());
  ExpectSamePlans(*local, chains);  // NOT_FOUND for y on both
  EXPECT_EQ(local->loads(), 1u);     // one stream throughout: every change came live
}

TEST_F(LocalDecisionsTest, CopiesLeaseTheirPartsOfAnRpmCapSoTogetherWithFailoverdTheyPlanItOnce) {
  constexpr int kCap = 12;
  v1::ApplyRequest config;
  AddTarget(&config, "a")->mutable_limits()->set_rpm(kCap);
  AddTarget(&config, "b");
  AddChain(&config, "ch", {"a", "b"});
  ASSERT_TRUE(Apply(config).ok());
  std::unique_ptr<client::LocalDecisions> busy = Follow();
  std::unique_ptr<client::LocalDecisions> idle = Follow();
  ASSERT_TRUE(busy->WaitReady(kFirstLoad)) << busy->last_error();
  ASSERT_TRUE(idle->WaitReady(kFirstLoad)) << idle->last_error();
  v1::PickTargetRequest req;
  req.set_chain("ch");
  auto plans_a = [&](client::LocalDecisions& copy) {
    v1::PickTargetResponse plan;
    return copy.Pick(req, &plan).ok() && plan.attempts_size() > 0 && plan.attempts(0).target() == "a";
  };
  // One copy's callers use the cap: it gets more as they use what it holds
  // (the idle copy keeps a small part), and failoverd plans what is left.
  // Before, each copy and failoverd planned the whole cap: three times it.
  // A round that runs into the next minute is taken again.
  int busy_planned = 0, idle_planned = 0, failoverd_planned = 0;
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(AwaitEarlyInAMinute(40));
    const int64_t minute = absl::ToUnixSeconds(absl::Now()) / 60;
    busy_planned = idle_planned = failoverd_planned = 0;
    const absl::Time deadline = absl::Now() + absl::Seconds(15);
    while (busy_planned < kCap - 1 && absl::Now() < deadline) busy_planned += plans_a(*busy);
    for (int k = 0; k < 200; ++k) busy_planned += plans_a(*busy);
    for (int k = 0; k < 5; ++k) idle_planned += plans_a(*idle);
    for (int k = 0; k < 5; ++k) failoverd_planned += Pick("ch").attempts(0).target() == "a";
    if (absl::ToUnixSeconds(absl::Now()) / 60 == minute) break;
  }
  EXPECT_GE(busy_planned, kCap - 1) << "the busy copy's share did not follow its callers";
  EXPECT_LE(idle_planned, 1);
  EXPECT_EQ(busy_planned + idle_planned + failoverd_planned, kCap)
      << "busy copy " << busy_planned << ", idle copy " << idle_planned << ", failoverd " << failoverd_planned;
}

// A copy that closes gives back what it held of a cap and did not plan, so
// failoverd (and other copies) can plan it in the same minute. Before, the
// share stayed booked until the minute ended.
TEST_F(LocalDecisionsTest, AClosingCopyGivesBackTheRpmItHeldAndDidNotPlan) {
  constexpr int kCap = 640;  // a copy's first ask is a quarter of cap / 16: 10
  v1::ApplyRequest config;
  AddTarget(&config, "a")->mutable_limits()->set_rpm(kCap);
  AddTarget(&config, "b");
  AddChain(&config, "ch", {"a", "b"});
  ASSERT_TRUE(Apply(config).ok());
  v1::PickTargetRequest req;
  req.set_chain("ch");
  int copy_planned = 0;
  int failoverd_planned = 0;
  // A round that runs into the next minute is taken again.
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(AwaitEarlyInAMinute(40));
    const int64_t minute = absl::ToUnixSeconds(absl::Now()) / 60;
    copy_planned = failoverd_planned = 0;
    {
      std::unique_ptr<client::LocalDecisions> copy = Follow();
      ASSERT_TRUE(copy->WaitReady(kFirstLoad)) << copy->last_error();
      // It plans none of the cap until it holds a share.
      const absl::Time deadline = absl::Now() + absl::Seconds(10);
      while (copy_planned == 0 && absl::Now() < deadline) {
        v1::PickTargetResponse plan;
        copy_planned += copy->Pick(req, &plan).ok() && plan.attempts_size() > 0 && plan.attempts(0).target() == "a";
      }
      ASSERT_EQ(copy_planned, 1) << "the copy got no share of the cap";
    }
    for (int k = 0; k < kCap + 20; ++k) failoverd_planned += Pick("ch").attempts(0).target() == "a";
    if (absl::ToUnixSeconds(absl::Now()) / 60 == minute) break;
  }
  EXPECT_EQ(failoverd_planned, kCap - copy_planned)
      << "failoverd planned the cap less the closed copy's whole share, not less what it planned";
}

TEST_F(LocalDecisionsTest, ManualFailoverOfEveryTargetStopsTheLoopWithoutTraffic) {
  v1::ApplyRequest config;
  AddTarget(&config, "a");
  AddTarget(&config, "b");
  AddChain(&config, "ch", {"a", "b"});
  ASSERT_TRUE(Apply(config).ok());
  client::ClientOptions options;
  options.failoverd_budget = absl::Seconds(60);  // a loaded machine never sends these fail-static
  options.connection.server = proc_->address();
  auto client = client::ConnectLocal(options);
  ASSERT_TRUE(client.ok()) << client.status();
  auto* local = static_cast<client::LocalDecisions*>((*client)->local());
  for (const char* t : {"a", "b"}) {
    ASSERT_TRUE(Admin([&](grpc::ClientContext* ctx) {
                  v1::TriggerFailoverRequest req;
                  req.set_target(t);
                  v1::TargetView view;
                  return admin_->TriggerFailover(ctx, req, &view);
                }).ok());
  }
  ASSERT_TRUE(local->WaitForSequence(NextSequence(), absl::Seconds(10))) << local->last_error();
  int attempts = 0;
  client::LoopResult r = (*client)->Run("ch", [&](const v1::Attempt&) {
    ++attempts;
    return Answer(true);
  });
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.decided_locally);
  EXPECT_EQ(attempts, 0);
  EXPECT_THAT(r.error, ::testing::HasSubstr("a"));
}

TEST_F(LocalDecisionsTest, TripReportedByOneCallerReachesAnothersLocalDecisions) {
  v1::ApplyRequest config;
  AddTarget(&config, "a");
  AddTarget(&config, "b");
  AddChain(&config, "ch", {"a", "b"});  // trip.errors 1
  ASSERT_TRUE(Apply(config).ok());
  client::ClientOptions options;
  options.failoverd_budget = absl::Seconds(60);  // a loaded machine never sends these fail-static
  options.connection.server = proc_->address();
  auto first = client::ConnectLocal(options);
  auto second = client::ConnectLocal(options);
  ASSERT_TRUE(first.ok() && second.ok());
  auto* second_local = static_cast<client::LocalDecisions*>((*second)->local());
  ASSERT_TRUE(static_cast<client::LocalDecisions*>((*first)->local())->WaitReady(kFirstLoad));
  ASSERT_TRUE(second_local->WaitReady(kFirstLoad));

  // The first caller's a fails: its own copy sends it on to b at once.
  client::LoopResult r = (*first)->Run("ch", [](const v1::Attempt& a) { return Answer(a.target() == "b"); });
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(r.decided_locally);
  EXPECT_EQ(r.served_by, "b");
  ASSERT_EQ(r.attempts.size(), 2u);
  EXPECT_EQ(r.attempts[0].verdict, v1::VERDICT_TRY_NEXT);
  // failoverd gets the report from the first caller's flusher, trips a, and
  // the second caller's copy hears of it: its plans start with b.
  EXPECT_TRUE(Eventually([&] { return Target("a").status().health() == v1::HEALTH_STATE_DOWN; }));
  ASSERT_TRUE(second_local->WaitForSequence(NextSequence(), absl::Seconds(10)));
  int tried_a = 0;
  client::LoopResult s = (*second)->Run("ch", [&](const v1::Attempt& a) {
    tried_a += a.target() == "a";
    return Answer(true);
  });
  EXPECT_TRUE(s.ok);
  EXPECT_TRUE(s.decided_locally);
  EXPECT_EQ(s.served_by, "b");
  EXPECT_EQ(tried_a, 0);
}

TEST_F(LocalDecisionsTest, WithoutACopyDecisionsAreFailoverds) {
  v1::ApplyRequest config;
  AddTarget(&config, "a");
  AddTarget(&config, "b");
  AddChain(&config, "ch", {"a", "b"});
  ASSERT_TRUE(Apply(config).ok());
  // The copy's stream goes nowhere: it never gets a state.
  client::ConnectionOptions nowhere;
  nowhere.server = "127.0.0.1:" + std::to_string(FreePort());
  auto channel = client::OpenChannel(nowhere);
  ASSERT_TRUE(channel.ok());
  client::ClientOptions options;
  options.failoverd_budget = absl::Seconds(60);  // a loaded machine never sends these fail-static
  options.local = std::make_shared<client::LocalDecisions>(v1::DecisionService::NewStub(*channel), nowhere);
  client::Client client(v1::DecisionService::NewStub(proc_->Channel()), options);
  client::LoopResult r = client.Run("ch", [](const v1::Attempt&) { return Answer(true); });
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_FALSE(r.decided_locally);
  EXPECT_FALSE(r.fail_static);
  EXPECT_EQ(r.attempts[0].verdict, v1::VERDICT_DONE);  // failoverd's verdict
  EXPECT_EQ(client.local()->Staleness(), absl::InfiniteDuration());
}

// A hung failoverd keeps its connections open: the copy notices the missing
// heartbeats, says it is stale, follows again, and decisions go on from it.
TEST_F(LocalDecisionsTest, AHungFailoverdMakesTheCopyStaleWhileDecisionsGoOn) {
  ASSERT_TRUE(Apply(TwoTargetConfig()).ok());
  client::LocalOptions options;
  options.silence = absl::Milliseconds(1500);  // failoverd's heartbeat comes every second
  options.retry_max = absl::Milliseconds(200);
  client::LocalDecisions local(v1::DecisionService::NewStub(proc_->Channel()), client::ConnectionOptions(), options);
  ASSERT_TRUE(local.WaitReady(kFirstLoad)) << local.last_error();
  ASSERT_TRUE(Eventually([&] { return local.heartbeats() >= 2; })) << "no heartbeat while nothing changed";
  EXPECT_EQ(local.Staleness(), absl::ZeroDuration());

  ASSERT_EQ(::kill(proc_pid(), SIGSTOP), 0);
  ASSERT_TRUE(Eventually([&] { return local.Staleness() > absl::ZeroDuration(); }));
  ASSERT_TRUE(Eventually([&] { return local.silences() >= 1; }));  // the silent stream was given up
  // And the next one, as silent, too: every stream is judged on its own (the
  // watchdog once told streams apart by an address each of them reused).
  ASSERT_TRUE(Eventually([&] { return local.silences() >= 3; })) << "a later silent stream was never given up";
  v1::PickTargetRequest pick;
  pick.set_chain("ch");
  v1::PickTargetResponse plan;
  EXPECT_TRUE(local.Pick(pick, &plan).ok());  // still deciding, from the copy
  EXPECT_EQ(plan.active_target(), "a");

  ASSERT_EQ(::kill(proc_pid(), SIGCONT), 0);
  EXPECT_TRUE(Eventually([&] { return local.Staleness() == absl::ZeroDuration(); })) << local.last_error();
}

TEST(LocalDecisionsProcessTest, DecisionsGoOnFromTheCopyWhileFailoverdIsAwayAndItCatchesUp) {
  TempDir data;
  const std::string listen = "127.0.0.1:" + std::to_string(FreePort());
  auto proc = std::make_unique<FailoverdProcess>(FailoverdProcess::Options{data.path(), {}, listen});
  std::string error;
  ASSERT_TRUE(proc->Start(&error)) << error;
  auto admin = v1::AdminService::NewStub(proc->Channel());
  ASSERT_TRUE(ApplyConfig(admin.get(), TwoTargetConfig()).ok());
  client::ClientOptions options;
  options.failoverd_budget = absl::Seconds(60);  // a loaded machine never sends these fail-static
  options.connection.server = listen;
  client::LocalOptions follow;
  follow.retry_max = absl::Milliseconds(200);
  auto client = client::ConnectLocal(options, follow);
  ASSERT_TRUE(client.ok());
  auto* local = static_cast<client::LocalDecisions*>((*client)->local());
  ASSERT_TRUE(local->WaitReady(kFirstLoad));

  ASSERT_NE(proc->Stop(SIGKILL), -1);
  ASSERT_TRUE(Eventually([&] { return local->Staleness() > absl::ZeroDuration(); }));
  for (int i = 0; i < 3; ++i) {
    client::LoopResult r = (*client)->Run("ch", [](const v1::Attempt& a) { return Answer(a.target() == "b"); });
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_TRUE(r.decided_locally);  // from the copy: no deadline waited out
    EXPECT_FALSE(r.fail_static);
  }
  EXPECT_GT((*client)->buffered_reports(), 0u);

  proc = std::make_unique<FailoverdProcess>(FailoverdProcess::Options{data.path(), {}, listen});
  ASSERT_TRUE(proc->Start(&error)) << error;
  // The copy follows again from a fresh state, and the reports made meanwhile
  // reach failoverd, which trips a on them.
  // As long as the first load may take: the restarted failoverd, under a
  // sanitizer on a loaded machine, can take most of ten seconds to answer.
  ASSERT_TRUE(Eventually([&] { return local->loads() >= 2 && local->Staleness() == absl::ZeroDuration(); },
                         absl::ToChronoSeconds(kFirstLoad)))
      << local->last_error();
  auto admin2 = v1::AdminService::NewStub(proc->Channel());
  ASSERT_TRUE(Eventually([&] {
    grpc::ClientContext ctx;
    v1::GetTargetRequest req;
    req.set_name("a");
    v1::TargetView view;
    return admin2->GetTarget(&ctx, req, &view).ok() && view.status().health() == v1::HEALTH_STATE_DOWN;
  }));
  EXPECT_TRUE(Eventually([&] {
    v1::PickTargetRequest req;
    req.set_chain("ch");
    v1::PickTargetResponse plan;
    return local->Pick(req, &plan).ok() && plan.active_target() == "b";
  }));
  EXPECT_EQ((*client)->buffered_reports(), 0u);
}

}  // namespace
}  // namespace failover::testing
