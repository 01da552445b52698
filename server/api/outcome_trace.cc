#include "server/api/outcome_trace.h"

#include <algorithm>
#include <utility>

#include "common/status_macros.h"
#include "common/utf8.h"

namespace failover::api {

void OutcomeTrace::Add(TraceEntry entry) {
  if (!enabled()) return;
  std::string& message = entry.facts.message;
  if (message.size() > kTraceMessageBytes || !IsValidUtf8(message)) message = SanitizeUtf8(message, kTraceMessageBytes);
  std::string& code = entry.facts.error_code;
  if (code.size() > kTraceMessageBytes || !IsValidUtf8(code)) code = SanitizeUtf8(code, kTraceMessageBytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (waiting_.size() >= keep_) {
    ++dropped_;
    return;
  }
  waiting_.push_back(std::move(entry));
}

absl::Status OutcomeTrace::WriteWaiting(storage::Store* store) {
  std::vector<TraceEntry> batch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    batch.swap(waiting_);
    // The next second is likely as busy: growing from empty would move every
    // entry a dozen times. Capped, so one burst does not hold memory for good.
    constexpr size_t kMaxReserve = 16384;
    waiting_.reserve(std::min({batch.size(), keep_, kMaxReserve}));
  }
  if (batch.empty()) return absl::OkStatus();
  absl::Status appended = store->AppendTrace(&batch);
  if (appended.ok()) {
    // Kept for the next Flush's caller, whichever call wrote them.
    written_.insert(written_.end(), std::make_move_iterator(batch.begin()), std::make_move_iterator(batch.end()));
    return appended;
  }
  // Keep the oldest: they come first when the disk takes writes again.
  std::lock_guard<std::mutex> lock(mu_);
  if (batch.size() > keep_) {
    dropped_ += batch.size() - keep_;
    batch.resize(keep_);
  }
  const size_t room = keep_ - batch.size();
  if (waiting_.size() > room) {
    dropped_ += waiting_.size() - room;
    waiting_.resize(room);
  }
  batch.insert(batch.end(), std::make_move_iterator(waiting_.begin()), std::make_move_iterator(waiting_.end()));
  waiting_ = std::move(batch);
  return appended;
}

absl::Status OutcomeTrace::Flush(storage::Store* store, absl::Time now, std::vector<TraceEntry>* written) {
  if (!enabled()) return absl::OkStatus();
  std::lock_guard<std::mutex> flushing(flush_mu_);
  const absl::Status appended = WriteWaiting(store);
  if (written != nullptr) {
    written->insert(written->end(), std::make_move_iterator(written_.begin()), std::make_move_iterator(written_.end()));
  }
  written_.clear();
  RETURN_IF_ERROR(appended);
  return store->TrimTrace(keep_, max_age_, now);
}

absl::StatusOr<std::vector<TraceEntry>> OutcomeTrace::Read(storage::Store* store, absl::Time from, absl::Time to,
                                                           absl::string_view chain, size_t limit, uint64_t after) {
  if (enabled()) {
    std::lock_guard<std::mutex> flushing(flush_mu_);
    RETURN_IF_ERROR(WriteWaiting(store));
  }
  return store->ReadTrace(from, to, chain, limit, after);
}

uint64_t OutcomeTrace::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

}  // namespace failover::api
