// The committer between the engine and the data dir (DESIGN 2): Changes are
// written in order, grouped when several are ready, and published only once
// written (their callers may answer as soon as they are durable); a write the data dir refuses fails the calls that caused it,
// publishes nothing, and is retried until the disk takes it. Runs on a real
// RocksDB store in a temp dir, with the real engine and decision service.
#include "server/committer/committer.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "gmock/gmock.h"
#include "server/api/admin_service.h"
#include "server/api/decision_service.h"
#include "server/api/event_log.h"
#include "server/engine/engine.h"
#include "storage/store.h"
#include "tests/support/api_test.h"

namespace failover {
namespace {

using ::testing::HasSubstr;
namespace v1 = ::failover::v1;

Change ChangeWithEvents(uint64_t first, int n) {
  Change c;
  for (int i = 0; i < n; ++i) {
    Event e;
    e.kind = EventKind::kConfigChanged;
    e.sequence = first + static_cast<uint64_t>(i);
    c.events.push_back(e);
  }
  c.next_sequence = first + static_cast<uint64_t>(n);
  return c;
}

TEST(CommitterTest, PublishesInOrderOnlyAfterTheWriteAndGroupsWhatIsReady) {
  std::mutex mu;
  std::condition_variable cv;
  bool hold = true;
  std::vector<size_t> batch_sizes;
  std::vector<uint64_t> written;
  std::vector<uint64_t> published;
  Committer committer(
      [&](const std::vector<const Change*>& changes) {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return !hold; });
        batch_sizes.push_back(changes.size());
        for (const Change* c : changes) written.push_back(c->events.front().sequence);
        return absl::OkStatus();
      },
      [&](const Change& c) {
        std::lock_guard<std::mutex> lock(mu);
        // Publication never runs ahead of the write.
        EXPECT_NE(std::find(written.begin(), written.end(), c.events.front().sequence), written.end());
        published.push_back(c.events.front().sequence);
      },
      [](const absl::Status&) {});
  const uint64_t first = committer.Submit(ChangeWithEvents(1, 1));
  // While the first write is held, three more arrive: they go in one write.
  committer.Submit(ChangeWithEvents(2, 2));
  committer.Submit(ChangeWithEvents(4, 1));
  const uint64_t last = committer.Submit(ChangeWithEvents(5, 1));
  {
    std::lock_guard<std::mutex> lock(mu);
    hold = false;
  }
  cv.notify_all();
  ASSERT_TRUE(committer.Await(last).ok());
  ASSERT_TRUE(committer.Await(first).ok());
  committer.Stop();  // publication follows durability: let it finish
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(published, (std::vector<uint64_t>{1, 2, 4, 5}));
  ASSERT_FALSE(batch_sizes.empty());
  EXPECT_LT(batch_sizes.size(), 4u) << "Changes that were ready together should share a write";
}

// AwaitThen holds no thread: its callback runs once the ticket is durable
// (never before the write), with the write's error when it fails, at once
// when the ticket is settled already, and with an error at Stop.
TEST(CommitterTest, AwaitThenAnswersOnceDurableWithoutAWaitingThread) {
  std::mutex mu;
  std::condition_variable cv;
  bool hold = true;
  bool refuse = false;
  int writes = 0;
  std::vector<std::pair<int, absl::Status>> answers;  // (which, status)
  Committer committer(
      [&](const std::vector<const Change*>&) {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return !hold; });
        ++writes;
        return refuse ? absl::UnavailableError("No space left on device") : absl::OkStatus();
      },
      [](const Change&) {}, [](const absl::Status&) {}, absl::Hours(1));
  auto answer = [&](int which) {
    return [&, which](absl::Status status) {
      std::lock_guard<std::mutex> lock(mu);
      answers.emplace_back(which, std::move(status));
      cv.notify_all();
    };
  };
  auto answered = [&](size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(30), [&] { return answers.size() >= n; });
  };
  const uint64_t first = committer.Submit(ChangeWithEvents(1, 1));
  committer.AwaitThen(first, answer(1));  // returns at once: the write is held
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(answers.empty());
    hold = false;
  }
  cv.notify_all();
  ASSERT_TRUE(answered(1));
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(writes, 1);
    EXPECT_TRUE(answers[0].second.ok()) << answers[0].second;
  }
  committer.AwaitThen(first, answer(2));  // settled already: answered on this thread
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(answers.size(), 2u);
    EXPECT_TRUE(answers[1].second.ok());
    refuse = true;
  }
  committer.AwaitThen(committer.Submit(ChangeWithEvents(2, 1)), answer(3));
  ASSERT_TRUE(answered(3));
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(answers[2].first, 3);
    EXPECT_THAT(std::string(answers[2].second.message()), HasSubstr("No space left on device"));
  }
  // Still refused (retried only after an hour): one more waits, and Stop answers it.
  committer.AwaitThen(committer.Submit(ChangeWithEvents(3, 1)), answer(4));
  committer.Stop();
  ASSERT_TRUE(answered(4));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(answers[3].first, 4);
  EXPECT_FALSE(answers[3].second.ok());
}

