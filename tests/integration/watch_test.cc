// WatchEvents, recent events and metrics through the real failoverd.
#include <signal.h>

#include <atomic>
#include <thread>

#include "gmock/gmock.h"
#include "tests/support/api_test.h"

namespace failover::testing {
namespace {

using ::testing::HasSubstr;

class WatchTest : public ApiTest {
 protected:
  void TwoChains() {
    v1::ApplyRequest req;
    for (const char* t : {"a", "b", "c", "d"}) AddTarget(&req, t);
    v1::Chain* one = req.add_chains();
    one->set_name("one");
    one->add_targets("a");
    one->add_targets("b");
    v1::Chain* two = req.add_chains();
    two->set_name("two");
    two->add_targets("c");
    two->add_targets("d");
    ASSERT_TRUE(Apply(req).ok());
  }

  struct Watch {
    std::unique_ptr<grpc::ClientContext> ctx;
    std::unique_ptr<grpc::ClientReader<v1::Event>> reader;
  };
  Watch Open(v1::WatchEventsRequest req, v1::DecisionService::Stub* stub = nullptr) {
    Watch w{Ctx(), nullptr};
    w.reader = (stub != nullptr ? stub : decide_.get())->WatchEvents(w.ctx.get(), req);
    return w;
  }
  // Reads until `stop` accepts an event; returns everything read.
  template <typename F>
  std::vector<v1::Event> ReadUntil(Watch& w, F stop) {
    std::vector<v1::Event> out;
    v1::Event e;
    while (w.reader->Read(&e)) {
      out.push_back(e);
      if (stop(e)) break;
    }
    return out;
  }

  // Trips target a (chain one switches to b).
  void TripA() {
    v1::PickTargetResponse plan = Pick("one");
    Report(plan.decision_id(), "a", 500, "boom");
  }
};

TEST_F(WatchTest, SnapshotFirstThenTheSwitchWithSequences) {
  StartServer();
  TwoChains();
  Watch w = Open(v1::WatchEventsRequest());
  v1::Event first;
  ASSERT_TRUE(w.reader->Read(&first));
  ASSERT_TRUE(first.has_snapshot());
  EXPECT_FALSE(first.snapshot().resync());
  EXPECT_EQ(first.snapshot().chains_size(), 2);
  EXPECT_EQ(first.snapshot().targets_size(), 4);
  EXPECT_EQ(first.snapshot().chains(0).active_target(), "a");
  TripA();
  auto events = ReadUntil(w, [](const v1::Event& e) { return e.has_chain_switched(); });
  ASSERT_FALSE(events.empty());
  const v1::Event& sw = events.back();
  EXPECT_EQ(sw.chain_switched().chain(), "one");
  EXPECT_EQ(sw.chain_switched().from_target(), "a");
  EXPECT_EQ(sw.chain_switched().to_target(), "b");
  EXPECT_EQ(sw.chain_switched().reason(), v1::SWITCH_REASON_TRIP);
  EXPECT_GT(sw.sequence(), first.sequence());
  EXPECT_GT(sw.time().seconds(), 0);
  // The target event came first, with its source and error.
  bool saw_target = false;
  for (const auto& e : events) {
    if (e.has_target_state() && e.target_state().target() == "a") {
      saw_target = true;
      EXPECT_EQ(e.target_state().to_state(), v1::HEALTH_STATE_DOWN);
      EXPECT_EQ(e.target_state().source(), v1::TRANSITION_SOURCE_AUTO);
      EXPECT_THAT(e.target_state().last_error(), HasSubstr("500"));
    }
  }
  EXPECT_TRUE(saw_target);
}

// Shadow events (DESIGN 3.17) go only to watchers that ask for them and
// whose filter takes their chain. They carry the shadow's name and no
// sequence, and the real events around them stay numbered one after another.
TEST_F(WatchTest, ShadowEventsReachOnlyTheWatchersThatAskForThem) {
  StartServer();
  v1::ApplyRequest apply;
  for (const char* t : {"a", "b", "c", "d"}) AddTarget(&apply, t);
  v1::Chain* one = apply.add_chains();
  one->set_name("one");
  one->add_targets("a");
  one->add_targets("b");
  one->mutable_policy()->mutable_trip()->set_errors(3);
  v1::ShadowPolicy* eager = one->add_shadow();
  eager->set_name("eager");
  eager->mutable_policy()->mutable_trip()->set_errors(1);
  v1::Chain* two = apply.add_chains();
  two->set_name("two");
  two->add_targets("c");
  two->add_targets("d");
  ASSERT_TRUE(Apply(apply).ok());

  v1::WatchEventsRequest asking;
  asking.set_include_shadow(true);
  v1::WatchEventsRequest asking_for_two = asking;
  asking_for_two.add_chains("two");
  // Shadows are judged where the trace is kept: in a cluster, the leader.
  std::unique_ptr<v1::DecisionService::Stub> leader;
  if (cluster_leader_ != nullptr) {
    leader = v1::DecisionService::NewStub(
        grpc::CreateChannel(cluster_leader_->address(), grpc::InsecureChannelCredentials()));
  }
  Watch shadowed = Open(asking, leader.get());
  Watch plain = Open(v1::WatchEventsRequest(), leader.get());
  Watch other_chain = Open(asking_for_two, leader.get());
  for (Watch* w : {&shadowed, &plain, &other_chain}) {
    v1::Event snapshot;
    ASSERT_TRUE(w->reader->Read(&snapshot) && snapshot.has_snapshot());
  }

  // One error: the shadow trips a and switches; the real chain waits for three.
  v1::PickTargetResponse plan = Pick("one");
  Report(plan.decision_id(), "a", 500, "boom");
  std::vector<v1::Event> seen = ReadUntil(shadowed, [](const v1::Event& e) { return e.has_chain_switched(); });
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].shadow(), "eager");
  EXPECT_EQ(seen[0].sequence(), 0u);
  EXPECT_EQ(seen[0].target_state().target(), "a");
  EXPECT_EQ(seen[0].target_state().to_state(), v1::HEALTH_STATE_DOWN);
  EXPECT_EQ(seen[1].shadow(), "eager");
  EXPECT_EQ(seen[1].sequence(), 0u);
  EXPECT_EQ(seen[1].chain_switched().to_target(), "b");
  EXPECT_NE(Target("a").status().health(), v1::HEALTH_STATE_DOWN);  // the real a is not tripped

