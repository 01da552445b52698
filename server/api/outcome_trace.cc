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
  if (waiting_count_ >= keep_) {
    ++dropped_;
    return;
  }
  if (waiting_count_ < waiting_.size()) {
    // A spent slot: its strings are freed here, one entry per report.
    waiting_[waiting_count_] = std::move(entry);
  } else {
    waiting_.push_back(std::move(entry));
  }
  ++waiting_count_;
}

absl::Status OutcomeTrace::WriteWaiting(storage::Store* store, size_t* written) {
  *written = 0;
  size_t n = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    batch_.swap(waiting_);  // Add overwrites the last write's slots
    n = waiting_count_;
    waiting_count_ = 0;
  }
  if (n == 0) return absl::OkStatus();
  absl::Status appended = store->AppendTrace(absl::MakeSpan(batch_).first(n));
  if (appended.ok()) {
    *written = n;
    return appended;
  }
  // Keep the oldest: they come first when the disk takes writes again.
  std::lock_guard<std::mutex> lock(mu_);
  const size_t from_batch = std::min(n, keep_);
  const size_t from_waiting = std::min(waiting_count_, keep_ - from_batch);
  dropped_ += (n - from_batch) + (waiting_count_ - from_waiting);
  std::vector<TraceEntry> requeued;
  requeued.reserve(from_batch + from_waiting);
  requeued.insert(requeued.end(), std::make_move_iterator(batch_.begin()),
                  std::make_move_iterator(batch_.begin() + static_cast<ptrdiff_t>(from_batch)));
  requeued.insert(requeued.end(), std::make_move_iterator(waiting_.begin()),
                  std::make_move_iterator(waiting_.begin() + static_cast<ptrdiff_t>(from_waiting)));
  waiting_ = std::move(requeued);
  waiting_count_ = waiting_.size();
  return appended;
}

absl::Status OutcomeTrace::Flush(storage::Store* store, absl::Time now,
                                 absl::FunctionRef<void(absl::Span<const TraceEntry>)> written) {
  if (!enabled()) {
    written({});
    return absl::OkStatus();
  }
  std::lock_guard<std::mutex> flushing(flush_mu_);
  size_t n = 0;
  const absl::Status appended = WriteWaiting(store, &n);
  if (written_.empty()) {
    written(absl::MakeConstSpan(batch_).first(n));
  } else {  // a Read wrote some since the last Flush: one span, in trace order
    KeepWritten(n);
    written(written_);
    written_.clear();
  }
  // As many slots are kept as this second used (at most kMaxKeptSlots), so
  // an idle trace holds none and a burst's are let go a second later.
  constexpr size_t kMaxKeptSlots = 16384;
  const size_t kept = std::min(n, kMaxKeptSlots);
  if (batch_.size() > kept) batch_.resize(kept);
  if (batch_.capacity() > 2 * kept) batch_.shrink_to_fit();
  RETURN_IF_ERROR(appended);
  return store->TrimTrace(keep_, max_age_, now);
}

void OutcomeTrace::KeepWritten(size_t n) {
  written_.insert(written_.end(), std::make_move_iterator(batch_.begin()),
                  std::make_move_iterator(batch_.begin() + static_cast<ptrdiff_t>(n)));
}

absl::StatusOr<std::vector<TraceEntry>> OutcomeTrace::Read(storage::Store* store, absl::Time from, absl::Time to,
                                                           absl::string_view chain, size_t limit, uint64_t after) {
  if (enabled()) {
    std::lock_guard<std::mutex> flushing(flush_mu_);
    size_t n = 0;
    RETURN_IF_ERROR(WriteWaiting(store, &n));
    KeepWritten(n);  // for the next Flush's caller: the shadow policies see every entry once
  }
  return store->ReadTrace(from, to, chain, limit, after);
}

uint64_t OutcomeTrace::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

}  // namespace failover::api
