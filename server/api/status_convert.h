// The one place where absl::Status becomes grpc::Status. The canonical codes
// have the same numbers in both, so the code carries over unchanged.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "common/utf8.h"
#include "grpcpp/grpcpp.h"

namespace failover::api {

// Longest error message sent. Messages may quote the caller's input; an
// unbounded one would overflow gRPC's metadata limit and reach the caller as
// RESOURCE_EXHAUSTED instead of the error it describes.
inline constexpr size_t kMaxErrorMessageBytes = 2048;

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      SanitizeUtf8(status.message(), kMaxErrorMessageBytes));
}

}  // namespace failover::api
