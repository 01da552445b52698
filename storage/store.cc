#include "storage/store.h"

#include <filesystem>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "server/engine/status_macros.h"

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
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const FamilyInfo& f : kFamilies) {
    descriptors.emplace_back(f.name, rocksdb::ColumnFamilyOptions());
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
  return FromRocks(s, data_dir_);
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

}  // namespace failover::storage
