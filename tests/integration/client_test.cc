// The client library against a real failoverd that is killed mid-run and
// restarted: requests keep being served, and buffered reports arrive later.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/connection.h"
#include "client/upstream_failure.h"
#include "gmock/gmock.h"
#include "tests/support/api_test.h"

namespace failover::testing {
namespace {

// A real failoverd on a fresh data dir of its own.
class TestFailoverd {
 public:
  explicit TestFailoverd(std::vector<std::string> args = {})
      : proc_(FailoverdProcess::Options{data_.path(), std::move(args)}) {}
  // Starts it and applies `config`.
  ::testing::AssertionResult Start(const v1::ApplyRequest& config) {
    std::string error;
    if (!proc_.Start(&error)) return ::testing::AssertionFailure() << error;
    const grpc::Status applied = ApplyConfig(v1::AdminService::NewStub(proc_.Channel()).get(), config);
    if (!applied.ok()) return ::testing::AssertionFailure() << "Apply: " << applied.error_message();
    return ::testing::AssertionSuccess();
  }
  FailoverdProcess& proc() { return proc_; }

 private:
  TempDir data_;
  FailoverdProcess proc_;
};

TEST(ClientFailStaticTest, FailoverdKilledMidRunAndRestarted) {
  TempDir data;
  const std::string listen = "127.0.0.1:" + std::to_string(FreePort());
  auto proc = std::make_unique<FailoverdProcess>(FailoverdProcess::Options{data.path(), {}, listen});
  std::string error;
  ASSERT_TRUE(proc->Start(&error)) << error;
  auto channel = proc->Channel();
  auto admin = v1::AdminService::NewStub(channel);
  ASSERT_TRUE(ApplyConfig(admin.get(), TwoTargetConfig()).ok());
  client::ClientOptions options;
  // Far above what a call takes on a loaded machine under ThreadSanitizer: a
  // request that met a slow failoverd would go fail-static, which this test is
  // not about (a killed failoverd refuses at once).
  options.connection.timeout_seconds = 60;
  options.failoverd_budget = absl::Seconds(60);
  // Each request's reports are sent before it ends, so the backlog below is
  // exactly what the requests made while failoverd was away (successes
  // reported in the background have tests of their own).
  options.report_successes_in_background = false;
  client::Client client(v1::DecisionService::NewStub(channel), options);
  auto upstream = [](const v1::Attempt& a) {
    client::AttemptOutcome o;
    o.ok = a.target() == "b";  // a is broken
    if (!o.ok) o.failure.set_http_status(500);
    return o;
  };
  client::LoopResult first = client.Run("ch", upstream);
  ASSERT_TRUE(first.ok) << first.error;
  EXPECT_EQ(first.served_by, "b");
  EXPECT_FALSE(first.fail_static);
  EXPECT_EQ(client.buffered_reports(), 0u);

  ASSERT_NE(proc->Stop(SIGKILL), -1);
  for (int i = 0; i < 3; ++i) {
    client::LoopResult r = client.Run("ch", upstream);
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_TRUE(r.fail_static);
    EXPECT_EQ(r.served_by, "b");  // the last plan seen: b first while a is down
  }
  EXPECT_EQ(client.buffered_reports(), 3u);

  proc = std::make_unique<FailoverdProcess>(
      FailoverdProcess::Options{data.path(), {"--metrics-listen", "127.0.0.1:0"}, listen});
  ASSERT_TRUE(proc->Start(&error)) << error;
  // Requests run normally again; the client's own thread sends the backlog.
  client::LoopResult back;
  int runs = 0;  // the ones before failoverd answers are served fail-static and buffered too
  // (A restarted failoverd built with TSan on a loaded machine can take many seconds to answer.)
  ASSERT_TRUE(Eventually(
      [&] {
        back = client.Run("ch", upstream);
        ++runs;
        return !back.fail_static;
      },
      std::chrono::seconds(120)));
  EXPECT_TRUE(back.ok);
  // The restarted failoverd counts every buffered success on b (the three
  // above and those of the runs while it started) and the report of the
  // request that got through, once the client's thread has sent the backlog
  // (no Flush called).
  const int metrics_port = proc->MetricsPort();
  ASSERT_GT(metrics_port, 0) << proc->Stderr();
  const std::string want = absl::StrCat("failover_outcomes_total{reason=\"none\",target=\"b\"} ", 3 + runs, "\n");
  EXPECT_TRUE(Eventually([&] { return HttpGet(metrics_port, "/metrics").find(want) != std::string::npos; }))
      << want;
  EXPECT_EQ(client.buffered_reports(), 0u);
  EXPECT_EQ(client.dropped_reports(), 0u);
}

// failoverd's own refusals are decisions, not outages: with every target
// manually failed over PickTarget answers UNAVAILABLE and the library must not
// send the request to its cached plan; a chain deleted mid-request makes the
// report NOT_FOUND, which is not buffered and not a reason to go fail-static.
TEST(ClientAnswersTest, AdminRefusalsAreFollowedNotTakenForAnOutage) {
  TempDir data;
  FailoverdProcess proc(FailoverdProcess::Options{data.path(), {}});
  std::string error;
  ASSERT_TRUE(proc.Start(&error)) << error;
  auto admin = v1::AdminService::NewStub(proc.Channel());
  auto call = [&](auto method, const auto& req, auto* resp) {
    grpc::ClientContext ctx;
    return ((*admin).*method)(&ctx, req, resp);
  };
  v1::ApplyRequest config = TwoTargetConfig();
  v1::ApplyResponse applied;
  ASSERT_TRUE(call(&v1::AdminService::Stub::Apply, config, &applied).ok());

  // Made from the options alone: the address is the one in them.
  client::ClientOptions options;
  options.connection.server = proc.address();
  options.failoverd_budget = absl::Seconds(60);  // a loaded machine never sends these fail-static
  absl::StatusOr<std::unique_ptr<client::Client>> connected = client::Client::Connect(options);
  ASSERT_TRUE(connected.ok()) << connected.status();
  client::Client& client = **connected;
  client::ClientOptions bad_tls;
  bad_tls.connection.tls_ca = data.path() + "/no-such-ca.pem";
  EXPECT_EQ(client::Client::Connect(bad_tls).status().code(), absl::StatusCode::kNotFound);
  int calls = 0;
  auto upstream = [&](const v1::Attempt&) {
    ++calls;
    client::AttemptOutcome o;
    o.ok = true;
    return o;
  };
  // A plan from failoverd is now cached (its first answer can be slow under TSan on a loaded machine).
  ASSERT_TRUE(Eventually(
      [&] {
        const client::LoopResult r = client.Run("ch", upstream);
        return r.ok && !r.fail_static;
      },
      std::chrono::seconds(120)));
  for (const char* t : {"a", "b"}) {
    v1::TriggerFailoverRequest trigger;
    trigger.set_target(t);
    trigger.set_reason("maintenance");
    v1::TargetView view;
    ASSERT_TRUE(call(&v1::AdminService::Stub::TriggerFailover, trigger, &view).ok());
  }
  calls = 0;
  client::LoopResult refused = client.Run("ch", upstream);
  EXPECT_FALSE(refused.ok);
  EXPECT_FALSE(refused.fail_static);
  EXPECT_EQ(calls, 0) << "traffic went to targets an admin took out";
  EXPECT_THAT(refused.error, ::testing::HasSubstr("has no target to try"));

  // Back in service; then the chain is deleted while a request is on a.
  for (const char* t : {"a", "b"}) {
    v1::CancelFailoverRequest cancel;
    cancel.set_target(t);
    v1::TargetView view;
    ASSERT_TRUE(call(&v1::AdminService::Stub::CancelFailover, cancel, &view).ok());
  }
  client::LoopResult deleted = client.Run("ch", [&](const v1::Attempt&) {
    v1::DeleteChainRequest del;
    del.set_name("ch");
    v1::DeleteResponse resp;
    EXPECT_TRUE(call(&v1::AdminService::Stub::DeleteChain, del, &resp).ok());
    client::AttemptOutcome o;
    o.failure.set_http_status(500);
    return o;
  });
  EXPECT_FALSE(deleted.ok);
  EXPECT_FALSE(deleted.fail_static);
  EXPECT_THAT(deleted.error, ::testing::HasSubstr("failoverd refused the report"));
  // The refused report is not kept (earlier successes leave with the backlog).
  EXPECT_TRUE(Eventually([&] { return client.buffered_reports() == 0; }));
}

// A call that got no HTTP reply, made with the real curl (its exit codes are
// libcurl's CURLcode): FailureFromCurl turns it into the transport error that
// failoverd classifies and counts against the target.
TEST(FailureFromCurlTest, RealCurlFailuresAreClassifiedByFailoverd) {
  v1::ApplyRequest config = TwoTargetConfig();
  config.mutable_chains(0)->mutable_policy()->mutable_trip()->set_errors(100);  // keep a in the plan
  TestFailoverd failoverd;
  ASSERT_TRUE(failoverd.Start(config));
  FailoverdProcess& proc = failoverd.proc();
  // Nothing listens on a free port: connection refused. A socket that is
  // listening but never answers: a timeout.
  const int closed = FreePort();
  const int silent_fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(silent_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(silent_fd, 8), 0);
  socklen_t len = sizeof(addr);
  getsockname(silent_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int silent = ntohs(addr.sin_port);

  auto decide = v1::DecisionService::NewStub(proc.Channel());
  struct Case {
    int port;
    int curl_exit;
    v1::TransportError transport;
    v1::FailureReason reason;
  };
  for (const Case& c : {Case{closed, 7, v1::TRANSPORT_ERROR_CONNECT_REFUSED, v1::FAILURE_REASON_NETWORK},
                        Case{silent, 28, v1::TRANSPORT_ERROR_TIMEOUT, v1::FAILURE_REASON_TIMEOUT}}) {
    CommandResult curl = RunCommand({"/usr/bin/curl", "-sS", "--max-time", "0.5",
                                     absl::StrCat("http://127.0.0.1:", c.port, "/v1/chat/completions")});
    ASSERT_EQ(curl.exit_code, c.curl_exit) << curl.err;
    v1::ReportOutcomeRequest report;
    report.set_chain("ch");
    report.set_target("a");
    *report.mutable_failure() = client::FailureFromCurl(curl.exit_code, curl.err);
    EXPECT_EQ(report.failure().transport_error(), c.transport);
    EXPECT_EQ(report.failure().message(), curl.err);
    grpc::ClientContext ctx;
    v1::ReportOutcomeResponse verdict;
    ASSERT_TRUE(decide->ReportOutcome(&ctx, report, &verdict).ok());
    EXPECT_EQ(verdict.reason(), c.reason) << curl.err;
    EXPECT_TRUE(verdict.counted());  // a real failure of the target, not the caller's
  }
  close(silent_fd);
}

// StreamOutcomes: many reports in one call, each handled as ReportOutcome
// would be; a bad one is counted and named, the rest still count.
TEST(StreamOutcomesTest, ABacklogInOneCallCountsEachReportOnce) {
  v1::ApplyRequest config = TwoTargetConfig();
  config.mutable_chains(0)->mutable_policy()->mutable_trip()->set_errors(2);
  TestFailoverd failoverd;
  ASSERT_TRUE(failoverd.Start(config));
  FailoverdProcess& proc = failoverd.proc();
  auto admin = v1::AdminService::NewStub(proc.Channel());
  auto decide = v1::DecisionService::NewStub(proc.Channel());
  grpc::ClientContext ctx;
  v1::StreamOutcomesResponse summary;
  auto writer = decide->StreamOutcomes(&ctx, &summary);
  for (const char* target : {"a", "", "a"}) {  // two failures of a, one report without a target
    v1::ReportOutcomeRequest r;
    r.set_chain("ch");
    r.set_target(target);
    r.mutable_failure()->set_http_status(503);
    ASSERT_TRUE(writer->Write(r));
  }
  writer->WritesDone();
  const grpc::Status s = writer->Finish();
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(summary.accepted(), 2u);
  EXPECT_EQ(summary.refused(), 1u);
  EXPECT_EQ(summary.first_refusal(), "outcomes[1]: target: must not be empty");
  // Both failures counted: a tripped at its threshold of 2.
  v1::GetTargetRequest get;
  get.set_name("a");
  v1::TargetView a;
  grpc::ClientContext get_ctx;
  ASSERT_TRUE(admin->GetTarget(&get_ctx, get, &a).ok());
  EXPECT_EQ(a.status().health(), v1::HEALTH_STATE_DOWN);
}

// ReportOutcomes: the same in one message, answered as StreamOutcomes is: in
// order, a bad one named by its place, a resent id counted once; and a batch
// over the limit refused whole, counting nothing.
TEST(StreamOutcomesTest, ABatchInOneMessageCountsInOrderAndOverTheLimitCountsNothing) {
  v1::ApplyRequest config = TwoTargetConfig();
  config.mutable_chains(0)->mutable_policy()->mutable_trip()->set_errors(2);
  TestFailoverd failoverd;
  ASSERT_TRUE(failoverd.Start(config));
  FailoverdProcess& proc = failoverd.proc();
  auto admin = v1::AdminService::NewStub(proc.Channel());
  auto decide = v1::DecisionService::NewStub(proc.Channel());
  auto failure = [](const std::string& target, uint64_t id) {
    v1::ReportOutcomeRequest r;
    r.set_chain("ch");
    r.set_target(target);
    r.mutable_failure()->set_http_status(503);
    r.mutable_report_id()->set_sender("batch-test");
    r.mutable_report_id()->set_sequence(id);
    return r;
  };
  auto health = [&](const std::string& target) {
    v1::GetTargetRequest get;
    get.set_name(target);
    v1::TargetView view;
    grpc::ClientContext ctx;
    EXPECT_TRUE(admin->GetTarget(&ctx, get, &view).ok());
    return view.status().health();
  };
  auto send = [&](const v1::ReportOutcomesRequest& batch, v1::StreamOutcomesResponse* summary) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return decide->ReportOutcomes(&ctx, batch, summary);
  };

  // One failure of a, one without a target, the first again under its id:
  // a has one failure counted, under its threshold of two.
  v1::ReportOutcomesRequest first;
  *first.add_outcomes() = failure("a", 1);
  *first.add_outcomes() = failure("", 2);
  *first.add_outcomes() = failure("a", 1);
  v1::StreamOutcomesResponse summary;
  grpc::Status s = send(first, &summary);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(summary.accepted(), 2u);
  EXPECT_EQ(summary.refused(), 1u);
  EXPECT_EQ(summary.duplicates(), 1u);
  EXPECT_EQ(summary.first_refusal(), "outcomes[1]: target: must not be empty");
  EXPECT_NE(health("a"), v1::HEALTH_STATE_DOWN);

  // Over the limit: refused whole, so b (two failures in it) stays up.
  v1::ReportOutcomesRequest too_many;
  for (uint64_t i = 0; i < 10001; ++i) *too_many.add_outcomes() = failure("b", 100 + i);
  v1::StreamOutcomesResponse refused;
  s = send(too_many, &refused);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "outcomes: at most 10000 per ReportOutcomes call, got 10001");
  EXPECT_NE(health("b"), v1::HEALTH_STATE_DOWN);

