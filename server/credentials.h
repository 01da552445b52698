// TLS credentials for the gRPC port, read from the files the flags name.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"
#include "server/flags.h"

namespace failover {

// Plaintext, TLS (--tls-cert/--tls-key) or mTLS (plus --tls-client-ca). A
// missing file or one that is not PEM is an error naming the flag and file.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const Flags& flags);

}  // namespace failover
