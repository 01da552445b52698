#include "client/connection.h"

#include <algorithm>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace failover::client {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const ConnectionOptions& options) {
  grpc::ChannelArguments args;
  const int max_backoff_ms = static_cast<int>(std::max(0.1, options.max_reconnect_backoff_seconds) * 1000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, max_backoff_ms);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, std::min(max_backoff_ms, 200));
  // GRPC_ARG_MIN_RECONNECT_BACKOFF_MS is left at gRPC's 20 s: gRPC gives each
  // connection attempt that long at least, and a shorter one abandoned every
  // attempt at a failoverd slower than it to answer (a loaded machine), so
  // the channel never connected.
  if (options.tls_ca.empty() && options.tls_cert.empty() && options.tls_key.empty()) {
    return grpc::CreateCustomChannel(options.server, grpc::InsecureChannelCredentials(), args);
  }
  grpc::SslCredentialsOptions ssl;
  if (!options.tls_ca.empty()) {
    auto ca = ReadPem(options.tls_ca);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
  }
  if (!options.tls_cert.empty()) {
    auto cert = ReadPem(options.tls_cert);
    if (!cert.ok()) return cert.status();
    ssl.pem_cert_chain = *cert;
  }
  if (!options.tls_key.empty()) {
    auto key = ReadPem(options.tls_key);
    if (!key.ok()) return key.status();
    ssl.pem_private_key = *key;
  }
  return grpc::CreateCustomChannel(options.server, grpc::SslCredentials(ssl), args);
}

void PrepareContext(const ConnectionOptions& options, grpc::ClientContext* ctx) {
  if (options.timeout_seconds > 0) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(static_cast<int64_t>(options.timeout_seconds * 1000)));
  }
  if (!options.token.empty()) ctx->AddMetadata("authorization", absl::StrCat("Bearer ", options.token));
}

}  // namespace failover::client