  // The second failure of a trips it; its answer waits for the save, and the
  // outcomes after it are handled from there: two failures trip b too.
  v1::ReportOutcomesRequest second;
  *second.add_outcomes() = failure("a", 3);
  *second.add_outcomes() = failure("b", 4);
  *second.add_outcomes() = failure("b", 5);
  s = send(second, &summary);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(summary.accepted(), 3u);
  EXPECT_EQ(summary.duplicates(), 0u);
  EXPECT_EQ(health("a"), v1::HEALTH_STATE_DOWN);
  EXPECT_EQ(health("b"), v1::HEALTH_STATE_DOWN);
}

// The mark replicas put on the outcomes they relay to the leader (counted
// toward health there, but not again in its metrics) is no one else's to use:
// on a single node, sent by any caller, the outcomes count in the metrics.
TEST(StreamOutcomesTest, TheReplicasForwardedMarkHidesNothingFromACaller) {
  TestFailoverd failoverd({"--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(failoverd.Start(TwoTargetConfig()));
  FailoverdProcess& proc = failoverd.proc();
  auto decide = v1::DecisionService::NewStub(proc.Channel());
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-failoverd-forwarded", "1");
  v1::StreamOutcomesResponse summary;
  auto writer = decide->StreamOutcomes(&ctx, &summary);
  v1::ReportOutcomeRequest r;
  r.set_chain("ch");
  r.set_target("b");
  r.mutable_success();
  r.set_count(4);
  ASSERT_TRUE(writer->Write(r));
  writer->WritesDone();
  ASSERT_TRUE(writer->Finish().ok());
  EXPECT_EQ(summary.accepted(), 1u);
  EXPECT_THAT(HttpGet(proc.MetricsPort(), "/metrics"),
              ::testing::HasSubstr("failover_outcomes_total{reason=\"none\",target=\"b\"} 4\n"));
}

}  // namespace
}  // namespace failover::testing

namespace failover::testing {
namespace {

// The state letter of /proc/PID/stat ('T' once stopped), or 0.
char ProcessState(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() ? 0 : line[paren + 2];
}

// A hung failoverd (SIGSTOP) is noticed once: the request that meets it pays
// its failoverd_budget, the ones after it go fail-static without waiting on it,
// and the client's own thread finds failoverd again once it runs (SIGCONT).
TEST(ClientHungFailoverdTest, AStoppedFailoverdCostsOneBudgetThenNothing) {
  TestFailoverd failoverd;
  ASSERT_TRUE(failoverd.Start(TwoTargetConfig()));
  FailoverdProcess& proc = failoverd.proc();
  client::ClientOptions options;
  options.connection.server = proc.address();
  // The call timeout is far above the budget, so "waited the budget" and
  // "waited the deadline" stay apart on a machine as loaded as CI's can be.
  options.connection.timeout_seconds = 60;
  options.failoverd_budget = absl::Milliseconds(300);  // what one request may wait on failoverd
  options.down_backoff = absl::Milliseconds(100);
  options.max_down_backoff = absl::Milliseconds(200);
  auto client = client::Client::Connect(options);
  ASSERT_TRUE(client.ok());
  auto ok = [](const v1::Attempt&) {
    client::AttemptOutcome o;
    o.ok = true;
    return o;
  };
  // A plan from failoverd first: the one fail-static serves from. The first
  // call (connecting, on a sanitizer build) may overrun the 300 ms budget, and
  // such a request fails without a plan, which is not what is tested here.
  ASSERT_TRUE(Eventually([&] {
    const client::LoopResult r = (*client)->Run("ch", ok);
    return r.ok && !r.fail_static;
  }));

  ASSERT_EQ(::kill(proc.pid(), SIGSTOP), 0);
  ASSERT_TRUE(Eventually([&] { return ProcessState(proc.pid()) == 'T'; }));  // the stop is asynchronous
  // The first request to meet it waits out its budget, not the call's 60 s timeout.
  const auto first_start = std::chrono::steady_clock::now();
  client::LoopResult first = (*client)->Run("ch", ok);
  EXPECT_LT(std::chrono::steady_clock::now() - first_start, std::chrono::seconds(20));
  EXPECT_TRUE(first.ok) << first.error;
  EXPECT_TRUE(first.fail_static);
  // Traffic for several times the backoff (after which failoverd is asked
  // again): no request waits for the deadline, however long failoverd hangs.
  const auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration slowest{};
  int requests = 0;
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(800)) {
    const auto t0 = std::chrono::steady_clock::now();
    client::LoopResult r = (*client)->Run("ch", ok);
    slowest = std::max(slowest, std::chrono::steady_clock::now() - t0);
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_TRUE(r.fail_static);
    ++requests;
  }
  EXPECT_LT(slowest, std::chrono::seconds(20)) << "a request waited for the deadline on the hung failoverd ("
                                               << requests << " requests)";

