// One WatchEvents stream (DESIGN 3.9): a snapshot (or a replay from the
// stored log when resuming), then live events. Runs on gRPC's callback API,
// so a watcher costs memory, not a thread. Each stream has a bounded queue; a
// watcher that falls behind loses its queue and gets a fresh snapshot marked
// resync, so it never slows publishers or other watchers.
#pragma once

#include <deque>
#include <functional>

#include "absl/container/flat_hash_set.h"
#include <mutex>
#include <shared_mutex>

#include "absl/base/thread_annotations.h"
#include "failover/v1/decision.grpc.pb.h"
#include "server/api/event_log.h"
#include "server/api/service_context.h"

namespace failover::api {

struct WatchOptions {
  // Events queued per watcher before it is resynced with a snapshot.
  size_t queue_limit = 1024;
  // Most events replayed on resume; further behind gets a snapshot.
  size_t max_replay = 10000;
  // Concurrent streams; one more is refused with RESOURCE_EXHAUSTED.
  size_t max_watchers = 10000;
  // Stored events after a sequence, oldest first; `complete` false when the
  // log no longer reaches back that far.
  std::function<absl::StatusOr<Events>(uint64_t after, size_t limit, bool* complete)> history;
};

class WatchStream final : public grpc::ServerWriteReactor<grpc::ByteBuffer>, public EventLog::Watcher {
 public:
  // Starts the stream; it deletes itself when done.
  // `allowed` is the caller's authorization; a stream that is not allowed ends at once.
  static void Start(const ServiceContext& ctx, const WatchOptions& options,
                    const failover::v1::WatchEventsRequest& request, const absl::Status& allowed, WatchStream** out);

  void Deliver(const Events& events, const std::vector<grpc::ByteBuffer>& wire) override;
  void Close() override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  WatchStream(const ServiceContext& ctx, const WatchOptions& options, const failover::v1::WatchEventsRequest& request);
  void Begin(const failover::v1::WatchEventsRequest& request);
  bool Matches(const Event& e) const;
  failover::v1::Event SnapshotEvent(uint64_t sequence, bool resync) const;
  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ServiceContext ctx_;
  const WatchOptions options_;
  absl::flat_hash_set<std::string> chains_;
  absl::flat_hash_set<std::string> targets_;

  std::mutex mu_;
  std::deque<grpc::ByteBuffer> queue_ ABSL_GUARDED_BY(mu_);  // serialized events
  grpc::ByteBuffer current_ ABSL_GUARDED_BY(mu_);  // the event being written, serialized
  uint64_t last_seen_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool resync_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool subscribed_ = false;
};

}  // namespace failover::api
