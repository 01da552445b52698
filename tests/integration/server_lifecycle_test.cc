// The real failoverd binary: it serves health and reflection, refuses a data
// dir another process holds, and shuts down cleanly on SIGTERM.
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "failover/v1/admin.grpc.pb.h"
#include "failover/v1/decision.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/support/api_test.h"
#include "tests/support/failoverd_process.h"

namespace failover::testing {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using ::testing::IsSupersetOf;

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(10);
}

HealthCheckResponse::ServingStatus Health(const FailoverdProcess& p, const std::string& service) {
  auto stub = grpc::health::v1::Health::NewStub(p.Channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline());
  HealthCheckRequest req;
  req.set_service(service);
  HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp.status();
}

std::set<std::string> ReflectedServices(const FailoverdProcess& p) {
  auto stub = grpc::reflection::v1alpha::ServerReflection::NewStub(p.Channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline());
  auto stream = stub->ServerReflectionInfo(&ctx);
  grpc::reflection::v1alpha::ServerReflectionRequest req;
  req.set_list_services("");
  EXPECT_TRUE(stream->Write(req));
  stream->WritesDone();
  grpc::reflection::v1alpha::ServerReflectionResponse resp;
  std::set<std::string> names;
  while (stream->Read(&resp)) {
    for (const auto& s : resp.list_services_response().service()) names.insert(s.name());
  }
  EXPECT_TRUE(stream->Finish().ok());
  return names;
}

TEST(ServerLifecycleTest, ServesHealthAndReflectionThenStopsCleanlyOnSigterm) {
  TempDir data;
  FailoverdProcess proc({data.path(), {}});
  std::string error;
  ASSERT_TRUE(proc.Start(&error)) << error;

  EXPECT_EQ(Health(proc, ""), HealthCheckResponse::SERVING);
  EXPECT_EQ(Health(proc, "failover.v1.DecisionService"), HealthCheckResponse::SERVING);
  EXPECT_EQ(Health(proc, "failover.v1.AdminService"), HealthCheckResponse::SERVING);
  EXPECT_THAT(ReflectedServices(proc),
              IsSupersetOf({"failover.v1.DecisionService", "failover.v1.AdminService",
                            "grpc.health.v1.Health"}));

  const int status = proc.Stop(SIGTERM);
  ASSERT_NE(status, -1) << "failoverd did not exit after SIGTERM";
  ASSERT_TRUE(WIFEXITED(status)) << proc.Stderr();
  EXPECT_EQ(WEXITSTATUS(status), 0) << proc.Stderr();
  EXPECT_THAT(proc.Stderr(), ::testing::HasSubstr("stopped cleanly"));
}

