// The RocksDB store on a real database in a fresh temp dir per test.
#include "storage/store.h"

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "storage/encoding.h"
#include "storage/records.h"
#include "storage/state_mirror.h"
#include "tests/support/failoverd_process.h"

namespace failover::storage {
namespace {

using ::failover::testing::TempDir;
using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

std::unique_ptr<Store> OpenOk(const std::string& dir, StoreOptions options = {}) {
  auto s = Store::Open(dir, options);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(s).value() : nullptr;
}

Event SwitchEvent(uint64_t seq, absl::Time t) {
  Event e;
  e.kind = EventKind::kChainSwitched;
  e.sequence = seq;
  e.time = t;
  e.chain = "ch";
  e.from_target = "a";
  e.to_target = "b";
  e.to_chain_state = ChainState::kFallback;
  e.switch_reason = SwitchReason::kTrip;
  e.detail = "a 503";
  return e;
}

TEST(StoreTest, KeysSortInNumericOrder) {
  std::vector<uint64_t> values = {0, 1, 255, 256, 257, 65535, 65536, 1ull << 40, UINT64_MAX};
  for (size_t i = 1; i < values.size(); ++i) {
    EXPECT_LT(EncodeUint64(values[i - 1]), EncodeUint64(values[i])) << values[i];
    uint64_t back = 0;
    ASSERT_TRUE(DecodeUint64(EncodeUint64(values[i]), &back));
    EXPECT_EQ(back, values[i]);
  }
}

absl::Status WriteOne(Store& store, const Change& c) { return store.Write({&c}); }

TEST(StoreTest, EveryColumnFamilyRoundTripsAcrossAReopen) {
  TempDir dir;
  std::string instance;
  {
    auto store = OpenOk(dir.path());
    instance = store->instance_id();
    Change config;
    config.config_generation = 5;
    TargetConfig a;
    a.name = "ollama/qwen3:8b";
    a.kind = TargetKind::kLocal;
    a.warm = true;
    a.labels["base_url"] = "http://127.0.0.1:11434/v1";
    a.timeout = absl::Seconds(30);
    a.managed_by = "/etc/failoverd/a.yaml";
    TargetConfig b;
    b.name = "b";
    b.weight = 3;
    b.upstream_model = "gpt-4o";
    b.health = HealthPolicy();
    b.health->trip_errors = 4;
    b.health->backoff_factor = 5;
    b.health->rate_limit_hold = absl::Seconds(25);
    config.put_targets = {a, b};
    ChainConfig c;
    c.name = "ch";
    c.targets = {"ollama/qwen3:8b", "b"};
    c.strategy = Strategy::kRoundRobin;
    c.policy.Mutable().recovery_min_dwell = absl::Seconds(5);
    c.policy.Mutable().retry_on_statuses = {"5xx"};
    c.policy.Mutable().same_target_retries[Reason::kNetwork] = 0;
    c.policy.Mutable().trip_errors = 0;
    c.policy.Mutable().trip_failure_rate = 12.5;
    c.policy.Mutable().trip_min_calls = 40;
    c.policy.Mutable().trip_slow_call_duration = absl::Milliseconds(1500);
    c.policy.Mutable().trip_slow_call_rate = 30;
    c.policy.Mutable().latency_explore = 0;  // unset reads as 5: a stored 0 must stay 0
    c.policy.Mutable().retry_budget_ratio = 0.25;
    c.policy.Mutable().retry_budget_min_per_second = 0;
    config.put_chains = {c};
    // Two Changes in one write, as the committer groups them.
    Change admin;
    admin.pins.push_back(PinRecord{"ch", "b"});
    admin.manual.push_back(ManualFailoverRecord{"b", true, "maintenance", kT0});
    TargetStateRecord health;
    health.name = "ollama/qwen3:8b";
    health.automatic = HealthState::kDown;
    health.since = kT0;
    health.trips = 3;
    health.last_error = "server_error: 500";
    health.last_error_time = kT0;
    health.last_check = "failed in 2s: 500";
    health.held_until = kT0 + absl::Seconds(30);
    admin.targets = {health};
    admin.chains = {failover::ChainStateRecord{"ch", "b", ChainState::kFallback, kT0, kT0}};
    admin.events = {SwitchEvent(1, kT0), SwitchEvent(2, kT0)};
    admin.next_sequence = 3;
    ASSERT_TRUE(store->Write({&config, &admin}).ok());
    EXPECT_EQ(store->next_sequence(), 3u);
    ASSERT_TRUE(store->Close().ok());
  }
  auto store = OpenOk(dir.path());
  EXPECT_EQ(store->instance_id(), instance);
  EXPECT_EQ(store->next_sequence(), 3u);
  auto state = store->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->generation, 5u);
  EXPECT_EQ(state->next_sequence, 3u);
  ASSERT_EQ(state->targets.size(), 2u);
  EXPECT_EQ(state->targets[1].name, "ollama/qwen3:8b");
  EXPECT_EQ(state->targets[1].kind, TargetKind::kLocal);
  EXPECT_EQ(state->targets[1].labels.at("base_url"), "http://127.0.0.1:11434/v1");
  EXPECT_EQ(state->targets[1].timeout, absl::Seconds(30));
  EXPECT_EQ(state->targets[1].managed_by, "/etc/failoverd/a.yaml");
  // The model as declared: empty stays empty (it means "the target name").
  EXPECT_EQ(state->targets[1].upstream_model, "");
  EXPECT_EQ(state->targets[0].upstream_model, "gpt-4o");
  EXPECT_EQ(state->targets[0].weight, 3u);
  // A target's own health settings come back; a target without them has none.
  ASSERT_TRUE(state->targets[0].health.has_value());
  EXPECT_EQ(state->targets[0].health->trip_errors, 4u);
  EXPECT_EQ(state->targets[0].health->backoff_factor, 5);
  EXPECT_EQ(state->targets[0].health->rate_limit_hold, absl::Seconds(25));
  EXPECT_FALSE(state->targets[1].health.has_value());
  ASSERT_EQ(state->chains.size(), 1u);
  EXPECT_EQ(state->chains[0].strategy, Strategy::kRoundRobin);
  EXPECT_EQ(state->chains[0].policy->recovery_min_dwell, absl::Seconds(5));
  EXPECT_EQ(state->chains[0].policy->retry_on_statuses, std::vector<std::string>{"5xx"});
  EXPECT_EQ(state->chains[0].policy->same_target_retries.at(Reason::kNetwork), 0u);
  EXPECT_EQ(state->chains[0].policy->trip_errors, 0u);
  EXPECT_EQ(state->chains[0].policy->trip_failure_rate, 12.5);
  EXPECT_EQ(state->chains[0].policy->trip_min_calls, 40u);
  EXPECT_EQ(state->chains[0].policy->trip_slow_call_duration, absl::Milliseconds(1500));
  EXPECT_EQ(state->chains[0].policy->trip_slow_call_rate, 30);
  EXPECT_EQ(state->chains[0].policy->latency_explore, 0);
  EXPECT_EQ(state->chains[0].policy->retry_budget_ratio, 0.25);
  EXPECT_EQ(state->chains[0].policy->retry_budget_min_per_second, 0);
  EXPECT_EQ(state->pins.at("ch"), "b");
  EXPECT_EQ(state->manual.at("b").reason, "maintenance");
  EXPECT_EQ(state->manual.at("b").since, kT0);
  ASSERT_EQ(state->health.size(), 1u);
  EXPECT_EQ(state->health[0].automatic, HealthState::kDown);
  EXPECT_EQ(state->health[0].trips, 3u);
  EXPECT_EQ(state->health[0].last_error, "server_error: 500");
  EXPECT_EQ(state->health[0].last_check, "failed in 2s: 500");
  EXPECT_EQ(state->health[0].held_until, kT0 + absl::Seconds(30));
  ASSERT_EQ(state->chain_states.size(), 1u);
  EXPECT_EQ(state->chain_states[0].active, "b");
  EXPECT_EQ(state->chain_states[0].active_since, kT0);
  auto events = store->RecentEvents(10);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[1].sequence, 2u);
  EXPECT_EQ((*events)[1].detail, "a 503");
  EXPECT_EQ((*events)[1].switch_reason, SwitchReason::kTrip);
}

