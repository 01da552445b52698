// The hot path touches memory only (DESIGN 2): a ReportOutcome that changes no
// state never reaches the disk, and while a trip's transition is being written,
// picks and quiet reports on other chains carry on. The committer's write is
// held open by a stand-in for the data dir that blocks until the test lets it go.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "gmock/gmock.h"
#include "server/api/decision_service.h"
#include "server/api/event_log.h"
#include "common/clock.h"
#include "server/engine/engine.h"

namespace failover::api {
namespace {

namespace v1 = ::failover::v1;

// Stands in for the data dir: counts batches and can hold one open.
class BlockingSink {
 public:
  void Write() {
    std::unique_lock<std::mutex> lock(mu_);
    ++writes_;
    writing_ = true;
    changed_.notify_all();
    changed_.wait(lock, [&] { return !hold_; });
    writing_ = false;
  }
  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = true;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = false;
    changed_.notify_all();
  }
  bool WaitUntilWriting() {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, std::chrono::seconds(10), [&] { return writing_; });
  }
  int writes() {
    std::lock_guard<std::mutex> lock(mu_);
    return writes_;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  int writes_ = 0;
  bool writing_ = false;
  bool hold_ = false;
};

class HotPathTest : public ::testing::Test {
 protected:
  HotPathTest() : service_(Context(), WatchOptions()) {
    engine_.SetChangeSink([this](Change&& c) { committer_.Submit(std::move(c)); });
    ConfigChange change;
    for (const char* name : {"a", "b", "c", "d"}) {
      TargetConfig t;
      t.name = name;
      change.targets.push_back(t);
    }
    ChainConfig tripping;
    tripping.name = "tripping";
    tripping.targets = {"a", "b"};
    tripping.policy.Mutable().trip_errors = 1;
    ChainConfig other;
    other.name = "other";
    other.targets = {"c", "d"};
    other.policy.Mutable().trip_errors = 3;
    change.chains = {tripping, other};
    EXPECT_TRUE(engine_.Apply(change, ApplyOptions(), clock_.Now()).ok());
  }

  ServiceContext Context() {
    ServiceContext ctx;
    ctx.engine = &engine_;
    ctx.clock = &clock_;
    ctx.events = &events_;
    ctx.committer = &committer_;
    return ctx;
  }

  v1::PickTargetResponse Pick(const std::string& chain) {
    v1::PickTargetRequest req;
    req.set_chain(chain);
    v1::PickTargetResponse resp;
    EXPECT_TRUE(service_.Pick(req, &resp).ok());
    return resp;
  }

  v1::ReportOutcomeResponse Report(const std::string& chain, const std::string& target, uint32_t http_status) {
    v1::ReportOutcomeRequest req;
    req.set_decision_id(Pick(chain).decision_id());
    req.set_target(target);
    if (http_status == 0) {
      req.mutable_success();
    } else {
      req.mutable_failure()->set_http_status(http_status);
    }
    v1::ReportOutcomeResponse resp;
    EXPECT_TRUE(service_.Report(req, &resp).ok());
    return resp;
  }

  SimulatedClock clock_;
  Engine engine_;
  EventLog events_;
  BlockingSink sink_;
  Committer committer_{[this](const std::vector<const Change*>&) {
                         sink_.Write();
                         return absl::OkStatus();
                       },
                       [this](const Change& c) { events_.Publish(c.events); }, [](const absl::Status&) {}};
  DecisionService service_;
};

TEST_F(HotPathTest, AReportThatChangesNothingWritesNothing) {
  Report("other", "c", 0);  // UNKNOWN -> HEALTHY: one transition, one write each
  Report("other", "d", 0);
  const int after_first = sink_.writes();
  EXPECT_GE(after_first, 1);  // grouped with the config's write, or not
  for (int i = 0; i < 100; ++i) {
    Report("other", "c", 0);
    Pick("tripping");
  }
  Report("other", "d", 503);  // one failure of the three that trip it: no state change
  EXPECT_EQ(sink_.writes(), after_first);
}

TEST_F(HotPathTest, PicksAndQuietReportsOnOtherChainsCarryOnWhileATripIsBeingWritten) {
  Report("other", "c", 0);
  const int before = sink_.writes();
  sink_.Hold();
  std::thread tripper([&] { Report("tripping", "a", 503); });
  ASSERT_TRUE(sink_.WaitUntilWriting());

  // The trip's batch is still being written; the other chain is served meanwhile.
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(Pick("other").attempts(0).target(), "c");
    EXPECT_EQ(Report("other", "c", 0).verdict(), v1::VERDICT_DONE);
  }
  EXPECT_EQ(sink_.writes(), before + 1);  // only the trip's

