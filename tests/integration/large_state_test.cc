// A state large enough that one message cannot carry it (thousands of chains
// and targets with long names), through the real failoverd and failoverctl:
// status and lists come in pages, a watch snapshot in bounded parts, and a
// watcher that stops reading is dropped instead of holding its buffers.
// One server is shared by every case (the state takes a while to apply).
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "failover/v1/admin.grpc.pb.h"
#include "failover/v1/decision.grpc.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "tests/support/api_test.h"

namespace failover::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kTargets = 6000;
constexpr int kChains = kTargets / 2;

// Names near the 128-character bound, in name order by index.
std::string TargetName(int i) { return absl::StrFormat("target-%05d-%s", i, std::string(100, 't')); }
std::string ChainName(int i) { return absl::StrFormat("chain-%05d-%s", i, std::string(100, 'c')); }

void StartWithLargeState(FailoverdProcess* proc) {
  std::string error;
  ASSERT_TRUE(proc->Start(&error)) << error;
  v1::ApplyRequest req;
  for (int i = 0; i < kTargets; ++i) req.add_targets()->set_name(TargetName(i));
  for (int i = 0; i < kChains; ++i) {
    v1::Chain* c = req.add_chains();
    c->set_name(ChainName(i));
    c->add_targets(TargetName(2 * i));
    c->add_targets(TargetName(2 * i + 1));
  }
  v1::ApplyResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  const grpc::Status s = v1::AdminService::NewStub(proc->Channel())->Apply(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
}

// A channel whose window does not grow: a client on it that stops reading
// stops failoverd's writes after a few KiB.
std::shared_ptr<grpc::Channel> SmallWindowChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt("grpc.http2.bdp_probe", 0);
  args.SetInt("grpc.http2.lookahead_bytes", 16 * 1024);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

class LargeStateTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new TempDir();
    proc_ = new FailoverdProcess(FailoverdProcess::Options{
        data_->path(), {"--watch-stall-timeout", "1s", "--metrics-listen", "127.0.0.1:0"}});
    ASSERT_NO_FATAL_FAILURE(StartWithLargeState(proc_));
  }
  static void TearDownTestSuite() {
    delete proc_;
    delete data_;
  }

  std::unique_ptr<grpc::ClientContext> Ctx() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return ctx;
  }
  std::unique_ptr<v1::AdminService::Stub> Admin() { return v1::AdminService::NewStub(proc_->Channel()); }
  CommandResult Ctl(std::vector<std::string> args) {
    args.insert(args.begin(), {FailoverctlBinary(), "--server", proc_->address()});
    return RunCommand(args);
  }

  static TempDir* data_;
  static FailoverdProcess* proc_;
};

TempDir* LargeStateTest::data_ = nullptr;
FailoverdProcess* LargeStateTest::proc_ = nullptr;

TEST_F(LargeStateTest, GetStatusComesInPagesThatAddUpToTheWholeState) {
  auto admin = Admin();
  v1::GetStatusRequest req;
  int chains = 0, targets = 0, pages = 0;
  std::string last_chain, last_target;
  for (;;) {
    v1::StatusResponse page;
    const grpc::Status s = admin->GetStatus(Ctx().get(), req, &page);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ++pages;
    EXPECT_LE(page.chains_size() + page.targets_size(), 500);
    for (const auto& c : page.chains()) {
      EXPECT_GT(c.name(), last_chain);  // name order, no repeats across pages
      last_chain = c.name();
    }
    for (const auto& t : page.targets()) {
      EXPECT_GT(t.name(), last_target);
      last_target = t.name();
    }
    chains += page.chains_size();
    targets += page.targets_size();
    if (page.next_page_token().empty()) break;
    req.set_page_token(page.next_page_token());
  }
  EXPECT_EQ(chains, kChains);
  EXPECT_EQ(targets, kTargets);
  EXPECT_EQ(pages, (kChains + kTargets + 499) / 500);

  // The whole state in one response would pass gRPC's default 4 MiB receive limit.
  v1::GetStatusRequest small;
  small.set_page_size(7);
  v1::StatusResponse seven;
  ASSERT_TRUE(admin->GetStatus(Ctx().get(), small, &seven).ok());
  EXPECT_EQ(seven.chains_size(), 7);
  EXPECT_FALSE(seven.next_page_token().empty());

  v1::GetStatusRequest bad;
  bad.set_page_token("not-a-token");
  v1::StatusResponse ignored;
  const grpc::Status refused = admin->GetStatus(Ctx().get(), bad, &ignored);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("page_token: \"not-a-token\""));
}