  // Two more errors: the real trip, numbered, after the shadow's events.
  for (int i = 0; i < 2; ++i) Report(Pick("one").decision_id(), "a", 500, "boom");
  // And a real trip on chain two, which the filtered watcher follows.
  Report(Pick("two").decision_id(), "c", 500, "boom");
  Report(Pick("two").decision_id(), "c", 500, "boom");
  Report(Pick("two").decision_id(), "c", 500, "boom");
  auto is_switch_of = [](const std::string& chain) {
    return [chain](const v1::Event& e) { return e.shadow().empty() && e.chain_switched().chain() == chain; };
  };
  std::vector<v1::Event> real = ReadUntil(shadowed, is_switch_of("two"));
  std::vector<v1::Event> unasked = ReadUntil(plain, is_switch_of("two"));
  std::vector<v1::Event> filtered = ReadUntil(other_chain, is_switch_of("two"));
  ASSERT_FALSE(real.empty());
  ASSERT_FALSE(unasked.empty());
  ASSERT_FALSE(filtered.empty());
  // Every watcher got the same real events, numbered without gaps.
  auto real_sequences = [](const std::vector<v1::Event>& events) {
    std::vector<uint64_t> out;
    for (const v1::Event& e : events) {
      if (e.shadow().empty()) out.push_back(e.sequence());
    }
    return out;
  };
  const std::vector<uint64_t> numbered = real_sequences(real);
  for (size_t i = 1; i < numbered.size(); ++i) EXPECT_EQ(numbered[i], numbered[i - 1] + 1);
  EXPECT_EQ(real_sequences(unasked), numbered);
  for (const v1::Event& e : unasked) EXPECT_EQ(e.shadow(), "") << e.DebugString();
  for (const v1::Event& e : filtered) {
    EXPECT_EQ(e.shadow(), "") << e.DebugString();  // chain one's shadow is outside its filter
    EXPECT_TRUE(e.chain_switched().chain() == "two" || e.target_state().target() == "c") << e.DebugString();
  }
  EXPECT_EQ(Target("a").status().health(), v1::HEALTH_STATE_DOWN);
}