  sink_.Release();
  tripper.join();
  EXPECT_EQ(Pick("tripping").attempts(0).target(), "b");
}

// An admin change is one write, and while it is being written the chain it
// pins keeps answering picks: no lock is held across the disk.
TEST_F(HotPathTest, APinIsOneWriteAndPicksOnItsChainCarryOnWhileItIsWritten) {
  Report("other", "c", 0);
  const int before = sink_.writes();
  sink_.Hold();
  std::thread pinner([&] {
    Committer::Scope changes(&committer_);
    EXPECT_TRUE(engine_.Pin("tripping", "b", clock_.Now()).ok());
    EXPECT_TRUE(changes.Await().ok());
  });
  ASSERT_TRUE(sink_.WaitUntilWriting());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(Pick("tripping").attempts_size(), 1);  // pinned, served meanwhile
  sink_.Release();
  pinner.join();
  EXPECT_EQ(sink_.writes(), before + 1);
}

// Counted once (DESIGN 3.14, invariant 4): a report sent again with the same
// id (a batch resent after its call failed) is answered but counts nothing.
TEST_F(HotPathTest, AReportSentAgainWithItsIdCountsOnce) {
  auto failure = [&](uint64_t sequence) {
    v1::ReportOutcomeRequest req;
    req.set_chain("other");
    req.set_target("c");
    req.mutable_failure()->set_http_status(503);
    req.mutable_report_id()->set_sender("client-1");
    req.mutable_report_id()->set_sequence(sequence);
    v1::ReportOutcomeResponse resp;
    EXPECT_TRUE(service_.Report(req, &resp).ok());
    return resp;
  };
  const v1::ReportOutcomeResponse first = failure(1);
  EXPECT_FALSE(first.duplicate());
  EXPECT_TRUE(first.counted());
  EXPECT_FALSE(failure(2).duplicate());
  // "other" trips at three failures: the two resent ones must not be the third.
  for (uint64_t sequence : {1, 2, 1}) {
    const v1::ReportOutcomeResponse again = failure(sequence);
    EXPECT_TRUE(again.duplicate());
    EXPECT_FALSE(again.counted());
    EXPECT_EQ(again.verdict(), first.verdict());  // the verdict is decided all the same
  }
  EXPECT_NE(engine_.GetTargetStatus("c")->health, HealthState::kDown);
  EXPECT_FALSE(failure(3).duplicate());
  EXPECT_EQ(engine_.GetTargetStatus("c")->health, HealthState::kDown);
}

TEST(ReportIdWindowTest, EachIdOnceAcrossSendersAndOldIdsBeyondTheWindowAreDuplicates) {
  ReportIdWindow window(ReportIdWindow::Options{128, 2});
  EXPECT_TRUE(window.FirstTime("s", 5));
  EXPECT_TRUE(window.FirstTime("s", 3));  // out of order, first time
  EXPECT_FALSE(window.FirstTime("s", 3));
  EXPECT_FALSE(window.FirstTime("s", 5));
  EXPECT_TRUE(window.FirstTime("t", 5));  // another sender's 5
  EXPECT_TRUE(window.FirstTime("s", 300));  // the window jumps: 172..300
  EXPECT_FALSE(window.FirstTime("s", 100));  // too old to know: taken as counted
  EXPECT_TRUE(window.FirstTime("s", 250));
  EXPECT_FALSE(window.FirstTime("s", 250));
  EXPECT_TRUE(window.FirstTime("s", 173));  // a slot the jump cleared
  EXPECT_TRUE(window.FirstTime("u", 1));  // a third sender: "t", heard from least recently, is forgotten
  EXPECT_EQ(window.senders(), 2u);
  EXPECT_FALSE(window.FirstTime("s", 300));
}

TEST(ReportIdWindowTest, IdsNotedFromElsewhereCountNothingHereAndOthersStillCount) {
  ReportIdWindow window;
  window.Note({{"relay-a", 7}, {"relay-a", 9}, {"client-b", 1}});
  EXPECT_FALSE(window.FirstTime("relay-a", 7));
  EXPECT_FALSE(window.FirstTime("relay-a", 9));
  EXPECT_FALSE(window.FirstTime("client-b", 1));
  EXPECT_TRUE(window.FirstTime("relay-a", 8));  // between two noted ids: never counted
  EXPECT_TRUE(window.FirstTime("client-b", 2));
}

}  // namespace
}  // namespace failover::api