TEST_F(LargeStateTest, ListTargetsAndListChainsPage) {
  auto admin = Admin();
  v1::ListTargetsRequest treq;
  treq.set_page_size(2500);  // more than the most: cut to 1000
  int targets = 0, pages = 0;
  for (;;) {
    v1::ListTargetsResponse page;
    ASSERT_TRUE(admin->ListTargets(Ctx().get(), treq, &page).ok());
    EXPECT_LE(page.targets_size(), 1000);
    targets += page.targets_size();
    ++pages;
    if (page.next_page_token().empty()) break;
    treq.set_page_token(page.next_page_token());
  }
  EXPECT_EQ(targets, kTargets);
  EXPECT_EQ(pages, kTargets / 1000);
  v1::ListChainsRequest creq;
  int chains = 0;
  for (;;) {
    v1::ListChainsResponse page;
    ASSERT_TRUE(admin->ListChains(Ctx().get(), creq, &page).ok());
    chains += page.chains_size();
    if (page.next_page_token().empty()) break;
    creq.set_page_token(page.next_page_token());
  }
  EXPECT_EQ(chains, kChains);
}

TEST_F(LargeStateTest, FailoverctlReadsEveryPage) {
  CommandResult status = Ctl({"-o", "json", "status"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  v1::StatusResponse parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(status.out, &parsed).ok());
  EXPECT_EQ(parsed.chains_size(), kChains);
  EXPECT_EQ(parsed.targets_size(), kTargets);
  EXPECT_TRUE(parsed.next_page_token().empty());

  CommandResult targets = Ctl({"get", "targets"});
  ASSERT_EQ(targets.exit_code, 0) << targets.err;
  EXPECT_EQ(std::count(targets.out.begin(), targets.out.end(), '\n'), kTargets + 1);  // and the header
  EXPECT_NE(targets.out.find(absl::StrFormat("target-%05d-", kTargets - 1)), std::string::npos);

  CommandResult watch = Ctl({"watch", "--max-events", "1"});
  ASSERT_EQ(watch.exit_code, 0) << watch.err;
  EXPECT_THAT(watch.out, HasSubstr(absl::StrCat("snapshot: ", kChains, " chains, ", kTargets, " targets")));
}

TEST_F(LargeStateTest, TheWatchSnapshotComesInBoundedPartsOfOneSequence) {
  auto decide = v1::DecisionService::NewStub(proc_->Channel());
  auto ctx = Ctx();
  auto reader = decide->WatchEvents(ctx.get(), v1::WatchEventsRequest());
  v1::Event e;
  int parts = 0, chains = 0, targets = 0;
  uint64_t sequence = 0;
  bool complete = false;
  while (!complete && reader->Read(&e)) {
    ASSERT_TRUE(e.has_snapshot());
    if (parts == 0) sequence = e.sequence();
    EXPECT_EQ(e.sequence(), sequence);
    EXPECT_LE(e.ByteSizeLong(), (1u << 20) + 4096);
    ++parts;
    chains += e.snapshot().chains_size();
    targets += e.snapshot().targets_size();
    complete = !e.snapshot().more();
  }
  EXPECT_TRUE(complete);
  EXPECT_GE(parts, 2);
  EXPECT_EQ(chains, kChains);
  EXPECT_EQ(targets, kTargets);
  ctx->TryCancel();
  reader->Finish();
}

// A client that stops reading: its window is small (no BDP growth), so the
// snapshot's first write stays stuck until failoverd drops the stream.
TEST_F(LargeStateTest, AWatcherThatStopsReadingIsDroppedAndAReadingOneIsNot) {
  auto stalled_stub = v1::DecisionService::NewStub(SmallWindowChannel(proc_->address()));
  auto stalled_ctx = Ctx();
  auto stalled = stalled_stub->WatchEvents(stalled_ctx.get(), v1::WatchEventsRequest());

  auto decide = v1::DecisionService::NewStub(proc_->Channel());
  auto reading_ctx = Ctx();
  auto reading = decide->WatchEvents(reading_ctx.get(), v1::WatchEventsRequest());
  v1::Event e;
  do {
    ASSERT_TRUE(reading->Read(&e));
  } while (e.snapshot().more());

  ASSERT_TRUE(Eventually([&] {
    return HttpGet(proc_->MetricsPort(), "/metrics").find("failover_watchers_dropped_total 1") != std::string::npos;
  })) << proc_->Stderr();
  EXPECT_THAT(proc_->Stderr(), HasSubstr("dropped a watcher that stopped reading"));
  // failoverd let go of it: one watcher is left. (Its client, which reads
  // nothing, would see the end only once it drained what it buffered.)
  EXPECT_TRUE(Eventually([&] {
    return HttpGet(proc_->MetricsPort(), "/metrics").find("failover_watchers 1") != std::string::npos;
  }));
  stalled_ctx->TryCancel();
  stalled->Finish();

  // The reading watcher is still served: a change reaches it.
  grpc::ClientContext pin_ctx;
  v1::PinChainRequest pin;
  pin.set_chain(ChainName(0));
  pin.set_target(TargetName(1));
  v1::ChainView pinned;
  ASSERT_TRUE(Admin()->PinChain(&pin_ctx, pin, &pinned).ok());
  bool saw_switch = false;
  while (!saw_switch && reading->Read(&e)) saw_switch = e.has_chain_switched();
  EXPECT_TRUE(saw_switch);
  reading_ctx->TryCancel();
  reading->Finish();
}

// Watchers that stopped reading do not hold up a shutdown past its grace (it
// took 19-28 s against a 5 s grace once).
TEST(LargeStateShutdownTest, StuckWatchersDoNotDelayTheExitPastTheGrace) {
  TempDir data;
  FailoverdProcess proc(
      FailoverdProcess::Options{data.path(), {"--shutdown-grace", "1s", "--metrics-listen", "127.0.0.1:0"}});
  ASSERT_NO_FATAL_FAILURE(StartWithLargeState(&proc));
  auto channel = SmallWindowChannel(proc.address());
  auto stub = v1::DecisionService::NewStub(channel);
  struct Stuck {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<v1::Event>> reader;
  };
  std::vector<std::unique_ptr<Stuck>> stuck;
  for (int i = 0; i < 20; ++i) {
    auto w = std::make_unique<Stuck>();
    w->reader = stub->WatchEvents(&w->ctx, v1::WatchEventsRequest());
    stuck.push_back(std::move(w));
  }
  // Every stream is open (counted) before the signal.
  ASSERT_TRUE(Eventually([&] {
    return HttpGet(proc.MetricsPort(), "/metrics").find("failover_watchers 20") != std::string::npos;
  }));
  const int status = proc.Stop(SIGTERM, /*timeout_s=*/10);
  EXPECT_NE(status, -1) << "failoverd did not exit within 10 s of SIGTERM with --shutdown-grace 1s";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << proc.Stderr().substr(0, 2000);
  for (auto& w : stuck) w->ctx.TryCancel();
}

}  // namespace
}  // namespace failover::testing