TEST_F(WatchTest, ChainFilterAlsoDeliversItsTargetsEvents) {
  StartServer();
  TwoChains();
  v1::WatchEventsRequest req;
  req.add_chains("two");
  Watch w = Open(req);
  v1::Event first;
  ASSERT_TRUE(w.reader->Read(&first));
  ASSERT_EQ(first.snapshot().chains_size(), 1);
  EXPECT_EQ(first.snapshot().targets_size(), 2);
  TripA();  // chain one: filtered out
  v1::PickTargetResponse plan = Pick("two");
  Report(plan.decision_id(), "c", 500);
  auto events = ReadUntil(w, [](const v1::Event& e) { return e.has_chain_switched(); });
  int c_events = 0;
  for (const auto& e : events) {
    if (e.has_chain_switched()) {
      EXPECT_EQ(e.chain_switched().chain(), "two");
    }
    if (e.has_target_state()) {
      EXPECT_EQ(e.target_state().target(), "c");
      ++c_events;
    }
  }
  // Chain two's own target's event came through, and its switch ended the read.
  EXPECT_GE(c_events, 1);
  ASSERT_TRUE(events.back().has_chain_switched());
  EXPECT_EQ(events.back().chain_switched().to_target(), "d");
}

TEST_F(WatchTest, ResumeReplaysExactlyTheMissedEvents) {
  StartServer();
  TwoChains();
  const uint64_t seen = Events().back().sequence();
  TripA();
  v1::PickTargetResponse plan = Pick("two");
  Report(plan.decision_id(), "c", 500);
  std::vector<uint64_t> missed;
  for (const auto& e : Events()) {
    if (e.sequence() > seen) missed.push_back(e.sequence());
  }
  ASSERT_GE(missed.size(), 4u);
  v1::WatchEventsRequest req;
  req.set_after_sequence(seen);
  Watch w = Open(req);
  std::vector<uint64_t> replayed;
  v1::Event e;
  while (replayed.size() < missed.size() && w.reader->Read(&e)) {
    ASSERT_FALSE(e.has_snapshot()) << "resume from a retained sequence must not send a snapshot";
    replayed.push_back(e.sequence());
  }
  EXPECT_EQ(replayed, missed);
}

// One history (DESIGN 3.14, invariant 3): a watch that resumes while events
// keep coming sees the replay first, then the live events, every sequence once
// and in order. A live event written before the replay broke this.
TEST_F(WatchTest, ResumingWhileEventsFlowSeesEverySequenceOnceInOrder) {
  StartServer();
  TwoChains();
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> pins{0};
  // Two chains pinned back and forth: a steady flow of live events.
  std::vector<std::thread> churn;
  for (const char* chain : {"one", "two"}) {
    churn.emplace_back([&, chain] {
      const bool first = std::string(chain) == "one";
      for (int i = 0; !stop.load(); ++i) {
        v1::PinChainRequest pin;
        pin.set_chain(chain);
        pin.set_target(i % 2 == 0 ? (first ? "b" : "d") : (first ? "a" : "c"));
        v1::ChainView view;
        EXPECT_TRUE(admin_->PinChain(Ctx().get(), pin, &view).ok());
        ++pins;
      }
    });
  }
  // A long replay (read from the stored log) keeps the window between the
  // subscription and the opening open long enough for live events to arrive.
  constexpr uint64_t kReplay = 400;
  ASSERT_TRUE(Eventually([&] { return pins.load() > kReplay; }));
  for (int round = 0; round < 30; ++round) {
    const uint64_t after = Events().back().sequence();
    v1::WatchEventsRequest req;
    req.set_after_sequence(after - kReplay);
    Watch w = Open(req);
    uint64_t expected = req.after_sequence() + 1;
    v1::Event e;
    while (expected <= after + 20 && w.reader->Read(&e)) {
      ASSERT_FALSE(e.has_snapshot()) << "round " << round;
      ASSERT_EQ(e.sequence(), expected) << "round " << round << ": a live event came before the replay";
      ++expected;
    }
    EXPECT_GT(expected, after + 20) << "round " << round << ": the stream ended early";
    w.ctx->TryCancel();
  }
  stop = true;
  for (std::thread& t : churn) t.join();
}

TEST_F(WatchTest, ResumeFromBeyondTheRetainedLogGetsAResyncSnapshot) {
  StartServer({"--events-keep", "2"});
  TwoChains();
  TripA();
  // Only the newest two events are kept: the first ones are gone from the log.
  const std::vector<v1::Event> kept = Events();
  ASSERT_GE(kept.size(), 2u);
  const uint64_t last = kept.back().sequence();
  ASSERT_GT(last, 3u);
  for (uint64_t after : {uint64_t{1}, uint64_t{1'000'000}}) {  // trimmed, and never issued
    v1::WatchEventsRequest req;
    req.set_after_sequence(after);
    Watch w = Open(req);
    v1::Event e;
    ASSERT_TRUE(w.reader->Read(&e));
    ASSERT_TRUE(e.has_snapshot()) << "after " << after;
    EXPECT_TRUE(e.snapshot().resync());
    EXPECT_EQ(e.sequence(), last);
  }
  // A sequence still kept replays instead.
  v1::WatchEventsRequest req;
  req.set_after_sequence(last - 1);
  Watch w = Open(req);
  v1::Event e;
  ASSERT_TRUE(w.reader->Read(&e));
  EXPECT_FALSE(e.has_snapshot());
  EXPECT_EQ(e.sequence(), last);
}

