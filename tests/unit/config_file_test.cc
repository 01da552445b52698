// Config files: every example loads and applies; errors name file, line, field.
#include "server/config/config_file.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/config/config_writer.h"
#include "server/engine/engine.h"

namespace failover::config {
namespace {

using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

TEST(ConfigFileTest, EveryExampleLoadsAndApplies) {
  auto loaded = LoadConfigPath(EXAMPLES_DIR);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->files.size(), 5u);
  Engine engine;
  ApplyOptions options;
  options.from_files = true;
  auto applied = engine.Apply(loaded->change, options, kT0);
  ASSERT_TRUE(applied.ok()) << Locate(*loaded, applied.status());
  auto goclaw = engine.GetChain("agent-default");
  ASSERT_TRUE(goclaw.ok());
  EXPECT_EQ(goclaw->config.policy->backoff_factor, 5);
  EXPECT_EQ(goclaw->config.policy->probe_interval, absl::Seconds(60));
  EXPECT_THAT(goclaw->config.managed_by, HasSubstr("goclaw-cooldown.yaml"));
  auto gomodel = engine.GetChain("resilient-chat");
  ASSERT_TRUE(gomodel.ok());
  EXPECT_EQ(gomodel->config.strategy, Strategy::kRoundRobin);
  EXPECT_EQ(gomodel->config.policy->retry_on_statuses, (std::vector<std::string>{"408", "5xx"}));
  auto shared = engine.GetTarget("openai/gpt-4o");
  ASSERT_TRUE(shared.ok());
  ASSERT_TRUE(shared->config.health.has_value());
  EXPECT_EQ(shared->config.health->trip_errors, 3u);
  auto minuspod = engine.GetChain("ad-detection");
  ASSERT_TRUE(minuspod.ok());
  EXPECT_EQ(minuspod->config.policy->rate_limit_on, RateLimitMode::kWait);
  EXPECT_EQ(minuspod->config.policy->probe_interval, absl::Minutes(5));
  auto busy = engine.GetChain("chat-high-traffic");
  ASSERT_TRUE(busy.ok());
  EXPECT_EQ(busy->config.policy->trip_failure_rate, 20);
  EXPECT_EQ(busy->config.policy->trip_errors, 0u);
  auto fastest = engine.GetChain("chat-fastest");
  ASSERT_TRUE(fastest.ok());
  EXPECT_EQ(fastest->config.strategy, Strategy::kLeastLatency);
  EXPECT_EQ(fastest->config.policy->latency_explore, 5);
  EXPECT_EQ(fastest->config.policy->hedge_after, absl::Seconds(3));
  EXPECT_EQ(fastest->config.policy->retry_budget_ratio, 0.2);
  auto local = engine.GetTarget("piper-local");
  ASSERT_TRUE(local.ok());
  EXPECT_FALSE(local->config.HasHealthCheck());
}

TEST(ConfigFileTest, SeveralDocumentsPerFile) {
  auto loaded = ParseConfigText("targets: [{name: a}]\n---\ntargets: [{name: b}]\nchains: [{name: c, targets: [a, b]}]\n",
                                "multi.yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->change.targets.size(), 2u);
  EXPECT_EQ(loaded->change.chains.size(), 1u);
  EXPECT_EQ(loaded->chain_origins[0].line, 4);
}

TEST(ConfigFileTest, ParseErrorsNameFileLineAndField) {
  struct Case {
    std::string text;
    std::string expected;
  } cases[] = {
      {"targets:\n  - name: a\n    timeout: soon\n", "f.yaml:3: targets[0].timeout: must be a duration"},
      {"targets:\n  - name: a\n    colour: red\n", "f.yaml:3: targets[0].colour: unknown field"},
      {"targets:\n  - name: a\n    kind: cloud\n", "f.yaml:3: targets[0].kind: must be remote or local"},
      {"chains:\n  - name: c\n    targets: [a, b]\n    policy:\n      trip: {errors: many}\n",
       "f.yaml:5: chains[0].policy.trip.errors: must be a whole number"},
      {"chains:\n  - name: c\n    targets: [a, b]\n    strategy: random\n", "f.yaml:4: chains[0].strategy"},
      {"chains:\n  - targets: [a, b]\n", "chains[0]: name is required"},
      {"targets: [a: b: c]\n", "f.yaml:1: not valid YAML"},
      {"nodes: []\n", "f.yaml:1: nodes: unknown field"},
      {"chains:\n  - name: c\n    targets: [a, b]\n    policy: {same_target_retries: {sleepy: 1}}\n",
       "chains[0].policy.same_target_retries.sleepy: unknown reason"},
      // Found by the config fuzzer: a list as a map key used to throw out of the parser.
      {"chains:\n  - name: c\n    ? - upstream failed\n      - overloaded\n",
       "f.yaml:3: chains[0].(key): keys must be plain words, got a list"},
      {"targets:\n  - name: a\n    labels: {? [x]: y}\n", "targets[0].labels.(key): keys must be plain words"},
      // Found by the config fuzzer: yaml-cpp's LoadAll looped forever, allocating, on a line starting
      // with ','; alone, the document loads as null, which must not pass for an empty file.
      {"# comment\n, x]\n", "f.yaml:2: not valid YAML: the document does not parse as a map"},
      {"chains:\n  - name: c\n    targets: [a, b]\n    shadow: eager\n",
       "f.yaml:4: chains[0].shadow: must be a list of {name, policy}, got \"eager\""},
      {"chains:\n  - name: c\n    targets: [a, b]\n    shadow:\n      - policy: {}\n",
       "f.yaml:5: chains[0].shadow[0]: name is required"},
      {"chains:\n  - name: c\n    targets: [a, b]\n    shadow:\n      - name: s\n        trip: {errors: 1}\n",
       "f.yaml:6: chains[0].shadow[0].trip: unknown field"},
      {"chains:\n  - name: c\n    targets: [a, b]\n    shadow:\n      - name: s\n        policy:\n"
       "          trip: {errors: many}\n",
       "f.yaml:7: chains[0].shadow[0].policy.trip.errors: must be a whole number"},
      // Lines count from the file's start in every document.
      {"targets: [{name: a}]\n---\ntargets:\n  - name: b\n    colour: red\n", "f.yaml:5: targets[0].colour: unknown field"},
  };
  for (const Case& c : cases) {
    auto loaded = ParseConfigText(c.text, "f.yaml");
    ASSERT_FALSE(loaded.ok()) << c.text;
    EXPECT_THAT(std::string(loaded.status().message()), HasSubstr(c.expected)) << c.text;
  }
}

// A shadow policy is a whole policy: what it leaves out takes the defaults,
// not the chain's settings. Written back (get -o yaml), it reads the same.
TEST(ConfigFileTest, AShadowListReadsAsWholePoliciesAndWritesBackTheSame) {
  const std::string text =
      "targets: [{name: a}, {name: b}]\n"
      "chains:\n"
      "  - name: c\n"
      "    targets: [a, b]\n"
      "    policy: {trip: {errors: 1}, recovery: {min_dwell: 30s}}\n"
      "    shadow:\n"
      "      - name: rate20\n"
      "        policy:\n"
      "          trip: {failure_rate: 20, min_calls: 10, window: 30s}\n"
      "      - name: defaults\n";
  auto loaded = ParseConfigText(text, "f.yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const ChainConfig& chain = loaded->change.chains.at(0);
  ASSERT_EQ(chain.shadows.size(), 2u);
  EXPECT_EQ(chain.shadows[0].name, "rate20");
  EXPECT_EQ(chain.shadows[0].policy->trip_failure_rate, 20);
  EXPECT_EQ(chain.shadows[0].policy->trip_errors, 0u);  // a rate alone
  EXPECT_EQ(chain.shadows[0].policy->recovery_min_dwell, Policy().recovery_min_dwell);
  EXPECT_EQ(chain.shadows[1].policy, Policy());
  Engine engine;
  ApplyOptions options;
  options.from_files = true;
  ASSERT_TRUE(engine.Apply(loaded->change, options, kT0).ok());

  auto again = ParseConfigText(WriteConfig(loaded->change.targets, loaded->change.chains), "f.yaml");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->change.chains.at(0).shadows, chain.shadows);
}

TEST(ConfigFileTest, EngineErrorsAreLocatedInTheirFile) {
  auto loaded = ParseConfigText("targets:\n  - name: a\n  - name: b\nchains:\n  - name: c\n    targets: [a, ghost]\n",
                                "chains.yaml");
  ASSERT_TRUE(loaded.ok());
  Engine engine;
  ApplyOptions options;
  options.from_files = true;
  auto applied = engine.Apply(loaded->change, options, kT0);
  ASSERT_FALSE(applied.ok());
  const absl::Status located = Locate(*loaded, applied.status());
  EXPECT_THAT(std::string(located.message()), HasSubstr("chains.yaml:5: chains[0].targets[1]: unknown target \"ghost\""));
}

TEST(ConfigFileTest, ATargetSetsItsOwnHealthWithTheChainPolicyKeys) {
  auto loaded = ParseConfigText(
      "targets:\n  - name: a\n    health:\n      trip: {errors: 3, window: 1m}\n      probe: {interval: 5s}\n"
      "      rate_limit: {hold: 20s}\n  - name: b\n",
      "t.yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const TargetConfig& a = loaded->change.targets[0];
  ASSERT_TRUE(a.health.has_value());
  EXPECT_EQ(a.health->trip_errors, 3u);
  EXPECT_EQ(a.health->trip_window, absl::Minutes(1));
  EXPECT_EQ(a.health->probe_interval, absl::Seconds(5));
  EXPECT_EQ(a.health->rate_limit_hold, absl::Seconds(20));
  EXPECT_EQ(a.health->recovery_probes, HealthPolicy().recovery_probes);  // unset: the default
  EXPECT_FALSE(loaded->change.targets[1].health.has_value());

  struct Case {
    std::string text;
    std::string expected;
  } cases[] = {
      {"targets:\n  - name: a\n    health:\n      max_attempts: 2\n",
       "t.yaml:4: targets[0].health.max_attempts: unknown field"},
      {"targets:\n  - name: a\n    health:\n      rate_limit: {on: wait}\n",
       "t.yaml:4: targets[0].health.rate_limit.on: is a chain setting"},
      {"targets:\n  - name: a\n    health:\n      trip: {window: soon}\n",
       "t.yaml:4: targets[0].health.trip.window: must be a duration"},
  };
  for (const Case& c : cases) {
    auto bad = ParseConfigText(c.text, "t.yaml");
    ASSERT_FALSE(bad.ok()) << c.text;
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr(c.expected)) << c.text;
  }
}

TEST(ConfigFileTest, RateTripsReadTheirKeysAndARateAloneTurnsTheErrorCountOff) {
  auto loaded = ParseConfigText(
      "targets: [{name: a}, {name: b}, {name: c}, {name: d}]\nchains:\n  - name: busy\n    targets: [a, b]\n"
      "    policy:\n      trip: {failure_rate: 25, min_calls: 20, window: 1m,\n"
      "             slow_call: {duration: 2500ms, rate: 40}}\n"
      "  - name: both\n    targets: [c, d]\n    policy: {trip: {errors: 5, failure_rate: 10}}\n",
      "rates.yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Policy& busy = loaded->change.chains[0].policy;
  EXPECT_EQ(busy.trip_failure_rate, 25);
  EXPECT_EQ(busy.trip_min_calls, 20u);
  EXPECT_EQ(busy.trip_slow_call_duration, absl::Milliseconds(2500));
  EXPECT_EQ(busy.trip_slow_call_rate, 40);
  EXPECT_EQ(busy.trip_errors, 0u) << "a rate alone must not also trip on the first failure";
  EXPECT_EQ(loaded->change.chains[1].policy->trip_errors, 5u);
  Engine engine;
  ApplyOptions options;
  options.from_files = true;
  ASSERT_TRUE(engine.Apply(loaded->change, options, kT0).ok());

  struct Case {
    std::string policy;
    std::string expected;
  } cases[] = {
      {"{trip: {failure_rate: 150}}", "chains[0].policy.trip.failure_rate: must be a percentage 0..100"},
      {"{trip: {failure_rate: 20, min_calls: 0}}", "chains[0].policy.trip.min_calls: must be 1..1000000, got 0"},
      {"{trip: {slow_call: {rate: 20}}}", "chains[0].policy.trip.slow_call.duration: trip.slow_call needs both"},
      {"{trip: {slow_call: {duration: 1s}}}", "chains[0].policy.trip.slow_call.rate: trip.slow_call needs both"},
      {"{trip: {errors: 0}}", "chains[0].policy.trip.errors: must be 1..10000 (0 only with"},
      {"{trip: {slow_call: {speed: 1s}}}", "chains[0].policy.trip.slow_call.speed: unknown field"},
      {"{hedge: {after: -1s}}", "chains[0].policy.hedge.after: must not be negative"},
      {"{retry_budget: {ratio: -1}}", "chains[0].policy.retry_budget.ratio: must be 0..10 (0 = no budget), got -1"},
      {"{retry_budget: {ratio: 0.2, per_minute: 3}}", "chains[0].policy.retry_budget.per_minute: unknown field"},
      {"{least_latency: {explore: 60}}", "chains[0].policy.least_latency.explore: must be a percentage 0..50, got 60"},
  };
  for (const Case& c : cases) {
    auto bad = ParseConfigText(absl::StrCat("targets: [{name: a}, {name: b}]\nchains:\n  - name: c\n    targets: [a, b]\n"
                                            "    policy: ", c.policy, "\n"),
                               "bad.yaml");
    absl::Status status = bad.status();
    if (bad.ok()) {
      Engine fresh;
      status = Locate(*bad, fresh.Apply(bad->change, options, kT0).status());
    }
    ASSERT_FALSE(status.ok()) << c.policy;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.expected)) << c.policy;
  }
}

TEST(ConfigFileTest, ChainsThatDisagreeOnASharedTargetsHealthAreRefusedInTheirFile) {
  auto loaded = ParseConfigText(
      "targets: [{name: a}, {name: b}, {name: c}]\nchains:\n  - name: one\n    targets: [a, b]\n"
      "  - name: two\n    targets: [a, c]\n    policy: {probe: {interval: 5s}}\n",
      "chains.yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  Engine engine;
  ApplyOptions options;
  options.from_files = true;
  options.dry_run = true;
  auto applied = engine.Apply(loaded->change, options, kT0);
  ASSERT_EQ(applied.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(Locate(*loaded, applied.status()).message()),
              HasSubstr("chains.yaml:5: chains[1].policy.probe.interval: chains \"one\" and \"two\" both list "
                        "target \"a\" but give it different probe.interval (15s vs 5s)"));
}

TEST(ConfigFileTest, OutOfRangeDurationsAndNonAsciiNamesAreLocatedAndEscaped) {
  struct Case {
    std::string text;
    std::string expected;
  } cases[] = {
      {"targets: [{name: a}, {name: b}]\nchains:\n  - name: c\n    targets: [a, b]\n"
       "    policy: {trip: {window: 1000h}}\n",
       "f.yaml:3: chains[0].policy.trip.window: must be at most 720h, got 1000h"},
      {"targets:\n  - name: a\n    timeout: -5s\n", "f.yaml:2: targets[0].timeout: must not be negative, got -5s"},
      {"targets:\n  - name: \"caf\xc3\xa9\"\n",
       "f.yaml:2: targets[0].name: may only contain A-Za-z0-9._:/@-, got \"caf\\xc3\\xa9\""},
  };
  for (const Case& c : cases) {
    auto loaded = ParseConfigText(c.text, "f.yaml");
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    Engine engine;
    ApplyOptions options;
    options.from_files = true;
    auto applied = engine.Apply(loaded->change, options, kT0);
    ASSERT_FALSE(applied.ok()) << c.text;
    EXPECT_THAT(std::string(Locate(*loaded, applied.status()).message()), HasSubstr(c.expected));
    EXPECT_EQ(engine.generation(), 0u);  // nothing applied
  }
}

}  // namespace
}  // namespace failover::config

