#include "storage/store.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rocksdb/cache.h"
#include "rocksdb/table.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"
#include "common/status_macros.h"
#include "storage/encoding.h"
#include "storage/records.h"

namespace failover::storage {
namespace {

constexpr char kSchemaKey[] = "schema_version";
constexpr char kInstanceKey[] = "instance_id";

absl::Status FromRocks(const rocksdb::Status& s, const std::string& data_dir) {
  if (s.ok()) return absl::OkStatus();
  const std::string what = s.ToString();
  if (s.IsIOError() && what.find("lock") != std::string::npos) {
    return absl::FailedPreconditionError(absl::StrCat(
        "data dir ", data_dir, " is in use by another failoverd (RocksDB lock held): ", what));
  }
  if (s.IsCorruption()) {
    return absl::DataLossError(absl::StrCat("data dir ", data_dir, " holds a corrupt database: ", what));
  }
  return absl::InternalError(absl::StrCat("data dir ", data_dir, ": ", what));
}

std::string NewInstanceId() {
  std::random_device rd;
  return absl::StrFormat("%08x%08x", rd(), rd());
}

// RocksDB's log, routed (StoreOptions::log): warnings and errors only, one
// line each; nothing is written to the data dir, so no write of it can fail.
class RoutedLogger final : public rocksdb::Logger {
 public:
  explicit RoutedLogger(std::function<void(absl::string_view)> sink)
      : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL), sink_(std::move(sink)) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override { Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap); }
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel() || level == rocksdb::InfoLogLevel::HEADER_LEVEL) return;
    char line[1024];
    const int n = vsnprintf(line, sizeof(line), format, ap);
    if (n < 0) return;
    const absl::string_view text(line, std::min<size_t>(static_cast<size_t>(n), sizeof(line) - 1));
    if (sink_) {
      sink_(text);
    } else {
      fprintf(stderr, "rocksdb: %.*s\n", static_cast<int>(text.size()), text.data());
    }
  }

 private:
  std::function<void(absl::string_view)> sink_;
};

constexpr char kNextSequenceKey[] = "next_sequence";

// The next event sequence as of the last synced write, kept in a small file
// beside the database. A synced write was acknowledged; if the database
// opens without it (a write-ahead log cut short reads as a torn tail, which
// RocksDB drops without a word), the start is refused instead of serving an
// older state as if it were current.
constexpr char kWatermarkFile[] = "FAILOVERD-SYNCED";

// 0 when there is no watermark (a data dir from before it, or a new one).
absl::StatusOr<uint64_t> ReadWatermark(const std::string& data_dir) {
  std::ifstream in(std::filesystem::path(data_dir) / kWatermarkFile);
  if (!in) return 0;
  std::string text;
  std::getline(in, text);
  uint64_t n = 0;
  if (!absl::SimpleAtoi(text, &n)) {
    return absl::DataLossError(absl::StrCat("data dir ", data_dir, ": ", kWatermarkFile, " is unreadable (\"",
                                            text.substr(0, 40), "\"); nothing was changed"));
  }
  return n;
}

// Opens the database read-only and reads it whole: every table's checksums,
// and the next event sequence against the watermark. Writes nothing, so a
// refused start leaves the dir exactly as it was.
absl::Status CheckReadOnly(const rocksdb::DBOptions& options, const std::string& data_dir,
                           const std::vector<rocksdb::ColumnFamilyDescriptor>& descriptors) {
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  rocksdb::Status read = rocksdb::DB::OpenForReadOnly(options, data_dir, descriptors, &handles, &db);
  absl::Status sound = FromRocks(read, data_dir);
  if (read.ok()) {
    rocksdb::Status verified = db->VerifyChecksum();
    if (!verified.ok()) sound = FromRocks(verified, data_dir);
    rocksdb::ColumnFamilyHandle* meta = handles[static_cast<int>(Family::kMeta)];
    std::string value;
    uint64_t stored = 0;
    const rocksdb::Status s = db->Get(rocksdb::ReadOptions(), meta, kNextSequenceKey, &value);
    if (s.ok()) DecodeUint64(value, &stored);
    const absl::StatusOr<uint64_t> watermark = ReadWatermark(data_dir);
    if (!watermark.ok()) {
      sound.Update(watermark.status());
    } else if (sound.ok() && stored < *watermark) {
      sound = absl::DataLossError(absl::StrCat(
          "data dir ", data_dir, " lost writes it had acknowledged: it holds events up to ",
          stored == 0 ? 0 : stored - 1, " but events up to ", *watermark - 1,
          " were saved (a write-ahead log cut short or damaged?); refusing to serve an older state. Nothing was "
          "changed (see \"Recovering a data dir\" in the README)"));
    }
    for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
    (void)db->Close();
    delete db;
  }
  return sound;
}

}  // namespace

