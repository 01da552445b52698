// failoverd: flags, wiring and shutdown. Decisions live in server/engine,
// RPC adapters in server/api, persistence in storage/.
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "google/protobuf/stubs/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "prometheus/exposer.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "server/api/admin_service.h"
#include "server/api/decision_service.h"
#include "server/api/event_log.h"
#include "server/api/release_memory.h"
#include "server/api/service_context.h"
#include "server/config_reloader.h"
#include "server/engine/clock.h"
#include "server/engine/engine.h"
#include "server/log/log.h"
#include "server/state_sync.h"
#include "storage/store.h"

namespace {

namespace log = failover::log;

struct Flags {
  std::string listen = "127.0.0.1:50051";
  std::string data_dir = "./data";
  std::string config;
  double config_poll_seconds = 2;
  std::string metrics_listen = "127.0.0.1:9464";
  std::string log_level = "info";
  std::string log_format = "text";
  std::string port_file;
  double shutdown_grace_seconds = 10;
  size_t events_keep = 10000;
  size_t watch_queue = 1024;
  std::string tokens_file;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  double events_max_age_hours = 168;
  size_t max_message_bytes = 4 << 20;
  size_t max_watchers = 10000;
  size_t max_targets = 100000;
  size_t max_chains = 100000;
};

// The services whose health is reported; "" is the server as a whole.
constexpr const char* kHealthServices[] = {"", "failover.v1.DecisionService", "failover.v1.AdminService"};

void SetServing(grpc::Server* server, bool serving) {
  for (const char* name : kHealthServices) server->GetHealthCheckService()->SetServingStatus(name, serving);
}

// Runs the time-driven work about once a second: the engine's dwell expiry,
// targets without health checks coming back, decision expiry; and once a
// minute, event retention.
class Ticker {
 public:
  Ticker(failover::Engine* engine, const failover::Clock* clock, failover::api::EventLog* events,
         failover::storage::Store* store, const Flags& flags)
      : engine_(engine), clock_(clock), events_(events), store_(store), flags_(flags), thread_([this] { Run(); }) {}
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
    for (int tick = 1; !mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Seconds(1)); ++tick) {
      mu_.Unlock();
      failover::Events events;
      engine_->Tick(clock_->Now(), &events);
      events_->Publish(std::move(events));
      if (tick % 60 == 0) {
        const absl::Status trimmed = store_->TrimEvents(
            flags_.events_keep, absl::Hours(flags_.events_max_age_hours), clock_->Now());
        if (!trimmed.ok()) log::Error(absl::StrCat("event retention failed: ", trimmed.message()));
      }
      mu_.Lock();
    }
  }

  failover::Engine* engine_;
  const failover::Clock* clock_;
  failover::api::EventLog* events_;
  failover::storage::Store* store_;
  const Flags& flags_;
  absl::Mutex mu_;
  bool stop_ = false;
  std::thread thread_;
};

absl::StatusOr<std::string> ReadPem(const std::string& flag, const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  // gRPC would only fail later, at listen time, without naming the file.
  if (text.str().find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is not PEM (no -----BEGIN line)"));
  }
  return text.str();
}

