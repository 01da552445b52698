// The outcome trace (DESIGN 3.17): the in-memory buffer the report path
// appends to, written to a real RocksDB data dir in a temp dir.
#include "server/api/outcome_trace.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "common/utf8.h"
#include "server/api/admin_service.h"
#include "server/engine/engine.h"
#include "server/api/convert.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "storage/store.h"
#include "tests/support/failoverd_process.h"

namespace failover::api {
namespace {

using ::failover::storage::Store;
using ::failover::testing::TempDir;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

std::unique_ptr<Store> OpenOk(const std::string& dir) {
  auto s = Store::Open(dir);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(s).value() : nullptr;
}

TraceEntry Failure(absl::Time at, int n) {
  TraceEntry e;
  e.at = at;
  e.chain = "chat";
  e.target = n % 2 == 0 ? "openai" : "anthropic";
  e.classified = Reason::kServerError;
  e.latency = absl::Milliseconds(n);
  e.facts.http_status = 503;
  e.facts.message = absl::StrCat("overloaded ", n);
  e.facts.error_code = "overloaded_error";
  e.facts.retry_after = absl::Seconds(2);
  e.facts.transport = TransportError::kReset;
  e.facts.phase = Phase::kAfterFirstByte;
  return e;
}

std::vector<TraceEntry> ReadAll(const Store& store, absl::string_view chain = "") {
  auto read = store.ReadTrace(absl::InfinitePast(), absl::InfiniteFuture(), chain, 1'000'000);
  EXPECT_TRUE(read.ok()) << read.status();
  return read.ok() ? *read : std::vector<TraceEntry>{};
}

TEST(OutcomeTraceTest, EntriesSurviveARestartWithEveryFactAndTheNumberingGoesOn) {
  TempDir dir;
  {
    auto store = OpenOk(dir.path());
    OutcomeTrace trace(1000, absl::Hours(24));
    for (int i = 0; i < 3; ++i) trace.Add(Failure(kT0 + absl::Seconds(i), i));
    TraceEntry batch;
    batch.at = kT0 + absl::Seconds(3);
    batch.chain = "embed";
    batch.target = "local";
    batch.count = 40;  // forty successes sent as one report
    batch.facts.success = true;
    trace.Add(batch);
    TraceEntry check = Failure(kT0 + absl::Seconds(3), 3);
    check.chain.clear();
    check.source = TraceSource::kProbeFail;
    check.recovery_probe = true;
    trace.Add(check);
    ASSERT_TRUE(trace.Flush(store.get(), kT0 + absl::Seconds(4)).ok());
    ASSERT_TRUE(store->Close().ok());
  }
  auto store = OpenOk(dir.path());
  std::vector<TraceEntry> back = ReadAll(*store);
  ASSERT_EQ(back.size(), 5u);
  for (int i = 0; i < 3; ++i) {
    const TraceEntry want = Failure(kT0 + absl::Seconds(i), i);
    const TraceEntry& got = back[i];
    EXPECT_EQ(got.number, static_cast<uint64_t>(i + 1));
    EXPECT_EQ(got.at, want.at);
    EXPECT_EQ(got.chain, want.chain);
    EXPECT_EQ(got.target, want.target);
    EXPECT_EQ(got.count, 1u);
    EXPECT_EQ(got.classified, Reason::kServerError);
    EXPECT_EQ(got.latency, want.latency);
    EXPECT_FALSE(got.facts.success);
    EXPECT_EQ(got.facts.http_status, 503u);
    EXPECT_EQ(got.facts.message, want.facts.message);
    EXPECT_EQ(got.facts.error_code, "overloaded_error");
    EXPECT_EQ(got.facts.retry_after, absl::Seconds(2));
    EXPECT_EQ(got.facts.transport, TransportError::kReset);
    EXPECT_EQ(got.facts.phase, Phase::kAfterFirstByte);
    EXPECT_EQ(got.source, TraceSource::kOutcome);
  }
  EXPECT_EQ(back[3].count, 40u);
  EXPECT_TRUE(back[3].facts.success);
  EXPECT_EQ(back[4].source, TraceSource::kProbeFail);
  EXPECT_TRUE(back[4].recovery_probe);
  EXPECT_EQ(back[4].chain, "");
  EXPECT_EQ(ReadAll(*store, "embed").size(), 1u);

  OutcomeTrace trace(1000, absl::Hours(24));
  trace.Add(Failure(kT0 + absl::Seconds(5), 5));
  ASSERT_TRUE(trace.Flush(store.get(), kT0 + absl::Seconds(6)).ok());
  back = ReadAll(*store);
  ASSERT_EQ(back.size(), 6u);
  EXPECT_EQ(back[5].number, 6u);
}

TEST(OutcomeTraceTest, AFloodKeepsTheNewestEntriesOnDiskAndBoundsWhatWaits) {
  TempDir dir;
  auto store = OpenOk(dir.path());
  OutcomeTrace trace(100, absl::Hours(24));
  int n = 0;
  for (int second = 0; second < 10; ++second) {
    for (int i = 0; i < 100; ++i, ++n) trace.Add(Failure(kT0 + absl::Seconds(second), n));
    ASSERT_TRUE(trace.Flush(store.get(), kT0 + absl::Seconds(second)).ok());
    EXPECT_EQ(store->trace_size(), 100u);
  }
  std::vector<TraceEntry> kept = ReadAll(*store);
  ASSERT_EQ(kept.size(), 100u);
  EXPECT_EQ(kept.front().number, 901u);
  EXPECT_EQ(kept.back().number, 1000u);
  EXPECT_EQ(kept.back().facts.message, "overloaded 999");
  EXPECT_EQ(trace.dropped(), 0u);

  // Without a flush (a stalled ticker), no more than `keep` wait in memory.
  for (int i = 0; i < 250; ++i) trace.Add(Failure(kT0 + absl::Seconds(11), i));
  EXPECT_EQ(trace.dropped(), 150u);
  ASSERT_TRUE(trace.Flush(store.get(), kT0 + absl::Seconds(11)).ok());
  kept = ReadAll(*store);
  ASSERT_EQ(kept.size(), 100u);
  EXPECT_EQ(kept.back().facts.message, "overloaded 99");  // the first hundred were kept
}

// The bytes bound: however long the messages a flood carries, what is kept is
// at most `keep` entries of at most kTraceMessageBytes of text each.
TEST(OutcomeTraceTest, AFloodOfLongMessagesKeepsAtMostKeepEntriesOfCutText) {
  TempDir dir;
  auto store = OpenOk(dir.path());
  OutcomeTrace trace(50, absl::Hours(24));
  for (int second = 0; second < 5; ++second) {
    for (int i = 0; i < 200; ++i) {
      TraceEntry e = Failure(kT0 + absl::Seconds(second), i);
      e.facts.message = std::string(64 * 1024, 'm');
      e.facts.error_code = std::string(64 * 1024, 'c');
      trace.Add(e);
    }
    ASSERT_TRUE(trace.Flush(store.get(), kT0 + absl::Seconds(second)).ok());
  }
  const std::vector<TraceEntry> kept = ReadAll(*store);
  ASSERT_EQ(kept.size(), 50u);
  size_t text = 0;
  for (const TraceEntry& e : kept) text += e.facts.message.size() + e.facts.error_code.size();
  EXPECT_LE(text, 50u * 2 * kTraceMessageBytes);
  EXPECT_GT(text, 0u);
}

TEST(OutcomeTraceTest, EntriesOlderThanTheMaxAgeGo) {
  TempDir dir;
  auto store = OpenOk(dir.path());
  OutcomeTrace trace(1000, absl::Hours(2));
  for (int h = 0; h < 5; ++h) trace.Add(Failure(kT0 + absl::Hours(h), h));
  ASSERT_TRUE(trace.Flush(store.get(), kT0 + absl::Hours(4) + absl::Minutes(30)).ok());
  std::vector<TraceEntry> kept = ReadAll(*store);
  ASSERT_EQ(kept.size(), 2u);  // 3h and 4h are within 2h of 4h30
  EXPECT_EQ(kept.front().at, kT0 + absl::Hours(3));
  // A window reads only what was counted inside it.
  auto window = store->ReadTrace(kT0 + absl::Hours(3), kT0 + absl::Hours(4), "", 10);
  ASSERT_TRUE(window.ok());
  ASSERT_EQ(window->size(), 1u);
  EXPECT_EQ((*window)[0].at, kT0 + absl::Hours(3));
}

// A window's first page starts at the window (found by bisecting the
// numbers), whatever came before it, and pages on by number.
TEST(OutcomeTraceTest, AWindowStartsAtItsFirstEntryAndPagesByNumber) {
  TempDir dir;
  auto store = OpenOk(dir.path());
  OutcomeTrace trace(600, absl::Hours(24));
  for (int i = 0; i < 1000; ++i) {
    trace.Add(Failure(kT0 + absl::Seconds(i), i));
    if (i % 100 == 99) {
      ASSERT_TRUE(trace.Flush(store.get(), kT0 + absl::Seconds(i)).ok());
    }
  }
  ASSERT_EQ(ReadAll(*store).front().number, 401u);  // the oldest 400 were trimmed
  auto numbers = [&](absl::Time from, absl::Time to, uint64_t after) {
    auto read = store->ReadTrace(from, to, "", 3, after);
    EXPECT_TRUE(read.ok()) << read.status();
    std::vector<uint64_t> out;
    for (const TraceEntry& e : *read) out.push_back(e.number);
    return out;
  };
  const absl::Time end = absl::InfiniteFuture();
  EXPECT_THAT(numbers(kT0 + absl::Seconds(700), end, 0), ::testing::ElementsAre(701, 702, 703));
  EXPECT_THAT(numbers(kT0 + absl::Seconds(700), end, 702), ::testing::ElementsAre(703, 704, 705));
  EXPECT_THAT(numbers(kT0 + absl::Milliseconds(699'500), end, 0), ::testing::ElementsAre(701, 702, 703));
  EXPECT_THAT(numbers(kT0, end, 0), ::testing::ElementsAre(401, 402, 403));  // before what is kept
  EXPECT_THAT(numbers(kT0 + absl::Seconds(998), end, 0), ::testing::ElementsAre(999, 1000));
  EXPECT_THAT(numbers(kT0 + absl::Seconds(1000), end, 0), ::testing::ElementsAre());
  EXPECT_THAT(numbers(kT0 + absl::Seconds(500), kT0 + absl::Seconds(502), 0), ::testing::ElementsAre(501, 502));
}

TEST(OutcomeTraceTest, AMessageIsCutToValidUtf8) {
  TempDir dir;
  auto store = OpenOk(dir.path());
  OutcomeTrace trace(10, absl::Hours(1));
  TraceEntry e = Failure(kT0, 0);
  e.facts.message = std::string(5000, 'x') + "\xff";
  e.facts.error_code = "bad\xc3";
  trace.Add(e);
  ASSERT_TRUE(trace.Flush(store.get(), kT0).ok());
  std::vector<TraceEntry> kept = ReadAll(*store);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_LE(kept[0].facts.message.size(), kTraceMessageBytes);
  EXPECT_TRUE(IsValidUtf8(kept[0].facts.message));
  EXPECT_TRUE(IsValidUtf8(kept[0].facts.error_code));
  EXPECT_THAT(kept[0].facts.error_code, ::testing::StartsWith("bad"));
}

TEST(OutcomeTraceTest, WhatARefusedWriteHeldIsWrittenOnceTheStoreTakesWritesAgain) {
  TempDir dir;
  auto store = OpenOk(dir.path());
  OutcomeTrace trace(10, absl::Hours(1));
  for (int i = 0; i < 4; ++i) trace.Add(Failure(kT0, i));
  ASSERT_TRUE(store->Close().ok());
  EXPECT_FALSE(trace.Flush(store.get(), kT0).ok());
  for (int i = 4; i < 12; ++i) trace.Add(Failure(kT0, i));  // two past the bound
  EXPECT_EQ(trace.dropped(), 2u);
  store.reset();
  store = OpenOk(dir.path());
  ASSERT_TRUE(trace.Flush(store.get(), kT0).ok());
  std::vector<TraceEntry> kept = ReadAll(*store);
  ASSERT_EQ(kept.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(kept[i].facts.message, absl::StrCat("overloaded ", i));
}

// The shadow policies' feed: each Flush passes what was written since the
// last one (a Read's write included) once, in order. The buffer's slots are
// overwritten by the next second's entries, so none of a slot's old facts
// may show through.
TEST(OutcomeTraceTest, EachFlushFeedsWhatWasWrittenSinceTheLastOnceAndInOrder) {
  TempDir dir;
  auto store = OpenOk(dir.path());
  OutcomeTrace trace(1000, absl::Hours(24));
  std::vector<std::string> fed;
  int calls = 0;
  auto flush = [&](absl::Time now) {
    calls = 0;
    fed.clear();
    ASSERT_TRUE(trace
                    .Flush(store.get(), now,
                           [&](absl::Span<const TraceEntry> written) {
                             ++calls;
                             for (const TraceEntry& e : written) fed.push_back(e.facts.message);
                           })
                    .ok());
  };
  for (int i = 0; i < 5; ++i) trace.Add(Failure(kT0, i));
  flush(kT0 + absl::Seconds(1));
  EXPECT_THAT(fed, ::testing::ElementsAre("overloaded 0", "overloaded 1", "overloaded 2", "overloaded 3",
                                          "overloaded 4"));
  for (int i = 5; i < 8; ++i) trace.Add(Failure(kT0 + absl::Seconds(1), i));
  ASSERT_TRUE(trace.Read(store.get(), absl::InfinitePast(), absl::InfiniteFuture(), "", 100, 0).ok());
  TraceEntry bare;  // into a slot that held a full failure two seconds ago
  bare.at = kT0 + absl::Seconds(1);
  bare.target = "local";
  trace.Add(bare);
  flush(kT0 + absl::Seconds(2));
  EXPECT_EQ(calls, 1);
  EXPECT_THAT(fed, ::testing::ElementsAre("overloaded 5", "overloaded 6", "overloaded 7", ""));
  flush(kT0 + absl::Seconds(3));
  EXPECT_EQ(calls, 1);  // nothing written: an empty span, so the feed's clock still moves on
  EXPECT_THAT(fed, ::testing::IsEmpty());
  OutcomeTrace off(0, absl::Hours(24));
  int off_calls = 0;
  ASSERT_TRUE(off.Flush(store.get(), kT0, [&](absl::Span<const TraceEntry> written) {
                   ++off_calls;
                   EXPECT_TRUE(written.empty());
                 }).ok());
  EXPECT_EQ(off_calls, 1);  // a trace turned off still moves the feed's clock

  std::vector<TraceEntry> kept = ReadAll(*store);
  ASSERT_EQ(kept.size(), 9u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(kept[i].facts.message, absl::StrCat("overloaded ", i));
  const TraceEntry& last = kept[8];
  EXPECT_EQ(last.target, "local");
  EXPECT_EQ(last.chain, "");
  EXPECT_EQ(last.facts.http_status, 0u);
  EXPECT_EQ(last.facts.error_code, "");
  EXPECT_EQ(last.latency, absl::ZeroDuration());
  EXPECT_EQ(last.number, kept[7].number + 1);
}

// Reports add while the ticker flushes and a caller reads, as under load:
// the slots a Flush hands back are overwritten by reports already waiting.
// Every entry reaches the disk and the shadow feed once, in one order, and
// each reporting thread's entries keep theirs (under ThreadSanitizer in
// scripts/sanitize, the hand-over must also be race-free).
TEST(OutcomeTraceTest, ReportsAddingDuringFlushesAndReadsEachReachDiskAndFeedOnceInOrder) {
  TempDir dir;
  auto store = OpenOk(dir.path());
  ASSERT_NE(store, nullptr);
  constexpr int kThreads = 4;
  constexpr int kEach = 3000;
  OutcomeTrace trace(kThreads * kEach, absl::Hours(24));
  std::atomic<int> adding{kThreads};
  std::vector<std::thread> reporters;
  for (int t = 0; t < kThreads; ++t) {
    reporters.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        TraceEntry e = Failure(kT0, i);
        e.target = absl::StrCat("target-of-reporting-thread-", t);  // past the short-string buffer
        trace.Add(std::move(e));
      }
      adding.fetch_sub(1);
    });
  }
  std::vector<std::string> fed;  // target/message, in the order fed
  auto flush = [&] {
    ASSERT_TRUE(trace
                    .Flush(store.get(), kT0,
                           [&](absl::Span<const TraceEntry> written) {
                             for (const TraceEntry& e : written) fed.push_back(absl::StrCat(e.target, "/", e.facts.message));
                           })
                    .ok());
  };
  for (int round = 0; adding.load() > 0; ++round) {
    flush();
    if (round % 3 == 0) {
      ASSERT_TRUE(trace.Read(store.get(), absl::InfinitePast(), absl::InfiniteFuture(), "", 1, 0).ok());
    }
  }
  for (std::thread& r : reporters) r.join();
  flush();

  const std::vector<TraceEntry> back = ReadAll(*store);
  ASSERT_EQ(back.size(), static_cast<size_t>(kThreads * kEach));
  EXPECT_EQ(trace.dropped(), 0u);
  std::vector<std::string> stored;
  std::vector<int> next_of(kThreads, 0);
  for (size_t i = 0; i < back.size(); ++i) {
    EXPECT_EQ(back[i].number, i + 1);
    stored.push_back(absl::StrCat(back[i].target, "/", back[i].facts.message));
    const int t = back[i].target.back() - '0';
    ASSERT_TRUE(t >= 0 && t < kThreads) << back[i].target;
    EXPECT_EQ(back[i].facts.message, absl::StrCat("overloaded ", next_of[t]++)) << "reporting thread " << t;
  }
  EXPECT_EQ(fed, stored);  // what the shadow policies saw: the disk's entries, once each, in its order
}

// The ticker flushes the trace while the committer writes state changes.
// Each lands whole and numbered in order; under ThreadSanitizer (scripts/
// sanitize) the two writes must also never be in RocksDB at once, where it
// would copy one thread's batch on the other's and stop the process.
TEST(OutcomeTraceTest, TraceFlushesAndStateWritesFromTwoThreadsBothLandWhole) {
  TempDir dir;
  auto store = OpenOk(dir.path());
  ASSERT_NE(store, nullptr);
  constexpr int kWrites = 400;
  std::thread committer([&] {
    for (int i = 1; i <= kWrites; ++i) {
      Change c;
      Event e;
      e.kind = EventKind::kChainSwitched;
      e.sequence = i;
      e.time = kT0;
      e.chain = "chat";
      e.from_target = "openai";
      e.to_target = "anthropic";
      c.events = {e};
      c.next_sequence = i + 1;
      ASSERT_TRUE(store->Write({&c}).ok());
    }
  });
  OutcomeTrace trace(100000, absl::Hours(24));
  for (int i = 0; i < kWrites; ++i) {
    trace.Add(Failure(kT0, 2 * i));
    trace.Add(Failure(kT0, 2 * i + 1));
    ASSERT_TRUE(trace.Flush(store.get(), kT0).ok());
  }
  committer.join();
  const std::vector<TraceEntry> back = ReadAll(*store);
  ASSERT_EQ(back.size(), 2u * kWrites);
  for (size_t i = 0; i < back.size(); ++i) {
    EXPECT_EQ(back[i].number, i + 1);
    EXPECT_EQ(back[i].facts.message, absl::StrCat("overloaded ", i));
  }
  absl::StatusOr<Events> events = store->RecentEvents(kWrites);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), static_cast<size_t>(kWrites));
  EXPECT_EQ(events->front().sequence, 1u);
  EXPECT_EQ(events->back().sequence, static_cast<uint64_t>(kWrites));
}

TEST(OutcomeTraceTest, ADataDirFromBeforeTheTraceOpensAndGainsOne) {
  TempDir dir;
  ASSERT_TRUE(OpenOk(dir.path())->Close().ok());
  {
    // Take the family away, as a data dir written by an earlier build lacks it.
    std::vector<rocksdb::ColumnFamilyDescriptor> families;
    for (const storage::FamilyInfo& f : storage::kFamilies) families.emplace_back(f.name, rocksdb::ColumnFamilyOptions());
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::DBOptions(), dir.path(), families, &handles, &db).ok());
    ASSERT_TRUE(db->DropColumnFamily(handles[static_cast<int>(storage::Family::kTrace)]).ok());
    for (auto* h : handles) ASSERT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
    ASSERT_TRUE(db->Close().ok());
    delete db;
  }
  auto store = OpenOk(dir.path());
  ASSERT_NE(store, nullptr);
  OutcomeTrace trace(10, absl::Hours(1));
  trace.Add(Failure(kT0, 0));
  ASSERT_TRUE(trace.Flush(store.get(), kT0).ok());
  EXPECT_EQ(ReadAll(*store).size(), 1u);
}