void Store::WriteWatermark(uint64_t next_sequence) const {
  // Best effort: a watermark that could not be written is an older one, which
  // only weakens the check at the next start, never refuses a sound dir.
  const std::string path = (std::filesystem::path(data_dir_) / kWatermarkFile).string();
  const std::string tmp = path + ".tmp";
  const std::string text = absl::StrCat(next_sequence, "\n");
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!written || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return;
  }
  const int dir = ::open(data_dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    (void)::fsync(dir);
    ::close(dir);
  }
}

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& data_dir, StoreOptions store_options) {
  std::error_code ec;
  std::filesystem::create_directories(data_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("data dir ", data_dir, " cannot be created: ", ec.message()));
  }
  // A dir that holds files but no CURRENT is a damaged database (or not one):
  // RocksDB would create a fresh, empty one over it.
  const bool exists = std::filesystem::exists(std::filesystem::path(data_dir) / "CURRENT", ec);
  if (!exists && !std::filesystem::is_empty(data_dir, ec)) {
    return absl::DataLossError(absl::StrCat(
        "data dir ", data_dir, " holds files but no CURRENT file: the database is damaged, or the dir is not "
        "failoverd's; nothing was changed (see \"Recovering a data dir\" in the README)"));
  }
  rocksdb::DBOptions options;
  options.create_if_missing = !exists;
  options.create_missing_column_families = !exists;
  options.paranoid_checks = true;
  options.info_log = std::make_shared<RoutedLogger>(store_options.log);
  // A damaged record in the middle of the WAL stops the start instead of
  // silently dropping everything after it; a torn last record (a write cut by
  // a power loss, never acknowledged) is dropped.
  options.wal_recovery_mode = rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  // failoverd's data is small and is read whole at start: small memtables and
  // one small block cache shared by every family keep RocksDB's share of the
  // RSS low (the defaults are 64 MiB memtables and a 32 MiB cache per family).
  options.db_write_buffer_size = 8 << 20;
  rocksdb::ColumnFamilyOptions family_options;
  family_options.write_buffer_size = 2 << 20;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(8 << 20);
  family_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const FamilyInfo& f : kFamilies) {
    descriptors.emplace_back(f.name, family_options);
  }
  std::unique_ptr<Store> store(new Store());
  store->data_dir_ = data_dir;
  store->options_ = store_options;
  // Opening writes (a new manifest, the options file); RocksDB aborts when
  // the disk is full under it, so refuse first, saying why.
  RETURN_IF_ERROR(store->CheckFreeSpace(0));
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  if (exists) {
    // A family added since the dir was written (kAddedFamilies) is created;
    // any other missing one is refused by Open below, as before.
    std::vector<std::string> present;
    RETURN_IF_ERROR(FromRocks(rocksdb::DB::ListColumnFamilies(options, data_dir, &present), data_dir));
    std::vector<rocksdb::ColumnFamilyDescriptor> existing;
    for (const rocksdb::ColumnFamilyDescriptor& d : descriptors) {
      const bool added = std::any_of(kAddedFamilies.begin(), kAddedFamilies.end(),
                                     [&](Family f) { return d.name == kFamilies[static_cast<int>(f)].name; });
      const bool there = std::find(present.begin(), present.end(), d.name) != present.end();
      if (there || !added) existing.push_back(d);
      if (!there && added) options.create_missing_column_families = true;
    }
    // Read it whole without writing anything: a database that does not read
    // back whole, or lost acknowledged writes, is refused untouched.
    RETURN_IF_ERROR(CheckReadOnly(options, data_dir, existing));
  }
  rocksdb::Status s = rocksdb::DB::Open(options, data_dir, descriptors, &handles, &store->db_);
  RETURN_IF_ERROR(FromRocks(s, data_dir));
  for (size_t i = 0; i < handles.size(); ++i) store->handles_[i] = handles[i];
  RETURN_IF_ERROR(store->CheckSchema());
  return store;
}

