#include "server/api/admin_service.h"

#include "server/api/unimplemented.h"

namespace failover::api {

using namespace failover::v1;

grpc::ServerUnaryReactor* AdminService::Apply(grpc::CallbackServerContext* ctx, const ApplyRequest*, ApplyResponse*) {
  return FinishUnimplemented(ctx, "Apply");
}

grpc::ServerUnaryReactor* AdminService::GetTarget(grpc::CallbackServerContext* ctx, const GetTargetRequest*, TargetView*) {
  return FinishUnimplemented(ctx, "GetTarget");
}

grpc::ServerUnaryReactor* AdminService::ListTargets(grpc::CallbackServerContext* ctx, const ListTargetsRequest*, ListTargetsResponse*) {
  return FinishUnimplemented(ctx, "ListTargets");
}

grpc::ServerUnaryReactor* AdminService::DeleteTarget(grpc::CallbackServerContext* ctx, const DeleteTargetRequest*, DeleteResponse*) {
  return FinishUnimplemented(ctx, "DeleteTarget");
}

grpc::ServerUnaryReactor* AdminService::GetChain(grpc::CallbackServerContext* ctx, const GetChainRequest*, ChainView*) {
  return FinishUnimplemented(ctx, "GetChain");
}

grpc::ServerUnaryReactor* AdminService::ListChains(grpc::CallbackServerContext* ctx, const ListChainsRequest*, ListChainsResponse*) {
  return FinishUnimplemented(ctx, "ListChains");
}

grpc::ServerUnaryReactor* AdminService::DeleteChain(grpc::CallbackServerContext* ctx, const DeleteChainRequest*, DeleteResponse*) {
  return FinishUnimplemented(ctx, "DeleteChain");
}

grpc::ServerUnaryReactor* AdminService::PinChain(grpc::CallbackServerContext* ctx, const PinChainRequest*, ChainView*) {
  return FinishUnimplemented(ctx, "PinChain");
}

grpc::ServerUnaryReactor* AdminService::UnpinChain(grpc::CallbackServerContext* ctx, const UnpinChainRequest*, ChainView*) {
  return FinishUnimplemented(ctx, "UnpinChain");
}

grpc::ServerUnaryReactor* AdminService::TriggerFailover(grpc::CallbackServerContext* ctx, const TriggerFailoverRequest*, TargetView*) {
  return FinishUnimplemented(ctx, "TriggerFailover");
}

grpc::ServerUnaryReactor* AdminService::CancelFailover(grpc::CallbackServerContext* ctx, const CancelFailoverRequest*, TargetView*) {
  return FinishUnimplemented(ctx, "CancelFailover");
}

grpc::ServerUnaryReactor* AdminService::SetTargetEnabled(grpc::CallbackServerContext* ctx, const SetTargetEnabledRequest*, TargetView*) {
  return FinishUnimplemented(ctx, "SetTargetEnabled");
}

grpc::ServerUnaryReactor* AdminService::ProbeNow(grpc::CallbackServerContext* ctx, const ProbeNowRequest*, ProbeNowResponse*) {
  return FinishUnimplemented(ctx, "ProbeNow");
}

grpc::ServerUnaryReactor* AdminService::ListEvents(grpc::CallbackServerContext* ctx, const ListEventsRequest*, ListEventsResponse*) {
  return FinishUnimplemented(ctx, "ListEvents");
}

grpc::ServerUnaryReactor* AdminService::GetStatus(grpc::CallbackServerContext* ctx, const GetStatusRequest*, StatusResponse*) {
  return FinishUnimplemented(ctx, "GetStatus");
}

}  // namespace failover::api
