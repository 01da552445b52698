// What every RPC handler needs: the engine, the time source and where events go.
#pragma once

#include <string>

#include "absl/time/time.h"
#include "server/api/event_log.h"
#include "server/api/metrics.h"
#include "server/engine/clock.h"
#include "server/engine/engine.h"

namespace failover::api {

struct ServiceContext {
  Engine* engine = nullptr;
  const Clock* clock = nullptr;
  EventLog* events = nullptr;
  Metrics* metrics = nullptr;  // optional
  absl::Time started;
  std::string version;
};

}  // namespace failover::api
