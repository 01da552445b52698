// failoverctl: the command-line client of failoverd.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "CLI/CLI.hpp"
#include "client/connection.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace {

// Exit codes, stable for scripts.
constexpr int kExitOk = 0;
constexpr int kExitRefused = 1;
constexpr int kExitUsage = 2;
constexpr int kExitUnreachable = 3;

int ExitFor(const grpc::Status& status) {
  if (status.ok()) return kExitOk;
  std::fprintf(stderr, "failoverctl: %s\n", status.error_message().c_str());
  return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                 status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
             ? kExitUnreachable
             : kExitRefused;
}

}  // namespace

int main(int argc, char** argv) {
  failover::client::ConnectionOptions conn;
  if (const char* env = std::getenv("FAILOVERD_ADDR")) conn.server = env;
  double timeout_seconds = 5;

  CLI::App app{"failoverctl: administer and inspect failoverd"};
  app.require_subcommand(1);
  app.add_option("--server", conn.server, "failoverd address host:port (env FAILOVERD_ADDR)")
      ->capture_default_str();
  app.add_option("--timeout", timeout_seconds, "Seconds to wait for each call")->capture_default_str();

  CLI::App* health = app.add_subcommand("health", "Check that failoverd is serving (gRPC health)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }

  auto channel = failover::client::OpenChannel(conn);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000)));
  if (*health) {
    auto stub = grpc::health::v1::Health::NewStub(channel);
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    grpc::Status s = stub->Check(&ctx, req, &resp);
    if (!s.ok()) return ExitFor(s);
    const bool serving = resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
    std::printf("%s\n", serving ? "SERVING" : "NOT_SERVING");
    return serving ? kExitOk : kExitRefused;
  }
  return kExitUsage;
}
