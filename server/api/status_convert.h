// The one place where absl::Status becomes grpc::Status. The canonical codes
// have the same numbers in both, so the code carries over unchanged.
#pragma once

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"

namespace failover::api {

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

// Runs `body` (returning absl::Status) and finishes the unary call with it.
template <typename Body>
grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* ctx, Body&& body) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(std::forward<Body>(body)()));
  return reactor;
}

}  // namespace failover::api
