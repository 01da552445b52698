#include "storage/store.h"

#include <filesystem>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rocksdb/cache.h"
#include "rocksdb/table.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "failover/v1/types.pb.h"
#include "rocksdb/write_batch.h"
#include "server/api/convert.h"
#include "server/engine/status_macros.h"
#include "storage/encoding.h"
#include "records.pb.h"  // generated from storage/records.proto

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

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& data_dir) {
  std::error_code ec;
  std::filesystem::create_directories(data_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("data dir ", data_dir, " cannot be created: ", ec.message()));
  }
  rocksdb::DBOptions options;
  options.create_if_missing = true;
  options.create_missing_column_families = true;
  options.paranoid_checks = true;
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
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::Status s = rocksdb::DB::Open(options, data_dir, descriptors, &handles, &store->db_);
  RETURN_IF_ERROR(FromRocks(s, data_dir));
  for (size_t i = 0; i < handles.size(); ++i) store->handles_[i] = handles[i];
  RETURN_IF_ERROR(store->CheckSchema());
  return store;
}

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
  try {
    version = std::stoi(value);
  } catch (...) {
    return absl::DataLossError(
        absl::StrCat("data dir ", data_dir_, ": unreadable schema version \"", value, "\""));
  }
  if (version > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "data dir ", data_dir_, " was written by a newer failoverd (schema version ", version,
        ", this build understands up to ", kSchemaVersion, "); refusing to open it"));
  }
  s = db_->Get(rocksdb::ReadOptions(), meta, kInstanceKey, &instance_id_);
  RETURN_IF_ERROR(FromRocks(s, data_dir_));
  std::string next;
  s = db_->Get(rocksdb::ReadOptions(), meta, "next_sequence", &next);
  if (s.IsNotFound()) return absl::OkStatus();
  RETURN_IF_ERROR(FromRocks(s, data_dir_));
  if (!DecodeUint64(next, &next_sequence_)) {
    return absl::DataLossError(absl::StrCat("data dir ", data_dir_, ": unreadable next event sequence"));
  }
  return absl::OkStatus();
}

