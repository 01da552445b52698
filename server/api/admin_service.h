// gRPC adapter for failover.v1.AdminService.
#pragma once

#include <atomic>

#include "failover/v1/admin.grpc.pb.h"
#include "server/api/service_context.h"

namespace failover::api {

// Raw callback methods: ServeUnary (wire.h) parses each request itself.
using AdminGrpc = failover::v1::AdminService;
using AdminServiceBase =
    AdminGrpc::WithRawCallbackMethod_Apply<
    AdminGrpc::WithRawCallbackMethod_GetTarget<
    AdminGrpc::WithRawCallbackMethod_ListTargets<
    AdminGrpc::WithRawCallbackMethod_DeleteTarget<
    AdminGrpc::WithRawCallbackMethod_GetChain<
    AdminGrpc::WithRawCallbackMethod_ListChains<
    AdminGrpc::WithRawCallbackMethod_DeleteChain<
    AdminGrpc::WithRawCallbackMethod_PinChain<
    AdminGrpc::WithRawCallbackMethod_UnpinChain<
    AdminGrpc::WithRawCallbackMethod_TriggerFailover<
    AdminGrpc::WithRawCallbackMethod_CancelFailover<
    AdminGrpc::WithRawCallbackMethod_SetTargetEnabled<
    AdminGrpc::WithRawCallbackMethod_ProbeNow<
    AdminGrpc::WithRawCallbackMethod_ListEvents<
    AdminGrpc::WithRawCallbackMethod_GetStatus<
    AdminGrpc::WithRawCallbackMethod_ListTrace<
    AdminGrpc::WithRawCallbackMethod_Simulate<
    AdminGrpc::Service>>>>>>>>>>>>>>>>>;

class AdminService final : public AdminServiceBase {
 public:
  explicit AdminService(ServiceContext ctx) : ctx_(ctx) {}

  grpc::ServerUnaryReactor* Apply(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetTarget(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListTargets(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* DeleteTarget(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetChain(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListChains(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* DeleteChain(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* PinChain(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* UnpinChain(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* TriggerFailover(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CancelFailover(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* SetTargetEnabled(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ProbeNow(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListEvents(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListTrace(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Simulate(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;

 // The handlers without the call around them (the fuzzers call these).
  absl::Status DoApply(const failover::v1::ApplyRequest& req, failover::v1::ApplyResponse* resp);
  absl::Status DoGetTarget(const failover::v1::GetTargetRequest& req, failover::v1::TargetView* resp);
  absl::Status DoListTargets(const failover::v1::ListTargetsRequest& req, failover::v1::ListTargetsResponse* resp);
  absl::Status DoDeleteTarget(const failover::v1::DeleteTargetRequest& req, failover::v1::DeleteResponse* resp);
  absl::Status DoGetChain(const failover::v1::GetChainRequest& req, failover::v1::ChainView* resp);
  absl::Status DoListChains(const failover::v1::ListChainsRequest& req, failover::v1::ListChainsResponse* resp);
  absl::Status DoDeleteChain(const failover::v1::DeleteChainRequest& req, failover::v1::DeleteResponse* resp);
  absl::Status DoPinChain(const failover::v1::PinChainRequest& req, failover::v1::ChainView* resp);
  absl::Status DoUnpinChain(const failover::v1::UnpinChainRequest& req, failover::v1::ChainView* resp);
  absl::Status DoTriggerFailover(const failover::v1::TriggerFailoverRequest& req, failover::v1::TargetView* resp);
  absl::Status DoCancelFailover(const failover::v1::CancelFailoverRequest& req, failover::v1::TargetView* resp);
  absl::Status DoSetTargetEnabled(const failover::v1::SetTargetEnabledRequest& req, failover::v1::TargetView* resp);
  absl::Status DoListEvents(const failover::v1::ListEventsRequest& req, failover::v1::ListEventsResponse* resp);
  absl::Status DoGetStatus(const failover::v1::GetStatusRequest& req, failover::v1::StatusResponse* resp);
  absl::Status DoProbeNow(const failover::v1::ProbeNowRequest& req, failover::v1::ProbeNowResponse* resp);
  absl::Status DoListTrace(const failover::v1::ListTraceRequest& req, failover::v1::ListTraceResponse* resp);
  absl::Status DoSimulate(const failover::v1::SimulateRequest& req, failover::v1::SimulateResponse* resp);

 private:
  absl::Status TargetViewOf(const std::string& name, failover::v1::TargetView* resp);
  absl::Status ChainViewOf(const std::string& name, failover::v1::ChainView* resp);

  ServiceContext ctx_;
  // Simulations running now: each holds up to 300,000 trace entries and a
  // gRPC thread while it replays, so only a few run at once.
  std::atomic<int> simulating_{0};
};

// Simulate calls that may run at once; one more is refused with RESOURCE_EXHAUSTED.
inline constexpr int kMaxConcurrentSimulations = 2;

}  // namespace failover::api
