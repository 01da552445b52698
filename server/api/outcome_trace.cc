#include "server/api/outcome_trace.h"

#include <utility>

#include "common/utf8.h"

namespace failover::api {

void OutcomeTrace::Add(TraceEntry entry) {
  if (!enabled()) return;
  std::string& message = entry.facts.message;
  if (message.size() > kTraceMessageBytes || !IsValidUtf8(message)) message = SanitizeUtf8(message, kTraceMessageBytes);
  std::string& code = entry.facts.error_code;
  if (code.size() > kTraceMessageBytes || !IsValidUtf8(code)) code = SanitizeUtf8(code, kTraceMessageBytes);
  absl::MutexLock lock(&mu_);
  if (waiting_.size() >= keep_) {
    ++dropped_;
    return;
  }
  waiting_.push_back(std::move(entry));
}

absl::Status OutcomeTrace::Flush(storage::Store* store, absl::Time now) {
  if (!enabled()) return absl::OkStatus();
  std::vector<TraceEntry> batch;
  {
    absl::MutexLock lock(&mu_);
    batch.swap(waiting_);
  }
  if (!batch.empty()) {
    if (absl::Status written = store->AppendTrace(&batch); !written.ok()) {
      // Keep the oldest: they come first when the disk takes writes again.
      absl::MutexLock lock(&mu_);
      const size_t room = keep_ > batch.size() ? keep_ - batch.size() : 0;
      if (waiting_.size() > room) {
        dropped_ += waiting_.size() - room;
        waiting_.resize(room);
      }
      if (batch.size() > keep_) {
        dropped_ += batch.size() - keep_;
        batch.resize(keep_);
      }
      batch.insert(batch.end(), std::make_move_iterator(waiting_.begin()), std::make_move_iterator(waiting_.end()));
      waiting_ = std::move(batch);
      return written;
    }
  }
  return store->TrimTrace(keep_, max_age_, now);
}

uint64_t OutcomeTrace::dropped() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

}  // namespace failover::api
