// One WatchEvents stream (DESIGN 3.9): a snapshot (or a replay from the
// stored log when resuming), then live events. Runs on gRPC's callback API,
// so a watcher costs memory, not a thread. Snapshots are built by the
// WatchWorker, off the threads that decide. Each stream's queue of live events
// is bounded in events and bytes; a watcher that falls behind loses its queue
// and gets a fresh snapshot marked resync, so it never slows publishers or
// other watchers. A watcher whose write is stuck (it stopped reading) past
// the stall timeout is dropped, which frees everything it held.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "failover/v1/decision.grpc.pb.h"
#include "server/api/event_log.h"
#include "server/api/outbox.h"
#include "server/api/service_context.h"
#include "server/api/watch_worker.h"

namespace failover::api {

struct WatchOptions {
  // Live events queued per watcher before it is resynced with a snapshot.
  size_t queue_limit = 1024;
  // Bytes of live events queued per watcher before it is resynced.
  size_t queue_bytes = 1 << 20;
  // Most events replayed on resume; further behind gets a snapshot.
  size_t max_replay = 10000;
  // Concurrent streams; one more is refused with RESOURCE_EXHAUSTED.
  size_t max_watchers = 10000;
  // A write that has not completed for this long (the client stopped
  // reading) drops the watcher; zero = never.
  absl::Duration stall_timeout = absl::Seconds(30);
  // Stored events after a sequence, oldest first; `complete` false when the
  // log no longer reaches back that far.
  std::function<absl::StatusOr<Events>(uint64_t after, size_t limit, bool* complete)> history;
};

class WatchStream final : public grpc::ServerWriteReactor<grpc::ByteBuffer>, public EventLog::Watcher {
 public:
  // Starts the stream; it deletes itself when done.
  // `allowed` is the caller's authorization; a stream that is not allowed ends at once.
  static void Start(const ServiceContext& ctx, const WatchOptions& options, WatchWorker* worker,
                    grpc::CallbackServerContext* call, const failover::v1::WatchEventsRequest& request,
                    const absl::Status& allowed, WatchStream** out);

  void Deliver(const Events& events, const std::vector<grpc::ByteBuffer>& wire) override;
  void Close() override;
  std::function<void()> StalledDrop() override;
  void Resync() override;
  void DeliverShadow(const std::vector<ShadowEvent>& events, const std::vector<grpc::ByteBuffer>& wire) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  struct Meta {
    uint64_t sequence = 0;
    bool resumable = true;  // a client may resume after it (false for a snapshot part with more)
    bool shadow = false;    // a shadow event: unnumbered, never the point to resume after
  };
  using Entry = Outbox<Meta>::Entry;

  WatchStream(const ServiceContext& ctx, const WatchOptions& options, WatchWorker* worker,
              grpc::CallbackServerContext* call, const failover::v1::WatchEventsRequest& request);
  // Checks the request, then opens the stream from the call pool.
  void Begin(const failover::v1::WatchEventsRequest& request);
  // Subscribes and queues the opening: a replay or a snapshot request.
  void Open(const failover::v1::WatchEventsRequest& request);
  // Whether the watcher's filters let `e` through. `snap` is the engine
  // snapshot a chain filter reads a target's chains from: loaded on first
  // need, then kept by the caller for the rest of its batch.
  bool Matches(const Event& e, std::shared_ptr<const Snapshot>* snap) const;
  void RequestSnapshotLocked(bool resync) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SnapshotReady(std::shared_ptr<const SnapshotParts> parts);
  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues a live event; one too many (in events or bytes) resyncs the watcher.
  void QueueLiveLocked(Entry q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref();

  const ServiceContext ctx_;
  const WatchOptions options_;
  WatchWorker* const worker_;
  grpc::CallbackServerContext* const call_;
  absl::flat_hash_set<std::string> chains_;
  absl::flat_hash_set<std::string> targets_;
  const bool include_shadow_;
  // gRPC's reference (until OnDone) plus one per pending opening, snapshot or drop.
  std::atomic<int> refs_{1};

  std::mutex mu_;
  // The opening (replay or snapshot) and live events; open once the opening
  // is queued or requested. Live events count against queue_bytes.
  Outbox<Meta> out_ ABSL_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point write_started_ ABSL_GUARDED_BY(mu_);
  uint64_t last_seen_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t last_sent_ ABSL_GUARDED_BY(mu_) = 0;  // sequence of the last event fully written
  bool awaiting_snapshot_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t snapshot_sequence_ ABSL_GUARDED_BY(mu_) = 0;  // the newest snapshot covers events up to here
  bool resync_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool dropping_ ABSL_GUARDED_BY(mu_) = false;
  // Subscribed (by Open) and done (OnDone ran): whichever comes second
  // unsubscribes, so a call cancelled while it opened leaves no watcher behind.
  bool subscribed_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace failover::api