absl::Status Store::Close() {
  if (db_ == nullptr) return absl::OkStatus();
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

namespace {

constexpr char kGenerationKey[] = "generation";
constexpr char kNextSequenceKey[] = "next_sequence";
// Config keys: a kind prefix, then the object name.
constexpr char kTargetPrefix[] = "t/";
constexpr char kChainPrefix[] = "c/";

int64_t Nanos(absl::Time t) { return t == absl::InfinitePast() ? INT64_MIN : absl::ToUnixNanos(t); }
absl::Time FromNanos(int64_t n) { return n == INT64_MIN ? absl::InfinitePast() : absl::FromUnixNanos(n); }

absl::Status Corrupt(const std::string& data_dir, absl::string_view what, absl::string_view key) {
  return absl::DataLossError(absl::StrCat("data dir ", data_dir, ": unreadable ", what, " record \"", key, "\""));
}

}  // namespace

absl::Status Store::Commit(const Mutation& m) {
  rocksdb::WriteBatch batch;
  switch (m.kind) {
    case Mutation::Kind::kConfig: {
      rocksdb::ColumnFamilyHandle* config = handle(Family::kConfig);
      for (const TargetConfig& t : m.put_targets) {
        v1::Target proto;
        api::TargetToProto(t, &proto);
        batch.Put(config, absl::StrCat(kTargetPrefix, t.name), proto.SerializeAsString());
      }
      for (const ChainConfig& c : m.put_chains) {
        v1::Chain proto;
        api::ChainToProto(c, &proto);
        batch.Put(config, absl::StrCat(kChainPrefix, c.name), proto.SerializeAsString());
      }
      for (const std::string& name : m.deleted_targets) {
        batch.Delete(config, absl::StrCat(kTargetPrefix, name));
        batch.Delete(handle(Family::kHealth), name);
        batch.Delete(handle(Family::kManual), name);
      }
      for (const std::string& name : m.deleted_chains) {
        batch.Delete(config, absl::StrCat(kChainPrefix, name));
        batch.Delete(handle(Family::kChainState), name);
        batch.Delete(handle(Family::kPins), name);
      }
      batch.Put(config, kGenerationKey, EncodeUint64(m.generation));
      break;
    }
    case Mutation::Kind::kPin:
      if (m.target.empty()) {
        batch.Delete(handle(Family::kPins), m.chain);
      } else {
        batch.Put(handle(Family::kPins), m.chain, m.target);
      }
      break;
    case Mutation::Kind::kManual:
      if (m.manual) {
        ManualRecord r;
        r.set_reason(m.reason);
        r.set_since_unix_nanos(Nanos(m.since));
        batch.Put(handle(Family::kManual), m.target, r.SerializeAsString());
      } else {
        batch.Delete(handle(Family::kManual), m.target);
      }
      break;
  }
  rocksdb::WriteOptions sync;
  sync.sync = true;
  const rocksdb::Status s = db_->Write(sync, &batch);
  if (!s.ok()) return absl::UnavailableError(absl::StrCat("cannot save the change: ", s.ToString()));
  return absl::OkStatus();
}

absl::Status Store::WriteTransitions(const std::vector<TargetStatus>& targets, const std::vector<ChainStatus>& chains,
                                     const Events& events) {
  rocksdb::WriteBatch batch;
  for (const TargetStatus& t : targets) {
    HealthRecord r;
    r.set_automatic(static_cast<int>(t.automatic));
    r.set_since_unix_nanos(Nanos(t.since));
    r.set_trips(t.trips);
    r.set_recovery_passes(t.recovery_passes);
    r.set_source(static_cast<int>(t.source));
    r.set_reason(t.reason);
    r.set_last_error(t.last_error);
    r.set_last_error_unix_nanos(Nanos(t.last_error_time));
    r.set_last_probe_unix_nanos(Nanos(t.last_probe));
    batch.Put(handle(Family::kHealth), t.name, r.SerializeAsString());
  }
  for (const ChainStatus& c : chains) {
    ChainStateRecord r;
    r.set_active(c.active_target);
    r.set_state(static_cast<int>(c.state));
    r.set_active_since_unix_nanos(Nanos(c.active_since));
    r.set_last_switch_unix_nanos(Nanos(c.last_switch));
    batch.Put(handle(Family::kChainState), c.name, r.SerializeAsString());
  }
  uint64_t last = 0;
  for (const Event& e : events) {
    v1::Event proto;
    api::EventToProto(e, &proto);
    batch.Put(handle(Family::kEvents), EncodeUint64(e.sequence), proto.SerializeAsString());
    last = std::max(last, e.sequence);
  }
  if (last >= next_sequence_) {
    next_sequence_ = last + 1;
    batch.Put(handle(Family::kMeta), kNextSequenceKey, EncodeUint64(next_sequence_));
  }
  const rocksdb::Status s = db_->Write(rocksdb::WriteOptions(), &batch);
  return FromRocks(s, data_dir_);
}

absl::StatusOr<RestoredState> Store::Load() const {
  RestoredState state;
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
      v1::Target proto;
      if (!proto.ParseFromArray(value.data(), static_cast<int>(value.size()))) return Corrupt(data_dir_, "target", key);
      ASSIGN_OR_RETURN(TargetConfig t, api::TargetFromProto(proto, key));
      state.targets.push_back(std::move(t));
    } else if (absl::StartsWith(key, kChainPrefix)) {
      v1::Chain proto;
      if (!proto.ParseFromArray(value.data(), static_cast<int>(value.size()))) return Corrupt(data_dir_, "chain", key);
      ASSIGN_OR_RETURN(ChainConfig c, api::ChainFromProto(proto, key));
      state.chains.push_back(std::move(c));
    }
  }
  RETURN_IF_ERROR(FromRocks(it->status(), data_dir_));

  it.reset(db_->NewIterator(scan, handle(Family::kPins)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) state.pins[it->key().ToString()] = it->value().ToString();

  it.reset(db_->NewIterator(scan, handle(Family::kManual)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    ManualRecord r;
    if (!r.ParseFromString(it->value().ToString())) return Corrupt(data_dir_, "manual", it->key().ToString());
    state.manual[it->key().ToString()] = RestoredManual{r.reason(), FromNanos(r.since_unix_nanos())};
  }

  it.reset(db_->NewIterator(scan, handle(Family::kHealth)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    HealthRecord r;
    if (!r.ParseFromString(it->value().ToString())) return Corrupt(data_dir_, "health", it->key().ToString());
    RestoredTarget t;
    t.name = it->key().ToString();
    t.automatic = static_cast<HealthState>(r.automatic());
    t.since = FromNanos(r.since_unix_nanos());
    t.trips = r.trips();
    t.recovery_passes = r.recovery_passes();
    t.source = static_cast<Source>(r.source());
    t.reason = r.reason();
    t.last_error = r.last_error();
    t.last_error_time = FromNanos(r.last_error_unix_nanos());
    t.last_probe = FromNanos(r.last_probe_unix_nanos());
    state.health.push_back(std::move(t));
  }

  it.reset(db_->NewIterator(scan, handle(Family::kChainState)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    ChainStateRecord r;
    if (!r.ParseFromString(it->value().ToString())) return Corrupt(data_dir_, "chain state", it->key().ToString());
    state.chain_states.push_back(RestoredChain{it->key().ToString(), r.active(), static_cast<ChainState>(r.state()),
                                               FromNanos(r.active_since_unix_nanos()),
                                               FromNanos(r.last_switch_unix_nanos())});
  }
  RETURN_IF_ERROR(FromRocks(it->status(), data_dir_));
  return state;
}

absl::StatusOr<Events> Store::EventsAfter(uint64_t sequence, size_t limit, bool* complete) const {
  Events out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), handle(Family::kEvents)));
  it->SeekToFirst();
  uint64_t oldest = 0;
  *complete = !it->Valid() || (DecodeUint64(it->key().ToStringView(), &oldest) && oldest <= sequence + 1);
  for (it->Seek(EncodeUint64(sequence + 1)); it->Valid() && out.size() < limit; it->Next()) {
    v1::Event proto;
    if (!proto.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return Corrupt(data_dir_, "event", "");
    }
    out.push_back(api::EventFromProto(proto));
  }
  RETURN_IF_ERROR(FromRocks(it->status(), data_dir_));
  return out;
}

