// Replaying the outcome trace (DESIGN 3.17). A live engine serves scripted
// traffic on a hand-driven clock and records its trace as failoverd does
// (every counted outcome, every accepted check); the replay of that trace
// must reproduce what the live engine did, and a candidate policy must be
// judged on the same outcomes.
#include "server/engine/replay.h"

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/engine.h"

namespace failover {
namespace {

using ::testing::HasSubstr;

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

// A provider that fails one call in twenty at random, and all of them during
// a real outage after two quiet minutes (so both policies are using it when
// the outage begins); "steady" never fails.
struct Providers {
  std::mt19937 random{7};
  absl::Time outage_from = kStart + absl::Minutes(20);
  absl::Time outage_to = kStart + absl::Minutes(25);

  bool Fails(const std::string& target, absl::Time now) {
    if (target != "noisy") return false;
    if (now >= outage_from && now < outage_to) return true;
    if (now >= outage_from - absl::Minutes(2) && now < outage_from) return false;
    return std::uniform_int_distribution<int>(0, 19)(random) == 0;
  }
};

Policy LivePolicy() {
  Policy p;
  p.trip_errors = 1;
  p.probe_interval = absl::Seconds(5);
  p.recovery_probes = 2;
  p.recovery_min_dwell = absl::Seconds(30);
  return p;
}

Policy RatePolicy() {
  Policy p = LivePolicy();
  p.trip_errors = 0;
  p.trip_failure_rate = 20;
  p.trip_min_calls = 10;
  p.trip_window = absl::Seconds(30);
  return p;
}

OutcomeFacts Facts(bool failed) {
  OutcomeFacts f;
  f.success = !failed;
  if (failed) {
    f.http_status = 503;
    f.message = "upstream overloaded";
  }
  return f;
}

// Target and chain events as one line each, to compare two runs.
std::vector<std::string> Lines(const Events& events) {
  std::vector<std::string> out;
  for (const Event& e : events) {
    const std::string at = absl::FormatDuration(e.time - kStart);
    if (e.kind == EventKind::kTargetState) {
      out.push_back(absl::StrCat(at, " ", e.target, " ", HealthStateName(e.from_health), "->",
                                 HealthStateName(e.to_health)));
    } else if (e.kind == EventKind::kChainSwitched) {
      out.push_back(absl::StrCat(at, " ", e.chain, " ", e.from_target, "->", e.to_target, " ",
                                 ChainStateName(e.to_chain_state), " ", SwitchReasonName(e.switch_reason)));
    }
  }
  return out;
}

// Serves traffic (two requests a second through the chain's plan) and
// answers the health checks it hands out.
class LiveRun {
 public:
  explicit LiveRun(const Policy& policy) {
    EngineOptions options;
    options.probe_jitter = 0;
    engine_ = std::make_unique<Engine>(options);
    TargetConfig noisy, steady;
    noisy.name = "noisy";
    steady.name = "steady";
    ChainConfig chain;
    chain.name = "chat";
    chain.targets = {"noisy", "steady"};
    chain.policy = policy;
    input_.chain = chain;
    input_.targets = {noisy, steady};
    auto applied = engine_->Apply(ConfigChange{input_.targets, {chain}}, ApplyOptions{}, kStart);
    EXPECT_TRUE(applied.ok()) << applied.status();
    if (applied.ok()) Record(applied->events);
  }

  // Each second: the ticker at the whole second, then a prober that polls
  // twice (answering what it was handed at its last poll) between two
  // requests, so checks fall due, are handed out and answered between ticks.
  void Serve(absl::Duration length) {
    for (absl::Time now = kStart; now <= kStart + length; now += absl::Seconds(1)) {
      Events events;
      engine_->Tick(now, &events);
      Record(events);
      PollProber(now + absl::Milliseconds(300));
      Request(now + absl::Milliseconds(400));
      PollProber(now + absl::Milliseconds(700));
      Request(now + absl::Milliseconds(800));
    }
    input_.from = kStart;
    input_.to = kStart + length;
  }

  const Events& events() const { return events_; }
  const ReplayInput& input() const { return input_; }

