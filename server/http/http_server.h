// failoverd's optional HTTP port (--http-listen): the status page at "/",
// the JSON routes of gateway.h, and GET /v1/watch, WatchEvents as
// Server-Sent Events. Served by cpp-httplib on a bounded pool of threads;
// every call goes to failoverd's gRPC server in-process, so the HTTP port has
// exactly the gRPC port's roles, checks and errors.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"

namespace httplib {
class Server;
}

namespace failover::http {

struct HttpOptions {
  std::string listen;  // host:port; port 0 picks a free one
  // TLS as on the gRPC port: certificate chain and key, and a CA that client
  // certificates must chain to (mTLS); all PEM files, empty = plain HTTP.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  size_t max_body = 4 << 20;   // larger request bodies get 413
  size_t threads = 32;         // connections served at once
  size_t max_streams = 16;     // concurrent /v1/watch streams (each holds a thread); more get 429
};

class HttpServer {
 public:
  // Binds and starts serving; `channel` reaches failoverd's gRPC services.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpOptions& options,
                                                           std::shared_ptr<grpc::Channel> channel);
  ~HttpServer();  // Stop()

  int port() const { return port_; }
  // Ends the event streams and stops serving.
  void Stop();

 private:
  HttpServer() = default;

  std::unique_ptr<httplib::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<size_t> streams_{0};
  size_t max_streams_ = 16;
};

}  // namespace failover::http