namespace {

constexpr char kGenerationKey[] = "generation";
// Cluster mode: the last entry of the replicated Change log written here.
constexpr char kLogIndexKey[] = "cluster_log_index";
// Sequences up to here may have been streamed: a start continues after it.
constexpr char kReservedSequenceKey[] = "sequence_reserved";
// Sequences reserved ahead by one synced write.
constexpr uint64_t kSequenceBlock = 4096;
// Config keys: a kind prefix, then the object name.
constexpr char kTargetPrefix[] = "t/";
constexpr char kChainPrefix[] = "c/";

absl::Status Corrupt(const std::string& data_dir, absl::string_view what, absl::string_view key) {
  return absl::DataLossError(absl::StrCat("data dir ", data_dir, ": unreadable ", what, " record \"", key, "\""));
}

}  // namespace

absl::Status Store::CheckSchema() {
  rocksdb::ColumnFamilyHandle* meta = handle(Family::kMeta);
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), meta, kSchemaKey, &value);
  rocksdb::WriteOptions sync;
  sync.sync = true;
  if (s.IsNotFound()) {
    instance_id_ = NewInstanceId();
    rocksdb::WriteBatch batch;
    batch.Put(meta, kSchemaKey, std::to_string(kSchemaVersion));
    batch.Put(meta, kInstanceKey, instance_id_);
    return FromRocks(db_->Write(sync, &batch), data_dir_);
  }
  RETURN_IF_ERROR(FromRocks(s, data_dir_));
  int version = 0;
  if (!absl::SimpleAtoi(value, &version)) {
    return absl::DataLossError(absl::StrCat("data dir ", data_dir_, ": unreadable schema version \"", value, "\""));
  }
  if (version > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "data dir ", data_dir_, " was written by a newer failoverd (schema version ", version,
        ", this build understands up to ", kSchemaVersion, "); refusing to open it"));
  }
  if (version < kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "data dir ", data_dir_, " was written by an earlier failoverd (schema version ", version,
        "), whose records this build does not read; start on a new --data-dir (config files apply again; "
        "pins and manual failovers must be set again)"));
  }
  s = db_->Get(rocksdb::ReadOptions(), meta, kInstanceKey, &instance_id_);
  RETURN_IF_ERROR(FromRocks(s, data_dir_));
  std::string next;
  s = db_->Get(rocksdb::ReadOptions(), meta, kNextSequenceKey, &next);
  if (!s.IsNotFound()) {
    RETURN_IF_ERROR(FromRocks(s, data_dir_));
    uint64_t n = 0;
    if (!DecodeUint64(next, &n)) {
      return absl::DataLossError(absl::StrCat("data dir ", data_dir_, ": unreadable next event sequence"));
    }
    next_sequence_.store(n);
  }
  // State changes are written without a sync, so a machine crash can lose the
  // last ones after watchers saw them; their numbers were reserved with a sync
  // and are not handed out again (the stream has a gap instead).
  std::string reserved;
  s = db_->Get(rocksdb::ReadOptions(), meta, kReservedSequenceKey, &reserved);
  if (!s.IsNotFound()) {
    RETURN_IF_ERROR(FromRocks(s, data_dir_));
    uint64_t n = 0;
    if (!DecodeUint64(reserved, &n)) {
      return absl::DataLossError(absl::StrCat("data dir ", data_dir_, ": unreadable reserved event sequence"));
    }
    reserved_sequence_ = n;
    if (options_.reserve_sequences && n > next_sequence_.load()) next_sequence_.store(n);
  }
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), handle(Family::kEvents)));
  it->SeekToFirst();
  uint64_t oldest = 0;
  if (it->Valid() && DecodeUint64(it->key().ToStringView(), &oldest)) oldest_event_.store(oldest);
  RETURN_IF_ERROR(FromRocks(it->status(), data_dir_));
  // The trace continues after its newest entry.
  it.reset(db_->NewIterator(rocksdb::ReadOptions(), handle(Family::kTrace)));
  uint64_t first = 0;
  uint64_t last = 0;
  it->SeekToFirst();
  if (it->Valid() && DecodeUint64(it->key().ToStringView(), &first)) {
    it->SeekToLast();
    if (!it->Valid() || !DecodeUint64(it->key().ToStringView(), &last) || last < first) {
      return Corrupt(data_dir_, "trace", it->Valid() ? it->key().ToString() : "(last)");
    }
    oldest_trace_.store(first);
    next_trace_.store(last + 1);
  }
  return FromRocks(it->status(), data_dir_);
}