// Records what reaches watchers.
class RecordingWatcher : public api::EventLog::Watcher {
 public:
  void Deliver(const Events& events, const std::vector<grpc::ByteBuffer>&) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Event& e : events) sequences_.push_back(e.sequence);
  }
  void Close() override {}
  std::vector<uint64_t> sequences() {
    std::lock_guard<std::mutex> lock(mu_);
    return sequences_;
  }

 private:
  std::mutex mu_;
  std::vector<uint64_t> sequences_;
};

class RefusedWriteTest : public ::testing::Test {
 protected:
  RefusedWriteTest() {
    OpenStore();
    engine_.SetChangeSink([this](Change&& c) { committer_->Submit(std::move(c)); });
    committer_ = std::make_unique<Committer>(
        [this](const std::vector<const Change*>& changes) -> absl::Status {
          if (refuse_.load()) return absl::UnavailableError("cannot write to data dir /x: IO error: No space left on device");
          return store_->Write(changes);
        },
        [this](const Change& c) { events_.Publish(c.events); },
        [this](const absl::Status& s) {
          engine_.SetAcceptingChanges(s.ok(), std::string(s.message()));
          std::lock_guard<std::mutex> lock(mu_);
          health_.push_back(s.ok());
        },
        absl::Milliseconds(5));
    api::ServiceContext ctx;
    ctx.engine = &engine_;
    ctx.clock = &clock_;
    ctx.events = &events_;
    ctx.committer = committer_.get();
    service_ = std::make_unique<api::DecisionService>(ctx, api::WatchOptions());
    admin_ = std::make_unique<api::AdminService>(ctx);
    ConfigChange change;
    for (const char* name : {"a", "b"}) {
      TargetConfig t;
      t.name = name;
      change.targets.push_back(t);
    }
    ChainConfig chain;
    chain.name = "ch";
    chain.targets = {"a", "b"};
    change.chains = {chain};
    Committer::Scope scope(committer_.get());
    auto applied = engine_.Apply(change, ApplyOptions(), clock_.Now());
    EXPECT_TRUE(applied.ok());
    EXPECT_TRUE(scope.Await().ok());
    // Watchers get a Change just after its caller is answered: let the config's arrive first.
    const uint64_t config_last = applied->events.back().sequence;
    EXPECT_TRUE(testing::Eventually([&] { return events_.last_sequence() == config_last; }));
    EXPECT_TRUE(events_.Subscribe(&watcher_, 10).ok());
  }
  ~RefusedWriteTest() override {
    events_.Unsubscribe(&watcher_);
    committer_->Stop();
  }

  void OpenStore() {
    auto store = storage::Store::Open(dir_.path());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(store).value();
  }

  grpc::Status Report(const std::string& target, uint32_t http_status, v1::ReportOutcomeResponse* resp) {
    v1::ReportOutcomeRequest req;
    req.set_chain("ch");
    req.set_target(target);
    req.mutable_failure()->set_http_status(http_status);
    const absl::Status s = service_->Report(req, resp);
    return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
  }

  std::vector<bool> health() {
    std::lock_guard<std::mutex> lock(mu_);
    return health_;
  }

  testing::TempDir dir_;
  std::unique_ptr<storage::Store> store_;
  SimulatedClock clock_;
  Engine engine_;
  api::EventLog events_;
  std::atomic<bool> refuse_{false};
  std::unique_ptr<Committer> committer_;
  std::unique_ptr<api::DecisionService> service_;
  std::unique_ptr<api::AdminService> admin_;
  RecordingWatcher watcher_;
  std::mutex mu_;
  std::vector<bool> health_;
};

