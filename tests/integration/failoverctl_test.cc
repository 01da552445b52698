// The real failoverctl against a real failoverd.
#include <signal.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "failover/v1/admin.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "tests/support/api_test.h"

namespace failover::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class FailoverctlTest : public ApiTest {
 protected:
  void SetUp() override {
    StartServer();
    std::ofstream(config_.path() + "/chains.yaml")
        << "targets:\n  - name: argus-llm\n    upstream_model: gemma-3-12b\n  - name: gemma-local\n    kind: local\n"
           "    warm: true\nchains:\n  - name: assistant-llm\n    targets: [argus-llm, gemma-local]\n";
  }
  CommandResult Ctl(std::vector<std::string> args) {
    args.insert(args.begin(), {FailoverctlBinary(), "--server", proc_->address()});
    return RunCommand(args);
  }
  TempDir config_;
};

TEST_F(FailoverctlTest, ApplyShowsTheDiffAndDryRunSavesNothing) {
  CommandResult dry = Ctl({"apply", "-f", config_.path(), "--dry-run"});
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_THAT(dry.out, HasSubstr("chain assistant-llm: created"));
  EXPECT_THAT(dry.out, HasSubstr("dry run: nothing was saved"));
  EXPECT_EQ(Ctl({"get", "chains"}).out, "CHAIN  STATE  ACTIVE  LAST SWITCH  TARGETS\n");
  CommandResult applied = Ctl({"apply", "-f", config_.path()});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  EXPECT_THAT(applied.out, HasSubstr("target argus-llm: created"));
  EXPECT_THAT(applied.out, HasSubstr("generation 1"));
  std::ofstream(config_.path() + "/chains.yaml", std::ios::app) << "    strategy: round_robin\n";
  CommandResult changed = Ctl({"apply", "-f", config_.path(), "--dry-run"});
  EXPECT_THAT(changed.out, HasSubstr("chain assistant-llm: updated: strategy: failover -> round_robin"));
  EXPECT_THAT(changed.out, HasSubstr("target argus-llm: unchanged"));
}

// -f repeats: the files are read as one config, and an object declared in two
// of them is refused naming where.
TEST_F(FailoverctlTest, ApplyAndValidateTakeSeveralFiles) {
  TempDir split;
  std::ofstream(split.path() + "/targets.yaml") << "targets:\n  - name: a\n  - name: b\n";
  std::ofstream(split.path() + "/chains.yaml") << "chains:\n  - name: ab\n    targets: [a, b]\n";
  const std::string targets = split.path() + "/targets.yaml", chains = split.path() + "/chains.yaml";
  CommandResult valid = Ctl({"validate", "-f", targets, "-f", chains});
  EXPECT_EQ(valid.exit_code, 0) << valid.err;
  EXPECT_THAT(valid.out, HasSubstr("valid (2 files, 2 targets, 1 chains)"));
  CommandResult applied = Ctl({"apply", "-f", targets, "--file", chains});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  EXPECT_THAT(applied.out, HasSubstr("chain ab: created"));
  // The same file twice (by itself and in its directory) is read once.
  EXPECT_EQ(Ctl({"validate", "-f", targets, "-f", split.path()}).exit_code, 0);
  std::ofstream(split.path() + "/again.yaml") << "targets:\n  - name: a\n";
  CommandResult twice = Ctl({"validate", "-f", split.path()});
  EXPECT_NE(twice.exit_code, 0);
  EXPECT_THAT(twice.err, HasSubstr(R"(targets.yaml:2: targets[1].name: "a" appears twice)"));
}