absl::Status Store::Close() {
  std::unique_lock<std::shared_mutex> lock(mu_);
  if (db_ == nullptr) return absl::OkStatus();
  // A clean stop releases the reserve: the next start continues without a gap.
  rocksdb::WriteBatch release;
  release.Put(handle(Family::kMeta), kReservedSequenceKey, EncodeUint64(next_sequence_.load()));
  rocksdb::WriteOptions sync;
  sync.sync = true;
  if (CheckFreeSpace(0).ok()) (void)db_->Write(sync, &release);
  for (auto*& h : handles_) {
    if (h != nullptr) db_->DestroyColumnFamilyHandle(h);
    h = nullptr;
  }
  rocksdb::Status s = db_->Close();
  delete db_;
  db_ = nullptr;
  return FromRocks(s, data_dir_);
}

Store::~Store() { (void)Close(); }

absl::Status Store::OpenOrRefuse() const {
  if (db_ != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("data dir ", data_dir_, " is closed"));
}

absl::Status Store::CheckFreeSpace(uint64_t write_bytes) const {
  if (options_.min_free_bytes == 0) return absl::OkStatus();
  struct statvfs fs;
  if (statvfs(data_dir_.c_str(), &fs) != 0) return absl::OkStatus();  // cannot tell: let RocksDB try
  const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  // The write goes to the WAL now and to a table file at the next flush.
  if (free_bytes >= options_.min_free_bytes + 2 * write_bytes) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("data dir ", data_dir_, " has ", free_bytes >> 20,
                                             " MiB free, less than the ", options_.min_free_bytes >> 20,
                                             " MiB failoverd keeps in reserve (--min-free-mb); free some space"));
}