// A change dropped (never to be written) stays failed however many writes
// follow: never an OK from a durable index that passed it, even after the
// committer has forgotten which of many interleaved drops were which.
TEST(CommitterTest, ADroppedChangeIsNeverReportedSaved) {
  int writes = 0;
  Committer committer(
      [&](const std::vector<const Change*>&) {
        return ++writes % 2 == 1 ? Dropped(absl::FailedPreconditionError("no longer the leader"))
                                 : absl::OkStatus();
      },
      [](const Change&) {}, [](const absl::Status&) {}, absl::Seconds(1), Committer::Mode::kCallerDriven);
  const uint64_t first = committer.Submit(ChangeWithEvents(1, 1));
  const absl::Status dropped = committer.Await(first);
  EXPECT_EQ(dropped.code(), absl::StatusCode::kFailedPrecondition) << dropped;
  // Thousands of drops, each between two durable writes.
  std::vector<uint64_t> saved;
  for (uint64_t i = 0; i < 5000; ++i) {
    const uint64_t ticket = committer.Submit(ChangeWithEvents(2 + i, 1));
    if (committer.Await(ticket).ok()) saved.push_back(ticket);
  }
  ASSERT_EQ(saved.size(), 2500u);
  EXPECT_FALSE(committer.Await(first).ok());
  EXPECT_TRUE(committer.Await(saved.back()).ok());
}

// A batch whose first part was saved before the write failed (in cluster
// mode: earlier groups reached etcd's log): that part's callers hear OK, the
// rest the error; none of it is published here (the log brings it back).
TEST(CommitterTest, ThePartOfADroppedBatchThatWasSavedIsAnsweredSaved) {
  std::vector<size_t> batches;
  int published = 0;
  Committer committer(
      [&](const std::vector<const Change*>& changes) {
        batches.push_back(changes.size());
        return Dropped(absl::UnavailableError("lost the leadership after the first group"), 2);
      },
      [&](const Change&) { ++published; }, [](const absl::Status&) {}, absl::Seconds(1),
      Committer::Mode::kCallerDriven);
  const uint64_t a = committer.Submit(ChangeWithEvents(1, 1));
  const uint64_t b = committer.Submit(ChangeWithEvents(2, 1));
  const uint64_t c = committer.Submit(ChangeWithEvents(3, 1));
  EXPECT_THAT(committer.Await(c).message(), HasSubstr("lost the leadership"));
  EXPECT_EQ(batches, std::vector<size_t>{3});  // one write for the three
  EXPECT_TRUE(committer.Await(a).ok());
  EXPECT_TRUE(committer.Await(b).ok());
  EXPECT_EQ(published, 0);
  // A later batch wholly saved though the write failed: every caller hears OK.
  Committer whole([&](const std::vector<const Change*>&) { return Dropped(absl::UnavailableError("gone"), 1); },
                  [](const Change&) {}, [](const absl::Status&) {}, absl::Seconds(1), Committer::Mode::kCallerDriven);
  EXPECT_TRUE(whole.Await(whole.Submit(ChangeWithEvents(1, 1))).ok());
}

