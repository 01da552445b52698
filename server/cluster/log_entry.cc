#include "server/cluster/log_entry.h"

#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "proto/model_convert.h"
#include "proto/state_convert.h"
#include "log_entry.pb.h"  // generated from server/cluster/log_entry.proto

namespace failover::cluster {
namespace {

// etcd's range_end for "every key starting with `prefix`": the prefix with its last byte plus one.
std::string RangeEndOf(std::string prefix) {
  while (!prefix.empty()) {
    if (static_cast<unsigned char>(prefix.back()) < 0xff) {
      prefix.back() = static_cast<char>(prefix.back() + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');
}

}  // namespace

Keys::Keys(std::string prefix) : prefix_(std::move(prefix)) {
  while (!prefix_.empty() && prefix_.back() == '/') prefix_.pop_back();
}

std::string Keys::Log(uint64_t index) const { return absl::StrFormat("%s%020u", LogPrefix(), index); }

std::string Keys::LogEnd() const { return RangeEndOf(LogPrefix()); }

std::string Keys::SnapshotParts(uint64_t index) const {
  return absl::StrFormat("%s/snapshot-parts/%020u/", prefix_, index);
}

std::string Keys::SnapshotPart(uint64_t index, uint32_t part) const {
  return absl::StrFormat("%s%05u", SnapshotParts(index), part);
}

std::string Keys::SnapshotPartsEnd() const { return RangeEndOf(prefix_ + "/snapshot-parts/"); }

std::string Keys::Replica(absl::string_view address) const { return absl::StrCat(ReplicasPrefix(), address); }

std::string Keys::ReplicasEnd() const { return RangeEndOf(ReplicasPrefix()); }

std::optional<uint64_t> Keys::IndexOf(absl::string_view key) const {
  const std::string log = LogPrefix();
  if (!absl::StartsWith(key, log)) return std::nullopt;
  uint64_t index = 0;
  if (!absl::SimpleAtoi(key.substr(log.size()), &index) || index == 0) return std::nullopt;
  return index;
}

std::string EncodeEntry(const Change& change, int64_t term) {
  LogEntry entry;
  api::ChangeToProto(change, entry.mutable_change());
  for (const Event& e : change.events) api::EventToProto(e, entry.add_events());
  for (const CountedReport& r : change.counted_reports) {
    failover::v1::ReportId* id = entry.add_counted_reports();
    id->set_sender(r.sender);
    id->set_sequence(r.sequence);
  }
  entry.set_term(term);
  return entry.SerializeAsString();
}

absl::StatusOr<Change> DecodeEntry(absl::string_view bytes, uint64_t index) {
  LogEntry entry;
  if (!entry.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(absl::StrCat("log entry ", index, ": does not parse"));
  }
  absl::StatusOr<Change> change = api::ChangeFromProto(entry.change());
  if (!change.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("log entry ", index, ": ", change.status().message()));
  }
  for (const auto& e : entry.events()) change->events.push_back(api::EventFromProto(e));
  // Ids of another shape than a report's are not kept (nothing depends on
  // them but a resend's count).
  for (const auto& r : entry.counted_reports()) {
    if (IsReportId(r.sender(), r.sequence())) change->counted_reports.push_back({r.sender(), r.sequence()});
  }
  change->log_index = index;
  return change;
}

std::string EncodeCard(const ReplicaCard& card) {
  ReplicaRecord out;
  out.set_version(card.version);
  out.set_started_unix_seconds(absl::ToUnixSeconds(card.started));
  return out.SerializeAsString();
}

ReplicaCard DecodeCard(const Keys& keys, absl::string_view key, absl::string_view bytes) {
  ReplicaCard card;
  card.address = std::string(absl::StripPrefix(key, keys.ReplicasPrefix()));
  ReplicaRecord in;
  if (in.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    card.version = in.version();
    if (in.started_unix_seconds() > 0) card.started = absl::FromUnixSeconds(in.started_unix_seconds());
  }
  return card;
}

}  // namespace failover::cluster