absl::Status Store::Write(const std::vector<const Change*>& changes) {
  std::shared_lock<std::shared_mutex> open(mu_);
  RETURN_IF_ERROR(OpenOrRefuse());
  std::lock_guard<std::mutex> one_writer(write_mu_);
  rocksdb::WriteBatch batch;
  rocksdb::ColumnFamilyHandle* config = handle(Family::kConfig);
  uint64_t next = next_sequence_.load();
  uint64_t first_event = 0;
  uint64_t log_index = 0;
  for (const Change* c : changes) {
    log_index = std::max(log_index, c->log_index);
    if (c->config_generation != 0) {
      for (const TargetConfig& t : c->put_targets) {
        TargetRecord r;
        EncodeTarget(t, &r);
        batch.Put(config, absl::StrCat(kTargetPrefix, t.name), r.SerializeAsString());
      }
      for (const ChainConfig& ch : c->put_chains) {
        ChainRecord r;
        EncodeChain(ch, &r);
        batch.Put(config, absl::StrCat(kChainPrefix, ch.name), r.SerializeAsString());
      }
      for (const std::string& name : c->deleted_targets) {
        batch.Delete(config, absl::StrCat(kTargetPrefix, name));
        batch.Delete(handle(Family::kHealth), name);
        batch.Delete(handle(Family::kManual), name);
      }
      for (const std::string& name : c->deleted_chains) {
        batch.Delete(config, absl::StrCat(kChainPrefix, name));
        batch.Delete(handle(Family::kChainState), name);
        batch.Delete(handle(Family::kPins), name);
      }
      batch.Put(config, kGenerationKey, EncodeUint64(c->config_generation));
    }
    for (const PinRecord& p : c->pins) {
      if (p.target.empty()) {
        batch.Delete(handle(Family::kPins), p.chain);
      } else {
        batch.Put(handle(Family::kPins), p.chain, p.target);
      }
    }
    for (const ManualFailoverRecord& m : c->manual) {
      if (m.active) {
        ManualRecord r;
        r.set_reason(m.reason);
        r.set_since_unix_nanos(TimeToNanos(m.since));
        batch.Put(handle(Family::kManual), m.target, r.SerializeAsString());
      } else {
        batch.Delete(handle(Family::kManual), m.target);
      }
    }
    for (const TargetStateRecord& t : c->targets) {
      HealthRecord r;
      EncodeHealth(t, &r);
      batch.Put(handle(Family::kHealth), t.name, r.SerializeAsString());
    }
    for (const failover::ChainStateRecord& ch : c->chains) {
      storage::ChainStateRecord r;
      EncodeChainState(ch, &r);
      batch.Put(handle(Family::kChainState), ch.name, r.SerializeAsString());
    }
    for (const Event& e : c->events) {
      EventRecord r;
      EncodeEvent(e, &r);
      if (&e == &c->events.front()) {
        for (const CountedReport& counted : c->counted_reports) {
          CountedReportRecord* id = r.add_counted_reports();
          id->set_sender(counted.sender);
          id->set_sequence(counted.sequence);
        }
      }
      batch.Put(handle(Family::kEvents), EncodeUint64(e.sequence), r.SerializeAsString());
      if (first_event == 0) first_event = e.sequence;
    }
    next = std::max(next, c->next_sequence);
  }
  batch.Put(handle(Family::kMeta), kNextSequenceKey, EncodeUint64(next));
  if (log_index != 0) batch.Put(handle(Family::kMeta), kLogIndexKey, EncodeUint64(log_index));
  // Retention by count rides along with the write that passes it.
  uint64_t oldest = oldest_event_.load();
  if (oldest == 0) oldest = first_event;
  const uint64_t keep_from = next > options_.events_keep ? next - options_.events_keep : 0;
  if (oldest != 0 && oldest < keep_from) {
    batch.DeleteRange(handle(Family::kEvents), EncodeUint64(oldest), EncodeUint64(keep_from));
    oldest = keep_from;
  }
  // Admin changes are synced: they are few, and an operator was told they
  // took. State changes (trips, recoveries, switches) only go to the WAL: that
  // survives a crash of the process; a machine crash can lose the last ones,
  // and failoverd then judges those targets afresh.
  bool admin = false;
  for (const Change* c : changes) admin = admin || c->config_generation != 0 || !c->pins.empty() || !c->manual.empty();
  const bool reserve = options_.reserve_sequences && next > reserved_sequence_;
  if (reserve) batch.Put(handle(Family::kMeta), kReservedSequenceKey, EncodeUint64(next + kSequenceBlock));
  RETURN_IF_ERROR(CheckFreeSpace(batch.GetDataSize()));
  rocksdb::WriteOptions sync;
  sync.sync = admin || reserve;
  rocksdb::Status s = db_->Write(sync, &batch);
  if (!s.ok() && s.IsIOError()) {
    // A background error (a flush that failed, say) stops every write until
    // RocksDB is told to resume; the caller retries after this.
    (void)db_->Resume();
  }
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot write to data dir ", data_dir_, ": ", s.ToString()));
  }
  next_sequence_.store(next, std::memory_order_release);
  oldest_event_.store(oldest);
  if (reserve) reserved_sequence_ = next + kSequenceBlock;
  if (sync.sync) WriteWatermark(next);
  return absl::OkStatus();
}

