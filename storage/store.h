// RocksDB persistence for failoverd. Column families are declared once, in the
// Family enum and the fixed-order kFamilies registry below; call sites name a
// Family, never a raw string.
#pragma once

#include <array>
#include <atomic>
#include <mutex>
#include <shared_mutex>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/change.h"
#include "common/outcome.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
class Iterator;
}  // namespace rocksdb

namespace failover::storage {

enum class Family : int {
  kDefault = 0,  // RocksDB requires it; failoverd keeps nothing there.
  kConfig,       // targets and chains with their generation
  kPins,         // chain -> pinned target
  kManual,       // target -> manual failover reason
  kHealth,       // target -> health record
  kChainState,   // chain -> active target, state, active since
  kEvents,       // sequence -> event
  kMeta,         // schema version, next event sequence, instance id
  kTrace,        // trace number -> counted outcome (DESIGN 3.17)
  kCount,
};

struct FamilyInfo {
  Family id;
  const char* name;
};

// Order matches the enum; Open() relies on it.
inline constexpr std::array<FamilyInfo, static_cast<int>(Family::kCount)> kFamilies = {{
    {Family::kDefault, "default"},
    {Family::kConfig, "config"},
    {Family::kPins, "pins"},
    {Family::kManual, "manual"},
    {Family::kHealth, "health"},
    {Family::kChainState, "chain_state"},
    {Family::kEvents, "events"},
    {Family::kMeta, "meta"},
    {Family::kTrace, "trace"},
}};

// Families a data dir from an earlier build may lack; Open adds them.
inline constexpr std::array<Family, 1> kAddedFamilies = {Family::kTrace};

// The on-disk layout version this build writes. A newer one on disk is
// refused; so is version 1 (records in the API's format, before storage had its own).
inline constexpr int kSchemaVersion = 2;

struct StoreOptions {
  // Events kept, newest first; older ones are dropped as new ones are written.
  size_t events_keep = 10000;
  // A write is refused while the data dir's file system has less free space
  // than this (plus the write itself): RocksDB must never meet a full disk,
  // which it does not survive (it aborts on the next write). 0 = no check.
  uint64_t min_free_bytes = 64ull << 20;
  // Hand out no event sequence twice even after a machine crash lost the last
  // unsynced writes (a gap instead). Off in cluster mode, where the Change log
  // in etcd numbers events and a replica replays what it lost.
  bool reserve_sequences = true;
  // Where RocksDB's own log lines (warnings and errors) go: failoverd's log.
  // RocksDB keeps no LOG file of its own in the data dir; a file that failed
  // once to take a line (a full disk) would abort the process at its next one.
  // Null: standard error.
  std::function<void(absl::string_view line)> log;
};

// Thread-safe. Every call after Close() gets FAILED_PRECONDITION instead of
// reaching a closed database.
class Store {
 public:
  // Opens (creating if needed) the database in `data_dir`. Fails without
  // touching anything when the dir is locked by another process, holds another
  // schema, or is corrupt; the message names the dir and the problem.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& data_dir,
                                                                   StoreOptions options = {});
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& data_dir() const { return data_dir_; }
  const std::string& instance_id() const { return instance_id_; }

  // Flushes and closes the database. Safe to call twice.
  [[nodiscard]] absl::Status Close();

  // Writes `changes` in order in one write: each one's config, pins, manual
  // failovers, state records and numbered events, and the next sequence.
  // Synced when it carries an admin change (or reserves sequences); otherwise
  // in the WAL, which a process crash does not lose. Nothing is written on an error.
  [[nodiscard]] absl::Status Write(const std::vector<const Change*>& changes);

  // Everything needed to restore the engine, with the next event sequence.
  [[nodiscard]] absl::StatusOr<RestoredState> Load() const;
  // The next event sequence to hand out (1 on a fresh store).
  uint64_t next_sequence() const { return next_sequence_.load(std::memory_order_acquire); }
  // The newest `limit` events, oldest first.
  [[nodiscard]] absl::StatusOr<Events> RecentEvents(size_t limit) const;
  // Events after `sequence`, oldest first, at most `limit`; false in `complete`
  // when `sequence` is older than the oldest retained event or numbers are
  // missing among those read (the events in between are not here).
  [[nodiscard]] absl::StatusOr<Events> EventsAfter(uint64_t sequence, size_t limit, bool* complete) const;