absl::StatusOr<Events> Store::RecentEvents(size_t limit) const {
  Events out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), handle(Family::kEvents)));
  for (it->SeekToLast(); it->Valid() && out.size() < limit; it->Prev()) {
    v1::Event proto;
    if (!proto.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return Corrupt(data_dir_, "event", "");
    }
    out.push_back(api::EventFromProto(proto));
  }
  RETURN_IF_ERROR(FromRocks(it->status(), data_dir_));
  return Events(out.rbegin(), out.rend());
}

absl::Status Store::TrimEvents(size_t keep_count, absl::Duration max_age, absl::Time now) {
  rocksdb::ColumnFamilyHandle* events = handle(Family::kEvents);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), events));
  it->SeekToFirst();
  if (!it->Valid()) return FromRocks(it->status(), data_dir_);
  uint64_t oldest = 0;
  DecodeUint64(it->key().ToStringView(), &oldest);
  // By count: everything below next_sequence - keep_count goes.
  uint64_t cut = next_sequence_ > keep_count ? next_sequence_ - keep_count : 0;
  // By age: walk forward from the oldest while events are too old.
  for (; it->Valid(); it->Next()) {
    v1::Event proto;
    uint64_t seq = 0;
    if (!DecodeUint64(it->key().ToStringView(), &seq) ||
        !proto.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      break;
    }
    if (seq >= cut && api::TimeFromProto(proto.time()) >= now - max_age) break;
    cut = std::max(cut, seq + 1);
  }
  if (cut <= oldest) return absl::OkStatus();
  const rocksdb::Status s =
      db_->DeleteRange(rocksdb::WriteOptions(), events, EncodeUint64(oldest), EncodeUint64(cut));
  return FromRocks(s, data_dir_);
}

}  // namespace failover::storage