  ASSERT_EQ(::kill(proc.pid(), SIGCONT), 0);
  // No bound is promised here beyond "once it runs": gRPC's reconnect backoff
  // grows while failoverd is stopped, and a sanitizer build on a loaded
  // machine took longer than ten seconds (CI, TSan stage; then the channel
  // also gave up each connection attempt after at most a second, fixed since:
  // ClientConnectionTest below).
  EXPECT_TRUE(Eventually([&] { return !(*client)->Run("ch", ok).fail_static; }, std::chrono::seconds(60)));
  EXPECT_TRUE(Eventually([&] { return (*client)->buffered_reports() == 0; }, std::chrono::seconds(60)));
}

// A failoverd slow to answer a new connection (stopped here; on a loaded
// machine, busy) is waited for: the channel's attempt stays open past its
// reconnect backoff (at most 1 s) and connects once failoverd answers. An
// attempt given up after the backoff is started again with the same short
// deadline, so a failoverd slower than that was never reached.
TEST(ClientConnectionTest, AFailoverdSlowToAnswerANewConnectionIsWaitedFor) {
  TestFailoverd failoverd;
  ASSERT_TRUE(failoverd.Start(TwoTargetConfig()));
  FailoverdProcess& proc = failoverd.proc();
  ASSERT_EQ(::kill(proc.pid(), SIGSTOP), 0);
  const absl::Cleanup resume = [&] { ::kill(proc.pid(), SIGCONT); };
  ASSERT_TRUE(Eventually([&] { return ProcessState(proc.pid()) == 'T'; }));
  client::ConnectionOptions options;
  options.server = proc.address();
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = client::OpenChannel(options);
  ASSERT_TRUE(channel.ok());
  (*channel)->GetState(/*try_to_connect=*/true);
  ASSERT_TRUE(Eventually([&] { return (*channel)->GetState(false) == GRPC_CHANNEL_CONNECTING; }));
  // Three times the longest backoff: still the one attempt, not a failure.
  EXPECT_FALSE((*channel)->WaitForStateChange(GRPC_CHANNEL_CONNECTING,
                                              std::chrono::system_clock::now() + std::chrono::seconds(3)))
      << "the attempt was given up: the channel is " << (*channel)->GetState(false);
  ASSERT_EQ(::kill(proc.pid(), SIGCONT), 0);
  EXPECT_TRUE((*channel)->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(60)));
}

}  // namespace
}  // namespace failover::testing