// A replay's answer is bounded whatever the window held: a week of a
// flapping chain lists its first 1000 trips and events and counts the rest.
TEST(OutcomeTraceTest, ASimulateAnswerListsAtMostAThousandTripsAndEventsAndCountsThemAll) {
  ReplaySummary run;
  for (int i = 0; i < 5000; ++i) {
    run.trips.push_back(ReplayTrip{"a", kT0 + absl::Seconds(i), absl::Seconds(i % 10)});
    Event e;
    e.kind = EventKind::kTargetState;
    e.target = "a";
    e.time = kT0 + absl::Seconds(i);
    run.events.push_back(e);
  }
  v1::SimulatedRun out;
  SimulatedRunToProto(run, Policy(), &out);
  EXPECT_EQ(out.trips_size(), 1000);
  EXPECT_EQ(out.trip_count(), 5000u);
  EXPECT_EQ(out.detection_median().seconds(), 5);
  EXPECT_EQ(out.detection_max().seconds(), 9);
  EXPECT_EQ(out.events_size(), 1000);
  EXPECT_EQ(out.events_left_off(), 4000u);
  EXPECT_LT(out.ByteSizeLong(), 200u * 1024);
}

// Each simulation holds its window's entries and a thread: two run at once,
// a third is refused while they do, and a slot is free again once one answers.
TEST(OutcomeTraceTest, AtMostTwoSimulationsRunAtOnce) {
  Engine engine{EngineOptions{}};
  ConfigChange config;
  config.targets.resize(2);
  config.targets[0].name = "openai";
  config.targets[1].name = "anthropic";
  ChainConfig chain;
  chain.name = "chat";
  chain.targets = {"openai", "anthropic"};
  config.chains = {chain};
  ASSERT_TRUE(engine.Apply(config, ApplyOptions{}, kT0).ok());
  SimulatedClock clock(kT0 + absl::Minutes(10));
  std::atomic<int> reading{0};
  absl::Notification release;
  ServiceContext ctx;
  ctx.engine = &engine;
  ctx.clock = &clock;
  // Reads of the first two simulations wait until released.
  ctx.read_trace = [&](absl::Time, absl::Time, absl::string_view, size_t, uint64_t)
      -> absl::StatusOr<std::vector<TraceEntry>> {
    if (reading.fetch_add(1) < 2) release.WaitForNotification();
    return std::vector<TraceEntry>{Failure(kT0 + absl::Minutes(1), 0)};
  };
  AdminService admin(ctx);
  v1::SimulateRequest req;
  req.set_chain("chat");
  req.mutable_policy()->mutable_trip()->set_errors(3);
  absl::Status first, second;
  std::thread one([&] {
    v1::SimulateResponse resp;
    first = admin.DoSimulate(req, &resp);
  });
  std::thread two([&] {
    v1::SimulateResponse resp;
    second = admin.DoSimulate(req, &resp);
  });
  const bool both_running = failover::testing::WaitUntil(10, [&] { return reading.load() == 2; });
  EXPECT_TRUE(both_running);
  v1::SimulateResponse refused;
  const absl::Status third = admin.DoSimulate(req, &refused);
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted) << third;
  EXPECT_THAT(third.message(), ::testing::HasSubstr("2 simulations are running already"));
  EXPECT_EQ(reading.load(), 2);  // refused before reading anything
  release.Notify();
  one.join();
  two.join();
  EXPECT_TRUE(first.ok()) << first;
  EXPECT_TRUE(second.ok()) << second;
  v1::SimulateResponse after;
  const absl::Status fourth = admin.DoSimulate(req, &after);
  ASSERT_TRUE(fourth.ok()) << fourth;
  EXPECT_EQ(after.trace_entries(), 1u);
}

}  // namespace
}  // namespace failover::api