// Every stored field of a state, in storage's own encoding.
std::string Dump(const RestoredState& s) {
  std::string out = absl::StrCat("generation ", s.generation, " next_sequence ", s.next_sequence, "\n");
  for (const TargetConfig& t : s.targets) {
    TargetRecord r;
    EncodeTarget(t, &r);
    absl::StrAppend(&out, "target ", r.ShortDebugString(), "\n");
  }
  for (const ChainConfig& c : s.chains) {
    ChainRecord r;
    EncodeChain(c, &r);
    absl::StrAppend(&out, "chain ", r.ShortDebugString(), "\n");
  }
  for (const auto& [chain, target] : s.pins) absl::StrAppend(&out, "pin ", chain, "=", target, "\n");
  for (const auto& [target, m] : s.manual) {
    absl::StrAppend(&out, "manual ", target, " ", m.reason, " ", absl::FormatTime(m.since), "\n");
  }
  for (const TargetStateRecord& h : s.health) {
    HealthRecord r;
    EncodeHealth(h, &r);
    absl::StrAppend(&out, "health ", h.name, " ", r.ShortDebugString(), "\n");
  }
  for (const failover::ChainStateRecord& c : s.chain_states) {
    ChainStateRecord r;
    EncodeChainState(c, &r);
    absl::StrAppend(&out, "chain_state ", c.name, " ", r.ShortDebugString(), "\n");
  }
  return out;
}

