// failoverd's optional HTTP port (--http-listen): the status page at "/",
// the JSON routes of gateway.h, and GET /v1/watch, WatchEvents as
// Server-Sent Events. Every call goes to failoverd's gRPC server in-process,
// so the HTTP port has exactly the gRPC port's roles, checks and errors.
//
// Served by Boost.Beast on Asio (DESIGN 3.16): a few event-loop threads own
// every connection, so a slow or silent client holds a connection slot, never
// a thread. Each request is bounded before it is buffered: header bytes and
// count (431), body bytes however it is framed (413), a deadline for the whole
// header section and one for the body; an unread event stream is dropped when
// a write stalls. No thread waits for a JSON route's in-process gRPC call (it
// may wait for the disk): its answer comes back to the connection's strand.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"

namespace failover::http {

struct HttpOptions {
  std::string listen;  // host:port; port 0 picks a free one
  // TLS as on the gRPC port: certificate chain and key, and a CA that client
  // certificates must chain to (mTLS); all PEM files, empty = plain HTTP.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  // Host names answered besides the listen host, "localhost" and IP literals;
  // "*" answers any (host_check.h).
  std::vector<std::string> allowed_hosts;
  size_t max_body = 4 << 20;           // request body bytes, however framed; more get 413
  size_t max_header_bytes = 16 << 10;  // request line and headers; more get 431
  size_t max_header_fields = 100;      // header lines; more get 431
  // From the moment a connection waits for a request (or its TLS hello) until
  // the header section is complete; a connection that misses it is closed.
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds body_timeout{30000};   // for the whole body
  std::chrono::milliseconds write_timeout{30000};  // for one response or event write
  size_t max_connections = 1024;  // open at once; more are answered 503 and closed
  size_t max_streams = 64;        // concurrent /v1/watch streams; more get 429
  size_t io_threads = 2;          // event-loop threads
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
  struct Impl;
  HttpServer() = default;

  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace failover::http