absl::StatusOr<RestoredState> Store::Load() const {
  std::shared_lock<std::shared_mutex> open(mu_);
  RETURN_IF_ERROR(OpenOrRefuse());
  RestoredState state;
  state.next_sequence = next_sequence_.load();
  {
    std::string value;
    const rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), handle(Family::kMeta), kLogIndexKey, &value);
    if (!s.IsNotFound()) {
      RETURN_IF_ERROR(FromRocks(s, data_dir_));
      if (!DecodeUint64(value, &state.log_index)) return Corrupt(data_dir_, "meta", kLogIndexKey);
    }
  }
  // Restore reads every record once: keeping those blocks cached would only hold memory.
  rocksdb::ReadOptions scan;
  scan.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(scan, handle(Family::kConfig)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const std::string key = it->key().ToString();
    const rocksdb::Slice value = it->value();
    if (key == kGenerationKey) {
      if (!DecodeUint64(value.ToStringView(), &state.generation)) return Corrupt(data_dir_, "config", key);
    } else if (absl::StartsWith(key, kTargetPrefix)) {
      TargetRecord r;
      TargetConfig t;
      if (!r.ParseFromArray(value.data(), static_cast<int>(value.size())) || !DecodeTarget(r, &t)) {
        return Corrupt(data_dir_, "target", key);
      }
      state.targets.push_back(std::move(t));
    } else if (absl::StartsWith(key, kChainPrefix)) {
      ChainRecord r;
      ChainConfig c;
      if (!r.ParseFromArray(value.data(), static_cast<int>(value.size())) || !DecodeChain(r, &c)) {
        return Corrupt(data_dir_, "chain", key);
      }
      state.chains.push_back(std::move(c));
    }
  }
  RETURN_IF_ERROR(FromRocks(it->status(), data_dir_));

  it.reset(db_->NewIterator(scan, handle(Family::kPins)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) state.pins[it->key().ToString()] = it->value().ToString();
  RETURN_IF_ERROR(FromRocks(it->status(), data_dir_));

  it.reset(db_->NewIterator(scan, handle(Family::kManual)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    ManualRecord r;
    if (!r.ParseFromString(it->value().ToString())) return Corrupt(data_dir_, "manual", it->key().ToString());
    state.manual[it->key().ToString()] = RestoredManual{r.reason(), TimeFromNanos(r.since_unix_nanos())};
  }
  RETURN_IF_ERROR(FromRocks(it->status(), data_dir_));

  it.reset(db_->NewIterator(scan, handle(Family::kHealth)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    HealthRecord r;
    TargetStateRecord t;
    if (!r.ParseFromString(it->value().ToString()) || !DecodeHealth(r, &t)) {
      return Corrupt(data_dir_, "health", it->key().ToString());
    }
    t.name = it->key().ToString();
    state.health.push_back(std::move(t));
  }
  RETURN_IF_ERROR(FromRocks(it->status(), data_dir_));

  it.reset(db_->NewIterator(scan, handle(Family::kChainState)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    storage::ChainStateRecord r;
    failover::ChainStateRecord c;
    if (!r.ParseFromString(it->value().ToString()) || !DecodeChainState(r, &c)) {
      return Corrupt(data_dir_, "chain state", it->key().ToString());
    }
    c.name = it->key().ToString();
    state.chain_states.push_back(std::move(c));
  }
  RETURN_IF_ERROR(FromRocks(it->status(), data_dir_));
  return state;
}

absl::StatusOr<Events> Store::ReadEvents(rocksdb::Iterator* it, bool forward, uint64_t from, size_t limit) const {
  Events out;
  if (forward) {
    it->Seek(EncodeUint64(from));
  } else {
    it->SeekToLast();
  }
  for (; it->Valid() && out.size() < limit; forward ? it->Next() : it->Prev()) {
    EventRecord r;
    Event e;
    if (!DecodeUint64(it->key().ToStringView(), &e.sequence) ||
        !r.ParseFromArray(it->value().data(), static_cast<int>(it->value().size())) || !DecodeEvent(r, &e)) {
      return Corrupt(data_dir_, "event", absl::StrCat(e.sequence));
    }
    out.push_back(std::move(e));
  }
  RETURN_IF_ERROR(FromRocks(it->status(), data_dir_));
  if (!forward) std::reverse(out.begin(), out.end());
  return out;
}

absl::StatusOr<Events> Store::EventsAfter(uint64_t sequence, size_t limit, bool* complete) const {
  std::shared_lock<std::shared_mutex> open(mu_);
  RETURN_IF_ERROR(OpenOrRefuse());
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), handle(Family::kEvents)));
  it->SeekToFirst();
  uint64_t oldest = 0;
  *complete = !it->Valid() || (DecodeUint64(it->key().ToStringView(), &oldest) && oldest <= sequence + 1);
  absl::StatusOr<Events> events = ReadEvents(it.get(), /*forward=*/true, sequence + 1, limit);
  // Numbers skipped after `sequence` (a crash's reserve, a replica started
  // from the cluster's snapshot): what was there is not here to replay.
  if (events.ok() && *complete) {
    uint64_t expected = sequence + 1;
    for (const Event& e : *events) {
      if (e.sequence != expected) {
        *complete = false;
        break;
      }
      ++expected;
    }
  }
  return events;
}

