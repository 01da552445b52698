// gRPC adapter for failover.v1.DecisionService.
#pragma once

#include "failover/v1/decision.grpc.pb.h"
#include "server/api/service_context.h"
#include "server/api/watch_stream.h"

namespace failover::api {

class DecisionService final : public failover::v1::DecisionService::CallbackService {
 public:
  DecisionService(ServiceContext ctx, WatchOptions watch) : ctx_(ctx), watch_(std::move(watch)) {}

  grpc::ServerUnaryReactor* PickTarget(grpc::CallbackServerContext* ctx,
                                       const failover::v1::PickTargetRequest* request,
                                       failover::v1::PickTargetResponse* response) override;
  grpc::ServerUnaryReactor* ReportOutcome(grpc::CallbackServerContext* ctx,
                                          const failover::v1::ReportOutcomeRequest* request,
                                          failover::v1::ReportOutcomeResponse* response) override;
  grpc::ServerUnaryReactor* Probe(grpc::CallbackServerContext* ctx,
                                  const failover::v1::ProbeRequest* request,
                                  failover::v1::ProbeResponse* response) override;
  grpc::ServerWriteReactor<failover::v1::Event>* WatchEvents(
      grpc::CallbackServerContext* ctx, const failover::v1::WatchEventsRequest* request) override;

 private:
  absl::Status Pick(const failover::v1::PickTargetRequest& req, failover::v1::PickTargetResponse* resp);
  absl::Status DoProbe(const failover::v1::ProbeRequest& req, failover::v1::ProbeResponse* resp);
  absl::Status Report(const failover::v1::ReportOutcomeRequest& req, failover::v1::ReportOutcomeResponse* resp);

  ServiceContext ctx_;
  WatchOptions watch_;
};

}  // namespace failover::api
