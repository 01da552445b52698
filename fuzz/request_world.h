// What the request fuzzer and its seed writer share: a small in-memory world
// (engine, services, simulated clock; no disk, no network) and the table of
// every RPC, each run as failoverd runs it: parse the raw bytes, validate and
// convert, call the engine, serialize the response.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "server/api/admin_service.h"
#include "server/api/decision_service.h"
#include "server/api/event_log.h"
#include "common/clock.h"
#include "server/engine/engine.h"

namespace failover::fuzz {

struct World {
  World();  // targets a, b, c (c local) and chains ch [a, b], ch2 [b, c]

  SimulatedClock clock;
  Engine engine;
  api::EventLog events;
  api::DecisionService decision;
  api::AdminService admin;
};

struct Method {
  std::string name;  // as in the service, e.g. "PickTarget"
  // `response`, when not null, receives the serialized response.
  std::function<absl::Status(World&, const grpc::ByteBuffer&, std::string* response)> run;
};

// Every RPC of both services; a fuzz input's first byte picks one.
const std::vector<Method>& Methods();

// GetStatus and ListEvents, serialized and parsed back as a client would:
// false if either is not a valid message (a string that is not UTF-8).
bool EverythingSentIsValid(World& world);

}  // namespace failover::fuzz