 private:
  // One request: the plan's attempts in order until one succeeds or the verdict stops.
  void Request(absl::Time now) {
    PickRequest pick;
    pick.chain = "chat";
    Plan plan;
    Events events;
    ASSERT_TRUE(engine_->Pick(pick, now, &plan, &events).ok());
    Record(events);
    for (uint32_t attempt = 0; attempt < plan.attempts.size(); ++attempt) {
      const std::string target = plan.attempts[attempt].target->config->name;
      ReportRequest report;
      report.decision_id = plan.decision_id;
      report.target = target;
      report.attempt = attempt;
      report.facts = Facts(providers_.Fails(target, now));
      ReportResult result;
      events.clear();
      ASSERT_TRUE(engine_->Report(report, now, &result, &events).ok());
      Record(events);
      TraceEntry e{0, now, result.chain, target, 1, result.classified, absl::ZeroDuration(), report.facts};
      input_.entries.push_back(std::move(e));
      if (result.verdict != Verdict::kTryNext) return;
    }
  }

  void PollProber(absl::Time now) {
    ProbeRequest answers;
    answers.prober_id = "prober";
    for (const ProbeTask& task : pending_) {
      ProbeResult& r = answers.results.emplace_back();
      r.lease_id = task.lease_id;
      const bool failed = providers_.Fails(task.target->config->name, now);
      r.outcome = failed ? ProbeOutcome::kFail : ProbeOutcome::kPass;
      r.facts = Facts(failed);
    }
    ProbeResponse probed;
    Events events;
    ASSERT_TRUE(engine_->Probe(answers, now, &probed, &events).ok());
    Record(events);
    for (const AcceptedCheck& c : probed.checks) {
      TraceEntry e;
      e.at = now;
      e.target = c.target;
      e.facts = c.result->facts;
      e.source = c.outcome == ProbeOutcome::kPass ? TraceSource::kProbePass : TraceSource::kProbeFail;
      e.recovery_probe = c.recovery;
      input_.entries.push_back(std::move(e));
    }
    pending_ = probed.tasks;
  }

  void Record(const Events& events) { events_.insert(events_.end(), events.begin(), events.end()); }

