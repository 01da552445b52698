// Conversion between the neutral model (common/) and storage's own records
// (records.proto). Decoding checks every enum and returns false for a record
// this build cannot have written, so a corrupt value is refused, never used.
#pragma once

#include <string>

#include "common/change.h"
#include "common/outcome.h"
#include "records.pb.h"  // generated from storage/records.proto

namespace failover::storage {

int64_t TimeToNanos(absl::Time t);
absl::Time TimeFromNanos(int64_t n);

void EncodeTarget(const TargetConfig& in, TargetRecord* out);
[[nodiscard]] bool DecodeTarget(const TargetRecord& in, TargetConfig* out);
void EncodeChain(const ChainConfig& in, ChainRecord* out);
[[nodiscard]] bool DecodeChain(const ChainRecord& in, ChainConfig* out);
void EncodeEvent(const Event& in, EventRecord* out);
[[nodiscard]] bool DecodeEvent(const EventRecord& in, Event* out);
void EncodeHealth(const TargetStateRecord& in, HealthRecord* out);
[[nodiscard]] bool DecodeHealth(const HealthRecord& in, TargetStateRecord* out);
void EncodeChainState(const failover::ChainStateRecord& in, storage::ChainStateRecord* out);
[[nodiscard]] bool DecodeChainState(const storage::ChainStateRecord& in, failover::ChainStateRecord* out);
void EncodeTrace(const TraceEntry& in, TraceRecord* out);
[[nodiscard]] bool DecodeTrace(const TraceRecord& in, TraceEntry* out);

}  // namespace failover::storage
