// An engine that follows another (DESIGN 3.13): every Change the leading
// engine makes is sent through the FollowState wire format and applied to the
// follower, which must then plan exactly as the leader does, while deciding
// no transition of its own. A follower may also join midway from the state
// the Changes so far add up to (StateMirror).
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/replace_with.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/state_convert.h"
#include "server/engine/engine.h"
#include "storage/state_mirror.h"

namespace failover {
namespace {

using ::testing::ElementsAre;

TargetConfig Target(const std::string& name) {
  TargetConfig t;
  t.name = name;
  t.kind = TargetKind::kRemote;
  return t;
}

ChainConfig Chain(const std::string& name, std::vector<std::string> targets, uint32_t trip_errors = 1) {
  ChainConfig c;
  c.name = name;
  c.targets = std::move(targets);
  c.policy.Mutable().trip_errors = trip_errors;
  return c;
}

OutcomeFacts Http(uint32_t status) {
  OutcomeFacts f;
  f.http_status = status;
  return f;
}

// A Change as a follower receives it: serialized and parsed again.
Change OverTheWire(const Change& change) {
  v1::StateChange wire;
  api::ChangeToProto(change, &wire);
  v1::StateChange parsed;
  EXPECT_TRUE(parsed.ParseFromString(wire.SerializeAsString()));
  auto back = api::ChangeFromProto(parsed);
  EXPECT_TRUE(back.ok()) << back.status();
  return back.ok() ? *back : Change();
}

class FollowTest : public ::testing::Test {
 protected:
  FollowTest() {
    lead_.SetChangeSink([this](Change&& c) {
      mirror_.Apply(c);
      pending_.push_back(std::move(c));
    });
    EXPECT_TRUE(lead_.Restore(RestoredState(), now_).ok());
    follower_ = NewFollower(RestoredState());
  }

  std::unique_ptr<Engine> NewFollower(const RestoredState& state) {
    auto e = std::make_unique<Engine>();
    e->SetAcceptingChanges(false, "following");
    // Through the wire as well, in small parts.
    RestoredState received;
    std::vector<v1::FollowedState> parts = api::StateToProto(state, 200);
    for (size_t i = 0; i < parts.size(); ++i) {
      v1::FollowedState parsed;
      EXPECT_TRUE(parsed.ParseFromString(parts[i].SerializeAsString()));
      EXPECT_EQ(parsed.more(), i + 1 < parts.size());
      EXPECT_TRUE(api::AddStatePart(parsed, i, &received).ok());
    }
    EXPECT_TRUE(e->Restore(received, now_).ok());
    return e;
  }

  // Hands the leader's Changes so far to the follower.
  void Forward() {
    for (const Change& c : pending_) ASSERT_TRUE(follower_->ApplyChange(OverTheWire(c), now_).ok());
    pending_.clear();
  }

  void Apply(std::vector<TargetConfig> targets, std::vector<ChainConfig> chains) {
    auto r = lead_.Apply(ConfigChange{std::move(targets), std::move(chains)}, ApplyOptions{}, now_);
    ASSERT_TRUE(r.ok()) << r.status();
  }