// The change feed's mirror (what FollowState streams start from and cluster
// snapshots are made of) is what the data dir reads back after the same
// Changes, field for field: records that encode to no bytes at all included.
TEST(StoreTest, TheMirrorOfTheChangesIsWhatTheStoreReadsBack) {
  TempDir dir;
  auto store = OpenOk(dir.path());
  StateMirror mirror;
  auto write = [&](const Change& c) {
    ASSERT_TRUE(store->Write({&c}).ok());
    mirror.Apply(c);
    auto loaded = store->Load();
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(Dump(mirror.State()), Dump(*loaded));
  };
  Change config;
  config.config_generation = 2;
  TargetConfig a;
  a.name = "a";
  a.labels["region"] = "eu";
  a.health = HealthPolicy();
  a.health->trip_errors = 3;
  TargetConfig b;
  b.name = "b";
  b.enabled = false;
  ChainConfig c;
  c.name = "ch";
  c.targets = {"a", "b"};
  c.policy.Mutable().trip_failure_rate = 20;
  ChainConfig plain;  // the default policy, which the mirror leaves out of its record
  plain.name = "plain";
  plain.targets = {"b", "a"};
  // A name and a record longer than 127 bytes: the mirror packs each entry
  // behind length prefixes that take a second byte from there.
  TargetConfig long_name;
  long_name.name = std::string(200, 'n');
  long_name.labels["note"] = std::string(300, 'v');
  config.put_targets = {a, b, long_name};
  config.put_chains = {c, plain};
  ASSERT_NO_FATAL_FAILURE(write(config));

  Change state;
  state.pins.push_back(PinRecord{"ch", "b"});
  state.manual.push_back(ManualFailoverRecord{"a", true, "maintenance", kT0});
  TargetStateRecord down;
  down.name = "a";
  down.automatic = HealthState::kDown;
  down.since = kT0;
  down.trips = 2;
  down.last_error = "server_error: 503";
  down.held_until = kT0 + absl::Seconds(10);
  TargetStateRecord zero;  // every field at its proto default: encodes to no bytes
  zero.name = "b";
  zero.since = absl::UnixEpoch();
  zero.last_error_time = absl::UnixEpoch();
  zero.last_probe = absl::UnixEpoch();
  zero.held_until = absl::UnixEpoch();
  state.targets = {down, zero};
  state.chains = {failover::ChainStateRecord{"ch", "b", ChainState::kFallback, kT0, kT0}};
  state.next_sequence = 7;
  ASSERT_NO_FATAL_FAILURE(write(state));
  EXPECT_EQ(mirror.State().health.size(), 2u);

  Change undo;
  undo.pins.push_back(PinRecord{"ch", ""});
  undo.manual.push_back(ManualFailoverRecord{"a", false, "", absl::InfinitePast()});
  ASSERT_NO_FATAL_FAILURE(write(undo));

  // A config edit of objects that have state records keeps the records.
  Change edit;
  edit.config_generation = 3;
  a.labels["tier"] = "gold";
  c.policy.Mutable().trip_failure_rate = 30;
  edit.put_targets = {a};
  edit.put_chains = {c};
  ASSERT_NO_FATAL_FAILURE(write(edit));
  EXPECT_EQ(mirror.State().health.size(), 2u);
  EXPECT_EQ(mirror.State().chain_states.size(), 1u);

  Change deletion;
  deletion.config_generation = 4;
  deletion.deleted_targets = {"a"};
  deletion.deleted_chains = {"ch"};
  ASSERT_NO_FATAL_FAILURE(write(deletion));
  EXPECT_EQ(mirror.State().targets.size(), 2u);
  EXPECT_TRUE(mirror.State().chain_states.empty());
}