  std::vector<ProbeTask> pending_;
  std::unique_ptr<Engine> engine_;
  Providers providers_;
  ReplayInput input_;
  Events events_;
};

TEST(ReplayTest, TheLivePolicysReplayMakesExactlyTheTripsAndSwitchesThatHappened) {
  LiveRun live(LivePolicy());
  live.Serve(absl::Minutes(30));
  absl::StatusOr<ReplaySummary> replayed = Replay(live.input());
  ASSERT_TRUE(replayed.ok()) << replayed.status();

  const std::vector<std::string> happened = Lines(live.events());
  EXPECT_GT(happened.size(), 20u) << "the noisy provider should have tripped over and over";
  EXPECT_EQ(Lines(replayed->events), happened);
  EXPECT_EQ(replayed->checks_unused, 0u);
}

TEST(ReplayTest, ARateTripFlapsLessOnANoisyProviderAndTakesLongerToDetectTheOutage) {
  LiveRun live(LivePolicy());
  live.Serve(absl::Minutes(30));
  ReplayInput input = live.input();
  input.flap_window = LivePolicy().recovery_min_dwell;
  absl::StatusOr<ReplaySummary> single = Replay(input);
  absl::StatusOr<ReplaySummary> rate = Replay(WithPolicy(input, RatePolicy()));
  ASSERT_TRUE(single.ok() && rate.ok());

  EXPECT_GT(single->flaps, 3u);
  EXPECT_LT(rate->flaps, single->flaps);
  EXPECT_LT(rate->trips.size(), single->trips.size());
  EXPECT_LT(rate->in_fallback, single->in_fallback);
  // Both trip in the real outage: one failure trips at once, the rate waits
  // for ten calls in its window (or failed checks).
  const Providers outage;
  auto outage_trip = [&](const ReplaySummary& s) {
    for (const ReplayTrip& t : s.trips) {
      if (t.at >= outage.outage_from && t.at < outage.outage_to) return t;
    }
    ADD_FAILURE() << "no trip during the outage";
    return ReplayTrip{};
  };
  EXPECT_EQ(outage_trip(*single).detection, absl::ZeroDuration());
  EXPECT_GT(outage_trip(*rate).detection, absl::ZeroDuration());
  // Replays are deterministic.
  absl::StatusOr<ReplaySummary> again = Replay(WithPolicy(input, RatePolicy()));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(Lines(again->events), Lines(rate->events));
}

// A shadow policy is judged live: its run is fed each second's entries as
// they are written, and read after each. It must decide what the replay of
// the same window decides, or shadow events and simulate would disagree.
TEST(ReplayTest, ARunFedSecondBySecondDecidesWhatTheReplayOfTheWindowDecides) {
  LiveRun live(LivePolicy());
  live.Serve(absl::Minutes(30));
  const ReplayInput input = WithPolicy(live.input(), RatePolicy());
  absl::StatusOr<ReplaySummary> replayed = Replay(input);
  ASSERT_TRUE(replayed.ok()) << replayed.status();

  absl::StatusOr<std::unique_ptr<PolicyRun>> run = PolicyRun::Start(input);
  ASSERT_TRUE(run.ok()) << run.status();
  Events seen;
  std::vector<ReplayTrip> trips;
  size_t next = 0;
  for (absl::Time second = input.from; second <= input.to; second += absl::Seconds(1)) {
    for (; next < input.entries.size() && input.entries[next].at < second; ++next) {
      (*run)->Feed(input.entries[next]);
    }
    (*run)->AdvanceTo(second);
    for (Event& e : (*run)->TakeEvents()) seen.push_back(std::move(e));
    for (ReplayTrip& t : (*run)->TakeTrips()) trips.push_back(std::move(t));
  }
  for (; next < input.entries.size(); ++next) (*run)->Feed(input.entries[next]);
  const ReplaySummary last = (*run)->Finish(input.to);
  for (const Event& e : last.events) seen.push_back(e);

  EXPECT_GT(replayed->trips.size(), 0u);
  EXPECT_EQ(Lines(seen), Lines(replayed->events));
  EXPECT_EQ(trips.size() + last.trips.size(), replayed->trips.size());
  EXPECT_EQ(last.switches, replayed->switches);
  EXPECT_EQ(last.flaps, replayed->flaps);
  EXPECT_EQ(last.in_fallback, replayed->in_fallback);
  EXPECT_EQ(last.checks_used, replayed->checks_used);
}

// Entries written by several threads can come a little out of time order;
// the run's clock does not go back for them.
TEST(ReplayTest, AnEntryStampedBeforeTheRunsClockIsTakenAtTheClock) {
  ReplayInput setup;
  setup.chain.name = "chat";
  setup.chain.targets = {"a", "b"};
  setup.chain.policy.Mutable().trip_errors = 1;
  setup.targets.resize(2);
  setup.targets[0].name = "a";
  setup.targets[1].name = "b";
  setup.from = kStart;
  absl::StatusOr<std::unique_ptr<PolicyRun>> run = PolicyRun::Start(setup);
  ASSERT_TRUE(run.ok()) << run.status();
  (*run)->AdvanceTo(kStart + absl::Seconds(10));
  TraceEntry late{0, kStart + absl::Seconds(4), "chat", "a", 1, {}, absl::ZeroDuration(), Facts(true)};
  (*run)->Feed(late);
  const std::vector<ReplayTrip> trips = (*run)->TakeTrips();
  ASSERT_EQ(trips.size(), 1u);
  EXPECT_EQ(trips[0].target, "a");
  EXPECT_EQ(trips[0].at, kStart + absl::Seconds(10));
}

TEST(ReplayTest, AWindowThatIsEmptyOrTooLongIsRefusedByName) {
  ReplayInput input;
  input.chain.name = "chat";
  input.from = kStart;
  input.to = kStart;
  EXPECT_THAT(Replay(input).status().message(), HasSubstr("to: "));
  input.to = kStart + kMaxReplayWindow + absl::Seconds(1);
  EXPECT_THAT(Replay(input).status().message(), HasSubstr("longer than"));
}

}  // namespace
}  // namespace failover