TEST_F(WatchTest, ASlowWatcherIsResyncedWhileOthersAndDecisionsCarryOn) {
  StartServer({"--watch-queue", "4", "--metrics-listen", "127.0.0.1:0"});
  TwoChains();
  // Read up to its opening snapshot (so it is subscribed before the burst),
  // then not again until the end.
  Watch slow = Open(v1::WatchEventsRequest());
  v1::Event opening;
  ASSERT_TRUE(slow.reader->Read(&opening));
  ASSERT_TRUE(opening.has_snapshot());
  v1::WatchEventsRequest only_two;
  only_two.add_chains("two");
  Watch other = Open(only_two);
  v1::Event first;
  ASSERT_TRUE(other.reader->Read(&first));
  // A burst far larger than the queue: 40 new targets in one apply.
  v1::ApplyRequest burst;
  for (int i = 0; i < 40; ++i) AddTarget(&burst, "extra-" + std::to_string(i));
  ASSERT_TRUE(Apply(burst).ok());
  // Decisions keep working, and the other watcher still gets its switch.
  for (int i = 0; i < 20; ++i) EXPECT_EQ(Pick("one").attempts(0).target(), "a");
  v1::PickTargetResponse plan = Pick("two");
  Report(plan.decision_id(), "c", 500);
  auto got = ReadUntil(other, [](const v1::Event& e) { return e.has_chain_switched(); });
  EXPECT_EQ(got.back().chain_switched().to_target(), "d");
  // The slow one: (queue dropped) a resync snapshot that already shows the
  // 40 new targets.
  auto events = ReadUntil(slow, [](const v1::Event& e) { return e.has_snapshot() && e.snapshot().resync(); });
  ASSERT_FALSE(events.empty());
  ASSERT_TRUE(events.back().has_snapshot());
  EXPECT_TRUE(events.back().snapshot().resync());
  EXPECT_GE(events.back().snapshot().targets_size(), 44);
  EXPECT_THAT(HttpGet(proc_->MetricsPort(), "/metrics"), HasSubstr("failover_watch_resyncs_total 1"));
}

// The queue is bounded in bytes as well as in events: a few large events
// resync a slow watcher long before the event bound.
TEST_F(WatchTest, ASlowWatcherIsResyncedOnceItsQueuedBytesPassTheBound) {
  StartServer({"--watch-queue", "100000", "--watch-queue-bytes", "2048", "--metrics-listen", "127.0.0.1:0"});
  TwoChains();
  Watch slow = Open(v1::WatchEventsRequest());
  v1::Event opening;
  ASSERT_TRUE(slow.reader->Read(&opening));
  // 40 config events of a long-named target each: far past 2 KiB.
  v1::ApplyRequest burst;
  for (int i = 0; i < 40; ++i) AddTarget(&burst, "extra-" + std::to_string(i) + "-" + std::string(100, 'x'));
  ASSERT_TRUE(Apply(burst).ok());
  auto events = ReadUntil(slow, [](const v1::Event& e) { return e.has_snapshot() && e.snapshot().resync(); });
  ASSERT_FALSE(events.empty());
  EXPECT_TRUE(events.back().snapshot().resync());
  EXPECT_LT(events.size(), 40u);  // the queued events were dropped, not all sent
  EXPECT_GE(events.back().snapshot().targets_size(), 44);
  EXPECT_THAT(HttpGet(proc_->MetricsPort(), "/metrics"), HasSubstr("failover_watch_resyncs_total 1"));
}