namespace failover::config {
namespace {

TEST(ConfigFileTest, AByteThatIsNotUtf8IsRefusedWithItsLineAndColumn) {
  // "caf\xe9" is Latin-1: it would make every response carrying the label unreadable.
  auto refused = ParseConfigText("targets:\n  - name: a\n    labels: {region: caf\xe9}\n", "f.yaml");
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("f.yaml:3: column 25: not valid UTF-8"));
  // An escape must not spell what is not UTF-8 either (the config fuzzer's
  // finding is replayed from fuzz/corpus/config/crash-escape-not-utf8).
  EXPECT_FALSE(ParseConfigText("targets:\n  - name: a\n    labels: {region: \"\\uD800\"}\n", "f.yaml").ok());
  // The same text in UTF-8 is fine.
  EXPECT_TRUE(ParseConfigText("targets:\n  - name: a\n    labels: {region: caf\xc3\xa9}\n", "f.yaml").ok());
}

TEST(ConfigFileTest, AFileThatDeclaresNothingIsRefusedUnlessItSaysSo) {
  for (const char* text : {"", "# only a comment\n", "---\n# comment\n"}) {
    auto refused = ParseConfigText(text, "half-written.yaml");
    ASSERT_FALSE(refused.ok()) << "\"" << text << "\"";
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("half-written.yaml:1: declares nothing"));
  }
  auto explicit_empty = ParseConfigText("targets: []\n", "empty.yaml");
  ASSERT_TRUE(explicit_empty.ok()) << explicit_empty.status();
  EXPECT_TRUE(explicit_empty->change.targets.empty());
}

