// Opening a channel to failoverd and preparing calls, shared by failoverctl
// and the client library.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace failover::client {

struct ConnectionOptions {
  std::string server = "127.0.0.1:50051";  // host:port
  std::string token;                       // sent as "authorization: Bearer <token>"
  std::string tls_ca;                      // PEM files; TLS is on when any is set
  std::string tls_cert;
  std::string tls_key;
  double timeout_seconds = 5;
  // How long the channel waits at most between attempts to reconnect after
  // failoverd went away (gRPC's own default grows to 120 s, so a failoverd
  // back after a restart could go unnoticed for minutes).
  double max_reconnect_backoff_seconds = 1;
};

// Fails only when a TLS file cannot be read.
[[nodiscard]] absl::StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const ConnectionOptions& options);

// Sets the deadline (timeout_seconds; 0 = none) and the bearer token.
void PrepareContext(const ConnectionOptions& options, grpc::ClientContext* ctx);

}  // namespace failover::client
