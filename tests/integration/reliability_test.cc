// Faults an unlucky operator meets, through the real binary: a full disk, and
// valid input that once bricked the data dir. Each fault gets a clear refusal;
// nothing acknowledged is lost; failoverd keeps deciding.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/mount.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/support/api_test.h"
#include "tests/support/small_disk.h"

namespace failover::testing {
namespace {

using ::testing::HasSubstr;

std::string HealthOf(const FailoverdProcess& p) {
  auto stub = grpc::health::v1::Health::NewStub(p.Channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckResponse resp;
  if (!stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &resp).ok()) return "unreachable";
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING ? "SERVING" : "NOT_SERVING";
}

class ReliabilityTest : public ApiTest {
 protected:
  void TwoTargets() {
    v1::ApplyRequest req;
    AddTarget(&req, "a");
    AddTarget(&req, "b");
    AddChain(&req, "ch", {"a", "b"});
    ASSERT_TRUE(Apply(req).ok());
  }
};

TEST(DiskFullTest, ChangesAreRefusedDecisionsGoOnAndEverythingIsSavedOnceSpaceIsBack) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  SmallDisk disk(24);
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here";
  const std::string data = disk.path() + "/data";
  auto proc = std::make_unique<FailoverdProcess>(FailoverdProcess::Options{data, {"--min-free-mb", "8"}});
  std::string error;
  ASSERT_TRUE(proc->Start(&error)) << error;
  auto admin = v1::AdminService::NewStub(proc->Channel());
  auto decide = v1::DecisionService::NewStub(proc->Channel());
  auto apply = [&](const std::string& target) {
    v1::ApplyRequest req;
    req.add_targets()->set_name(target);
    v1::Chain* chain = req.add_chains();
    chain->set_name("ch");
    chain->add_targets("a");
    chain->add_targets(target);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ApplyResponse resp;
    return admin->Apply(&ctx, req, &resp);
  };
  {
    v1::ApplyRequest req;
    req.add_targets()->set_name("a");
    grpc::ClientContext ctx;
    v1::ApplyResponse resp;
    ASSERT_TRUE(admin->Apply(&ctx, req, &resp).ok());
  }
  ASSERT_TRUE(apply("b").ok());

  disk.FillLeaving(4);
  const grpc::Status refused = apply("c");
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.error_message(), HasSubstr("--min-free-mb"));
  EXPECT_THAT(refused.error_message(), HasSubstr(data));
  EXPECT_EQ(HealthOf(*proc), "NOT_SERVING");
  EXPECT_THAT(proc->Stderr(), HasSubstr("cannot save state changes"));
  // Further changes are refused; decisions go on from memory.
  EXPECT_EQ(apply("d").error_code(), grpc::StatusCode::UNAVAILABLE);
  {
    v1::PickTargetRequest pick;
    pick.set_chain("ch");
    grpc::ClientContext ctx;
    v1::PickTargetResponse resp;
    ASSERT_TRUE(decide->PickTarget(&ctx, pick, &resp).ok());
    EXPECT_EQ(resp.attempts(0).target(), "a");
  }

  disk.Free();
  ASSERT_TRUE(Eventually([&] { return HealthOf(*proc) == "SERVING"; })) << proc->Stderr();
  EXPECT_THAT(proc->Stderr(), HasSubstr("takes writes again"));
  EXPECT_TRUE(apply("d").ok());
  ASSERT_EQ(proc->Stop(SIGTERM), 0) << proc->Stderr();

  // Everything is on disk: the change held back while the disk was full and the later one.
  proc = std::make_unique<FailoverdProcess>(FailoverdProcess::Options{data, {"--min-free-mb", "8"}});
  ASSERT_TRUE(proc->Start(&error)) << error;
  admin = v1::AdminService::NewStub(proc->Channel());
  for (const char* name : {"a", "b", "c", "d"}) {
    v1::GetTargetRequest get;
    get.set_name(name);
    grpc::ClientContext ctx;
    v1::TargetView view;
    EXPECT_TRUE(admin->GetTarget(&ctx, get, &view).ok()) << name;
  }
}