absl::StatusOr<Events> Store::RecentEvents(size_t limit) const {
  std::shared_lock<std::shared_mutex> open(mu_);
  RETURN_IF_ERROR(OpenOrRefuse());
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), handle(Family::kEvents)));
  return ReadEvents(it.get(), /*forward=*/false, 0, limit);
}

absl::StatusOr<std::vector<CountedReport>> Store::CountedReports() const {
  std::shared_lock<std::shared_mutex> open(mu_);
  RETURN_IF_ERROR(OpenOrRefuse());
  std::vector<CountedReport> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), handle(Family::kEvents)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    EventRecord r;
    uint64_t seq = 0;
    if (!DecodeUint64(it->key().ToStringView(), &seq) ||
        !r.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return Corrupt(data_dir_, "event", absl::StrCat(seq));
    }
    for (const CountedReportRecord& id : r.counted_reports()) {
      if (IsReportId(id.sender(), id.sequence())) out.push_back({id.sender(), id.sequence()});
    }
  }
  RETURN_IF_ERROR(FromRocks(it->status(), data_dir_));
  return out;
}

absl::Status Store::FlushMemtables() {
  std::shared_lock<std::shared_mutex> open(mu_);
  RETURN_IF_ERROR(OpenOrRefuse());
  RETURN_IF_ERROR(CheckFreeSpace(0));  // a flush writes table files
  rocksdb::FlushOptions background;
  background.wait = false;
  const std::vector<rocksdb::ColumnFamilyHandle*> families(handles_.begin(), handles_.end());
  return FromRocks(db_->Flush(background, families), data_dir_);
}

absl::Status Store::TrimEvents(size_t keep_count, absl::Duration max_age, absl::Time now) {
  std::shared_lock<std::shared_mutex> open(mu_);
  RETURN_IF_ERROR(OpenOrRefuse());
  std::lock_guard<std::mutex> one_writer(write_mu_);
  rocksdb::ColumnFamilyHandle* events = handle(Family::kEvents);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), events));
  it->SeekToFirst();
  if (!it->Valid()) return FromRocks(it->status(), data_dir_);
  uint64_t oldest = 0;
  DecodeUint64(it->key().ToStringView(), &oldest);
  // By count: everything below next_sequence - keep_count goes.
  const uint64_t next = next_sequence_.load();
  uint64_t cut = next > keep_count ? next - keep_count : 0;
  // By age: walk forward from the oldest while events are too old.
  for (; it->Valid(); it->Next()) {
    EventRecord r;
    uint64_t seq = 0;
    if (!DecodeUint64(it->key().ToStringView(), &seq) ||
        !r.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      break;
    }
    if (seq >= cut && TimeFromNanos(r.time_nanos()) >= now - max_age) break;
    cut = std::max(cut, seq + 1);
  }
  if (cut <= oldest) return absl::OkStatus();
  RETURN_IF_ERROR(CheckFreeSpace(0));
  rocksdb::WriteOptions sync;
  sync.sync = true;
  const rocksdb::Status s = db_->DeleteRange(sync, events, EncodeUint64(oldest), EncodeUint64(cut));
  if (s.ok()) oldest_event_.store(cut);
  return FromRocks(s, data_dir_);
}