TEST(StoreTest, DeletingAChainOrTargetRemovesItsRuntimeRecords) {
  TempDir dir;
  auto store = OpenOk(dir.path());
  Change pin;
  pin.pins.push_back(PinRecord{"ch", "b"});
  ASSERT_TRUE(WriteOne(*store, pin).ok());
  Change del;
  del.config_generation = 2;
  del.deleted_chains = {"ch"};
  ASSERT_TRUE(WriteOne(*store, del).ok());
  auto state = store->Load();
  ASSERT_TRUE(state.ok());
  EXPECT_TRUE(state->pins.empty());
  // Unpin deletes the pin.
  ASSERT_TRUE(WriteOne(*store, pin).ok());
  EXPECT_EQ(store->Load()->pins.size(), 1u);
  pin.pins[0].target.clear();
  ASSERT_TRUE(WriteOne(*store, pin).ok());
  EXPECT_TRUE(store->Load()->pins.empty());
}

TEST(StoreTest, EventsAreTrimmedByCountAndByAge) {
  TempDir dir;
  auto store = OpenOk(dir.path());
  Change change;
  for (uint64_t i = 1; i <= 100; ++i) {
    change.events.push_back(SwitchEvent(i, kT0 + absl::Minutes(static_cast<int64_t>(i))));
  }
  change.next_sequence = 101;
  ASSERT_TRUE(WriteOne(*store, change).ok());
  ASSERT_TRUE(store->TrimEvents(30, absl::Hours(1000), kT0 + absl::Minutes(100)).ok());
  auto left = store->RecentEvents(1000);
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 30u);
  EXPECT_EQ(left->front().sequence, 71u);
  // Age: keep only events newer than 10 minutes.
  ASSERT_TRUE(store->TrimEvents(1000, absl::Minutes(10), kT0 + absl::Minutes(100)).ok());
  left = store->RecentEvents(1000);
  ASSERT_EQ(left->size(), 11u);  // minutes 90..100
  EXPECT_EQ(left->front().sequence, 90u);
  bool complete = true;
  auto after = store->EventsAfter(50, 100, &complete);
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(complete);  // 51..89 are gone
  after = store->EventsAfter(95, 100, &complete);
  EXPECT_TRUE(complete);
  EXPECT_EQ(after->size(), 5u);
}