// Listing the events after a sequence answers with every number from there on,
// or says which one it does not have: never a list that jumps over events
// older than the recent ones kept, or skipped when a replica took the
// cluster's snapshot (live watchers are resynced then).
TEST(EventLogTest, ListingAfterASequenceNeverJumpsOverMissingEvents) {
  struct ResyncCounter : api::EventLog::Watcher {
    void Deliver(const Events&, const std::vector<grpc::ByteBuffer>&) override {}
    void Close() override {}
    void Resync() override { ++resyncs; }
    int resyncs = 0;
  } watcher;
  api::EventLog log(/*keep_recent=*/5);
  ASSERT_TRUE(log.Subscribe(&watcher, 10).ok());
  auto all = [](const Event&) { return true; };
  auto sequences = [](const std::vector<Event>& events) {
    std::vector<uint64_t> out;
    for (const Event& e : events) out.push_back(e.sequence);
    return out;
  };
  log.Publish(ChangeWithEvents(1, 8).events);  // 4..8 kept
  absl::StatusOr<std::vector<Event>> listed = log.After(1, 10, all);
  EXPECT_EQ(listed.status().code(), absl::StatusCode::kOutOfRange) << listed.status();
  EXPECT_THAT(listed.status().message(), HasSubstr("event 2 is not kept"));
  listed = log.After(3, 10, all);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(sequences(*listed), (std::vector<uint64_t>{4, 5, 6, 7, 8}));
  EXPECT_TRUE(log.After(8, 10, all).ok());

  log.SkipTo(20);  // 9..19 exist nowhere here
  EXPECT_EQ(watcher.resyncs, 1);
  log.Publish(ChangeWithEvents(20, 2).events);
  listed = log.After(6, 10, all);
  EXPECT_EQ(listed.status().code(), absl::StatusCode::kOutOfRange) << listed.status();
  EXPECT_THAT(listed.status().message(), HasSubstr("event 9 is not kept"));
  listed = log.After(6, 2, all);  // stops before the gap
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(sequences(*listed), (std::vector<uint64_t>{7, 8}));
  listed = log.After(19, 10, all);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(sequences(*listed), (std::vector<uint64_t>{20, 21}));

  log.SkipTo(30);  // a gap with nothing after it yet
  EXPECT_EQ(log.After(21, 10, all).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(log.After(29, 10, all).ok());
  log.Unsubscribe(&watcher);
}

// Failover never waits on bookkeeping (DESIGN 3.14, invariant 6): the report
// whose trip cannot be saved still gets its verdict, naming the write error.
TEST_F(RefusedWriteTest, TheVerdictStandsNothingIsStreamedAndTheChangeIsSavedOnceTheDiskTakesIt) {
  const uint64_t before = events_.last_sequence();
  refuse_ = true;
  v1::ReportOutcomeResponse resp;
  const grpc::Status answered = Report("a", 503, &resp);  // trips "a"
  ASSERT_TRUE(answered.ok()) << answered.error_message();
  EXPECT_EQ(resp.verdict(), v1::VERDICT_TRY_NEXT);
  EXPECT_EQ(resp.next_attempt().target(), "b");
  EXPECT_THAT(resp.not_saved(), HasSubstr("No space left on device"));
  EXPECT_THAT(resp.not_saved(), HasSubstr("refuses further changes"));
  EXPECT_EQ(health(), std::vector<bool>{false});
  EXPECT_TRUE(watcher_.sequences().empty());
  EXPECT_EQ(events_.last_sequence(), before);
  // Further changes are refused while the disk refuses; decisions go on.
  EXPECT_FALSE(engine_.accepting_changes());
  EXPECT_TRUE(Report("b", 503, &resp).ok());
  EXPECT_EQ(engine_.GetTargetStatus("b")->health, HealthState::kUnknown);

  refuse_ = false;
  ASSERT_TRUE(testing::Eventually([&] { return !watcher_.sequences().empty(); }));
  EXPECT_EQ(health(), (std::vector<bool>{false, true}));
  EXPECT_TRUE(engine_.accepting_changes());
  const std::vector<uint64_t> streamed = watcher_.sequences();
  for (size_t i = 0; i < streamed.size(); ++i) EXPECT_EQ(streamed[i], before + 1 + i);

  // After a clean stop the numbering goes on right after everything streamed:
  // none is reused, and the stop released the reserved block, so no gap.
  committer_->Stop();
  ASSERT_TRUE(store_->Close().ok());
  OpenStore();
  EXPECT_EQ(store_->next_sequence(), streamed.back() + 1);
  auto stored = store_->RecentEvents(100);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->back().sequence, streamed.back());
}

// Acknowledged means durable (DESIGN 3.14, invariant 2): once a change could
// not be saved, repeating it is refused too, though memory already holds it;
// once the disk takes writes again the repeat answers OK, and what it
// acknowledges is on disk.
TEST_F(RefusedWriteTest, RepeatingAChangeThatIsOnlyInMemoryIsRefusedUntilItIsSaved) {
  refuse_ = true;
  v1::PinChainRequest pin;
  pin.set_chain("ch");
  pin.set_target("b");
  v1::ChainView view;
  const absl::Status first = admin_->DoPinChain(pin, &view);
  EXPECT_EQ(first.code(), absl::StatusCode::kUnavailable) << first;
  const absl::Status repeated = admin_->DoPinChain(pin, &view);
  EXPECT_EQ(repeated.code(), absl::StatusCode::kUnavailable) << repeated;
  EXPECT_THAT(std::string(repeated.message()), HasSubstr("No space left on device"));
  v1::TriggerFailoverRequest trigger;
  trigger.set_target("a");
  v1::TargetView target;
  EXPECT_EQ(admin_->DoTriggerFailover(trigger, &target).code(), absl::StatusCode::kUnavailable);
  v1::ApplyRequest same;  // the config as it is: no diff
  same.add_targets()->set_name("a");
  same.add_targets()->set_name("b");
  v1::Chain* chain = same.add_chains();
  chain->set_name("ch");
  chain->add_targets("a");
  chain->add_targets("b");
  v1::ApplyResponse applied;
  EXPECT_EQ(admin_->DoApply(same, &applied).code(), absl::StatusCode::kUnavailable);

  refuse_ = false;
  ASSERT_TRUE(testing::Eventually([&] { return engine_.accepting_changes(); }));
  ASSERT_TRUE(admin_->DoPinChain(pin, &view).ok());
  EXPECT_TRUE(admin_->DoApply(same, &applied).ok());
  committer_->Stop();
  ASSERT_TRUE(store_->Close().ok());
  OpenStore();
  auto restored = store_->Load();
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->pins, (std::map<std::string, std::string>{{"ch", "b"}}));
}

}  // namespace
}  // namespace failover
