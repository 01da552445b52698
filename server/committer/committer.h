// The committer (DESIGN 2): makes the engine's Changes durable in sequence
// order, grouping the ones that are ready at once into one write, and only
// then publishes them (watchers, metrics, the log) in the same order. The RPC
// that caused a Change answers once it is durable (Scope::Await), without
// waiting for the fan-out to watchers.
//
// A write that fails is retried until the disk takes it: meanwhile every
// waiting RPC gets the error, the health callback is told (failoverd refuses
// further changes and reports NOT_SERVING), and nothing of the failed Changes
// is published. Sequence numbers are never reused: a Change is numbered once,
// and nobody sees it before it is on disk.
//
// A write that fails with Dropped(status) says its Changes will never be
// written (in cluster mode: this replica is no longer the leader): they are
// dropped, not retried, and the callers waiting for them get that error.
// Dropped(status, saved) says the batch's first `saved` Changes were saved
// where it counts (the cluster's log) though this write failed: their callers
// get OK, and they are not published here (the writer brings them back).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/change.h"
#include "common/pacer.h"

namespace failover {

// Marks a write error after which the Changes are dropped instead of retried.
[[nodiscard]] absl::Status Dropped(absl::Status status, size_t saved = 0);
bool IsDropped(const absl::Status& status);
// How many of a dropped batch's first Changes were saved (0 when not dropped).
size_t SavedBeforeDropped(const absl::Status& status);

class Committer {
 public:
  // Writes changes, in order, in one durable write.
  using WriteFn = std::function<absl::Status(const std::vector<const Change*>&)>;
  // Called for each durable Change, in order, on the committer's thread.
  using PublishFn = std::function<void(const Change&)>;
  // Called when writes start failing (the error) and when they succeed again (OK).
  using HealthFn = std::function<void(const absl::Status&)>;

  // kThread: a thread of its own writes what is queued (failoverd).
  // kCallerDriven: no thread; Await (and AwaitPublished, AwaitIdle) write on
  // the caller's thread, and Step retries a failed write: the simulation test
  // (tests/sim) runs the real committer single-threaded and deterministically.
  // A kCallerDriven committer is for one thread only.
  enum class Mode { kThread, kCallerDriven };
  // `pacer` (kThread): where the thread runs and waits (a simulation's; none in failoverd).
  Committer(WriteFn write, PublishFn publish, HealthFn on_health,
            absl::Duration retry_interval = absl::Seconds(1), Mode mode = Mode::kThread, Pacer* pacer = nullptr);
  // Stops (see Stop).
  ~Committer();
  Committer(const Committer&) = delete;
  Committer& operator=(const Committer&) = delete;

  // Queues a Change. The engine calls it under its writer lock, in sequence
  // order; it only queues. Returns the Change's ticket.
  uint64_t Submit(Change change);
  // Waits until the Change with `ticket` (and every one before it) is
  // durable: OK; or until its write failed: the error. Watchers get it just
  // after, in order.
  [[nodiscard]] absl::Status Await(uint64_t ticket);
  // Await without waiting: calls `then` with what Await would answer once the
  // ticket is settled; at once on this thread when it already is, else on the
  // committer's thread (kThread), which must not be kept long. So a gRPC
  // handler can answer once its Change is durable without holding a thread.
  using Then = std::function<void(absl::Status)>;
  void AwaitThen(uint64_t ticket, Then then);
  // Waits (up to `timeout`) until every Change submitted so far is published
  // or failed, so a read of the event log that follows an answered call sees
  // that call's events.
  void AwaitPublished(absl::Duration timeout);
  // Waits (up to `timeout`) until nothing is queued: every Change submitted
  // so far is published or dropped. False on timeout (a write keeps failing).
  bool AwaitIdle(absl::Duration timeout);
  // The ticket of the newest Change submitted so far (0: none).
  uint64_t LastTicket();
  // At most `n` Changes per write (0: no limit); etcd caps a transaction's size.
  void set_max_batch(size_t n) { max_batch_.store(n, std::memory_order_relaxed); }
  // kCallerDriven: one write of what is queued (a retry after a failed one).
  // True when it was written (or nothing was queued).
  bool Step();
  // Writes and publishes what is queued (one last try), then ends the thread.
  // Later Submits are dropped and their Await fails.
  void Stop();

  // Collects the tickets of the Changes the current thread submits while it
  // lives, so an RPC can wait for exactly what it caused.
  class Scope {
   public:
    explicit Scope(Committer* committer);  // null: Await is OK at once
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    bool changed() const { return last_ != 0; }
    [[nodiscard]] absl::Status Await() { return last_ == 0 ? absl::OkStatus() : committer_->Await(last_); }
    // Await without waiting (Committer::AwaitThen); `then` may outlive the Scope.
    void AwaitThen(Then then);
    // For a call whose change may already be applied (an admin call repeated):
    // when it submitted nothing, waits for every Change submitted before, one
    // of which may be the change it found, so its OK never comes from memory
    // alone (DESIGN 3.14, invariant 2).
    [[nodiscard]] absl::Status AwaitWithEarlier();

   private:
    friend class Committer;
    Committer* committer_;
    Scope* outer_;
    uint64_t last_ = 0;
  };

 private:
  void Run();
  // Takes what is queued, writes it with `lock` released, and settles the
  // outcome (durable and published, dropped, or failed). Queue not empty.
  void WriteQueuedLocked(std::unique_lock<std::mutex>& lock);
  // kCallerDriven: writes until `done` holds or a write fails.
  template <typename Done>
  void DriveLocked(std::unique_lock<std::mutex>& lock, Done done);
  bool SettledLocked(uint64_t ticket) const { return durable_ >= ticket || failed_up_to_ >= ticket; }
  // What Await answers for a settled ticket.
  absl::Status StatusOfLocked(uint64_t ticket) const;
  // Calls the AwaitThen callbacks whose tickets are settled, with `lock`
  // released meanwhile.
  void RunSettledLocked(std::unique_lock<std::mutex>& lock);

  const WriteFn write_;
  const PublishFn publish_;
  const HealthFn on_health_;
  const absl::Duration retry_interval_;

  std::mutex mu_;
  PacedCondition work_;  // the thread waits for Changes
  PacedCondition done_;  // Await waits for tickets
  std::deque<std::pair<uint64_t, Change>> queue_;
  std::multimap<uint64_t, Then> then_;  // AwaitThen callbacks by ticket
  uint64_t next_ticket_ = 1;
  uint64_t durable_ = 0;       // every ticket up to here is durable
  uint64_t published_ = 0;     // and up to here also published
  uint64_t failed_up_to_ = 0;  // every ticket up to here was in a write that failed
  absl::Status failure_;       // that write's error
  bool stopping_ = false;
  bool stopped_ = false;
  bool failing_ = false;  // the last write failed; retried after retry_interval_
  const Mode mode_;
  Pacer* const pacer_;
  // Tickets dropped (Dropped), the latest kDroppedKept ranges (adjacent ones
  // with the same error merged), so a later durable write does not make them
  // look written. Up to forgotten_through_ a ticket's fate may be forgotten:
  // Await answers an error there rather than guess OK.
  struct DroppedTickets {
    uint64_t first;
    uint64_t last;
    absl::Status why;
  };
  static constexpr size_t kDroppedKept = 1024;
  std::deque<DroppedTickets> dropped_;
  uint64_t forgotten_through_ = 0;
  std::atomic<size_t> max_batch_{0};
  std::thread thread_;
};

}  // namespace failover