// Plaintext, TLS (--tls-cert/--tls-key) or mTLS (plus --tls-client-ca).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const Flags& flags) {
  if (flags.tls_cert.empty() && flags.tls_key.empty()) {
    if (!flags.tls_client_ca.empty()) return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
    return grpc::InsecureServerCredentials();
  }
  if (flags.tls_cert.empty() || flags.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  grpc::SslServerCredentialsOptions ssl;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  auto cert = ReadPem("--tls-cert", flags.tls_cert);
  if (!cert.ok()) return cert.status();
  auto key = ReadPem("--tls-key", flags.tls_key);
  if (!key.ok()) return key.status();
  pair.cert_chain = *cert;
  pair.private_key = *key;
  ssl.pem_key_cert_pairs.push_back(pair);
  if (!flags.tls_client_ca.empty()) {
    auto ca = ReadPem("--tls-client-ca", flags.tls_client_ca);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

// Tokens are re-read on SIGHUP; a file that no longer parses keeps the old ones.
void ReloadTokens(failover::api::Authorizer& auth, const std::string& path) {
  const absl::Status reloaded = auth.Reload();
  if (!reloaded.ok()) {
    log::Error(absl::StrCat("tokens not reloaded, the previous ones stay: ", reloaded.message()));
    return;
  }
  log::Info("tokens reloaded", {{"tokens_file", path}, {"tokens", std::to_string(auth.token_count())}});
}

// libprotobuf writes its own complaints (a request with invalid UTF-8, say) to
// stderr; they belong in failoverd's log, and at debug, since the caller
// already gets the error.
void RouteProtobufLogs() {
  google::protobuf::SetLogHandler([](google::protobuf::LogLevel level, const char* file, int line,
                                     const std::string& message) {
    const log::Level to = level >= google::protobuf::LOGLEVEL_FATAL ? log::Level::kError : log::Level::kDebug;
    log::Write(to, absl::StrCat("libprotobuf: ", message), {{"at", absl::StrCat(file, ":", line)}});
  });
}

sigset_t HandledSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  return set;
}

int Run(const Flags& flags) {
  failover::RealClock clock;
  auto store_or = failover::storage::Store::Open(flags.data_dir);
  if (!store_or.ok()) {
    log::Error(absl::StrCat("cannot open the data dir: ", store_or.status().message()));
    return 1;
  }
  std::unique_ptr<failover::storage::Store> store = std::move(store_or).value();

  // Restore everything before serving.
  failover::EngineOptions engine_options;
  engine_options.max_targets = flags.max_targets;
  engine_options.max_chains = flags.max_chains;
  failover::Engine engine(engine_options);
  const absl::Time restore_start = clock.Now();
  auto restored = store->Load();
  if (!restored.ok()) {
    log::Error(absl::StrCat("cannot read the data dir: ", restored.status().message()));
    return 1;
  }
  auto settled = engine.Restore(*restored, clock.Now());
  if (!settled.ok()) {
    log::Error(absl::StrCat("cannot restore the stored state from ", flags.data_dir, ": ", settled.status().message()));
    return 1;
  }
  failover::api::EventLog event_log(1000, store->next_sequence());
  auto recent = store->RecentEvents(1000);
  if (recent.ok()) event_log.Preload(std::move(recent).value());
  auto registry = std::make_shared<prometheus::Registry>();
  failover::api::Metrics metrics(*registry);
  auto state_gauges = std::make_shared<failover::api::StateCollector>(&engine);
  event_log.SetSink([&](const failover::Events& events) {
    PersistTransitions(*store, engine, events);
    metrics.OnEvents(events);
  });
  engine.SetCommitHook([&](const failover::Mutation& m) { return store->Commit(m); });
  event_log.Publish(std::move(settled).value());
  log::Info("state restored", {{"data_dir", flags.data_dir},
                               {"instance", store->instance_id()},
                               {"targets", std::to_string(restored->targets.size())},
                               {"chains", std::to_string(restored->chains.size())},
                               {"generation", std::to_string(restored->generation)},
                               {"next_sequence", std::to_string(store->next_sequence())},
                               {"took", absl::FormatDuration(clock.Now() - restore_start)}});
  *restored = failover::RestoredState();
  failover::api::ReleaseFreedMemory();  // the stored state was read whole; give back what it took

  std::unique_ptr<failover::ConfigReloader> reloader;
  if (!flags.config.empty()) {
    reloader = std::make_unique<failover::ConfigReloader>(flags.config, &engine, &clock, &event_log);
    const absl::Status applied = reloader->Apply();
    if (!applied.ok()) {
      log::Error(absl::StrCat("bad config: ", applied.message()));
      return 1;
    }
    if (flags.config_poll_seconds > 0) reloader->Watch(absl::Seconds(flags.config_poll_seconds));
  }

  prometheus::BuildGauge()
      .Name("failover_build_info")
      .Help("Build information; always 1.")
      .Register(*registry)
      .Add({{"version", FAILOVERD_VERSION}})
      .Set(1);
  std::unique_ptr<prometheus::Exposer> exposer;
  if (!flags.metrics_listen.empty()) {
    try {
      exposer = std::make_unique<prometheus::Exposer>(flags.metrics_listen);
      exposer->RegisterCollectable(registry);
      exposer->RegisterCollectable(state_gauges);
    } catch (const std::exception& e) {
      log::Error(absl::StrCat("cannot listen for metrics on ", flags.metrics_listen, ": ", e.what()));
      return 1;
    }
  }

  std::unique_ptr<failover::api::Authorizer> auth;
  if (!flags.tokens_file.empty()) {
    auto loaded = failover::api::Authorizer::FromFile(flags.tokens_file);
    if (!loaded.ok()) {
      log::Error(absl::StrCat("bad --tokens-file: ", loaded.status().message()));
      return 1;
    }
    auth = std::move(loaded).value();
    log::Info("bearer tokens required", {{"tokens_file", flags.tokens_file},
                                         {"tokens", std::to_string(auth->token_count())}});
  } else {
    log::Warn("no --tokens-file: every caller that reaches the port may make decisions and change the config");
  }
  auto credentials = ServerCredentials(flags);
  if (!credentials.ok()) {
    log::Error(std::string(credentials.status().message()));
    return 1;
  }
  failover::api::ServiceContext context{&engine,    &clock,      &event_log, &metrics, auth.get(),
                                        clock.Now(), FAILOVERD_VERSION};
  failover::api::WatchOptions watch;
  watch.queue_limit = flags.watch_queue;
  watch.max_watchers = flags.max_watchers;
  watch.history = [&](uint64_t after, size_t limit, bool* complete) {
    return store->EventsAfter(after, limit, complete);
  };
  failover::api::DecisionService decision_service(context, watch);
  failover::api::AdminService admin_service(context);
  Ticker ticker(&engine, &clock, &event_log, store.get(), flags);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(flags.listen, *credentials, &port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(flags.max_message_bytes));
  builder.RegisterService(&decision_service);
  builder.RegisterService(&admin_service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    log::Error(absl::StrCat("cannot listen on ", flags.listen));
    return 1;
  }
  SetServing(server.get(), true);
  const std::string metrics_port =
      exposer && !exposer->GetListeningPorts().empty() ? std::to_string(exposer->GetListeningPorts()[0]) : "";
  log::Info("failoverd serving", {{"listen", flags.listen}, {"port", std::to_string(port)},
                                  {"metrics_port", metrics_port}});
  if (!flags.port_file.empty()) {
    // Written whole under a temp name, then renamed, so readers never see half a number.
    const std::string tmp = flags.port_file + ".tmp";
    std::ofstream(tmp) << port << "\n";
    std::rename(tmp.c_str(), flags.port_file.c_str());
  }

  // Signals were blocked in main() before any thread started; wait for them here.
  const sigset_t signals = HandledSignals();
  for (;;) {
    int sig = 0;
    sigwait(&signals, &sig);
    if (sig != SIGHUP) {
      log::Info(absl::StrCat("signal ", sig, " received; shutting down"));
      break;
    }
    if (auth) ReloadTokens(*auth, flags.tokens_file);
    if (reloader) {
      reloader->Reload("SIGHUP");
    } else {
      log::Info("SIGHUP received; no --config to reload");
    }
  }
  SetServing(server.get(), false);
  event_log.CloseWatchers();
  server->Shutdown(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(flags.shutdown_grace_seconds * 1000)));
  log::Debug("grpc server shut down");
  server->Wait();
  log::Debug("grpc server drained");
  reloader.reset();
  const absl::Status closed = store->Close();
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
  app.add_option("--data-dir", flags.data_dir, "Directory of the embedded RocksDB database")->capture_default_str();
  app.add_option("--config", flags.config,
                 "Config file or directory of *.yaml files declaring targets and chains; applied at start and "
                 "reloaded on SIGHUP or when the files change");
  app.add_option("--config-poll", flags.config_poll_seconds,
                 "Seconds between checks of the config files for changes; 0 = only on SIGHUP")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--metrics-listen", flags.metrics_listen, "Prometheus metrics address (host:port); empty disables")
      ->capture_default_str();
  app.add_option("--log-level", flags.log_level, "debug, info, warn or error")
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}))
      ->capture_default_str();
  app.add_option("--log-format", flags.log_format, "text (one line per record) or json (JSON lines)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app.add_option("--port-file", flags.port_file, "Write the bound gRPC port to this file once serving (for port 0)");
  app.add_option("--shutdown-grace", flags.shutdown_grace_seconds,
                 "Seconds in-flight calls get to finish on SIGTERM/SIGINT")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--events-keep", flags.events_keep, "Events kept in the data dir, newest first")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--watch-queue", flags.watch_queue,
                 "Events queued per WatchEvents stream before a slow watcher is resynced with a snapshot")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--tokens-file", flags.tokens_file,
                 "File of \"decide <token>\" / \"admin <token>\" lines; when set, calls need a bearer token");
  app.add_option("--tls-cert", flags.tls_cert, "Server certificate chain (PEM); with --tls-key enables TLS");
  app.add_option("--tls-key", flags.tls_key, "Server private key (PEM)");
  app.add_option("--tls-client-ca", flags.tls_client_ca, "CA (PEM) that client certificates must chain to (mTLS)");
  app.add_option("--events-max-age", flags.events_max_age_hours, "Hours an event is kept in the data dir")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-message-bytes", flags.max_message_bytes,
                 "Largest request accepted, in bytes; larger ones get RESOURCE_EXHAUSTED")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30))
      ->capture_default_str();
  app.add_option("--max-targets", flags.max_targets, "Targets in all; an apply that would pass it is refused")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-chains", flags.max_chains, "Chains in all; an apply that would pass it is refused")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-watchers", flags.max_watchers,
                 "Concurrent WatchEvents streams; one more gets RESOURCE_EXHAUSTED")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  log::Level level = log::Level::kInfo;
  log::ParseLevel(flags.log_level, &level);
  log::Configure(level, flags.log_format == "json");
  RouteProtobufLogs();
  // Debian's Abseil checks every absl::Mutex acquisition against a global
  // lock graph (deadlock detection); it showed in the profile of every call.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  failover::api::KeepLargeAllocationsSeparate();

  // Block the shutdown and reload signals in every thread; Run() waits for them.
  const sigset_t signals = HandledSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return Run(flags);
}