// RocksDB's own log would be a file in the data dir that, once a write to it
// failed on the full disk, aborts the process at its next line (a flush, or
// Close at SIGTERM). Its lines go to failoverd's log instead.
TEST(DiskFullTest, AStopWhileTheDiskIsFullExitsCleanly) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  SmallDisk disk(24);
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here";
  const std::string data = disk.path() + "/data";
  FailoverdProcess proc({data, {"--min-free-mb", "1"}});
  std::string error;
  ASSERT_TRUE(proc.Start(&error)) << error;
  auto admin = v1::AdminService::NewStub(proc.Channel());
  v1::ApplyRequest req = TwoTargetConfig();
  ASSERT_TRUE(ApplyConfig(admin.get(), req).ok());
  EXPECT_FALSE(std::filesystem::exists(data + "/LOG")) << "RocksDB keeps its own log file in the data dir";
  disk.FillLeaving(0);
  req.add_targets()->set_name("c");
  EXPECT_FALSE(ApplyConfig(admin.get(), req).ok());
  EXPECT_EQ(proc.Stop(SIGTERM), 0) << proc.Stderr();
  EXPECT_THAT(proc.Stderr(), ::testing::Not(HasSubstr("Assertion")));
}

// One history (DESIGN 3.14, invariant 3): a watcher that opens while a trip
// is in memory but not on disk gets a snapshot without it, then the trip's
// events once the disk takes them, once. (Snapshots were built from the
// engine: the trip showed in the snapshot, and its events came again later.)
TEST(DiskFullTest, ASnapshotHoldsOnlyWhatIsOnDiskAndTheEventsFollowOnce) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  SmallDisk disk(24);
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here";
  const std::string data = disk.path() + "/data";
  FailoverdProcess proc({data, {"--min-free-mb", "8"}});
  std::string error;
  ASSERT_TRUE(proc.Start(&error)) << error;
  auto admin = v1::AdminService::NewStub(proc.Channel());
  auto decide = v1::DecisionService::NewStub(proc.Channel());
  ASSERT_TRUE(ApplyConfig(admin.get(), TwoTargetConfig()).ok());

  disk.FillLeaving(4);
  v1::ReportOutcomeRequest failure;
  failure.set_chain("ch");
  failure.set_target("a");
  failure.mutable_failure()->set_http_status(503);
  v1::ReportOutcomeResponse verdict;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(decide->ReportOutcome(&ctx, failure, &verdict).ok());
  }
  EXPECT_EQ(verdict.verdict(), v1::VERDICT_TRY_NEXT);  // the verdict stands
  EXPECT_THAT(verdict.not_saved(), HasSubstr("--min-free-mb"));

  grpc::ClientContext watch_ctx;
  watch_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto reader = decide->WatchEvents(&watch_ctx, v1::WatchEventsRequest());
  v1::Event snapshot;
  ASSERT_TRUE(reader->Read(&snapshot));
  ASSERT_TRUE(snapshot.has_snapshot());
  for (const v1::TargetStatus& t : snapshot.snapshot().targets()) {
    if (t.name() == "a") {
      EXPECT_NE(t.health(), v1::HEALTH_STATE_DOWN) << "the snapshot holds a trip not on disk";
    }
  }
  disk.Free();
  // The trip arrives live once the disk took it, after the snapshot's sequence, once.
  int trips = 0;
  uint64_t last = snapshot.sequence();
  v1::Event e;
  while (reader->Read(&e)) {
    EXPECT_EQ(e.sequence(), last + 1);
    last = e.sequence();
    if (e.has_target_state() && e.target_state().target() == "a" &&
        e.target_state().to_state() == v1::HEALTH_STATE_DOWN) {
      ++trips;
    }
    if (e.has_chain_switched() && e.chain_switched().to_target() == "b") break;
  }
  EXPECT_EQ(trips, 1);
  watch_ctx.TryCancel();
}

TEST(DiskFullTest, AStartOnAFullDiskIsRefusedWithAMessageNotAnAbort) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  SmallDisk disk(16);
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here";
  disk.FillLeaving(0);
  FailoverdProcess proc({disk.path() + "/data", {"--min-free-mb", "8"}});
  std::string error;
  EXPECT_FALSE(proc.Start(&error, 10));
  EXPECT_THAT(proc.Stderr(), HasSubstr("cannot open the data dir"));
  EXPECT_THAT(proc.Stderr(), HasSubstr("--min-free-mb"));
  EXPECT_THAT(proc.Stderr(), ::testing::Not(HasSubstr("Assertion")));
}