  // The report ids the kept events' Changes were counted from, oldest first
  // (DESIGN 3.14, invariant 4): what a restart must still take as counted.
  [[nodiscard]] absl::StatusOr<std::vector<CountedReport>> CountedReports() const;

  // Starts writing the memtables out to table files, in the background, so
  // that their memory is freed: after a large change, whose records would
  // otherwise stay in memory until later writes fill the memtables.
  [[nodiscard]] absl::Status FlushMemtables();

  // Drops events beyond the newest `keep_count` and those older than `max_age`.
  [[nodiscard]] absl::Status TrimEvents(size_t keep_count, absl::Duration max_age, absl::Time now);

  // The outcome trace (DESIGN 3.17): counted outcomes numbered in the order
  // they are appended, apart from the event log. Appends are not synced (a
  // machine crash may lose the newest); the trace is a record for tuning, not
  // acknowledged state. Sets each entry's number.
  [[nodiscard]] absl::Status AppendTrace(absl::Span<TraceEntry> entries);
  // Entries counted in [from, to) and numbered after `after`, oldest first,
  // at most `limit`; only `chain`'s when it is not empty.
  [[nodiscard]] absl::StatusOr<std::vector<TraceEntry>> ReadTrace(absl::Time from, absl::Time to,
                                                                  absl::string_view chain, size_t limit,
                                                                  uint64_t after = 0) const;
  // Drops entries beyond the newest `keep_count` and those older than `max_age`.
  [[nodiscard]] absl::Status TrimTrace(size_t keep_count, absl::Duration max_age, absl::Time now);
  // Entries kept now.
  uint64_t trace_size() const { return next_trace_.load() - oldest_trace_.load(); }

  // For tests that reach under the API.
  rocksdb::DB* db() const { return db_; }
  rocksdb::ColumnFamilyHandle* handle(Family f) const { return handles_[static_cast<int>(f)]; }

 private:
  Store() = default;
  [[nodiscard]] absl::Status CheckSchema();
  [[nodiscard]] absl::Status OpenOrRefuse() const;  // shared lock held
  [[nodiscard]] absl::Status CheckFreeSpace(uint64_t write_bytes) const;
  // After a synced write: records `next_sequence` in the watermark file (see store.cc).
  void WriteWatermark(uint64_t next_sequence) const;
  [[nodiscard]] absl::StatusOr<Events> ReadEvents(rocksdb::Iterator* it, bool forward, uint64_t from,
                                                  size_t limit) const;

  std::string data_dir_;
  std::string instance_id_;
  StoreOptions options_;
  std::atomic<uint64_t> next_sequence_{1};
  // The oldest event sequence kept (0 = none yet); written under mu_ exclusively or by Write.
  std::atomic<uint64_t> oldest_event_{0};
  // Shared by every use of the database; Close takes it exclusively.
  mutable std::shared_mutex mu_;
  // One write to the database at a time: Write and TrimEvents hold it
  // throughout, the trace's writes (under trace_mu_) for the write alone.
  // RocksDB would merge concurrent writers' batches into one group, copying
  // them between threads inside its uninstrumented code: ThreadSanitizer then
  // reports a race it cannot see is synchronized, and stops failoverd. The
  // cost: a trace append waits for a state write under way, as it would
  // have inside RocksDB's group.
  std::mutex write_mu_;
  std::mutex trace_mu_;  // one AppendTrace or TrimTrace at a time; taken before write_mu_
  // Trace numbers kept are [oldest_trace_, next_trace_); written under trace_mu_.
  std::atomic<uint64_t> next_trace_{1};
  std::atomic<uint64_t> oldest_trace_{1};
  uint64_t reserved_sequence_ = 0;  // guarded by write_mu_ (and set at open)
  rocksdb::DB* db_ = nullptr;
  std::array<rocksdb::ColumnFamilyHandle*, static_cast<int>(Family::kCount)> handles_{};
};

}  // namespace failover::storage