TEST(StoreTest, WritesPastTheKeptCountDropTheOldestEventsAtOnce) {
  TempDir dir;
  StoreOptions options;
  options.events_keep = 10;
  auto store = OpenOk(dir.path(), options);
  ASSERT_NE(store, nullptr);
  for (uint64_t i = 1; i <= 25; ++i) {
    Change c;
    c.events = {SwitchEvent(i, kT0)};
    c.next_sequence = i + 1;
    ASSERT_TRUE(WriteOne(*store, c).ok());
  }
  auto left = store->RecentEvents(1000);
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 10u);
  EXPECT_EQ(left->front().sequence, 16u);
  bool complete = true;
  ASSERT_TRUE(store->EventsAfter(3, 100, &complete).ok());
  EXPECT_FALSE(complete);
}

TEST(StoreTest, TheReportIdsOfAChangeLastAsLongAsItsEvents) {
  TempDir dir;
  StoreOptions options;
  options.events_keep = 10;
  {
    auto store = OpenOk(dir.path(), options);
    ASSERT_NE(store, nullptr);
    for (uint64_t i = 1; i <= 15; ++i) {
      Change c;
      c.events = {SwitchEvent(i, kT0)};
      c.next_sequence = i + 1;
      c.counted_reports = {{"gateway", i}};
      if (i == 15) c.counted_reports.push_back({"", 9});  // not a report's id: not read back
      ASSERT_TRUE(WriteOne(*store, c).ok());
    }
    Change quiet;  // no events: nothing to keep the ids with
    quiet.next_sequence = 16;
    quiet.counted_reports = {{"gateway", 99}};
    ASSERT_TRUE(WriteOne(*store, quiet).ok());
    ASSERT_TRUE(store->Close().ok());
  }
  auto reopened = OpenOk(dir.path(), options);
  ASSERT_NE(reopened, nullptr);
  absl::StatusOr<std::vector<CountedReport>> counted = reopened->CountedReports();
  ASSERT_TRUE(counted.ok()) << counted.status();
  std::vector<uint64_t> sequences;
  for (const CountedReport& r : *counted) {
    EXPECT_EQ(r.sender, "gateway");
    sequences.push_back(r.sequence);
  }
  // Events 6..15 are kept, and the ids with them.
  EXPECT_EQ(sequences, (std::vector<uint64_t>{6, 7, 8, 9, 10, 11, 12, 13, 14, 15}));
}

TEST(StoreTest, EveryCallAfterCloseIsRefusedNotACrash) {
  TempDir dir;
  auto store = OpenOk(dir.path());
  ASSERT_TRUE(store->Close().ok());
  Change c;
  c.events = {SwitchEvent(1, kT0)};
  EXPECT_EQ(WriteOne(*store, c).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->Load().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->RecentEvents(1).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->TrimEvents(1, absl::Hours(1), kT0).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->FlushMemtables().code(), absl::StatusCode::kFailedPrecondition);
}

// After a large change the daemon flushes the memtables so that the memory
// holding its records is given back (restore_benchmark's live figure).
TEST(StoreTest, FlushingTheMemtablesFreesTheirMemoryAndKeepsEveryRecord) {
  TempDir dir;
  auto store = OpenOk(dir.path());
  ASSERT_NE(store, nullptr);
  Change change;
  for (uint64_t i = 1; i <= 2000; ++i) change.events.push_back(SwitchEvent(i, kT0));
  change.next_sequence = 2001;
  ASSERT_TRUE(WriteOne(*store, change).ok());
  const auto in_memtables = [&store] {
    uint64_t bytes = 0;
    EXPECT_TRUE(store->db()->GetAggregatedIntProperty("rocksdb.cur-size-all-mem-tables", &bytes));
    return bytes;
  };
  const uint64_t before = in_memtables();
  ASSERT_GT(before, 100u << 10);  // 2,000 events' records
  ASSERT_TRUE(store->FlushMemtables().ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(20);  // the flush runs in the background
  while (in_memtables() > before / 4 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_LE(in_memtables(), before / 4);
  absl::StatusOr<Events> kept = store->RecentEvents(5000);
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_EQ(kept->size(), 2000u);
  EXPECT_EQ(kept->back().sequence, 2000u);
}

TEST(StoreTest, ADataDirOfTheEarlierSchemaIsRefusedNamingWhatToDo) {
  TempDir dir;
  {
    auto store = OpenOk(dir.path());
    ASSERT_TRUE(store->db()->Put(rocksdb::WriteOptions(), store->handle(Family::kMeta), "schema_version", "1").ok());
    ASSERT_TRUE(store->Close().ok());
  }
  auto refused = Store::Open(dir.path());
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("earlier failoverd"));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("--data-dir"));
}