TEST_F(WatchTest, SigtermEndsWatchStreamsAndExitsCleanly) {
  StartServer();
  TwoChains();
  Watch w = Open(v1::WatchEventsRequest());
  v1::Event e;
  ASSERT_TRUE(w.reader->Read(&e));
  // A watcher reads all the time; do so while failoverd stops.
  grpc::Status end;
  std::thread reader([&] {
    v1::Event ignored;
    while (w.reader->Read(&ignored)) {
    }
    end = w.reader->Finish();
  });
  const int status = proc_->Stop(SIGTERM);
  reader.join();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(end.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(end.error_message(), HasSubstr("resume after sequence"));
}

TEST_F(WatchTest, RecentEventsDefaultToTwentyAndFilterByChain) {
  StartServer();
  TwoChains();
  v1::ApplyRequest burst;
  for (int i = 0; i < 30; ++i) AddTarget(&burst, "extra-" + std::to_string(i));
  ASSERT_TRUE(Apply(burst).ok());
  v1::ListEventsResponse resp;
  ASSERT_TRUE(admin_->ListEvents(Ctx().get(), v1::ListEventsRequest(), &resp).ok());
  EXPECT_EQ(resp.events_size(), 20);
  TripA();
  v1::PickTargetResponse plan = Pick("two");
  Report(plan.decision_id(), "c", 500);
  // Unfiltered, both chains' switches (first the initial, then the trip) are
  // there; filtered by "two", exactly its own and its targets'.
  int one_switches = 0, two_switches = 0, c_states = 0;
  for (const auto& ev : Events()) {
    one_switches += ev.has_chain_switched() && ev.chain_switched().chain() == "one";
    two_switches += ev.has_chain_switched() && ev.chain_switched().chain() == "two";
  }
  ASSERT_EQ(one_switches, 2);
  ASSERT_EQ(two_switches, 2);
  two_switches = 0;
  for (const auto& ev : Events("two")) {
    EXPECT_FALSE(ev.has_chain_switched() && ev.chain_switched().chain() == "one");
    EXPECT_FALSE(ev.has_target_state() && ev.target_state().target() == "a");
    two_switches += ev.has_chain_switched() && ev.chain_switched().chain() == "two";
    c_states += ev.has_target_state() && ev.target_state().target() == "c";
  }
  EXPECT_EQ(two_switches, 2) << "the filter dropped chain two's own switches";
  EXPECT_EQ(c_states, 1) << "the filter dropped the state of chain two's target c";
}

TEST_F(WatchTest, MetricsShowSwitchesStatesDecisionsAndWatchers) {
  StartServer({"--metrics-listen", "127.0.0.1:0"});
  TwoChains();
  const int port = proc_->MetricsPort();
  ASSERT_GT(port, 0) << proc_->Stderr();
  Watch w = Open(v1::WatchEventsRequest());
  v1::Event e;
  ASSERT_TRUE(w.reader->Read(&e));
  TripA();
  // Metrics follow once the trip is on disk, a moment after the report is answered.
  std::string text;
  ASSERT_TRUE(Eventually([&] {
    text = HttpGet(port, "/metrics");
    return text.find("failover_switches_total{chain=\"one\"") != std::string::npos;
  }));
  EXPECT_THAT(text, HasSubstr("failover_switches_total{chain=\"one\",from=\"a\",reason=\"trip\",to=\"b\"} 1"));
  EXPECT_THAT(text, HasSubstr("failover_target_up{target=\"a\"} 0"));
  // State sets: the current state 1, every other state 0.
  EXPECT_THAT(text, HasSubstr("failover_target_state{state=\"down\",target=\"a\"} 1"));
  EXPECT_THAT(text, HasSubstr("failover_target_state{state=\"healthy\",target=\"a\"} 0"));
  EXPECT_THAT(text, HasSubstr("failover_target_state{state=\"manual\",target=\"a\"} 0"));
  EXPECT_THAT(text, HasSubstr("failover_chain_state{chain=\"one\",state=\"fallback\"} 1"));
  EXPECT_THAT(text, HasSubstr("failover_chain_state{chain=\"one\",state=\"primary\"} 0"));
  EXPECT_THAT(text, HasSubstr("failover_verdicts_total{reason=\"server_error\",verdict=\"try_next\"} 1"));
  EXPECT_THAT(text, HasSubstr("failover_decisions_total{chain=\"one\",result=\"ok\"} 1"));
  EXPECT_THAT(text, HasSubstr("failover_outcomes_total{reason=\"server_error\",target=\"a\"} 1"));
  EXPECT_THAT(text, HasSubstr("failover_decision_seconds_count 1"));
  EXPECT_THAT(text, HasSubstr("failover_watchers 1"));
  EXPECT_THAT(text, HasSubstr("failover_build_info{grpc=\"1."));
  EXPECT_THAT(text, ::testing::ContainsRegex("process_open_fds [1-9]"));
  EXPECT_THAT(text, ::testing::ContainsRegex("process_resident_memory_bytes [1-9]"));
  EXPECT_THAT(text, ::testing::ContainsRegex("process_start_time_seconds [1-9]"));
  EXPECT_THAT(text, HasSubstr("failover_watch_resyncs_total 0"));
  // Every unary call by method and code, and timed.
  EXPECT_THAT(text, HasSubstr("failover_grpc_requests_total{code=\"OK\",method=\"Apply\"} 1"));
  EXPECT_THAT(text, HasSubstr("failover_grpc_requests_total{code=\"OK\",method=\"PickTarget\"} 1"));
  EXPECT_THAT(text, HasSubstr("failover_grpc_request_duration_seconds_count{method=\"ReportOutcome\"} 1"));
  v1::PickTargetRequest unknown;
  unknown.set_chain("no-such-chain");
  v1::PickTargetResponse ignored;
  EXPECT_FALSE(decide_->PickTarget(Ctx().get(), unknown, &ignored).ok());
  EXPECT_TRUE(Eventually([&] {
    return HttpGet(port, "/metrics").find("failover_grpc_requests_total{code=\"NOT_FOUND\",method=\"PickTarget\"} 1") !=
           std::string::npos;
  }));
  // Picks of chains that do not exist share one label.
  EXPECT_THAT(HttpGet(port, "/metrics"), HasSubstr("failover_decisions_total{chain=\"(unknown)\",result=\"error\"} 1"));
  // b trips too: chain one goes DEGRADED on the same target, a change of
  // state but not of target, which is not a switch.
  Report(Pick("one").decision_id(), "b", 500, "boom");
  ASSERT_TRUE(Eventually([&] {
    text = HttpGet(port, "/metrics");
    return text.find("failover_chain_state{chain=\"one\",state=\"degraded\"} 1") != std::string::npos;
  }));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("from=\"b\",reason=\"trip\",to=\"b\"")));
  // A watcher that goes away is freed at once.
  w.ctx->TryCancel();
  EXPECT_TRUE(Eventually([&] { return HttpGet(port, "/metrics").find("failover_watchers 0") != std::string::npos; }));
  // A deleted chain's series go away.
  v1::DeleteChainRequest del;
  del.set_name("two");
  v1::DeleteResponse resp;
  ASSERT_TRUE(admin_->DeleteChain(Ctx().get(), del, &resp).ok());
  // (The counters follow the published events, a moment after the answer.)
  EXPECT_TRUE(Eventually([&] { return HttpGet(port, "/metrics").find("chain=\"two\"") == std::string::npos; }))
      << HttpGet(port, "/metrics");
}

