// Where engine events go after an operation: numbered in order, written to
// the log, kept in a bounded in-memory list for ListEvents.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/engine/model.h"

namespace failover::api {

class EventLog {
 public:
  explicit EventLog(size_t keep_recent = 1000, uint64_t next_sequence = 1);

  // Numbers `events` (in order), logs one line each and keeps them.
  void Publish(Events events);

  // The newest `limit` events that `match` accepts, oldest first.
  std::vector<Event> Recent(size_t limit, const std::function<bool(const Event&)>& match) const;
  uint64_t last_sequence() const;

  // One human-readable line for an event, as written to the log.
  static std::string Describe(const Event& e);

 private:
  const size_t keep_recent_;
  mutable absl::Mutex mu_;
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_);
  std::deque<Event> recent_ ABSL_GUARDED_BY(mu_);
};

}  // namespace failover::api