absl::Status Store::AppendTrace(absl::Span<TraceEntry> entries) {
  std::shared_lock<std::shared_mutex> open(mu_);
  RETURN_IF_ERROR(OpenOrRefuse());
  std::lock_guard<std::mutex> one_writer(trace_mu_);
  rocksdb::ColumnFamilyHandle* trace = handle(Family::kTrace);
  rocksdb::WriteBatch batch;
  uint64_t next = next_trace_.load();
  TraceRecord r;
  std::string value;
  for (TraceEntry& e : entries) {
    e.number = next++;
    r.Clear();
    EncodeTrace(e, &r);
    r.SerializeToString(&value);
    batch.Put(trace, EncodeUint64(e.number), value);
  }
  RETURN_IF_ERROR(CheckFreeSpace(batch.GetDataSize()));
  {
    std::lock_guard<std::mutex> one_write(write_mu_);
    RETURN_IF_ERROR(FromRocks(db_->Write(rocksdb::WriteOptions(), &batch), data_dir_));
  }
  next_trace_.store(next);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TraceEntry>> Store::ReadTrace(absl::Time from, absl::Time to, absl::string_view chain,
                                                         size_t limit, uint64_t after) const {
  std::shared_lock<std::shared_mutex> open(mu_);
  RETURN_IF_ERROR(OpenOrRefuse());
  std::vector<TraceEntry> out;
  TraceRecord r;
  // Entries are appended in the order they were counted, so times rise with
  // numbers (failoverd's clock does not step back while it runs): the first
  // entry at or after `from` is found by bisecting the numbers, and the scan
  // stops at the first entry past `to`.
  uint64_t start = after + 1;
  if (from != absl::InfinitePast()) {
    uint64_t lo = std::max(start, oldest_trace_.load()), hi = next_trace_.load();
    rocksdb::PinnableSlice value;
    while (lo < hi) {
      const uint64_t mid = lo + (hi - lo) / 2;
      value.Reset();
      const rocksdb::Status got =
          db_->Get(rocksdb::ReadOptions(), handle(Family::kTrace), EncodeUint64(mid), &value);
      if (!got.ok() && !got.IsNotFound()) return FromRocks(got, data_dir_);
      // An entry trimmed meanwhile was among the oldest: before `from` too.
      const bool before = got.IsNotFound() ||
                          (r.ParseFromArray(value.data(), static_cast<int>(value.size())) &&
                           TimeFromNanos(r.time_nanos()) < from);
      if (before) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    start = std::max(start, lo);
  }
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), handle(Family::kTrace)));
  for (it->Seek(EncodeUint64(start)); it->Valid() && out.size() < limit; it->Next()) {
    TraceEntry e;
    if (!DecodeUint64(it->key().ToStringView(), &e.number) ||
        !r.ParseFromArray(it->value().data(), static_cast<int>(it->value().size())) || !DecodeTrace(r, &e)) {
      return Corrupt(data_dir_, "trace", absl::StrCat(e.number));
    }
    if (e.at >= to) break;
    if (e.at < from || (!chain.empty() && e.chain != chain)) continue;
    out.push_back(std::move(e));
  }
  RETURN_IF_ERROR(FromRocks(it->status(), data_dir_));
  return out;
}

absl::Status Store::TrimTrace(size_t keep_count, absl::Duration max_age, absl::Time now) {
  std::shared_lock<std::shared_mutex> open(mu_);
  RETURN_IF_ERROR(OpenOrRefuse());
  std::lock_guard<std::mutex> one_writer(trace_mu_);
  const uint64_t oldest = oldest_trace_.load();
  const uint64_t next = next_trace_.load();
  // By count: everything below next - keep_count goes.
  uint64_t cut = next - oldest > keep_count ? next - keep_count : oldest;
  // By age: walk forward from there while entries are too old.
  rocksdb::ColumnFamilyHandle* trace = handle(Family::kTrace);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), trace));
  TraceRecord r;
  for (it->Seek(EncodeUint64(cut)); it->Valid(); it->Next()) {
    uint64_t number = 0;
    if (!DecodeUint64(it->key().ToStringView(), &number) ||
        !r.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return Corrupt(data_dir_, "trace", it->key().ToString());
    }
    if (TimeFromNanos(r.time_nanos()) >= now - max_age) break;
    cut = number + 1;
  }
  RETURN_IF_ERROR(FromRocks(it->status(), data_dir_));
  if (cut <= oldest) return absl::OkStatus();
  RETURN_IF_ERROR(CheckFreeSpace(0));
  std::lock_guard<std::mutex> one_write(write_mu_);
  const rocksdb::Status s =
      db_->DeleteRange(rocksdb::WriteOptions(), trace, EncodeUint64(oldest), EncodeUint64(cut));
  if (s.ok()) oldest_trace_.store(cut);
  return FromRocks(s, data_dir_);
}

}  // namespace failover::storage
