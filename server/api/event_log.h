// Where engine events go after an operation: numbered in order, written to
// the log, kept in a bounded in-memory list for ListEvents.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "grpcpp/support/byte_buffer.h"
#include "server/engine/model.h"

namespace failover::api {

class EventLog {
 public:
  explicit EventLog(size_t keep_recent = 1000, uint64_t next_sequence = 1);

  // Called with every numbered batch, in sequence order, before Publish
  // returns (storage writes transitions with their events here).
  using Sink = std::function<void(const Events&)>;
  void SetSink(Sink sink) { sink_ = std::move(sink); }
  // Seeds the recent list (events read back from storage after a restart).
  void Preload(Events events);

  // Numbers `events` (in order), logs one line each, hands them to the sink
  // and to every watcher, and keeps them.
  void Publish(Events events);

  // A live subscriber. Deliver is called under the log's lock, in sequence
  // order, and must only queue (never block). `wire[i]` is `events[i]` as a
  // serialized failover.v1.Event, made once for all watchers.
  class Watcher {
   public:
    virtual ~Watcher() = default;
    virtual void Deliver(const Events& events, const std::vector<grpc::ByteBuffer>& wire) = 0;
    // failoverd is shutting down: end the stream.
    virtual void Close() = 0;
  };
  // Registers `w`; every event after the returned sequence reaches it.
  // nullopt when `max_watchers` are already subscribed.
  std::optional<uint64_t> Subscribe(Watcher* w, size_t max_watchers);
  void Unsubscribe(Watcher* w);
  size_t watcher_count() const;
  // Ends every watcher's stream (shutdown).
  void CloseWatchers();

  // The newest `limit` events that `match` accepts, oldest first.
  std::vector<Event> Recent(size_t limit, const std::function<bool(const Event&)>& match) const;
  uint64_t last_sequence() const;

  // One human-readable line for an event, as written to the log.
  static std::string Describe(const Event& e);

 private:
  const size_t keep_recent_;
  Sink sink_;
  mutable absl::Mutex mu_;
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_);
  std::deque<Event> recent_ ABSL_GUARDED_BY(mu_);
  std::vector<Watcher*> watchers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace failover::api