TEST_F(WatchTest, JsonLogLinesNameTheSwitch) {
  StartServer({"--log-format", "json"});
  TwoChains();
  TripA();
  // The log follows the write, a moment after the report is answered.
  const std::string line = "\"msg\":\"chain one: a -> b (trip: a 500 \\\"boom\\\") state primary -> fallback\"";
  EXPECT_TRUE(Eventually([&] { return proc_->Stderr().find(line) != std::string::npos; })) << proc_->Stderr();
  // Beside the prose, the event's fields, for log queries.
  EXPECT_THAT(proc_->Stderr(),
              HasSubstr(R"("event":"chain_switched","chain":"one","from_target":"a","to_target":"b",)"
                        R"("from_state":"primary","to_state":"fallback","reason":"trip","detail":"a 500 \"boom\""})"));
  EXPECT_THAT(proc_->Stderr(), HasSubstr(R"("event":"target_state","target":"a","from_state":"unknown",)"
                                         R"("to_state":"down","source":"auto","reason":"500 \"boom\"")"));
  // Who made an admin change.
  EXPECT_THAT(proc_->Stderr(), ::testing::ContainsRegex(R"("event":"config_changed","what":"chain","name":"one",)"
                                                        R"("change":"created","generation":[0-9]+,"actor":"[^"]+")"));
  // Numbers are JSON numbers, not strings.
  EXPECT_THAT(proc_->Stderr(), ::testing::ContainsRegex("\"seq\":[0-9]+,"));
  EXPECT_THAT(proc_->Stderr(), ::testing::ContainsRegex("\"port\":[0-9]+"));
  EXPECT_THAT(proc_->Stderr(), ::testing::Not(::testing::HasSubstr("\"seq\":\"")));
}

}  // namespace
}  // namespace failover::testing