TEST(ConfigFileTest, AnAliasBombIsRefusedWithoutExpandingIt) {
  // Each level doubles the one below: 2^40 nodes once expanded.
  std::string text = "a0: &a0 [x, x]\n";
  for (int i = 1; i <= 40; ++i) {
    text += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [*a" + std::to_string(i - 1) + ", *a" +
            std::to_string(i - 1) + "]\n";
  }
  text += "targets: [{name: a}]\n";
  auto refused = ParseConfigText(text, "bomb.yaml");
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("bomb.yaml:1: the document expands to more than"));
  // An alias that refers to itself (found by the fuzzer: it overflowed the stack).
  auto cycle = ParseConfigText("a1: &a1 [x, *a1]\ntargets: [{name: a}]\n", "cycle.yaml");
  ASSERT_FALSE(cycle.ok());
  EXPECT_THAT(std::string(cycle.status().message()), HasSubstr("nests deeper than 64 levels"));
}

// Few nodes, many bytes: one 1 MiB label behind an alias used 500 times is a
// 1 MiB file and 500 MiB once expanded. Refused before anything is copied.
TEST(ConfigFileTest, AnAliasOfABigScalarIsRefusedByTheBytesItExpandsTo) {
  std::string text = "big: &big \"" + std::string(1 << 20, 'x') + "\"\ntargets:\n";
  for (int i = 0; i < 500; ++i) text += "  - {name: t" + std::to_string(i) + ", labels: {note: *big}}\n";
  auto refused = ParseConfigText(text, "scalars.yaml");
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("scalars.yaml:1: the document expands to more than 2000000 YAML nodes or 64 MiB of text"));
}