  static std::vector<std::string> Plan(Engine& e, const std::string& chain) {
    PickRequest req;
    req.chain = chain;
    failover::Plan plan;
    Events events;
    EXPECT_TRUE(e.Pick(req, absl::FromUnixSeconds(1'800'000'000), &plan, &events).ok());
    std::vector<std::string> names;
    for (const PlannedAttempt& a : plan.attempts) names.push_back(a.target->config->name);
    return names;
  }

  void Fail(Engine& e, const std::string& chain, const std::string& target) {
    ReportRequest req;
    req.chain = chain;
    req.target = target;
    req.facts = Http(503);
    ReportResult r;
    Events events;
    ASSERT_TRUE(e.Report(req, now_, &r, &events).ok());
  }

  // What a caller would see differ: each chain's plan, state, active and pin,
  // each target's health.
  static std::string Describe(Engine& e) {
    std::string out;
    for (const ChainView& c : e.ListChains()) {
      out += c.config.name + ": state=" + std::to_string(static_cast<int>(c.status.state)) +
             " active=" + c.status.active_target + " pinned=" + c.status.pinned_target + " plan=";
      for (const std::string& t : Plan(e, c.config.name)) out += t + ",";
      out += "\n";
    }
    for (const TargetView& t : e.ListTargets()) {
      out += t.config.name + ": health=" + std::to_string(static_cast<int>(t.status.health)) +
             " enabled=" + (t.config.enabled ? "1" : "0") + "\n";
    }
    return out;
  }

  // The verdict each chain's first planned target gets for failures that
  // change no state: the caller's own admission refusal (moves on, never
  // counted) and a 400 (the caller's error: no other target can help).
  std::string Verdicts(Engine& e) {
    std::string out;
    for (const ChainView& c : e.ListChains()) {
      const std::vector<std::string> plan = Plan(e, c.config.name);
      if (plan.empty()) continue;
      for (uint32_t status : {0u, 400u}) {
        ReportRequest req;
        req.chain = c.config.name;
        req.target = plan.front();
        req.facts = Http(status);
        req.facts.admission_rejected = status == 0;
        ReportResult r;
        Events events;
        EXPECT_TRUE(e.Report(req, now_, &r, &events).ok());
        out += c.config.name + " " + std::to_string(status) + ": " + VerdictName(r.verdict) + " next=" +
               (r.has_next ? r.next.target->config->name : "-") + " delay=" + absl::FormatDuration(r.retry_delay) +
               "\n";
      }
    }
    return out;
  }

  void ExpectSame() {
    Forward();
    EXPECT_EQ(Verdicts(*follower_), Verdicts(lead_));
    EXPECT_TRUE(pending_.empty()) << "a verdict probe changed state";
    EXPECT_EQ(Describe(*follower_), Describe(lead_));
    EXPECT_EQ(follower_->next_sequence(), lead_.next_sequence());
    EXPECT_EQ(follower_->generation(), lead_.generation());
  }

  absl::Time now_ = absl::FromUnixSeconds(1'800'000'000);
  Engine lead_;
  StateMirror mirror_;
  std::vector<Change> pending_;
  std::unique_ptr<Engine> follower_;
};

TEST_F(FollowTest, FollowerPlansAsTheLeaderThroughEveryKindOfChange) {
  Apply({Target("a"), Target("b"), Target("c")}, {Chain("x", {"a", "b", "c"}), Chain("y", {"b", "c"})});
  ExpectSame();
  EXPECT_THAT(Plan(*follower_, "x"), ElementsAre("a", "b", "c"));

  Fail(lead_, "x", "a");  // trips a: x falls back to b
  ExpectSame();
  EXPECT_THAT(Plan(*follower_, "x"), ElementsAre("b", "c"));  // a is down: left out
  EXPECT_EQ(follower_->GetChain("x")->status.state, ChainState::kFallback);

  ASSERT_TRUE(lead_.TriggerManualFailover("b", "maintenance", now_).ok());
  ExpectSame();
  EXPECT_EQ(follower_->GetTarget("b")->status.health, HealthState::kManual);
  EXPECT_EQ(follower_->GetTarget("b")->status.reason, "maintenance");

  ASSERT_TRUE(lead_.Pin("y", "c", now_).ok());
  ExpectSame();
  EXPECT_EQ(follower_->GetChain("y")->status.pinned_target, "c");
  ASSERT_TRUE(lead_.Unpin("y", now_).ok());
  ASSERT_TRUE(lead_.CancelManualFailover("b", now_).ok());
  ExpectSame();

  ASSERT_TRUE(lead_.SetTargetEnabled("c", false, now_).ok());
  ExpectSame();
  EXPECT_EQ(follower_->GetTarget("c")->status.health, HealthState::kDisabled);

  // Config edits: a chain reordered, a chain and a target deleted, one added.
  Apply({Target("d")}, {Chain("x", {"d", "b", "a"})});
  ExpectSame();
  ASSERT_TRUE(lead_.DeleteChain("y", now_).ok());
  ASSERT_TRUE(lead_.DeleteTarget("c", now_).ok());
  ExpectSame();
  EXPECT_FALSE(follower_->GetChain("y").ok());
  EXPECT_FALSE(follower_->GetTarget("c").ok());

  // Time passes on the leader: a is probed back (its record comes over).
  now_ += absl::Minutes(5);
  Events events;
  lead_.Tick(now_, &events);
  ExpectSame();
}

TEST_F(FollowTest, FollowerMakesNoTransitionOfItsOwn) {
  Apply({Target("a"), Target("b")}, {Chain("x", {"a", "b"}, /*trip_errors=*/1)});
  ExpectSame();
  for (int i = 0; i < 5; ++i) Fail(*follower_, "x", "a");
  // The follower counted the failures but trips nothing: the leader decides.
  EXPECT_NE(follower_->GetTarget("a")->status.health, HealthState::kDown);
  EXPECT_THAT(Plan(*follower_, "x"), ElementsAre("a", "b"));
  EXPECT_TRUE(pending_.empty());
  // Once the leader trips a (it got the reports), the follower plans around it.
  Fail(lead_, "x", "a");
  ExpectSame();
  EXPECT_THAT(Plan(*follower_, "x"), ElementsAre("b"));
}

TEST_F(FollowTest, FollowerJoiningMidwayStartsFromTheMirroredState) {
  Apply({Target("a"), Target("b"), Target("c")}, {Chain("x", {"a", "b", "c"}), Chain("y", {"c", "b"})});
  Fail(lead_, "x", "a");
  ASSERT_TRUE(lead_.Pin("y", "b", now_).ok());
  ASSERT_TRUE(lead_.TriggerManualFailover("c", "drain", now_).ok());
  pending_.clear();  // a late joiner never sees these: it starts from the state
  follower_ = NewFollower(mirror_.State());
  ExpectSame();
  EXPECT_THAT(Plan(*follower_, "x"), ElementsAre("b"));  // a is down, c failed over by hand
  Fail(lead_, "x", "b");
  ExpectSame();
}

// What a deposed cluster leader does (DESIGN 3.12): it made Changes the log
// never took, and goes back to the state the log adds up to.
std::string DescribeState(const RestoredState& s) {
  // (next_sequence only grows in a store: a gap is fine, a number reused is not.)
  std::string out = "generation=" + std::to_string(s.generation) + "\n";
  for (const TargetConfig& t : s.targets) out += "target " + t.name + (t.enabled ? "" : " disabled") + "\n";
  for (const ChainConfig& c : s.chains) out += "chain " + c.name + "\n";
  for (const auto& [chain, target] : s.pins) out += "pin " + chain + "=" + target + "\n";
  for (const auto& [target, m] : s.manual) out += "manual " + target + " " + m.reason + "\n";
  for (const TargetStateRecord& r : s.health) {
    if (r.automatic == HealthState::kUnknown && r.trips == 0) continue;  // the same as no record
    out += "health " + r.name + "=" + std::to_string(static_cast<int>(r.automatic)) + "\n";
  }
  for (const ChainStateRecord& r : s.chain_states) out += "chain_state " + r.name + "=" + r.active + "\n";
  return out;
}

TEST_F(FollowTest, ADeposedLeaderGoesBackToTheReplicatedState) {
  Apply({Target("a"), Target("b"), Target("c")}, {Chain("x", {"a", "b", "c"}), Chain("y", {"c", "b"})});
  Fail(lead_, "x", "a");
  pending_.clear();
  // The deposed one starts where the log stood, then makes changes of every
  // kind that no one will ever see.
  auto deposed = NewFollower(mirror_.State());
  StateMirror deposed_state(mirror_.State());
  deposed->SetChangeSink([&](Change&& c) { deposed_state.Apply(c); });
  deposed->SetAcceptingChanges(true);
  ASSERT_TRUE(deposed->Pin("y", "b", now_).ok());
  ASSERT_TRUE(deposed->TriggerManualFailover("c", "drain", now_).ok());
  Fail(*deposed, "x", "b");
  ASSERT_TRUE(deposed->Apply(ConfigChange{{Target("a"), Target("b"), Target("c"), Target("d")},
                                          {Chain("x", {"a", "b", "d"})}},
                             ApplyOptions{}, now_)
                  .ok());
  ASSERT_NE(Describe(*deposed), Describe(lead_));
  // Meanwhile the new leader's changes are what the log holds.
  ASSERT_TRUE(lead_.Pin("x", "c", now_).ok());
  Fail(lead_, "y", "c");
  pending_.clear();

  deposed->SetAcceptingChanges(false, "not the leader");
  ASSERT_TRUE(deposed->ResetTo(mirror_.State(), now_).ok());
  EXPECT_EQ(Describe(*deposed), Describe(lead_));
  EXPECT_EQ(deposed->next_sequence(), lead_.next_sequence());
  EXPECT_EQ(Verdicts(*deposed), Verdicts(lead_));

  // The same Change brings its store (a mirror here) back too.
  std::set<std::string> targets, chains;
  for (const TargetConfig& t : deposed_state.State().targets) targets.insert(t.name);
  for (const ChainConfig& c : deposed_state.State().chains) chains.insert(c.name);
  deposed_state.Apply(ReplaceWith(mirror_.State(), targets, chains));
  EXPECT_EQ(DescribeState(deposed_state.State()), DescribeState(mirror_.State()));
}

TEST_F(FollowTest, ChangeWithAnUnknownEnumValueIsRefusedNamingTheField) {
  v1::StateChange wire;
  v1::TargetHealthRecord* r = wire.add_targets();
  r->set_name("a");
  r->set_automatic(static_cast<v1::HealthState>(42));
  r->set_source(v1::TRANSITION_SOURCE_AUTO);
  auto c = api::ChangeFromProto(wire);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()), ::testing::HasSubstr("targets[0].automatic"));
}

TEST_F(FollowTest, ChangeNamingAnUnknownTargetInAChainIsRefusedWhole) {
  Apply({Target("a"), Target("b")}, {Chain("x", {"a", "b"})});
  ExpectSame();
  Change bad;
  bad.config_generation = lead_.generation() + 1;
  bad.put_chains.push_back(Chain("x", {"a", "b", "ghost"}));
  absl::Status s = follower_->ApplyChange(bad, now_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(Plan(*follower_, "x"), ElementsAre("a", "b"));
  EXPECT_EQ(follower_->generation(), lead_.generation());
}

// A follower checks only what a Change touches, but that includes the chains
// it leaves alone that list a target it deletes.
TEST_F(FollowTest, ChangeDeletingATargetAKeptChainListsIsRefusedWhole) {
  Apply({Target("a"), Target("b"), Target("c")}, {Chain("x", {"a", "b"}), Chain("y", {"b", "c"})});
  ExpectSame();
  Change bad;
  bad.config_generation = lead_.generation() + 1;
  bad.deleted_targets.push_back("c");
  bad.put_chains.push_back(Chain("x", {"b", "a"}));
  absl::Status s = follower_->ApplyChange(bad, now_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("chain \"y\".targets[1]: unknown target \"c\""));
  EXPECT_THAT(Plan(*follower_, "x"), ElementsAre("a", "b"));
  EXPECT_THAT(Plan(*follower_, "y"), ElementsAre("b", "c"));
  EXPECT_EQ(follower_->generation(), lead_.generation());

  // Deleted with the chain that listed it, it goes.
  Change good = bad;
  good.deleted_chains.push_back("y");
  ASSERT_TRUE(follower_->ApplyChange(good, now_).ok());
  EXPECT_EQ(follower_->generation(), good.config_generation);
  EXPECT_EQ(follower_->GetTarget("c").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace failover