TEST(StoreTest, ANewerSchemaIsRefusedAndNothingIsOverwritten) {
  TempDir dir;
  {
    auto store = OpenOk(dir.path());
    ASSERT_TRUE(store->db()->Put(rocksdb::WriteOptions(), store->handle(Family::kMeta), "schema_version", "99").ok());
    ASSERT_TRUE(store->Close().ok());
  }
  auto refused = Store::Open(dir.path());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr(dir.path()));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("newer failoverd"));
  // Still 99 on disk.
  rocksdb::DB* raw = nullptr;
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
  for (const auto& f : kFamilies) cfs.emplace_back(f.name, rocksdb::ColumnFamilyOptions());
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  ASSERT_TRUE(rocksdb::DB::OpenForReadOnly(rocksdb::DBOptions(), dir.path(), cfs, &handles, &raw).ok());
  std::string v;
  ASSERT_TRUE(raw->Get(rocksdb::ReadOptions(), handles[static_cast<int>(Family::kMeta)], "schema_version", &v).ok());
  EXPECT_EQ(v, "99");
  for (auto* h : handles) raw->DestroyColumnFamilyHandle(h);
  delete raw;
}

TEST(StoreTest, ALockedDataDirIsRefused) {
  TempDir dir;
  auto first = OpenOk(dir.path());
  auto second = Store::Open(dir.path());
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(std::string(second.status().message()), HasSubstr(dir.path()));
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("in use"));
}

TEST(StoreTest, ACorruptDatabaseIsRefusedNamingTheDir) {
  TempDir dir;
  {
    auto store = OpenOk(dir.path());
    ASSERT_TRUE(store->Close().ok());
  }
  // Overwrite every MANIFEST with garbage.
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    if (entry.path().filename().string().rfind("MANIFEST", 0) == 0) {
      std::ofstream(entry.path(), std::ios::trunc) << "this is not a manifest";
    }
  }
  auto refused = Store::Open(dir.path());
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr(dir.path()));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("corrupt"));
}

}  // namespace
}  // namespace failover::storage

namespace failover::storage {
namespace {

std::vector<std::string> Listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind("LOG", 0) != 0) {  // RocksDB's info log may be rotated
      names.push_back(entry.path().filename().string() + ":" + std::to_string(entry.file_size()));
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(StoreTest, AMissingCurrentFileIsRefusedEveryTimeAndNothingIsCreated) {
  TempDir dir;
  {
    auto store = OpenOk(dir.path());
    Change c;
    c.pins.push_back(PinRecord{"ch", "b"});
    ASSERT_TRUE(store->Write({&c}).ok());
    ASSERT_TRUE(store->Close().ok());
  }
  std::filesystem::remove(dir.path() + "/CURRENT");
  const std::vector<std::string> before = Listing(dir.path());
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto refused = Store::Open(dir.path());
    ASSERT_FALSE(refused.ok()) << "attempt " << attempt;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("no CURRENT file"));
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr(dir.path()));
  }
  EXPECT_EQ(Listing(dir.path()), before);
}