// grpc.health.v1 Watch streams are counted and capped like WatchEvents
// streams; unknown services are answered as the protocol says; SIGTERM tells
// every Watch NOT_SERVING and ends it.
TEST(ServerLifecycleTest, HealthWatchStreamsAreCountedCappedAndEndedOnSigterm) {
  TempDir data;
  FailoverdProcess proc({data.path(), {"--max-watchers", "2", "--metrics-listen", "127.0.0.1:0"}});
  std::string error;
  ASSERT_TRUE(proc.Start(&error)) << error;
  auto stub = grpc::health::v1::Health::NewStub(proc.Channel());
  struct Watch {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> reader;
  };
  auto open = [&](const std::string& service) {
    auto w = std::make_unique<Watch>();
    w->ctx.set_deadline(Deadline());
    HealthCheckRequest req;
    req.set_service(service);
    w->reader = stub->Watch(&w->ctx, req);
    return w;
  };
  HealthCheckResponse resp;
  auto first = open("");
  ASSERT_TRUE(first->reader->Read(&resp));
  EXPECT_EQ(resp.status(), HealthCheckResponse::SERVING);
  auto unknown = open("no.such.Service");
  ASSERT_TRUE(unknown->reader->Read(&resp));
  EXPECT_EQ(resp.status(), HealthCheckResponse::SERVICE_UNKNOWN);
  // Two are open: a third is refused, and says why.
  auto third = open("failover.v1.DecisionService");
  EXPECT_FALSE(third->reader->Read(&resp));
  const grpc::Status refused = third->reader->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), ::testing::HasSubstr("health watchers: at most 2 at once"));
  EXPECT_THAT(HttpGet(proc.MetricsPort(), "/metrics"), ::testing::HasSubstr("failover_health_watchers 2"));
  // One goes away: its place is free again.
  unknown->ctx.TryCancel();
  (void)unknown->reader->Finish();
  std::unique_ptr<Watch> again;
  EXPECT_TRUE(Eventually([&] {
    again = open("failover.v1.AdminService");
    return again->reader->Read(&resp) && resp.status() == HealthCheckResponse::SERVING;
  }));
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline());
    HealthCheckRequest req;
    req.set_service("no.such.Service");
    EXPECT_EQ(stub->Check(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  // SIGTERM: the open Watch hears NOT_SERVING, then its stream ends; the exit is clean.
  std::thread stopper([&] { EXPECT_EQ(WEXITSTATUS(proc.Stop(SIGTERM)), 0) << proc.Stderr(); });
  ASSERT_TRUE(first->reader->Read(&resp));
  EXPECT_EQ(resp.status(), HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(first->reader->Read(&resp));
  stopper.join();
}

TEST(ServerLifecycleTest, SigintAlsoStopsCleanly) {
  TempDir data;
  FailoverdProcess proc({data.path(), {}});
  std::string error;
  ASSERT_TRUE(proc.Start(&error)) << error;
  const int status = proc.Stop(SIGINT);
  ASSERT_TRUE(WIFEXITED(status)) << proc.Stderr();
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(ServerLifecycleTest, SecondProcessOnTheSameDataDirIsRefusedAndNamesTheDir) {
  TempDir data;
  FailoverdProcess first({data.path(), {}});
  std::string error;
  ASSERT_TRUE(first.Start(&error)) << error;

  FailoverdProcess second({data.path(), {}});
  EXPECT_FALSE(second.Start(&error));
  EXPECT_THAT(error, ::testing::HasSubstr(data.path()));
  EXPECT_THAT(error, ::testing::HasSubstr("in use by another failoverd"));
  // The first one is unharmed.
  EXPECT_EQ(Health(first, ""), HealthCheckResponse::SERVING);
}

TEST(ServerLifecycleTest, FailoverctlHealthReportsServingAndExit3WhenUnreachable) {
  TempDir data;
  FailoverdProcess proc({data.path(), {}});
  std::string error;
  ASSERT_TRUE(proc.Start(&error)) << error;
  CommandResult ok = RunCommand({FailoverctlBinary(), "--server", proc.address(), "health"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ok.out, "SERVING\n");

  const std::string addr = proc.address();
  ASSERT_NE(proc.Stop(SIGTERM), -1);
  CommandResult down = RunCommand({FailoverctlBinary(), "--server", addr, "--timeout", "1", "health"});
  EXPECT_EQ(down.exit_code, 3) << down.err;
  // A watch on an address that never answers exits too, instead of retrying forever.
  CommandResult watch = RunCommand({FailoverctlBinary(), "--server", addr, "--timeout", "1", "watch"});
  EXPECT_EQ(watch.exit_code, 3) << watch.err;
}

TEST(ServerLifecycleTest, BothBinariesPrintTheirVersion) {
  CommandResult ctl = RunCommand({FailoverctlBinary(), "--version"});
  EXPECT_EQ(ctl.exit_code, 0) << ctl.err;
  EXPECT_THAT(ctl.out, ::testing::MatchesRegex(
                           "failoverctl [0-9]+\\.[0-9]+\\.[0-9]+ \\(commit ([0-9a-f]+|unknown), built [0-9-]+\\)\n"));
  CommandResult daemon = RunCommand({FailoverdBinary(), "--version"});
  EXPECT_EQ(daemon.exit_code, 0) << daemon.err;
  EXPECT_THAT(daemon.out, ::testing::MatchesRegex(
                              "failoverd [0-9]+\\.[0-9]+\\.[0-9]+ \\(commit ([0-9a-f]+|unknown), built [0-9-]+\\)\n"));
}

TEST(ServerLifecycleTest, BadFlagIsAUsageErrorNamingTheFlag) {
  CommandResult r = RunCommand({FailoverdBinary(), "--log-level", "loud"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err + r.out, ::testing::HasSubstr("--log-level"));
  CommandResult soon = RunCommand({FailoverdBinary(), "--shutdown-grace", "soon"});
  EXPECT_NE(soon.exit_code, 0);
  EXPECT_THAT(soon.err, ::testing::HasSubstr("--shutdown-grace: must be a number of SECONDS or a duration"));
  EXPECT_NE(RunCommand({FailoverdBinary(), "--config-poll", "inf"}).exit_code, 0);
}

// Every flag failoverd takes is in the README's flags table.
TEST(ServerLifecycleTest, TheReadmeDocumentsEveryFlag) {
  CommandResult help = RunCommand({FailoverdBinary(), "--help"});
  ASSERT_EQ(help.exit_code, 0);
  std::ifstream in(ReadmePath());
  const std::string readme((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(readme.empty());
  int flags = 0;
  for (absl::string_view line : absl::StrSplit(help.out, '\n')) {
    line = absl::StripLeadingAsciiWhitespace(line);
    if (!absl::StartsWith(line, "--") || absl::StartsWith(line, "--help")) continue;
    const std::string flag(line.substr(0, line.find_first_of(" ,=")));
    ++flags;
    bool in_table = false;
    for (absl::string_view row : absl::StrSplit(readme, '\n')) {
      in_table |= absl::StartsWith(row, "| `--") && absl::StrContains(row, absl::StrCat("`", flag, "`"));
    }
    EXPECT_TRUE(in_table) << flag << " is not in the README's flags table";
  }
  EXPECT_GT(flags, 20);
}

TEST(ServerLifecycleTest, EveryHelpPageHasAnExample) {
  const std::vector<std::vector<std::string>> pages = {
      {}, {"apply"}, {"get"}, {"delete"}, {"pin"}, {"unpin"}, {"failover"}, {"failover", "trigger"},
      {"failover", "cancel"}, {"enable"}, {"disable"}, {"probe"}, {"probe", "now"}, {"events"}, {"watch"},
      {"status"}, {"pick"}, {"report"}, {"probe-agent"}, {"health"}};
  for (const auto& page : pages) {
    std::vector<std::string> args = {FailoverctlBinary()};
    args.insert(args.end(), page.begin(), page.end());
    args.push_back("--help");
    CommandResult r = RunCommand(args);
    EXPECT_EQ(r.exit_code, 0) << absl::StrJoin(page, " ");
    EXPECT_THAT(r.out, ::testing::HasSubstr("Example")) << "failoverctl " << absl::StrJoin(page, " ") << " --help";
  }
  CommandResult daemon = RunCommand({FailoverdBinary(), "--help"});
  EXPECT_EQ(daemon.exit_code, 0);
  EXPECT_THAT(daemon.out, ::testing::HasSubstr("Examples:"));
}

// Duration flags take the config files' units as well as bare numbers.
TEST(ServerLifecycleTest, DurationFlagsTakeUnits) {
  TempDir data;
  FailoverdProcess proc({data.path(), {"--config-poll", "250ms", "--shutdown-grace", "1s", "--events-max-age", "720h",
                                       "--log-level", "debug"}});
  std::string error;
  ASSERT_TRUE(proc.Start(&error)) << error;
  EXPECT_EQ(WEXITSTATUS(proc.Stop(SIGTERM)), 0) << proc.Stderr();
}

}  // namespace
}  // namespace failover::testing

namespace failover::testing {
namespace {

// SIGTERM while callers trip and recover targets, the ticker brings local
// targets back every tick and watchers read: failoverd drains, saves what was
// acknowledged and exits 0, and the next start reads the data dir whole.
TEST(ServerLifecycleTest, SigtermUnderLoadWithTheTickerAndWatchersBusyIsClean) {
  TempDir data;
  auto proc = std::make_unique<FailoverdProcess>(
      FailoverdProcess::Options{data.path(), {"--shutdown-grace", "5"}});
  std::string error;
  ASSERT_TRUE(proc->Start(&error)) << error;
  auto admin = failover::v1::AdminService::NewStub(proc->Channel());
  failover::v1::ApplyRequest config;
  for (int i = 0; i < 4; ++i) {
    failover::v1::Target* t = config.add_targets();
    t->set_name(absl::StrCat("local-", i));
    t->set_kind(failover::v1::TARGET_KIND_LOCAL);  // no health check: back after the dwell, on a tick
  }
  for (int c = 0; c < 2; ++c) {
    failover::v1::Chain* chain = config.add_chains();
    chain->set_name(absl::StrCat("ch", c));
    chain->add_targets(absl::StrCat("local-", 2 * c));
    chain->add_targets(absl::StrCat("local-", 2 * c + 1));
    chain->mutable_policy()->mutable_recovery()->mutable_min_dwell()->set_nanos(50'000'000);
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline());
    failover::v1::ApplyResponse resp;
    ASSERT_TRUE(admin->Apply(&ctx, config, &resp).ok());
  }
  std::atomic<bool> stop{false};
  std::atomic<int> events_read{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 3; ++w) {
    threads.emplace_back([&] {
      auto decide = failover::v1::DecisionService::NewStub(proc->Channel());
      grpc::ClientContext ctx;
      auto watch = decide->WatchEvents(&ctx, failover::v1::WatchEventsRequest());
      failover::v1::Event e;
      while (watch->Read(&e)) ++events_read;
    });
  }
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      auto decide = failover::v1::DecisionService::NewStub(proc->Channel());
      for (int i = 0; !stop.load(); ++i) {
        failover::v1::ReportOutcomeRequest report;
        report.set_chain(absl::StrCat("ch", w));
        // A failure trips the target, a success brings it back (it has no health check).
        report.set_target(absl::StrCat("local-", 2 * w + (i / 2) % 2));
        if (i % 2 == 0) {
          report.mutable_failure()->set_http_status(503);
        } else {
          report.mutable_success();
        }
        grpc::ClientContext ctx;
        ctx.set_deadline(Deadline());
        failover::v1::ReportOutcomeResponse resp;
        if (!decide->ReportOutcome(&ctx, report, &resp).ok()) break;  // shutting down
      }
    });
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (events_read.load() < 600 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GE(events_read.load(), 600) << "the load should have changed state often";
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(proc->Stop(SIGTERM, 15), 0) << proc->Stderr();
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
  EXPECT_THAT(proc->Stderr(), ::testing::HasSubstr("failoverd stopped cleanly"));
  RecordProperty("sigterm_to_exit_ms", static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                            std::chrono::steady_clock::now() - started)
                                                            .count()));

  proc = std::make_unique<FailoverdProcess>(FailoverdProcess::Options{data.path(), {}});
  ASSERT_TRUE(proc->Start(&error)) << error;
  EXPECT_EQ(Health(*proc, ""), HealthCheckResponse::SERVING);
}

}  // namespace
}  // namespace failover::testing
