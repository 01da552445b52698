// Durable state and config files through the real failoverd: a SIGKILL right
// after acknowledgements loses nothing, config files reload live, and bad
// config or a bad data dir stop failoverd with a clear message.
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "tests/support/api_test.h"

namespace failover::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

void WriteFile(const std::string& path, const std::string& text) {
  // Written aside and renamed, as editors and ConfigMap updates do.
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp, std::ios::trunc) << text;
  fs::rename(tmp, path);
}

class PersistenceTest : public ApiTest {};

TEST_F(PersistenceTest, SigkillRightAfterAcknowledgementsLosesNothing) {
  StartServer();
  v1::ApplyRequest req;
  for (const char* t : {"a", "b", "c", "d"}) AddTarget(&req, t);
  for (const auto& [name, first, second] : {std::make_tuple("one", "a", "b"), std::make_tuple("two", "c", "d"),
                                            std::make_tuple("three", "a", "c")}) {
    v1::Chain* chain = req.add_chains();
    chain->set_name(name);
    chain->add_targets(first);
    chain->add_targets(second);
    *chain->mutable_policy()->mutable_recovery()->mutable_min_dwell() = Millis(3'600'000);
  }
  ASSERT_TRUE(Apply(req).ok());
  v1::PinChainRequest pin;
  pin.set_chain("two");
  pin.set_target("d");
  v1::ChainView chain_view;
  ASSERT_TRUE(admin_->PinChain(Ctx().get(), pin, &chain_view).ok());
  v1::TriggerFailoverRequest trigger;
  trigger.set_target("c");
  trigger.set_reason("upstream maintenance");
  v1::TargetView target_view;
  ASSERT_TRUE(admin_->TriggerFailover(Ctx().get(), trigger, &target_view).ok());
  // A failure that trips a switches chain "one" (and "three", which shares a).
  v1::PickTargetResponse plan = Pick("one");
  ASSERT_EQ(Report(plan.decision_id(), "a", 503, "overloaded").verdict(), v1::VERDICT_TRY_NEXT);
  const v1::ChainView one_before = Chain("one");
  ASSERT_EQ(one_before.status().active_target(), "b");
  const std::vector<v1::Event> events_before = Events();
  ASSERT_FALSE(events_before.empty());
  const uint64_t last_sequence = events_before.back().sequence();

  ASSERT_NE(proc_->Stop(SIGKILL), -1);
  StartServer();

  v1::ChainView one = Chain("one");
  EXPECT_EQ(one.status().active_target(), "b");
  EXPECT_EQ(one.status().state(), v1::CHAIN_STATE_FALLBACK);
  EXPECT_EQ(one.status().active_since().seconds(), one_before.status().active_since().seconds());
  EXPECT_EQ(Chain("three").status().state(), v1::CHAIN_STATE_DEGRADED);  // a down, c manual
  v1::ChainView two = Chain("two");
  EXPECT_EQ(two.status().pinned_target(), "d");
  EXPECT_EQ(two.status().state(), v1::CHAIN_STATE_PINNED);
  v1::TargetView a = Target("a");
  EXPECT_EQ(a.status().health(), v1::HEALTH_STATE_DOWN);
  EXPECT_THAT(a.status().last_error(), HasSubstr("503"));
  v1::TargetView c = Target("c");
  EXPECT_EQ(c.status().health(), v1::HEALTH_STATE_MANUAL);
  EXPECT_EQ(c.status().reason(), "upstream maintenance");
  EXPECT_EQ(Pick("one").attempts(0).target(), "b");

  // The event log came back and continues without reusing a sequence.
  const std::vector<v1::Event> events_after = Events();
  ASSERT_FALSE(events_after.empty());
  EXPECT_EQ(events_after.back().sequence(), last_sequence);
  v1::PinChainRequest repin;
  repin.set_chain("one");
  repin.set_target("a");
  ASSERT_TRUE(admin_->PinChain(Ctx().get(), repin, &chain_view).ok());
  // After a crash the numbering continues past the block reserved before it
  // (events written unsynced may have reached watchers and been lost with the
  // machine): a gap, never a reuse.
  std::vector<v1::Event> newest;
  ASSERT_TRUE(Eventually([&] {
    newest = Events();
    return newest.back().sequence() > last_sequence;
  }));
  EXPECT_EQ(newest.back().chain_switched().reason(), v1::SWITCH_REASON_PIN);
  EXPECT_GT(newest.back().sequence(), last_sequence + 1) << "no gap: the reserved block was not skipped";
}

