// Where cluster mode keeps things in etcd, under one prefix (DESIGN 3.12):
//   <prefix>/leader        the leader's address, on its lease
//   <prefix>/log/<index>   the Change log, index from 1, 20 digits so keys sort as numbers
//   <prefix>/snapshot      where the newest snapshot is, and its size
//   <prefix>/snapshot-parts/<index>/<part>   the state at log entry <index>
//   <prefix>/replicas/<address>   one per running replica, on its lease
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/change.h"

namespace failover::cluster {

class Keys {
 public:
  explicit Keys(std::string prefix);
  const std::string& prefix() const { return prefix_; }
  // The leader key and the log sort next to each other, with no other key
  // between: a follower watches exactly that range.
  std::string Leader() const { return prefix_ + "/leader"; }
  std::string LogPrefix() const { return prefix_ + "/log/"; }
  std::string Log(uint64_t index) const;
  // The end of the log's key range (etcd's range_end for LogPrefix).
  std::string LogEnd() const;
  std::string Snapshot() const { return prefix_ + "/snapshot"; }
  std::string SnapshotParts(uint64_t index) const;  // ".../snapshot-parts/<index>/"
  std::string SnapshotPart(uint64_t index, uint32_t part) const;
  // The end of the key range of every snapshot's parts.
  std::string SnapshotPartsEnd() const;
  std::string Replica(absl::string_view address) const;
  std::string ReplicasPrefix() const { return prefix_ + "/replicas/"; }
  std::string ReplicasEnd() const;
  // The index in a log key; nullopt for any other key.
  std::optional<uint64_t> IndexOf(absl::string_view key) const;

 private:
  std::string prefix_;
};

// The serialized entry for `change` (its log_index is the key, not the value).
std::string EncodeEntry(const Change& change, int64_t term);
// The Change in an entry; INVALID_ARGUMENT naming the index when it does not parse.
[[nodiscard]] absl::StatusOr<Change> DecodeEntry(absl::string_view bytes, uint64_t index);

// What a replica says about itself under <prefix>/replicas/.
struct ReplicaCard {
  std::string address;
  std::string version;
  absl::Time started = absl::InfinitePast();
};
std::string EncodeCard(const ReplicaCard& card);
// The card under `key` (the address comes from the key). One that does not
// parse still names its replica, with no version or start.
ReplicaCard DecodeCard(const Keys& keys, absl::string_view key, absl::string_view bytes);

}  // namespace failover::cluster