// An upstream error in Japanese, longer than failoverd keeps, relayed by a
// caller: every view, the event log, watchers and the next start still read.
TEST_F(ReliabilityTest, ALongMultiByteErrorMessageKeepsEveryViewReadableAndTheNextStart) {
  StartServer();
  TwoTargets();
  std::string message;
  for (int i = 0; i < 150; ++i) message += "\xe3\x82\xa8";  // U+30A8, 450 bytes in all
  v1::ReportOutcomeResponse verdict = Report(Pick("ch").decision_id(), "a", 500, "x" + message);
  EXPECT_EQ(verdict.verdict(), v1::VERDICT_TRY_NEXT);
  EXPECT_EQ(Target("a").status().health(), v1::HEALTH_STATE_DOWN);
  EXPECT_THAT(Target("a").status().last_error(), HasSubstr("\xe3\x82\xa8..."));
  bool saw_trip = false;
  for (const auto& e : Events()) saw_trip |= e.has_target_state() && e.target_state().target() == "a";
  EXPECT_TRUE(saw_trip);
  v1::StatusResponse status;
  ASSERT_TRUE(admin_->GetStatus(Ctx().get(), v1::GetStatusRequest(), &status).ok());

  ASSERT_EQ(proc_->Stop(SIGTERM), 0);
  StartServer();
  EXPECT_EQ(Target("a").status().health(), v1::HEALTH_STATE_DOWN);
}

// gRPC's listener stops accepting for good after one accept fails for lack of
// descriptors: failoverd takes the most the system allows at start.
TEST(DescriptorLimitTest, TheSoftLimitIsRaisedToTheHardOneAndLogged) {
  const std::string prlimit = "/usr/bin/prlimit";
  if (!std::filesystem::exists(prlimit)) GTEST_SKIP() << "needs " << prlimit << " (util-linux)";
  TempDir data;
  ChildProcess proc({prlimit, "--nofile=64:4096", FailoverdBinary(), "--data-dir", data.path(), "--listen",
                     "127.0.0.1:0", "--metrics-listen", ""});
  EXPECT_TRUE(Eventually([&] { return proc.Stderr().find("failoverd serving") != std::string::npos; }))
      << proc.Stderr();
  EXPECT_THAT(proc.Stderr(), HasSubstr("descriptor limit nofile=4096"));
  // An unset --max-watchers is sized to what the limit holds: (4096 - 256) / 2.
  EXPECT_THAT(proc.Stderr(), HasSubstr("--max-watchers sized to the descriptor limit max_watchers=1920"));
  EXPECT_THAT(proc.Stderr(), ::testing::Not(HasSubstr("is low for --max-watchers")));
}

// A plain TCP connection to a loopback port (it holds one of the server's
// descriptors once accepted), or -1.
int ConnectTcp(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// gRPC 1.51 closes its listener for good when one accept fails for lack of
// descriptors; failoverd keeps it open and serves again once they are free.
TEST(DescriptorLimitTest, RunningOutOfDescriptorsDoesNotCloseTheListener) {
  const std::string prlimit = "/usr/bin/prlimit";
  if (!std::filesystem::exists(prlimit)) GTEST_SKIP() << "needs " << prlimit << " (util-linux)";
  TempDir data;
  const int port = FreePort();
  ChildProcess proc({prlimit, "--nofile=64:64", FailoverdBinary(), "--data-dir", data.path(), "--listen",
                     "127.0.0.1:" + std::to_string(port), "--metrics-listen", "", "--max-watchers", "8"});
  ASSERT_TRUE(Eventually([&] { return proc.Stderr().find("failoverd serving") != std::string::npos; }))
      << proc.Stderr();
  auto healthy = [&] {
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
    auto stub = grpc::health::v1::Health::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    grpc::health::v1::HealthCheckResponse resp;
    return stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &resp).ok();
  };
  ASSERT_TRUE(healthy());

  // Idle connections until failoverd runs out of descriptors.
  std::vector<int> held;
  const bool ran_out = Eventually([&] {
    for (int i = 0; i < 8; ++i) {
      const int fd = ConnectTcp(port);
      if (fd >= 0) held.push_back(fd);
    }
    return proc.Stderr().find("out of file descriptors") != std::string::npos || held.size() > 400;
  });
  EXPECT_TRUE(ran_out) << proc.Stderr();
  EXPECT_THAT(proc.Stderr(), HasSubstr("nofile=64"));
  for (int fd : held) close(fd);

  // Descriptors are free again: new connections are served.
  EXPECT_TRUE(Eventually(healthy)) << proc.Stderr();
  EXPECT_THAT(proc.Stderr(), HasSubstr("accepting connections again"));
}

}  // namespace
}  // namespace failover::testing
