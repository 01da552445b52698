// The client library against a real failoverd that is killed mid-run and
// restarted: requests keep being served, and buffered reports arrive later.
#include <signal.h>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "tests/support/api_test.h"

namespace failover::testing {
namespace {

TEST(ClientFailStaticTest, FailoverdKilledMidRunAndRestarted) {
  TempDir data;
  const std::string listen = "127.0.0.1:" + std::to_string(FreePort());
  auto proc = std::make_unique<FailoverdProcess>(FailoverdProcess::Options{data.path(), {}, listen});
  std::string error;
  ASSERT_TRUE(proc->Start(&error)) << error;
  auto channel = proc->Channel();
  auto admin = v1::AdminService::NewStub(channel);
  v1::ApplyRequest config;
  config.add_targets()->set_name("a");
  config.add_targets()->set_name("b");
  v1::Chain* chain = config.add_chains();
  chain->set_name("ch");
  chain->add_targets("a");
  chain->add_targets("b");
  {
    grpc::ClientContext ctx;
    v1::ApplyResponse resp;
    ASSERT_TRUE(admin->Apply(&ctx, config, &resp).ok());
  }
  client::ClientOptions options;
  options.connection.timeout_seconds = 2;
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
  // The next request flushes the buffer first, then runs normally.
  client::LoopResult back;
  int runs = 0;  // the ones before failoverd answers are served fail-static and buffered too
  ASSERT_TRUE(Eventually([&] {
    back = client.Run("ch", upstream);
    ++runs;
    return !back.fail_static;
  }));
  EXPECT_TRUE(back.ok);
  EXPECT_EQ(client.buffered_reports(), 0u);
  // The restarted failoverd counted every buffered success on b (the three
  // above and those of the runs while it started), then the report of the
  // request that flushed them.
  const int metrics_port = proc->MetricsPort();
  ASSERT_GT(metrics_port, 0) << proc->Stderr();
  EXPECT_THAT(HttpGet(metrics_port, "/metrics"),
              ::testing::HasSubstr(absl::StrCat("failover_outcomes_total{reason=\"none\",target=\"b\"} ", 3 + runs)));
}

}  // namespace
}  // namespace failover::testing
