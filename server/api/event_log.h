// Where events go once their Change is durable: the committer publishes them
// here, in sequence order, on its own thread; they are written to the log,
// kept in a bounded in-memory list for ListEvents, and handed to watchers.
#pragma once

#include "absl/status/statusor.h"

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <vector>

#include <mutex>
#include <shared_mutex>

#include "absl/base/thread_annotations.h"
#include "grpcpp/support/byte_buffer.h"
#include "common/model.h"
#include "server/engine/shadows.h"
#include "server/log/log.h"

namespace failover::api {

class EventLog {
 public:
  // `last_sequence`: the newest event already durable (read back at start).
  explicit EventLog(size_t keep_recent = 1000, uint64_t last_sequence = 0);

  // Seeds the recent list (events read back from storage after a restart).
  void Preload(Events events);

  // Logs one line per event, hands them to every watcher and keeps them.
  // `events` are numbered and durable, and follow the last ones published.
  void Publish(const Events& events);
  // The next event will be numbered `next_sequence`: when that skips numbers
  // (a replica started from the cluster's snapshot), every watcher is resynced,
  // since the events it would miss exist nowhere here.
  void SkipTo(uint64_t next_sequence);
  // Logs what shadow policies would have done and hands it to the watchers
  // that asked for it. Shadow events are unnumbered and kept nowhere.
  void PublishShadow(const std::vector<ShadowEvent>& events);

  // A live subscriber. Deliver is called under the log's lock, in sequence
  // order, and must only queue (never block). `wire[i]` is `events[i]` as a
  // serialized failover.v1.Event, made once for all watchers.
  class Watcher {
   public:
    virtual ~Watcher() = default;
    virtual void Deliver(const Events& events, const std::vector<grpc::ByteBuffer>& wire) = 0;
    // failoverd is shutting down: end the stream.
    virtual void Close() = 0;
    // If this watcher's write has been stuck too long, what drops it (run
    // after the log's lock is released); otherwise empty.
    virtual std::function<void()> StalledDrop() { return {}; }
    // Events were skipped (a cluster snapshot installed in their place):
    // send the whole state again. Under the log's lock: must only queue.
    virtual void Resync() {}
    // Shadow events (PublishShadow); `wire[i]` is `events[i]` serialized,
    // marked with its shadow's name. Under the log's lock: must only queue.
    virtual void DeliverShadow(const std::vector<ShadowEvent>& events, const std::vector<grpc::ByteBuffer>& wire) {
      (void)events;
      (void)wire;
    }
  };
  // Registers `w`; every event after the returned sequence reaches it.
  // RESOURCE_EXHAUSTED when `max_watchers` are already subscribed, UNAVAILABLE
  // once CloseWatchers ran (a stream that opens during shutdown builds no
  // snapshot: the exit stays within the grace).
  absl::StatusOr<uint64_t> Subscribe(Watcher* w, size_t max_watchers);
  void Unsubscribe(Watcher* w);
  size_t watcher_count() const;
  // Ends every watcher's stream and refuses new ones (shutdown).
  void CloseWatchers();
  // Drops the watchers whose writes are stuck (Watcher::StalledDrop).
  void DropStalled();

  // The newest `limit` events that `match` accepts, oldest first.
  std::vector<Event> Recent(size_t limit, const std::function<bool(const Event&)>& match) const;
  // The oldest `limit` kept events after sequence `after` that `match` accepts.
  // OUT_OF_RANGE when events the answer would span are not kept here (older
  // than the recent list, or skipped for a cluster snapshot): never an answer
  // that silently jumps over them.
  absl::StatusOr<std::vector<Event>> After(uint64_t after, size_t limit,
                                           const std::function<bool(const Event&)>& match) const;
  uint64_t last_sequence() const;

  // One human-readable line for an event, as written to the log.
  static std::string Describe(const Event& e);
  // The fields a JSON log line carries beside that line.
  static log::Fields JsonFields(const Event& e);

 private:
  const size_t keep_recent_;
  mutable std::mutex mu_;
  bool closed_ = false;  // guarded by mu_
  uint64_t last_sequence_ ABSL_GUARDED_BY(mu_);
  std::deque<Event> recent_ ABSL_GUARDED_BY(mu_);
  std::vector<Watcher*> watchers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace failover::api
