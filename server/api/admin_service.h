// gRPC adapter for failover.v1.AdminService.
#pragma once

#include "failover/v1/admin.grpc.pb.h"

namespace failover::api {

class AdminService final : public failover::v1::AdminService::CallbackService {
 public:
  grpc::ServerUnaryReactor* Apply(grpc::CallbackServerContext* ctx, const failover::v1::ApplyRequest* request,
      failover::v1::ApplyResponse* response) override;
  grpc::ServerUnaryReactor* GetTarget(grpc::CallbackServerContext* ctx, const failover::v1::GetTargetRequest* request,
      failover::v1::TargetView* response) override;
  grpc::ServerUnaryReactor* ListTargets(grpc::CallbackServerContext* ctx, const failover::v1::ListTargetsRequest* request,
      failover::v1::ListTargetsResponse* response) override;
  grpc::ServerUnaryReactor* DeleteTarget(grpc::CallbackServerContext* ctx, const failover::v1::DeleteTargetRequest* request,
      failover::v1::DeleteResponse* response) override;
  grpc::ServerUnaryReactor* GetChain(grpc::CallbackServerContext* ctx, const failover::v1::GetChainRequest* request,
      failover::v1::ChainView* response) override;
  grpc::ServerUnaryReactor* ListChains(grpc::CallbackServerContext* ctx, const failover::v1::ListChainsRequest* request,
      failover::v1::ListChainsResponse* response) override;
  grpc::ServerUnaryReactor* DeleteChain(grpc::CallbackServerContext* ctx, const failover::v1::DeleteChainRequest* request,
      failover::v1::DeleteResponse* response) override;
  grpc::ServerUnaryReactor* PinChain(grpc::CallbackServerContext* ctx, const failover::v1::PinChainRequest* request,
      failover::v1::ChainView* response) override;
  grpc::ServerUnaryReactor* UnpinChain(grpc::CallbackServerContext* ctx, const failover::v1::UnpinChainRequest* request,
      failover::v1::ChainView* response) override;
  grpc::ServerUnaryReactor* TriggerFailover(grpc::CallbackServerContext* ctx, const failover::v1::TriggerFailoverRequest* request,
      failover::v1::TargetView* response) override;
  grpc::ServerUnaryReactor* CancelFailover(grpc::CallbackServerContext* ctx, const failover::v1::CancelFailoverRequest* request,
      failover::v1::TargetView* response) override;
  grpc::ServerUnaryReactor* SetTargetEnabled(grpc::CallbackServerContext* ctx, const failover::v1::SetTargetEnabledRequest* request,
      failover::v1::TargetView* response) override;
  grpc::ServerUnaryReactor* ProbeNow(grpc::CallbackServerContext* ctx, const failover::v1::ProbeNowRequest* request,
      failover::v1::ProbeNowResponse* response) override;
  grpc::ServerUnaryReactor* ListEvents(grpc::CallbackServerContext* ctx, const failover::v1::ListEventsRequest* request,
      failover::v1::ListEventsResponse* response) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* ctx, const failover::v1::GetStatusRequest* request,
      failover::v1::StatusResponse* response) override;
};

}  // namespace failover::api
