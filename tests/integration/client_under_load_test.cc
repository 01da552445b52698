// The client library as a busy caller uses it: 16 threads share one Client
// while failoverd is killed mid-run and restarted. No crash (this test also
// runs under ASan and TSan), every request is served (fail-static while
// failoverd is away), and the restarted failoverd counts each report made
// after the kill once: none lost, none sent twice.
#include <signal.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "tests/support/api_test.h"

namespace failover::testing {
namespace {

// The sum of failover_outcomes_total over every label set, from a scrape.
double OutcomesCounted(int metrics_port) {
  double sum = 0;
  for (absl::string_view line : absl::StrSplit(HttpGet(metrics_port, "/metrics"), '\n')) {
    if (!absl::StartsWith(line, "failover_outcomes_total{")) continue;
    double value = 0;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &value)) sum += value;
  }
  return sum;
}

TEST(ClientUnderLoadTest, SixteenThreadsThroughAKillAndRestartLoseAndRepeatNoReport) {
  TempDir data;
  const std::string listen = "127.0.0.1:" + std::to_string(FreePort());
  auto proc = std::make_unique<FailoverdProcess>(FailoverdProcess::Options{data.path(), {}, listen});
  std::string error;
  ASSERT_TRUE(proc->Start(&error)) << error;
  ASSERT_TRUE(ApplyConfig(v1::AdminService::NewStub(proc->Channel()).get(), TwoTargetConfig()).ok());

  client::ClientOptions options;
  options.connection.server = listen;
  // A slow answer must not send requests fail-static while failoverd is up
  // (their reports would then reach the restarted one): budgets far above what
  // a loaded machine needs. A killed failoverd refuses at once.
  options.connection.timeout_seconds = 60;
  options.failoverd_budget = absl::Seconds(60);
  options.max_buffered_reports = 1000000;  // nothing dropped: every report must arrive
  options.flush_interval = absl::Milliseconds(50);
  options.down_backoff = absl::Milliseconds(50);
  options.max_down_backoff = absl::Milliseconds(200);
  // Every report a request makes while failoverd is up is sent before the
  // request ends, so at most one per thread is in flight at the kill.
  options.report_successes_in_background = false;
  auto client = client::Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();

  // A plan from failoverd first, the one fail-static serves from after the
  // kill. A TSan-built failoverd on a loaded machine can take longer than the
  // connect timeout to answer its first connection, and a request without a
  // plan fails (as it should); that is not what is tested here.
  ASSERT_TRUE(Eventually(
      [&] {
        const client::LoopResult r = (*client)->Run("ch", [](const v1::Attempt&) {
          client::AttemptOutcome o;
          o.ok = true;
          return o;
        });
        return r.ok && !r.fail_static;
      },
      std::chrono::seconds(120)));

  // The phase a request starts and ends in says where its reports can go.
  // kUp: failoverd up. kKilling: the signal is on its way (set before kill(),
  // so a request started earlier ends in it or later); the old process may
  // still count a report. kDead: waited for, so a request started now reports
  // only to the buffer or to the restarted failoverd. kStop: the threads end.
  enum Phase : int { kUp, kKilling, kDead, kStop };
  std::atomic<int> phase{kUp};
  std::atomic<int> failed{0};
  // Attempts of requests started once the old process was gone: each must be
  // counted by the restarted one exactly once.
  std::atomic<int64_t> attempts_after_kill{0};
  // Attempts of requests that overlapped the kill: the old process may have
  // counted them or not, so the restarted one counts each at most once.
  std::atomic<int64_t> attempts_across_kill{0};
  std::atomic<int64_t> requests{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&] {
      while (phase.load() != kStop) {
        const int started = phase.load();
        int attempts = 0;
        client::LoopResult r = (*client)->Run("ch", [&](const v1::Attempt&) {
          ++attempts;
          // The upstream's latency, so the backlog stays thousands, not millions.
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
          client::AttemptOutcome o;
          o.ok = true;
          return o;
        });
        if (!r.ok && failed++ == 0) ADD_FAILURE() << "a request failed: " << r.error;
        if (started >= kDead) {
          attempts_after_kill += attempts;
        } else if (phase.load() >= kKilling) {
          attempts_across_kill += attempts;
        }
        ++requests;
      }
    });
  }
  // Progress, not a rate: the deadlines are far above what a loaded machine
  // under ThreadSanitizer needs for these counts.
  constexpr auto kProgressDeadline = std::chrono::seconds(120);
  ASSERT_TRUE(Eventually([&] { return requests.load() > 200; }, kProgressDeadline));
  phase = kKilling;
  ASSERT_EQ(::kill(proc->pid(), SIGKILL), 0);
  ASSERT_NE(proc->Stop(SIGKILL), -1);  // waits for the process: its code never runs again
  phase = kDead;
  const int64_t at_kill = requests.load();
  ASSERT_TRUE(Eventually([&] { return requests.load() > at_kill + 200; }, kProgressDeadline));  // fail-static meanwhile
  EXPECT_GT((*client)->buffered_reports(), 0u);

  proc = std::make_unique<FailoverdProcess>(
      FailoverdProcess::Options{data.path(), {"--metrics-listen", "127.0.0.1:0"}, listen});
  ASSERT_TRUE(proc->Start(&error)) << error;
  const int64_t at_restart = requests.load();
  ASSERT_TRUE(Eventually([&] { return requests.load() > at_restart + 200; }, kProgressDeadline));
  phase = kStop;
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  ASSERT_TRUE(Eventually([&] { return (*client)->buffered_reports() == 0; }, kProgressDeadline))
      << (*client)->buffered_reports() << " reports still buffered of " << attempts_after_kill.load() << "\n"
      << proc->Stderr();
  EXPECT_EQ((*client)->dropped_reports(), 0u);

  // Every attempt of a request started after the kill is counted once; those
  // that overlapped the kill may add theirs, once each.
  const int metrics_port = proc->MetricsPort();
  ASSERT_GT(metrics_port, 0);
  const double lower = static_cast<double>(attempts_after_kill.load());
  double counted = 0;
  ASSERT_TRUE(Eventually(
      [&] {
        counted = OutcomesCounted(metrics_port);
        return counted >= lower;
      },
      kProgressDeadline))
      << counted << " counted, " << lower << " made after the kill";
  EXPECT_LE(counted, lower + static_cast<double>(attempts_across_kill.load())) << "reports were counted twice";
}

}  // namespace
}  // namespace failover::testing