// A mistyped command names the closest one; each command's help lists the
// global flags it also takes.
TEST_F(FailoverctlTest, MistypedCommandsAreNamedAndHelpListsGlobalFlags) {
  CommandResult typo = Ctl({"gett", "chains"});
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_THAT(typo.err, HasSubstr(R"(unknown command "gett"; did you mean "get"?)"));
  CommandResult nested = Ctl({"-o", "json", "failover", "trigerr", "a"});
  EXPECT_EQ(nested.exit_code, 2);
  EXPECT_THAT(nested.err, HasSubstr(R"(failoverctl failover: unknown command "trigerr"; did you mean "trigger"?)"));
  CommandResult nothing_like = Ctl({"xyzzy"});
  EXPECT_EQ(nothing_like.exit_code, 2);
  EXPECT_THAT(nothing_like.err, HasSubstr(R"(unknown command "xyzzy" (failoverctl --help lists the commands))"));
  CommandResult help = Ctl({"pin", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  for (const char* flag : {"--server", "--token", "--tls-ca", "--timeout", "-o,--output"}) {
    EXPECT_THAT(help.out, HasSubstr(absl::StrCat("\n  ", flag, " "))) << help.out;
  }
  // A global flag after the command works as the help says.
  ASSERT_EQ(Ctl({"apply", "-f", config_.path()}).exit_code, 0);
  CommandResult after = RunCommand({FailoverctlBinary(), "get", "chains", "--server", proc_->address(), "-o", "json"});
  EXPECT_EQ(after.exit_code, 0) << after.err;
  EXPECT_THAT(after.out, HasSubstr("\"activeTarget\": \"argus-llm\""));
}

TEST_F(FailoverctlTest, GetInEveryOutputForm) {
  ASSERT_EQ(Ctl({"apply", "-f", config_.path()}).exit_code, 0);
  CommandResult table = Ctl({"get", "chains"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("assistant-llm  primary  argus-llm"));
  for (const auto& line : absl::StrSplit(table.out, '\n')) EXPECT_LE(absl::string_view(line).size(), 80u) << line;
  CommandResult json = Ctl({"-o", "json", "get", "chains"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  v1::ListChainsResponse parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &parsed).ok()) << json.out;
  ASSERT_EQ(parsed.chains_size(), 1);
  EXPECT_EQ(parsed.chains(0).status().active_target(), "argus-llm");
  CommandResult yaml = Ctl({"-o", "yaml", "get", "target", "gemma-local"});
  ASSERT_EQ(yaml.exit_code, 0) << yaml.err;
  // -o yaml is a config file: the keys and words a person writes.
  EXPECT_EQ(yaml.out, "targets:\n  - name: gemma-local\n    kind: local\n    warm: true\n");
  CommandResult targets = Ctl({"get", "targets"});
  EXPECT_THAT(targets.out, HasSubstr("TARGET       HEALTH   LAST CHECK  LAST ERROR"));
}

// What get -o yaml prints applies back unchanged, every kind of setting included.
TEST_F(FailoverctlTest, GetAsYamlAppliesBackUnchanged) {
  TempDir rich;
  std::ofstream(rich.path() + "/rich.yaml")
      << "targets:\n"
         "  - name: a\n    upstream_model: gpt-4o\n    weight: 3\n    cost: 2.5\n    timeout: 30s\n"
         "    labels: {base_url: \"https://api.example.com/v1\", region: eu, flag: \"true\"}\n"
         "    limits: {rpm: 600}\n"
         "    health: {trip: {failure_rate: 20, min_calls: 50, window: 1m, slow_call: {duration: 8s, rate: 50}}}\n"
         "  - name: b\n    kind: local\n    warm: true\n    enabled: false\n"
         "  - name: c\n"
         "chains:\n"
         "  - name: ch\n    targets: [a, b, c]\n    strategy: least_latency\n    failover_enabled: true\n"
         "    policy:\n      probe: {interval: 1m30s}\n      trip: {errors: 3}\n      backoff: {factor: 5, max: 1h}\n"
         "      rate_limit: {on: wait, hold: 20s}\n      max_attempts: 1\n      retry_on_statuses: [408, 5xx]\n"
         "      retry_on_errors: [model not found]\n      same_target_retries: {network: 0, overloaded: 3}\n"
         "      least_latency: {explore: 10}\n      retry_budget: {ratio: 0.2}\n      hedge: {after: 2500ms}\n";
  ASSERT_EQ(Ctl({"apply", "-f", rich.path()}).exit_code, 0);
  CommandResult targets = Ctl({"-o", "yaml", "get", "targets"});
  CommandResult chains = Ctl({"-o", "yaml", "get", "chains"});
  ASSERT_EQ(targets.exit_code, 0) << targets.err;
  ASSERT_EQ(chains.exit_code, 0) << chains.err;
  TempDir back;
  std::ofstream(back.path() + "/targets.yaml") << targets.out;
  std::ofstream(back.path() + "/chains.yaml") << chains.out;
  CommandResult again = Ctl({"apply", "-f", back.path(), "--dry-run"});
  ASSERT_EQ(again.exit_code, 0) << again.err << targets.out << chains.out;
  EXPECT_THAT(again.out, ::testing::Not(HasSubstr("updated"))) << again.out << targets.out << chains.out;
  EXPECT_THAT(again.out, HasSubstr("chain ch: unchanged"));
  EXPECT_THAT(chains.out, HasSubstr("hedge:\n        after: 2.5s"));
  EXPECT_THAT(chains.out, HasSubstr("ratio: 0.2\n"));
  EXPECT_THAT(targets.out, HasSubstr("flag: \"true\""));
}

TEST_F(FailoverctlTest, PinTriggerStatusAndEvents) {
  ASSERT_EQ(Ctl({"apply", "-f", config_.path()}).exit_code, 0);
  CommandResult pin = Ctl({"pin", "assistant-llm", "gemma-local"});
  ASSERT_EQ(pin.exit_code, 0) << pin.err;
  EXPECT_THAT(pin.out, HasSubstr("pinned"));
  ASSERT_EQ(Ctl({"unpin", "assistant-llm"}).exit_code, 0);
  CommandResult trigger = Ctl({"failover", "trigger", "argus-llm", "--reason", "provider maintenance"});
  ASSERT_EQ(trigger.exit_code, 0) << trigger.err;
  EXPECT_THAT(trigger.out, HasSubstr("argus-llm  manual"));
  CommandResult status = Ctl({"status"});
  ASSERT_EQ(status.exit_code, 0);
  EXPECT_THAT(status.out, HasSubstr("assistant-llm  fallback  gemma-local"));
  EXPECT_THAT(status.out, HasSubstr("argus-llm    manual"));
  CommandResult events = Ctl({"events", "--chain", "assistant-llm"});
  EXPECT_THAT(events.out, HasSubstr("chain assistant-llm: argus-llm -> gemma-local (manual: argus-llm manual: provider maintenance)"));
  ASSERT_EQ(Ctl({"failover", "cancel", "argus-llm"}).exit_code, 0);
  EXPECT_THAT(Ctl({"status"}).out, HasSubstr("assistant-llm  primary  argus-llm"));
}

// status --watch into a pipe: each view in turn under a dated line, no
// terminal escape codes, and a new view every second without any change (so
// the ages tick). The reading end closes the pipe at the third view (a shell
// loop: it reads line by line, where awk would wait for a full buffer);
// `timeout` is only the deadline.
TEST_F(FailoverctlTest, StatusWatchIntoAPipeWritesViewsInTurnWithoutEscapes) {
  ASSERT_EQ(Ctl({"apply", "-f", config_.path()}).exit_code, 0);
  const std::string command = "timeout 30 " + FailoverctlBinary() + " --server " + proc_->address() +
                              " status --watch | { n=0; while IFS= read -r line; do case $line in '--- '*) n=$((n+1)); "
                              "[ $n = 3 ] && exit;; esac; printf '%s\\n' \"$line\"; done; }";
  const CommandResult watched = RunCommand({"/bin/bash", "-c", command});
  EXPECT_EQ(watched.out.find("\033"), std::string::npos) << "escape codes in a pipe";
  size_t views = 0;
  for (size_t at = watched.out.find("--- "); at != std::string::npos; at = watched.out.find("\n--- ", at + 1)) ++views;
  EXPECT_EQ(views, 2u) << watched.out;
  EXPECT_THAT(watched.out, HasSubstr("assistant-llm"));
}

TEST_F(FailoverctlTest, WatchReceivesASwitch) {
  ASSERT_EQ(Ctl({"apply", "-f", config_.path()}).exit_code, 0);
  const std::string after = std::to_string(Events().back().sequence());
  CommandResult watched;
  // Replay from a known sequence, so the switch arrives whether it happens
  // before or after the stream opens.
  std::thread watcher([&] {
    watched = Ctl({"watch", "--chain", "assistant-llm", "--after", after, "--max-events", "2"});
  });
  CommandResult report = Ctl({"report", "--chain", "assistant-llm", "--target", "argus-llm", "--http-status", "500",
                              "--message", "boom"});
  EXPECT_EQ(report.exit_code, 0) << report.err;
  EXPECT_THAT(report.out, HasSubstr("verdict try_next"));
  watcher.join();
  EXPECT_EQ(watched.exit_code, 0) << watched.err;
  EXPECT_THAT(watched.out, HasSubstr("target argus-llm: unknown -> down"));
  EXPECT_THAT(watched.out, HasSubstr("chain assistant-llm: argus-llm -> gemma-local (trip"));
  CommandResult json = Ctl({"-o", "json", "watch", "--after", after, "--max-events", "1"});
  EXPECT_THAT(json.out, HasSubstr("\"targetState\""));
}

// Events say when, in full (date, time, zone) and how long ago, and can be
// narrowed to a kind and to the recent past; watch narrows to a kind too.
TEST_F(FailoverctlTest, EventsShowTheirTimeAndFilterByKindAndAge) {
  ASSERT_EQ(Ctl({"apply", "-f", config_.path()}).exit_code, 0);
  const std::string after = std::to_string(Events().back().sequence());
  ASSERT_EQ(Ctl({"report", "--chain", "assistant-llm", "--target", "argus-llm", "--http-status", "500"}).exit_code, 0);
  const std::string today = absl::FormatTime("%Y-%m-%d", absl::Now(), absl::LocalTimeZone());
  CommandResult all = Ctl({"events"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_THAT(all.out, ::testing::ContainsRegex("[0-9]+  " + today + " [0-9]{2}:[0-9]{2}:[0-9]{2} [A-Za-z0-9+-]+  "
                                                 "chain assistant-llm: argus-llm -> gemma-local"));
  EXPECT_THAT(all.out, HasSubstr("config: target argus-llm created"));
  EXPECT_THAT(all.out, ::testing::ContainsRegex("\\((now|[0-9.]+m?s ago)\\)\n"));
  CommandResult chains = Ctl({"events", "--kind", "chain"});
  EXPECT_THAT(chains.out, HasSubstr("chain assistant-llm: argus-llm -> gemma-local"));
  EXPECT_THAT(chains.out, Not(HasSubstr("config:")));
  EXPECT_THAT(chains.out, Not(HasSubstr("target argus-llm:")));
  CommandResult recent = Ctl({"events", "--since", "1h", "--kind", "target", "--kind", "config"});
  EXPECT_THAT(recent.out, HasSubstr("target argus-llm: unknown -> down"));
  EXPECT_THAT(recent.out, HasSubstr("config: target argus-llm created"));
  EXPECT_THAT(recent.out, Not(HasSubstr("chain assistant-llm:")));
  CommandResult bad = Ctl({"events", "--kind", "chains"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--kind: expected chain, target or config, got \"chains\""));
  EXPECT_EQ(Ctl({"events", "--since", "soon"}).exit_code, 2);
  CommandResult watched = Ctl({"watch", "--after", after, "--kind", "chain", "--max-events", "1"});
  EXPECT_THAT(watched.out, HasSubstr("chain assistant-llm: argus-llm -> gemma-local"));
  EXPECT_THAT(watched.out, Not(HasSubstr("target argus-llm:")));
}

TEST_F(FailoverctlTest, PickAndReportForDebugging) {
  ASSERT_EQ(Ctl({"apply", "-f", config_.path()}).exit_code, 0);
  CommandResult pick = Ctl({"pick", "assistant-llm"});
  ASSERT_EQ(pick.exit_code, 0) << pick.err;
  EXPECT_THAT(pick.out, HasSubstr("1  argus-llm    gemma-3-12b"));
  const std::string decision = pick.out.substr(9, pick.out.find('\n') - 9);
  CommandResult report = Ctl({"report", "--decision", decision, "--target", "argus-llm", "--success"});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_THAT(report.out, HasSubstr("verdict done"));
}

// The raw form: what the upstream sent, as a caller's helper relays it.
TEST_F(FailoverctlTest, ReportTakesTheUpstreamsRawReply) {
  ASSERT_EQ(Ctl({"apply", "-f", config_.path()}).exit_code, 0);
  CommandResult quota = Ctl({"report", "--chain", "assistant-llm", "--target", "argus-llm", "--status", "429",
                             "--header", "x-ratelimit-reset-requests: 20s", "--body",
                             R"({"error":{"message":"You exceeded your current quota, please check your plan and )"
                             R"(billing details.","type":"insufficient_quota","code":"insufficient_quota"}})"});
  ASSERT_EQ(quota.exit_code, 0) << quota.err;
  EXPECT_THAT(quota.out, HasSubstr("reason billing"));
  EXPECT_THAT(quota.out, HasSubstr("target argus-llm down"));
  CommandResult limited = Ctl({"report", "--chain", "assistant-llm", "--target", "gemma-local", "--status", "429",
                               "--header", "Retry-After: 7", "--body", R"({"message":"Requests rate limit exceeded"})"});
  ASSERT_EQ(limited.exit_code, 0) << limited.err;
  EXPECT_THAT(limited.out, HasSubstr("reason rate_limit"));
  EXPECT_GT(Target("gemma-local").status().held_until().seconds(), 0);
  EXPECT_EQ(Ctl({"report", "--target", "argus-llm", "--status", "500", "--header", "no colon"}).exit_code, 2);
}

TEST_F(FailoverctlTest, ExitCodes) {
  ASSERT_EQ(Ctl({"apply", "-f", config_.path()}).exit_code, 0);
  EXPECT_EQ(Ctl({"get", "chains"}).exit_code, 0);
  CommandResult refused = Ctl({"pin", "assistant-llm", "nope"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("\"nope\" is not a target of chain \"assistant-llm\""));
  CommandResult missing = Ctl({"get", "chain", "ghost"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("chain \"ghost\" not found"));
  EXPECT_EQ(Ctl({"frobnicate"}).exit_code, 2);
  EXPECT_EQ(Ctl({"get"}).exit_code, 2);
  EXPECT_EQ(Ctl({"report", "--target", "argus-llm"}).exit_code, 2);
  std::ofstream(config_.path() + "/bad.yaml") << "targets:\n  - name: x\n    weight: heavy\n";
  CommandResult bad = Ctl({"apply", "-f", config_.path()});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("bad.yaml:3: targets[0].weight"));
  // failoverd's own UNAVAILABLE (nothing left to try) is a refusal (1), not an outage (3).
  ASSERT_EQ(Ctl({"failover", "trigger", "argus-llm", "--reason", "maintenance"}).exit_code, 0);
  ASSERT_EQ(Ctl({"failover", "trigger", "gemma-local", "--reason", "maintenance"}).exit_code, 0);
  CommandResult nothing = Ctl({"pick", "assistant-llm"});
  EXPECT_EQ(nothing.exit_code, 1) << nothing.err;
  EXPECT_THAT(nothing.err, HasSubstr("has no target to try"));
  CommandResult help = Ctl({"watch", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("Examples:"));
  const std::string addr = proc_->address();
  ASSERT_NE(proc_->Stop(SIGTERM), -1);
  CommandResult down = RunCommand({FailoverctlBinary(), "--server", addr, "--timeout", "1", "status"});
  EXPECT_EQ(down.exit_code, 3);
  EXPECT_THAT(down.err, HasSubstr("cannot reach failoverd at " + addr));
  EXPECT_THAT(down.err, HasSubstr("hint: is failoverd running at " + addr));
  CommandResult env = RunCommand({FailoverctlBinary(), "--timeout", "1", "status"}, {"FAILOVERD_ADDR=" + addr});
  EXPECT_EQ(env.exit_code, 3);
  EXPECT_THAT(env.err, HasSubstr(addr.substr(addr.find(':') + 1)));
}

// The outcome trace through failoverctl: every counted outcome with what the
// caller saw, a resent report once, and the same entries after a restart.
TEST_F(FailoverctlTest, TraceListsEachCountedOutcomeOnceAndKeepsThemAcrossARestart) {
  ASSERT_EQ(Ctl({"apply", "-f", config_.path()}).exit_code, 0);
  const v1::PickTargetResponse plan = Pick("assistant-llm");
  v1::ReportOutcomeRequest failure;
  failure.set_decision_id(plan.decision_id());
  failure.set_target("argus-llm");
  failure.set_attempt(1);
  failure.mutable_failure()->set_http_status(503);
  failure.mutable_failure()->set_message("upstream overloaded");
  *failure.mutable_latency() = Millis(1500);
  failure.mutable_report_id()->set_sender("gateway-1");
  failure.mutable_report_id()->set_sequence(1);
  v1::ReportOutcomeResponse answer;
  ASSERT_TRUE(decide_->ReportOutcome(Ctx().get(), failure, &answer).ok());
  ASSERT_TRUE(decide_->ReportOutcome(Ctx().get(), failure, &answer).ok());  // resent: counted once
  ASSERT_TRUE(answer.duplicate());
  v1::ReportOutcomeRequest successes;
  successes.set_chain("assistant-llm");
  successes.set_target("gemma-local");
  successes.mutable_success();
  successes.set_count(40);
  ASSERT_TRUE(decide_->ReportOutcome(Ctx().get(), successes, &answer).ok());
  // A health check's result is traced too (without a chain).
  ASSERT_EQ(Ctl({"probe", "now", "gemma-local"}).exit_code, 0);
  v1::ProbeRequest ask;
  ask.set_prober_id("prober-1");
  v1::ProbeResponse tasks;
  ASSERT_TRUE(decide_->Probe(Ctx().get(), ask, &tasks).ok());
  v1::ProbeRequest results;
  results.set_prober_id("prober-1");
  for (const v1::ProbeTask& task : tasks.tasks()) {
    if (task.target() != "gemma-local") continue;
    v1::ProbeResult* r = results.add_results();
    r->set_lease_id(task.lease_id());
    r->set_outcome(v1::PROBE_OUTCOME_FAIL);
    r->mutable_failure()->set_http_status(500);
    r->mutable_failure()->set_message("health endpoint down");
  }
  ASSERT_EQ(results.results_size(), 1);
  ASSERT_TRUE(decide_->Probe(Ctx().get(), results, &tasks).ok());
  ASSERT_EQ(tasks.results_accepted(), 1u);

  auto check = [&](const std::string& when) {
    SCOPED_TRACE(when);
    const CommandResult json = Ctl({"trace", "-o", "json"});
    ASSERT_EQ(json.exit_code, 0) << json.err;
    v1::ListTraceResponse trace;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &trace).ok()) << json.out;
    ASSERT_EQ(trace.entries_size(), 3) << json.out;
    const v1::TraceEntry& failed = trace.entries(0);
    EXPECT_EQ(failed.chain(), "assistant-llm");
    EXPECT_EQ(failed.target(), "argus-llm");
    EXPECT_EQ(failed.failure().http_status(), 503u);
    EXPECT_EQ(failed.failure().message(), "upstream overloaded");
    EXPECT_EQ(failed.reason(), v1::FAILURE_REASON_OVERLOADED);
    EXPECT_EQ(failed.latency().seconds(), 1);
    EXPECT_EQ(failed.latency().nanos(), 500'000'000);
    const v1::TraceEntry& served = trace.entries(1);
    EXPECT_TRUE(served.has_success());
    EXPECT_EQ(served.count(), 40u);
    EXPECT_GT(served.number(), failed.number());
    const v1::TraceEntry& checked = trace.entries(2);
    EXPECT_EQ(checked.chain(), "");
    EXPECT_EQ(checked.target(), "gemma-local");
    EXPECT_EQ(checked.probe_outcome(), v1::PROBE_OUTCOME_FAIL);
    EXPECT_EQ(checked.failure().http_status(), 500u);
    EXPECT_FALSE(trace.more());

    const CommandResult text = Ctl({"trace", "--chain", "assistant-llm", "--since", "1h"});
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_THAT(text.out, HasSubstr("assistant-llm  argus-llm  503 \"upstream overloaded\" -> overloaded  1.5s\n"));
    EXPECT_THAT(text.out, HasSubstr("assistant-llm  gemma-local  ok x40\n"));
    // --chain keeps that chain's outcomes; checks belong to no chain.
    EXPECT_THAT(text.out, Not(HasSubstr("check")));
    EXPECT_THAT(Ctl({"trace"}).out, HasSubstr("-  gemma-local  liveness check fail \"health endpoint down\"\n"));
    // Paging by number gives the same entries one at a time.
    const CommandResult one = Ctl({"trace", "--limit", "1"});
    EXPECT_THAT(one.out, HasSubstr("argus-llm"));
    EXPECT_THAT(one.out, Not(HasSubstr("gemma-local")));
    EXPECT_THAT(one.out, HasSubstr("(more in the trace"));
  };
  check("before the restart");
  ASSERT_EQ(proc_->Stop(SIGTERM), 0);
  StartServer();
  check("after the restart");
  EXPECT_EQ(Ctl({"trace", "--chain", "other-llm"}).out, "");

  const CommandResult bad = Ctl({"trace", "--since", "yesterday"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("--since: expected a duration such as 30m or 2h, got \"yesterday\""));
  v1::ListTraceRequest too_many;
  too_many.set_limit(6000);
  v1::ListTraceResponse ignored;
  const grpc::Status refused = admin_->ListTrace(Ctx().get(), too_many, &ignored);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("limit: at most 5000, got 6000"));
}

// A shadow policy (DESIGN 3.17) is judged on the outcomes failoverd counts:
// one that trips on the first error reports the trip and the switch it would
// have made, in failoverd's log and metrics, while the real chain, under a
// policy that waits for five errors, stays where it is.
TEST_F(FailoverctlTest, AShadowPolicyTripsInTheLogAndMetricsWhileTheRealStateStays) {
  const bool single_node = cluster_leader_ == nullptr;
  if (single_node) {  // the metrics port (a cluster's leader replica has none here)
    ASSERT_EQ(proc_->Stop(SIGTERM), 0);
    StartServer({"--metrics-listen", "127.0.0.1:0"});
  }
  std::ofstream(config_.path() + "/chains.yaml")
      << "targets: [{name: a}, {name: b}]\n"
         "chains:\n"
         "  - name: ch\n"
         "    targets: [a, b]\n"
         "    policy: {trip: {errors: 5}}\n"
         "    shadow:\n"
         "      - name: eager\n"
         "        policy: {trip: {errors: 1, window: 10s}}\n";
  const CommandResult applied = Ctl({"apply", "-f", config_.path()});
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  EXPECT_THAT(Ctl({"get", "chain", "ch", "-o", "yaml"}).out,
              HasSubstr("shadow:\n      - name: eager\n        policy:\n          trip:\n            window: 10s"));

  // `failoverctl watch --shadow` follows what the shadow would do, marked as
  // such. Shadows are judged where the trace is kept: the leader, in a cluster.
  FailoverdProcess& judge = single_node ? *proc_ : *cluster_leader_;
  TempDir watch_dir;
  const std::string watch_out = watch_dir.path() + "/out";
  const pid_t watcher = SpawnProcess({FailoverctlBinary(), "--server", judge.address(), "watch", "--shadow", "--chain",
                                      "ch", "--max-events", "3"},
                                     watch_out, watch_dir.path() + "/err");
  ASSERT_GT(watcher, 0);
  auto watched = [&] {
    std::ifstream in(watch_out);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  ASSERT_TRUE(WaitUntil(10, [&] { return watched().find("snapshot") != std::string::npos; })) << watched();

  const v1::PickTargetResponse plan = Pick("ch");
  ASSERT_GT(plan.attempts_size(), 0);
  ASSERT_EQ(plan.attempts(0).target(), "a");
  Report(plan.decision_id(), "a", 503, "overloaded");
  int watch_status = -1;
  ASSERT_TRUE(WaitUntil(20, [&] { return waitpid(watcher, &watch_status, WNOHANG) == watcher; })) << watched();
  EXPECT_TRUE(WIFEXITED(watch_status) && WEXITSTATUS(watch_status) == 0) << watched();
  EXPECT_THAT(watched(), ::testing::ContainsRegex("\nshadow eager  [^\n]*  target a: unknown -> down"));
  EXPECT_THAT(watched(), ::testing::ContainsRegex("\nshadow eager  [^\n]*chain ch: a -> b \\(trip"));

  auto logged = [&](const std::string& line) { return judge.Stderr().find(line) != std::string::npos; };
  ASSERT_TRUE(Eventually([&] { return logged("shadow eager: chain ch: a -> b (trip"); })) << judge.Stderr();
  EXPECT_THAT(judge.Stderr(), HasSubstr("shadow eager: target a: unknown -> down"));
  if (single_node) {
    const std::string scrape = HttpGet(proc_->MetricsPort(), "/metrics");
    EXPECT_THAT(scrape, HasSubstr("failover_shadow_trips_total{chain=\"ch\",shadow=\"eager\"} 1"));
    EXPECT_THAT(scrape, HasSubstr("failover_shadow_chain_state{chain=\"ch\",shadow=\"eager\",state=\"fallback\"} 1"));
  }
  // The real chain is where it was: no event, a still first.
  EXPECT_NE(Target("a").status().health(), v1::HEALTH_STATE_DOWN);
  EXPECT_TRUE(Switches("ch").size() == 1 && Switches("ch")[0].reason() == v1::SWITCH_REASON_INITIAL);
  EXPECT_EQ(Pick("ch").attempts(0).target(), "a");

  // The shadow list is kept with the chain.
  ASSERT_EQ(proc_->Stop(SIGTERM), 0);
  StartServer();
  const v1::ChainView chain = Chain("ch");
  ASSERT_EQ(chain.config().shadow_size(), 1);
  EXPECT_EQ(chain.config().shadow(0).name(), "eager");
  EXPECT_EQ(chain.config().shadow(0).policy().trip().errors(), 1u);
}

// failoverctl simulate: the trace replayed with the live policy makes the
// trip and switch that really happened; a candidate that trips on three
// errors makes none and keeps sending to the failing target.
TEST_F(FailoverctlTest, SimulateReplaysTheTraceUnderTheLiveAndACandidatePolicy) {
  std::ofstream(config_.path() + "/chains.yaml", std::ios::app) << "    policy:\n      recovery:\n        min_dwell: 45s\n";
  ASSERT_EQ(Ctl({"apply", "-f", config_.path()}).exit_code, 0);
  v1::ReportOutcomeRequest failure;
  failure.set_chain("assistant-llm");
  failure.set_target("argus-llm");
  failure.mutable_failure()->set_http_status(503);
  v1::ReportOutcomeResponse answer;
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(decide_->ReportOutcome(Ctx().get(), failure, &answer).ok());
  // What really happened: argus-llm tripped at the first failure.
  v1::ListEventsRequest ask;
  ask.set_limit(100);
  v1::ListEventsResponse happened;
  ASSERT_TRUE(admin_->ListEvents(Ctx().get(), ask, &happened).ok());
  int real_trips = 0, real_switches = 0;
  for (const v1::Event& e : happened.events()) {
    real_trips += e.has_target_state() && e.target_state().to_state() == v1::HEALTH_STATE_DOWN;
    real_switches += e.has_chain_switched() && e.chain_switched().reason() == v1::SWITCH_REASON_TRIP;
  }
  ASSERT_EQ(real_trips, 1);
  ASSERT_EQ(real_switches, 1);

  TempDir dir;
  const std::string candidate = dir.path() + "/three-errors.yaml";
  std::ofstream(candidate) << "policy:\n  trip:\n    errors: 3\n";
  const CommandResult json = Ctl({"simulate", "--chain", "assistant-llm", "--policy", candidate, "-o", "json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  v1::SimulateResponse report;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &report).ok()) << json.out;
  EXPECT_EQ(report.trace_entries(), 2u);
  ASSERT_EQ(report.live().trips_size(), real_trips);
  EXPECT_EQ(report.live().trips(0).target(), "argus-llm");
  EXPECT_EQ(report.live().switches(), static_cast<uint32_t>(real_switches));
  EXPECT_EQ(report.live().requests_to_failing(), 1u);  // the second failure came after the switch
  EXPECT_EQ(report.candidate().trips_size(), 0);
  EXPECT_EQ(report.candidate().switches(), 0u);
  EXPECT_EQ(report.candidate().requests_to_failing(), 2u);
  EXPECT_EQ(report.candidate().policy().trip().errors(), 3u);
  // What the file leaves out stays as the chain has it; flaps are measured against its dwell.
  EXPECT_EQ(report.candidate().policy().recovery().min_dwell().seconds(), 45);
  EXPECT_EQ(report.flap_window().seconds(), 45);
  EXPECT_EQ(report.to().seconds() - report.from().seconds(), 3600);

  const CommandResult text = Ctl({"simulate", "--chain", "assistant-llm", "--policy", candidate, "--since", "10m"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("(10m), 2 trace entries"));
  EXPECT_THAT(text.out, HasSubstr("candidate: trip.errors 1 -> 3\n"));
  // The columns line up; compared here with each run of spaces as one.
  std::string squeezed;
  for (char c : text.out) {
    if (c != ' ' || squeezed.empty() || squeezed.back() != ' ') squeezed += c;
  }
  EXPECT_THAT(squeezed, HasSubstr("\n live candidate\ntrips 1 0\n"));
  EXPECT_THAT(squeezed, HasSubstr("\nswitches 1 0\n"));
  EXPECT_THAT(squeezed, HasSubstr("\nfailures on the target tried first 1 2\n"));

  // Bad input is refused by name and changes nothing.
  std::ofstream(candidate) << "trip:\n  errors: many\n";
  const CommandResult bad = Ctl({"simulate", "--chain", "assistant-llm", "--policy", candidate});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("three-errors.yaml:2: policy.trip.errors: must be a whole number"));
  std::ofstream(candidate) << "trip:\n  errors: 3\n";
  const CommandResult unknown = Ctl({"simulate", "--chain", "no-such-chain", "--policy", candidate});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_THAT(unknown.err, HasSubstr("no-such-chain"));
  const CommandResult both = Ctl({"simulate", "--chain", "assistant-llm", "--policy", candidate, "--since", "1h",
                                  "--from", "2026-12-04T10:00:00Z"});
  EXPECT_THAT(both.err, HasSubstr("give --since or --from/--to, not both"));
  EXPECT_THAT(Ctl({"simulate", "--chain", "assistant-llm", "--policy", candidate, "--from", "yesterday"}).err,
              HasSubstr("--from: expected a time such as 2026-12-04T10:00:00Z, got \"yesterday\""));
  EXPECT_THAT(Ctl({"simulate", "--chain", "assistant-llm", "--policy", candidate, "--flap-window", "-1s"}).err,
              HasSubstr("--flap-window: expected a duration"));
  v1::SimulateRequest week;
  week.set_chain("assistant-llm");
  week.mutable_policy()->mutable_trip()->set_errors(3);
  week.mutable_from()->set_seconds(absl::ToUnixSeconds(absl::Now() - absl::Hours(24 * 8)));
  v1::SimulateResponse ignored;
  const grpc::Status too_long = admin_->Simulate(Ctx().get(), week, &ignored);
  EXPECT_EQ(too_long.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(too_long.error_message(), HasSubstr("from: a window of"));
  week.clear_from();
  week.mutable_policy()->mutable_trip()->set_failure_rate(250);
  const grpc::Status bad_rate = admin_->Simulate(Ctx().get(), week, &ignored);
  EXPECT_EQ(bad_rate.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad_rate.error_message(), HasSubstr("policy.trip.failure_rate"));
  EXPECT_EQ(Ctl({"get", "chain", "assistant-llm", "-o", "json"}).out.find("\"errors\": 3"), std::string::npos);
}

// What a real failoverd recorded (outcomes through the decision service,
// checks through Probe, the ticker and picks moving the chain back), replayed
// under its own policy, tells the same story as its event log: the same trips,
// recoveries and switches in the same order.
TEST_F(FailoverctlTest, SimulateOfTheLivePolicyRetellsTheEventLog) {
  v1::ApplyRequest config;
  AddTarget(&config, "a");
  AddTarget(&config, "b");
  v1::Policy* policy = AddChain(&config, "ch", {"a", "b"})->mutable_policy();
  *policy->mutable_probe()->mutable_interval() = Millis(200);
  policy->mutable_recovery()->set_probes(1);
  *policy->mutable_recovery()->mutable_min_dwell() = Millis(400);
  ASSERT_TRUE(Apply(config).ok());
  // Answers every check it is handed with a pass.
  std::vector<std::string> leases;
  auto probe = [&] {
    v1::ProbeRequest req;
    req.set_prober_id("prober");
    for (const std::string& lease : leases) {
      v1::ProbeResult* r = req.add_results();
      r->set_lease_id(lease);
      r->set_outcome(v1::PROBE_OUTCOME_PASS);
    }
    v1::ProbeResponse resp;
    EXPECT_TRUE(decide_->Probe(Ctx().get(), req, &resp).ok());
    leases.clear();
    for (const auto& t : resp.tasks()) leases.push_back(t.lease_id());
  };
  for (int cycle = 0; cycle < 3; ++cycle) {
    const v1::PickTargetResponse plan = Pick("ch");
    ASSERT_GT(plan.attempts_size(), 0);
    ASSERT_EQ(plan.attempts(0).target(), "a");
    Report(plan.decision_id(), "a", 503, "overloaded");  // trips a
    Report(plan.decision_id(), "b", 0);
    // Checks bring a back; a pick after the dwell moves the chain back to it.
    ASSERT_TRUE(Eventually([&] {
      probe();
      const v1::PickTargetResponse next = Pick("ch");
      if (next.attempts_size() == 0) return false;
      if (next.attempts(0).target() != "a") {
        Report(next.decision_id(), next.attempts(0).target(), 0);
        return false;
      }
      return true;
    })) << "cycle " << cycle;
  }
  auto story = [](auto events) {
    std::vector<std::string> out;
    for (const v1::Event& e : events) {
      if (e.has_target_state()) {
        out.push_back(absl::StrCat(e.target_state().target(), " ", v1::HealthState_Name(e.target_state().from_state()),
                                   " -> ", v1::HealthState_Name(e.target_state().to_state())));
      } else if (e.has_chain_switched()) {
        out.push_back(absl::StrCat(e.chain_switched().chain(), " ", e.chain_switched().from_target(), " -> ",
                                   e.chain_switched().to_target(), " ",
                                   v1::SwitchReason_Name(e.chain_switched().reason())));
      }
    }
    return out;
  };
  const std::vector<std::string> happened = story(Events());
  ASSERT_GE(happened.size(), 10u);

  v1::SimulateRequest req;
  req.set_chain("ch");
  *req.mutable_policy() = *policy;
  v1::SimulateResponse replayed;
  const grpc::Status s = admin_->Simulate(Ctx().get(), req, &replayed);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(story(replayed.live().events()), happened);
  EXPECT_EQ(replayed.live().trips_size(), 3);
  EXPECT_EQ(replayed.live().trip_count(), 3u);
  EXPECT_EQ(replayed.live().checks_unused(), 0u);
}

}  // namespace
}  // namespace failover::testing
