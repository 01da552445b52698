#include "fuzz/request_world.h"

#include "server/api/wire.h"
#include "common/status_macros.h"

namespace failover::fuzz {
namespace {

api::ServiceContext Context(World* w) {
  api::ServiceContext ctx;
  ctx.engine = &w->engine;
  ctx.clock = &w->clock;
  ctx.events = &w->events;
  ctx.started = w->clock.Now();
  ctx.version = "fuzz";
  return ctx;
}

template <class Service, class Request, class Response>
Method Typed(std::string name, Service World::*service, absl::Status (Service::*handler)(const Request&, Response*)) {
  return Method{std::move(name),
                [service, handler](World& w, const grpc::ByteBuffer& in, std::string* serialized) -> absl::Status {
                  Request request;
                  Response response;
                  RETURN_IF_ERROR(api::ParseRequest(in, &request));
                  RETURN_IF_ERROR(((w.*service).*handler)(request, &response));
                  grpc::ByteBuffer out;
                  RETURN_IF_ERROR(api::SerializeMessage(response, &out));
                  if (serialized != nullptr && !response.SerializeToString(serialized)) {
                    return absl::InternalError("serialize");
                  }
                  return absl::OkStatus();
                }};
}

// WatchEvents runs as a stream on a live call; only its request parsing is
// reachable here.
Method ParseOnly(std::string name, std::function<google::protobuf::Message*()> make) {
  return Method{std::move(name), [make](World&, const grpc::ByteBuffer& in, std::string*) {
                  std::unique_ptr<google::protobuf::Message> request(make());
                  return api::ParseRequest(in, request.get());
                }};
}

}  // namespace

World::World()
    : decision(Context(this), api::WatchOptions()), admin(Context(this)) {
  // No disk here: Changes are published as they are made.
  engine.SetChangeSink([this](Change&& c) { events.Publish(c.events); });
  ConfigChange change;
  for (const char* name : {"a", "b", "c"}) {
    TargetConfig t;
    t.name = name;
    change.targets.push_back(t);
  }
  change.targets[2].kind = TargetKind::kLocal;
  ChainConfig ch;
  ch.name = "ch";
  ch.targets = {"a", "b"};
  ChainConfig ch2;
  ch2.name = "ch2";
  ch2.targets = {"b", "c"};
  ch2.policy.Mutable().trip_errors = 1;
  // Rate trips (target a's own) and least_latency, so that reports with
  // latencies reach them.
  ch2.strategy = Strategy::kLeastLatency;
  HealthPolicy rates;
  rates.trip_failure_rate = 50;
  rates.trip_min_calls = 2;
  rates.trip_slow_call_duration = absl::Seconds(1);
  rates.trip_slow_call_rate = 50;
  change.targets[0].health = rates;
  change.chains = {ch, ch2};
  auto applied = engine.Apply(change, ApplyOptions(), clock.Now());
  if (!applied.ok()) __builtin_trap();
}

const std::vector<Method>& Methods() {
  using api::AdminService;
  using api::DecisionService;
  static const auto* methods = new std::vector<Method>{
      Typed("PickTarget", &World::decision, &DecisionService::Pick),
      Typed("ReportOutcome", &World::decision, &DecisionService::Report),
      Typed("Probe", &World::decision, &DecisionService::DoProbe),
      ParseOnly("WatchEvents", [] { return new v1::WatchEventsRequest(); }),
      Typed("Apply", &World::admin, &AdminService::DoApply),
      Typed("GetTarget", &World::admin, &AdminService::DoGetTarget),
      Typed("ListTargets", &World::admin, &AdminService::DoListTargets),
      Typed("DeleteTarget", &World::admin, &AdminService::DoDeleteTarget),
      Typed("GetChain", &World::admin, &AdminService::DoGetChain),
      Typed("ListChains", &World::admin, &AdminService::DoListChains),
      Typed("DeleteChain", &World::admin, &AdminService::DoDeleteChain),
      Typed("PinChain", &World::admin, &AdminService::DoPinChain),
      Typed("UnpinChain", &World::admin, &AdminService::DoUnpinChain),
      Typed("TriggerFailover", &World::admin, &AdminService::DoTriggerFailover),
      Typed("CancelFailover", &World::admin, &AdminService::DoCancelFailover),
      Typed("SetTargetEnabled", &World::admin, &AdminService::DoSetTargetEnabled),
      Typed("ProbeNow", &World::admin, &AdminService::DoProbeNow),
      Typed("ListEvents", &World::admin, &AdminService::DoListEvents),
      Typed("GetStatus", &World::admin, &AdminService::DoGetStatus),
  };
  return *methods;
}

bool EverythingSentIsValid(World& world) {
  auto round_trip = [](const google::protobuf::Message& sent, google::protobuf::Message* received) {
    grpc::ByteBuffer wire;
    return api::SerializeMessage(sent, &wire).ok() && api::ParseRequest(wire, received).ok();
  };
  v1::StatusResponse status;
  v1::StatusResponse status_back;
  if (!world.admin.DoGetStatus(v1::GetStatusRequest(), &status).ok() || !round_trip(status, &status_back)) {
    return false;
  }
  v1::ListEventsRequest list;
  list.set_limit(1000);
  v1::ListEventsResponse events;
  v1::ListEventsResponse events_back;
  return world.admin.DoListEvents(list, &events).ok() && round_trip(events, &events_back);
}

}  // namespace failover::fuzz