TEST(StoreTest, ADamagedRecordInTheMiddleOfTheWalIsRefusedNotRolledBack) {
  TempDir dir;
  {
    auto store = OpenOk(dir.path());
    for (int i = 1; i <= 50; ++i) {
      Change c;
      c.config_generation = static_cast<uint64_t>(i);
      c.pins.push_back(PinRecord{"ch" + std::to_string(i), "b"});
      ASSERT_TRUE(store->Write({&c}).ok());
    }
    ASSERT_TRUE(store->Close().ok());
  }
  std::string wal;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    if (entry.path().extension() == ".log" && entry.file_size() > 0) wal = entry.path().string();
  }
  ASSERT_FALSE(wal.empty()) << "the writes should still be in the WAL";
  {
    std::fstream f(wal, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(wal) / 2));
    f.write("garbage!", 8);
  }
  const std::vector<std::string> before = Listing(dir.path());
  auto refused = Store::Open(dir.path());
  ASSERT_FALSE(refused.ok()) << "a damaged WAL must not open as an older state";
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr(dir.path()));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("corrupt"));
  EXPECT_EQ(Listing(dir.path()), before);
}

// Synced writes that a later start cannot find (the newest WAL cut short,
// which RocksDB reads as a torn tail and drops) refuse the start: serving the
// older state would silently roll back what was acknowledged.
TEST(StoreTest, AWalCutShortIsRefusedNotRolledBack) {
  TempDir dir;
  {
    auto store = OpenOk(dir.path());
    for (int i = 1; i <= 50; ++i) {
      Change c;
      c.config_generation = static_cast<uint64_t>(i);
      c.pins.push_back(PinRecord{"ch" + std::to_string(i), "b"});
      Event e;
      e.kind = EventKind::kChainSwitched;
      e.sequence = static_cast<uint64_t>(i);
      e.chain = "ch" + std::to_string(i);
      c.events.push_back(e);
      c.next_sequence = static_cast<uint64_t>(i) + 1;
      ASSERT_TRUE(store->Write({&c}).ok());
    }
    ASSERT_TRUE(store->Close().ok());
  }
  std::string wal;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    if (entry.path().extension() == ".log" && entry.file_size() > 0) wal = entry.path().string();
  }
  ASSERT_FALSE(wal.empty()) << "the writes should still be in the WAL";
  std::filesystem::resize_file(wal, std::filesystem::file_size(wal) * 6 / 10);
  const std::vector<std::string> before = Listing(dir.path());
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto refused = Store::Open(dir.path());
    ASSERT_FALSE(refused.ok()) << "a WAL cut short must not open as an older state";
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("lost writes it had acknowledged"));
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("events up to 50 were saved"));
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr(dir.path()));
  }
  EXPECT_EQ(Listing(dir.path()), before);
}

// A table file whose blocks do not match their checksums is refused before
// anything is written: no WAL replayed into new tables, no new manifest.
TEST(StoreTest, ACorruptTableFileIsRefusedAndTheDirIsLeftAsItWas) {
  TempDir dir;
  for (int round = 0; round < 2; ++round) {  // the second open turns the first round's WAL into a table file
    auto store = OpenOk(dir.path());
    for (int i = 1; i <= 200; ++i) {
      Change c;
      c.config_generation = static_cast<uint64_t>(round * 1000 + i);
      c.pins.push_back(PinRecord{"chain-with-a-longer-name-" + std::to_string(round * 1000 + i), "b"});
      ASSERT_TRUE(store->Write({&c}).ok());
    }
    ASSERT_TRUE(store->Close().ok());
  }
  std::string table;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    if (entry.path().extension() == ".sst" && entry.file_size() > 1024) table = entry.path().string();
  }
  ASSERT_FALSE(table.empty()) << "a table file should have been written";
  {
    std::fstream f(table, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20);  // inside the first data block, which opening does not read
    f.write("garbage!garbage!garbage!", 24);
  }
  const std::vector<std::string> before = Listing(dir.path());
  auto refused = Store::Open(dir.path());
  ASSERT_FALSE(refused.ok()) << "a corrupt table file must refuse the start";
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr(dir.path()));
  EXPECT_EQ(Listing(dir.path()), before) << "a refused start changed the data dir";
}

}  // namespace
}  // namespace failover::storage