// A client that sent a batch as failoverd died sends it again once failoverd is
// back (DESIGN 3.14, invariant 4): the report that tripped a target counts
// nothing the second time; its id was stored with the trip.
TEST_F(PersistenceTest, AReportThatTrippedCountsNothingAgainAfterASigkill) {
  StartServer();
  v1::ApplyRequest config;
  for (const char* t : {"a", "b"}) AddTarget(&config, t);
  v1::Chain* chain = config.add_chains();
  chain->set_name("one");
  chain->add_targets("a");
  chain->add_targets("b");
  chain->mutable_policy()->mutable_trip()->set_errors(1);
  ASSERT_TRUE(Apply(config).ok());
  auto report = [&](const std::string& target, uint64_t sequence) {
    v1::ReportOutcomeRequest req;
    req.set_chain("one");
    req.set_target(target);
    req.mutable_failure()->set_http_status(503);
    req.mutable_report_id()->set_sender("gateway-7c1e");
    req.mutable_report_id()->set_sequence(sequence);
    v1::ReportOutcomeResponse resp;
    const grpc::Status s = decide_->ReportOutcome(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  };
  const v1::ReportOutcomeResponse tripped = report("a", 5);
  ASSERT_TRUE(tripped.counted());
  ASSERT_EQ(tripped.target_health(), v1::HEALTH_STATE_DOWN);

  ASSERT_NE(proc_->Stop(SIGKILL), -1);
  StartServer();
  const v1::ReportOutcomeResponse again = report("a", 5);
  EXPECT_TRUE(again.duplicate()) << again.ShortDebugString();
  EXPECT_FALSE(again.counted());
  // An id of the same sender that was never counted still counts.
  const v1::ReportOutcomeResponse fresh = report("b", 4);
  EXPECT_FALSE(fresh.duplicate());
  EXPECT_TRUE(fresh.counted());
  EXPECT_EQ(Target("b").status().health(), v1::HEALTH_STATE_DOWN);
}

TEST_F(PersistenceTest, ConfigFilesReloadLiveAndABadChangeKeepsTheRunningConfig) {
  TempDir config_dir;
  const std::string file = config_dir.path() + "/chains.yaml";
  WriteFile(file,
            "targets: [{name: a}, {name: b}, {name: c}]\n"
            "chains: [{name: ch, targets: [a, b]}]\n");
  StartServer({"--config", config_dir.path(), "--config-poll", "0.05", "--metrics-listen", "127.0.0.1:0"});
  EXPECT_EQ(Chain("ch").config().targets_size(), 2);
  EXPECT_EQ(Chain("ch").config().managed_by(), file);
  auto metrics = [&] { return HttpGet(proc_->MetricsPort(), "/metrics"); };

  WriteFile(file,
            "targets: [{name: a}, {name: b}, {name: c}]\n"
            "chains: [{name: ch, targets: [a, b, c]}]\n");
  ASSERT_TRUE(Eventually([&] { return Chain("ch").config().targets_size() == 3; }));
  // The event is listed once the change is on disk, a moment after the engine has it.
  EXPECT_TRUE(Eventually([&] {
    for (const auto& e : Events()) {
      if (e.has_config_changed() && e.config_changed().name() == "ch" &&
          e.config_changed().change() == v1::CONFIG_CHANGE_UPDATED) {
        return true;
      }
    }
    return false;
  }));

  // A bad change is rejected with file, line and field; the running config stays.
  WriteFile(file,
            "targets: [{name: a}, {name: b}, {name: c}]\n"
            "chains:\n  - name: ch\n    targets: [a, b]\n    policy: {trip: {window: soon}}\n");
  ASSERT_TRUE(Eventually([&] { return proc_->Stderr().find("rejected") != std::string::npos; }));
  EXPECT_THAT(proc_->Stderr(), HasSubstr(file + ":5: chains[0].policy.trip.window"));
  EXPECT_EQ(Chain("ch").config().targets_size(), 3);

  // API edits of file-managed objects are refused, naming the file.
  v1::ApplyRequest edit;
  AddTarget(&edit, "a")->set_cost(3);
  grpc::Status refused = Apply(edit);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(refused.error_message(), HasSubstr(file));

  // The bad files are not parsed (and logged) again at every poll; metrics say
  // the last reload failed; fixing the file is logged as the way back.
  EXPECT_THAT(metrics(), HasSubstr("failover_config_last_reload_ok 0"));
  WriteFile(file,
            "targets: [{name: a}, {name: b}, {name: c}]\n"
            "chains: [{name: ch, targets: [a, c]}]\n");
  ASSERT_TRUE(Eventually([&] { return proc_->Stderr().find("config reload accepted again") != std::string::npos; }));
  EXPECT_THAT(proc_->Stderr(), HasSubstr("rejected_before=1"));
  const std::string err = proc_->Stderr();
  size_t rejections = 0;
  for (size_t at = err.find("rejected, the running config stays"); at != std::string::npos;
       at = err.find("rejected, the running config stays", at + 1)) {
    ++rejections;
  }
  EXPECT_EQ(rejections, 1u);
  const std::string text = metrics();
  EXPECT_THAT(text, HasSubstr("failover_config_last_reload_ok 1"));
  EXPECT_THAT(text, ::testing::ContainsRegex("failover_config_last_reload_success_timestamp_seconds [1-9][0-9.e+]+"));
  EXPECT_THAT(text, HasSubstr("failover_config_reloads_total{result=\"rejected\"} 1"));
  EXPECT_THAT(text, HasSubstr("failover_config_reloads_total{result=\"accepted\"} 3"));  // start, 2 changes
}

// The files declare what was stored: a restart with them changes nothing
// (the stored model is the declared one, not the effective upstream name).
TEST_F(PersistenceTest, ARestartWithTheSameConfigFilesChangesNothing) {
  TempDir config_dir;
  WriteFile(config_dir.path() + "/chains.yaml",
            "targets: [{name: a}, {name: b, upstream_model: gpt-4o}]\n"
            "chains: [{name: ch, targets: [a, b]}]\n");
  auto generation_now = [&] {
    v1::ApplyRequest nothing;
    nothing.set_dry_run(true);
    v1::ApplyResponse resp;
    EXPECT_TRUE(Apply(nothing, &resp).ok());
    return resp.generation();
  };
  StartServer({"--config", config_dir.path(), "--config-poll", "0"});
  const uint64_t generation = generation_now();
  const size_t events = Events().size();
  ASSERT_GT(generation, 0u);
  ASSERT_EQ(proc_->Stop(SIGTERM), 0);

  StartServer({"--config", config_dir.path(), "--config-poll", "0"});
  EXPECT_EQ(generation_now(), generation);
  std::vector<v1::Event> after = Events();
  EXPECT_EQ(after.size(), events);
  for (const auto& e : after) EXPECT_FALSE(e.has_config_changed() && e.config_changed().generation() > generation);
  // And an operator's dry run of the same files shows nothing to change.
  CommandResult dry = RunCommand(
      {FailoverctlBinary(), "--server", proc_->address(), "apply", "-f", config_dir.path(), "--dry-run"});
  EXPECT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_THAT(dry.out, ::testing::Not(HasSubstr("updated")));
  EXPECT_THAT(dry.out, HasSubstr("unchanged"));
}

TEST_F(PersistenceTest, SighupAndAConfigMapSymlinkSwapBothReload) {
  // The layout Kubernetes mounts: chains.yaml -> ..data/chains.yaml, ..data -> ..v1.
  TempDir mount;
  const std::string dir = mount.path();
  fs::create_directory(dir + "/..v1");
  std::ofstream(dir + "/..v1/chains.yaml") << "targets: [{name: a}, {name: b}]\nchains: [{name: ch, targets: [a, b]}]\n";
  fs::create_directory_symlink("..v1", dir + "/..data");
  fs::create_symlink("..data/chains.yaml", dir + "/chains.yaml");
  StartServer({"--config", dir, "--config-poll", "0.05"});
  EXPECT_EQ(Chain("ch").config().strategy(), v1::STRATEGY_FAILOVER);

  fs::create_directory(dir + "/..v2");
  std::ofstream(dir + "/..v2/chains.yaml")
      << "targets: [{name: a}, {name: b}]\nchains: [{name: ch, strategy: round_robin, targets: [a, b]}]\n";
  fs::create_directory_symlink("..v2", dir + "/..data_tmp");
  fs::rename(dir + "/..data_tmp", dir + "/..data");
  ASSERT_TRUE(Eventually([&] { return Chain("ch").config().strategy() == v1::STRATEGY_ROUND_ROBIN; }));

  // SIGHUP reloads too (restarted with the watcher off).
  StartServer({"--config", dir, "--config-poll", "0"});
  std::ofstream(dir + "/..v2/chains.yaml", std::ios::trunc)
      << "targets: [{name: a}, {name: b}]\nchains: [{name: ch, strategy: lowest_cost, targets: [a, b]}]\n";
  EXPECT_EQ(Chain("ch").config().strategy(), v1::STRATEGY_ROUND_ROBIN);  // no watcher: unchanged
  ::kill(proc_pid(), SIGHUP);
  ASSERT_TRUE(Eventually([&] { return Chain("ch").config().strategy() == v1::STRATEGY_LOWEST_COST; }));
}

TEST(StartupRefusalTest, BadConfigAtStartStopsWithFileLineAndField) {
  TempDir data;
  TempDir config_dir;
  std::ofstream(config_dir.path() + "/x.yaml") << "targets:\n  - name: a\n    weight: heavy\n";
  FailoverdProcess proc({data.path(), {"--config", config_dir.path()}});
  std::string error;
  EXPECT_FALSE(proc.Start(&error));
  EXPECT_THAT(error, HasSubstr(config_dir.path() + "/x.yaml:3: targets[0].weight"));
}

TEST(StartupRefusalTest, CorruptDataDirStopsNamingTheDirAndIsNotOverwritten) {
  TempDir data;
  {
    FailoverdProcess proc({data.path(), {}});
    std::string error;
    ASSERT_TRUE(proc.Start(&error)) << error;
    ASSERT_NE(proc.Stop(SIGTERM), -1);
  }
  std::vector<std::string> manifests;
  for (const auto& entry : fs::directory_iterator(data.path())) {
    if (entry.path().filename().string().rfind("MANIFEST", 0) == 0) {
      std::ofstream(entry.path(), std::ios::trunc) << "garbage";
      manifests.push_back(entry.path().string());
    }
  }
  ASSERT_FALSE(manifests.empty());
  FailoverdProcess proc({data.path(), {}});
  std::string error;
  EXPECT_FALSE(proc.Start(&error));
  EXPECT_THAT(error, HasSubstr(data.path()));
  EXPECT_THAT(error, HasSubstr("corrupt"));
  std::ifstream in(manifests[0]);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "garbage");
}

}  // namespace
}  // namespace failover::testing
