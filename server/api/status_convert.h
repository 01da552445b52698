// The one place where absl::Status becomes grpc::Status. The canonical codes
// have the same numbers in both, so the code carries over unchanged.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"

namespace failover::api {

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace failover::api
