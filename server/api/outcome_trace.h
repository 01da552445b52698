// The outcome trace's in-memory side (DESIGN 3.17). The report path appends
// one entry per counted outcome under a short lock; once a second the ticker
// writes what was appended to the data dir and trims it by count and age.
// What waits here is lost by a crash: at most a second of trace, never
// acknowledged state.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/outcome.h"
#include "storage/store.h"

namespace failover::api {

class OutcomeTrace {
 public:
  // `keep` entries and `max_age` bound the trace on disk; keep = 0 turns it off.
  OutcomeTrace(size_t keep, absl::Duration max_age) : keep_(keep), max_age_(max_age) {}

  bool enabled() const { return keep_ > 0; }
  // Cuts the message to kTraceMessageBytes (valid UTF-8). While `keep`
  // entries are already waiting (the data dir refuses writes), the entry is
  // dropped and counted instead, so memory stays bounded.
  void Add(TraceEntry entry);
  // Writes what waits, then trims the trace on disk. What a refused write
  // held goes back to wait (within the bound) for the next call. What was
  // written since the last Flush (a Read writes too) is passed to `written`
  // in trace order, as one span valid during the call: the shadow policies'
  // feed. `written` is called once every time, with an empty span when
  // nothing was written or the trace is off, so a feed's clock moves on.
  [[nodiscard]] absl::Status Flush(storage::Store* store, absl::Time now,
                                   absl::FunctionRef<void(absl::Span<const TraceEntry>)> written);
  [[nodiscard]] absl::Status Flush(storage::Store* store, absl::Time now) {
    return Flush(store, now, [](absl::Span<const TraceEntry>) {});
  }
  // What the trace holds (storage::Store::ReadTrace), what
  // waits included: it is written first. At most `limit`.
  [[nodiscard]] absl::StatusOr<std::vector<TraceEntry>> Read(storage::Store* store, absl::Time from, absl::Time to,
                                                             absl::string_view chain, size_t limit, uint64_t after);

  // Entries dropped because too many waited.
  uint64_t dropped() const;

 private:
  // Writes what waits into batch_ and the store; flush_mu_ held, so entries
  // are numbered in the order they were added. On success the first
  // `*written` slots of batch_ hold what was written.
  [[nodiscard]] absl::Status WriteWaiting(storage::Store* store, size_t* written);
  // Moves the first `n` slots of batch_ (a write's) to the end of written_.
  void KeepWritten(size_t n);

  const size_t keep_;
  const absl::Duration max_age_;
  // std::mutex, not absl::Mutex: ThreadSanitizer sees it (Debian's Abseil
  // is not built for it). flush_mu_ is taken before mu_.
  std::mutex flush_mu_;
  // The slots of the last write, handed back to Add to overwrite: a second's
  // entries are never freed as a batch on one thread (under load that burst
  // of frees in other threads' malloc arenas was most of the decision tail).
  std::vector<TraceEntry> batch_;    // under flush_mu_
  std::vector<TraceEntry> written_;  // written by a Read since the last Flush; under flush_mu_
  mutable std::mutex mu_;
  // The first waiting_count_ slots wait; the rest are spent, kept to be overwritten.
  std::vector<TraceEntry> waiting_;  // under mu_
  size_t waiting_count_ = 0;         // under mu_
  uint64_t dropped_ = 0;             // under mu_
};

}  // namespace failover::api