// A candidate policy for `failoverctl simulate`: a chain's policy block, with
// or without its key, over the chain's live settings.
TEST(ConfigFileTest, APolicyFileChangesOnlyWhatItSays) {
  Policy live;
  live.recovery_min_dwell = absl::Seconds(45);
  for (const std::string text : {"trip:\n  errors: 0\n  failure_rate: 20\n",
                                 "policy:\n  trip:\n    errors: 0\n    failure_rate: 20\n"}) {
    SCOPED_TRACE(text);
    auto p = ParsePolicyText(text, "rate.yaml", live);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->trip_errors, 0u);
    EXPECT_EQ(p->trip_failure_rate, 20);
    EXPECT_EQ(p->recovery_min_dwell, absl::Seconds(45));
  }
  EXPECT_THAT(ParsePolicyText("trip:\n  errors: many\n", "rate.yaml", live).status().message(),
              HasSubstr("rate.yaml:2: policy.trip.errors: must be a whole number"));
  EXPECT_THAT(ParsePolicyText("trip:\n  erors: 1\n", "rate.yaml", live).status().message(),
              HasSubstr("rate.yaml:2: policy.trip.erors: unknown field"));
  EXPECT_THAT(ParsePolicyText("- 1\n", "rate.yaml", live).status().message(),
              HasSubstr("rate.yaml:1: must be one map of policy settings"));
  EXPECT_THAT(ParsePolicyText("trip: [\n", "rate.yaml", live).status().message(), HasSubstr("not valid YAML"));
  EXPECT_THAT(ParsePolicyText("trip: \"\\xff\"\n", "rate.yaml", live).status().message(), HasSubstr("rate.yaml"));
}

}  // namespace
}  // namespace failover::config
