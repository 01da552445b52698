// failoverd: flags, wiring and shutdown. Decisions live in server/engine,
// RPC adapters in server/api, persistence in storage/.
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "prometheus/exposer.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "server/api/admin_service.h"
#include "server/api/decision_service.h"
#include "server/api/event_log.h"
#include "server/api/service_context.h"
#include "server/engine/clock.h"
#include "server/engine/engine.h"
#include "server/log/log.h"
#include "storage/store.h"

namespace {

struct Flags {
  std::string listen = "127.0.0.1:50051";
  std::string data_dir = "./data";
  std::string config;
  std::string metrics_listen = "127.0.0.1:9464";
  std::string log_level = "info";
  std::string log_format = "text";
  std::string port_file;
  double shutdown_grace_seconds = 10;
};

// The services whose health is reported; "" is the server as a whole.
constexpr const char* kHealthServices[] = {"", "failover.v1.DecisionService",
                                           "failover.v1.AdminService"};

// Runs the engine's time-driven work (dwell expiry, targets without health
// checks coming back, decision expiry) about once a second.
class Ticker {
 public:
  Ticker(failover::Engine* engine, const failover::Clock* clock, failover::api::EventLog* events)
      : engine_(engine), clock_(clock), events_(events), thread_([this] { Run(); }) {}
  ~Ticker() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }

 private:
  void Run() {
    absl::MutexLock lock(&mu_);
    while (!mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Seconds(1))) {
      mu_.Unlock();
      failover::Events events;
      engine_->Tick(clock_->Now(), &events);
      events_->Publish(std::move(events));
      mu_.Lock();
    }
  }

  failover::Engine* engine_;
  const failover::Clock* clock_;
  failover::api::EventLog* events_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

void SetServing(grpc::Server* server, bool serving) {
  for (const char* name : kHealthServices) {
    server->GetHealthCheckService()->SetServingStatus(name, serving);
  }
}

int Run(const Flags& flags) {
  namespace log = failover::log;
  auto store_or = failover::storage::Store::Open(flags.data_dir);
  if (!store_or.ok()) {
    log::Error(absl::StrCat("cannot open the data dir: ", store_or.status().message()));
    return 1;
  }
  std::unique_ptr<failover::storage::Store> store = std::move(store_or).value();
  log::Info("data dir opened", {{"data_dir", flags.data_dir}, {"instance", store->instance_id()}});
  if (!flags.config.empty()) {
    log::Warn("config files are not loaded by this build yet", {{"config", flags.config}});
  }

  std::unique_ptr<prometheus::Exposer> exposer;
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildGauge()
      .Name("failover_build_info")
      .Help("Build information; always 1.")
      .Register(*registry)
      .Add({{"version", FAILOVERD_VERSION}})
      .Set(1);
  if (!flags.metrics_listen.empty()) {
    try {
      exposer = std::make_unique<prometheus::Exposer>(flags.metrics_listen);
      exposer->RegisterCollectable(registry);
    } catch (const std::exception& e) {
      log::Error(absl::StrCat("cannot listen for metrics on ", flags.metrics_listen, ": ", e.what()));
      return 1;
    }
  }

  failover::RealClock clock;
  failover::Engine engine;
  failover::api::EventLog event_log;
  failover::api::ServiceContext context{&engine, &clock, &event_log, clock.Now(), FAILOVERD_VERSION};
  failover::api::DecisionService decision_service(context);
  failover::api::AdminService admin_service(context);
  Ticker ticker(&engine, &clock, &event_log);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(flags.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&decision_service);
  builder.RegisterService(&admin_service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    log::Error(absl::StrCat("cannot listen on ", flags.listen));
    return 1;
  }
  SetServing(server.get(), true);
  log::Info("failoverd serving", {{"listen", flags.listen}, {"port", std::to_string(port)},
                                  {"metrics", flags.metrics_listen}});
  if (!flags.port_file.empty()) {
    // Written whole under a temp name, then renamed, so readers never see half a number.
    const std::string tmp = flags.port_file + ".tmp";
    std::ofstream(tmp) << port << "\n";
    std::rename(tmp.c_str(), flags.port_file.c_str());
  }

  // Signals were blocked in main() before any thread started; wait for one here.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  for (;;) {
    int sig = 0;
    sigwait(&set, &sig);
    if (sig == SIGHUP) {
      log::Info("SIGHUP received; nothing to reload in this build");
      continue;
    }
    log::Info(absl::StrCat("signal ", sig, " received; shutting down"));
    break;
  }
  SetServing(server.get(), false);
  server->Shutdown(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(flags.shutdown_grace_seconds * 1000)));
  server->Wait();
  absl::Status closed = store->Close();
  if (!closed.ok()) {
    log::Error(absl::StrCat("closing the data dir failed: ", closed.message()));
    return 1;
  }
  log::Info("failoverd stopped cleanly");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  CLI::App app{"failoverd: failover decisions for callers that do their own I/O"};
  app.add_option("--listen", flags.listen, "gRPC listen address (host:port; port 0 picks a free one)")
      ->capture_default_str();
  app.add_option("--data-dir", flags.data_dir, "Directory of the embedded RocksDB database")
      ->capture_default_str();
  app.add_option("--config", flags.config, "Config file or directory of *.yaml files (targets, chains)");
  app.add_option("--metrics-listen", flags.metrics_listen,
                 "Prometheus metrics address (host:port); empty disables metrics")
      ->capture_default_str();
  app.add_option("--log-level", flags.log_level, "debug, info, warn or error")
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}))
      ->capture_default_str();
  app.add_option("--log-format", flags.log_format, "text (one line per record) or json (JSON lines)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app.add_option("--port-file", flags.port_file,
                 "Write the bound gRPC port to this file once serving (useful with port 0)");
  app.add_option("--shutdown-grace", flags.shutdown_grace_seconds,
                 "Seconds in-flight calls get to finish on SIGTERM/SIGINT")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  failover::log::Level level = failover::log::Level::kInfo;
  failover::log::ParseLevel(flags.log_level, &level);
  failover::log::Configure(level, flags.log_format == "json");

  // Block the shutdown and reload signals in every thread; Run() waits for them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return Run(flags);
}
