#include "server/api/decision_service.h"

#include "server/api/unimplemented.h"

namespace failover::api {

using namespace failover::v1;

grpc::ServerUnaryReactor* DecisionService::PickTarget(grpc::CallbackServerContext* ctx,
                                                      const PickTargetRequest*, PickTargetResponse*) {
  return FinishUnimplemented(ctx, "PickTarget");
}

grpc::ServerUnaryReactor* DecisionService::ReportOutcome(grpc::CallbackServerContext* ctx,
                                                         const ReportOutcomeRequest*,
                                                         ReportOutcomeResponse*) {
  return FinishUnimplemented(ctx, "ReportOutcome");
}

grpc::ServerUnaryReactor* DecisionService::Probe(grpc::CallbackServerContext* ctx, const ProbeRequest*,
                                                 ProbeResponse*) {
  return FinishUnimplemented(ctx, "Probe");
}

grpc::ServerWriteReactor<Event>* DecisionService::WatchEvents(grpc::CallbackServerContext*,
                                                              const WatchEventsRequest*) {
  return new UnimplementedWriter<Event>("WatchEvents");
}

}  // namespace failover::api
