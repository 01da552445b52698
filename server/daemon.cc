#include "server/daemon.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "prometheus/exposer.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "server/api/admin_service.h"
#include "server/api/auth.h"
#include "server/api/change_feed.h"
#include "server/api/decision_service.h"
#include "server/api/event_log.h"
#include "server/api/health_service.h"
#include "server/api/metrics.h"
#include "server/api/outcome_trace.h"
#include "server/api/release_memory.h"
#include "server/api/report_ids.h"
#include "server/api/service_context.h"
#include "server/cluster/replica.h"
#include "server/committer/committer.h"
#include "server/config_reloader.h"
#include "server/credentials.h"
#include "server/engine/engine.h"
#include "server/engine/shadows.h"
#include "server/http/http_server.h"
#include "server/log/log.h"
#include "server/ticker.h"
#include "storage/store.h"

namespace failover {
namespace {

absl::Status Refuse(absl::string_view what, const absl::Status& why) {
  return absl::Status(why.code(), absl::StrCat(what, ": ", why.message()));
}

}  // namespace

Daemon::Daemon(Flags flags) : flags_(std::move(flags)) {}

Daemon::~Daemon() { (void)Stop(); }

void Daemon::UpdateServingLocked() {
  if (health_service_ != nullptr) health_service_->SetServing(serving_ && writes_ok_ && log_applies_);
}

void Daemon::OnWrites(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(health_mu_);
  writes_ok_ = status.ok();
  if (status.ok()) {
    log::Info("the data dir takes writes again; accepting changes", {{"data_dir", flags_.data_dir}});
  } else {
    log::Error(absl::StrCat("cannot save state changes, refusing further changes until the data dir takes "
                            "writes again: ",
                            status.message()));
  }
  engine_->SetAcceptingChanges(status.ok(), std::string(status.message()));
  UpdateServingLocked();
}

// Cluster mode's etcd client and replica, from the flags.
// "host:port" with a port from 1 to 65535 ("[::1]:2379" too).
static bool IsHostPort(absl::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == 0 || colon == absl::string_view::npos) return false;
  int port = 0;
  return absl::SimpleAtoi(address.substr(colon + 1), &port) && port > 0 && port < 65536 &&
         address.find_first_of(" /\t") == absl::string_view::npos;
}

static absl::StatusOr<std::unique_ptr<cluster::Replica>> MakeReplica(const Flags& flags, Engine* engine,
                                                                     const Clock* clock) {
  cluster::ReplicaOptions options;
  options.etcd.endpoints = absl::StrSplit(flags.etcd_endpoints, ',', absl::SkipWhitespace());
  for (const std::string& endpoint : options.etcd.endpoints) {
    if (!IsHostPort(endpoint)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--etcd-endpoints: \"", absl::CHexEscape(endpoint), "\" is not host:port"));
    }
  }
  if (!flags.advertise_address.empty() && !IsHostPort(flags.advertise_address)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--advertise-address: \"", absl::CHexEscape(flags.advertise_address), "\" is not host:port"));
  }
  options.version = FAILOVERD_VERSION;
  options.etcd.ca = flags.etcd_ca;
  options.etcd.cert = flags.etcd_cert;
  options.etcd.key = flags.etcd_key;
  options.etcd.user = flags.etcd_user;
  if (!flags.etcd_user.empty()) {
    if (flags.etcd_password_file.empty()) {
      return absl::InvalidArgumentError("--etcd-user needs --etcd-password-file");
    }
    std::ifstream in(flags.etcd_password_file);
    if (!in || !std::getline(in, options.etcd.password)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--etcd-password-file: cannot read a password from ", flags.etcd_password_file));
    }
  }
  options.prefix = flags.etcd_prefix;
  options.log_keep = flags.etcd_log_keep;
  options.max_request_bytes = flags.etcd_max_request_bytes;
  options.lease = absl::Seconds(static_cast<int64_t>(flags.leader_lease_seconds));
  options.peer_ca = flags.peer_ca.empty() ? flags.tls_client_ca : flags.peer_ca;
  if (!flags.tokens_file.empty() && flags.tls_cert.empty() && !flags.peer_plaintext) {
    // Followers pass admin calls on with the caller's token and relay
    // outcomes with one from the file: without TLS anyone on the path reads them.
    return absl::InvalidArgumentError(
        "--tokens-file in cluster mode without TLS: replicas would send tokens to each other in the clear; set "
        "--tls-cert and --tls-key (replicas then call each other over TLS), or --peer-plaintext to accept it");
  }
  if (!flags.tls_cert.empty()) {
    // Replicas call each other on their TLS port, presenting their own certificate.
    options.peer_cert = flags.tls_cert;
    options.peer_key = flags.tls_key;
    if (options.peer_ca.empty()) return absl::InvalidArgumentError("--peer-ca: needed in cluster mode with TLS");
  }
  auto etcd = cluster::EtcdClient::Create(options.etcd);
  if (!etcd.ok()) return etcd.status();
  return std::make_unique<cluster::Replica>(std::move(options), std::move(etcd).value(), engine, clock);
}

absl::Status Daemon::Start() {
  const bool cluster_mode = !flags_.etcd_endpoints.empty();
  if (cluster_mode && flags_.advertise_address.empty() &&
      (absl::StartsWith(flags_.listen, "0.0.0.0:") || absl::StartsWith(flags_.listen, "[::]:") ||
       absl::StartsWith(flags_.listen, ":"))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--advertise-address: needed in cluster mode when --listen (", flags_.listen,
        ") is on every interface: the address the other replicas reach this one at"));
  }
  storage::StoreOptions store_options;
  store_options.events_keep = flags_.events_keep;
  store_options.min_free_bytes = flags_.min_free_mb << 20;
  store_options.reserve_sequences = !cluster_mode;
  store_options.log = [](absl::string_view line) { log::Warn(absl::StrCat("rocksdb: ", line)); };
  auto store = storage::Store::Open(flags_.data_dir, store_options);
  if (!store.ok()) return Refuse("cannot open the data dir", store.status());
  store_ = std::move(store).value();

  // Restore everything before serving.
  EngineOptions engine_options;
  engine_options.max_targets = flags_.max_targets;
  engine_options.max_chains = flags_.max_chains;
  engine_ = std::make_unique<Engine>(engine_options);
  if (cluster_mode) {
    auto replica = MakeReplica(flags_, engine_.get(), &clock_);
    if (!replica.ok()) return Refuse("cluster mode", replica.status());
    replica_ = std::move(replica).value();
    // Only the leader makes changes; it says so once elected.
    engine_->SetAcceptingChanges(false, "this replica is not the cluster's leader yet");
  }
  const absl::Time restore_start = clock_.Now();
  auto restored = store_->Load();
  if (!restored.ok()) return Refuse("cannot read the data dir", restored.status());

  registry_ = std::make_shared<prometheus::Registry>();
  metrics_ = std::make_unique<api::Metrics>(*registry_);
  state_gauges_ = std::make_shared<api::StateCollector>(engine_.get());
  process_metrics_ = std::make_shared<api::ProcessCollector>();  // the exposer keeps only a weak pointer
  shadows_ = std::make_unique<ShadowPolicies>();
  shadow_metrics_ = std::make_shared<api::ShadowCollector>(shadows_.get());
  events_ = std::make_unique<api::EventLog>(1000, restored->next_sequence - 1);
  auto recent = store_->RecentEvents(1000);
  if (recent.ok()) events_->Preload(std::move(recent).value());
  changes_ = std::make_unique<api::ChangeFeed>(*restored);
  const uint64_t restored_index = restored->log_index;
  committer_ = std::make_unique<Committer>(
      [this](const std::vector<const Change*>& changes) {
        if (replica_) {
          return replica_->Write(changes, [this](const std::vector<const Change*>& c) { return store_->Write(c); });
        }
        return store_->Write(changes);
      },
      [this](const Change& change) {
        changes_->Publish(change);
        if (change.next_sequence > change.events.size()) events_->SkipTo(change.next_sequence - change.events.size());
        events_->Publish(change.events);
        metrics_->OnEvents(change.events);
      },
      [this](const absl::Status& status) {
        // In cluster mode etcd being away stops changes, not decisions: the
        // replica keeps serving (fail-static) instead of reporting NOT_SERVING.
        if (replica_) {
          replica_->OnWrites(status);
        } else {
          OnWrites(status);
        }
      });
  if (replica_) committer_->set_max_batch(64);  // one etcd transaction per write
  engine_->SetChangeSink([this](Change&& change) {
    if (replica_) replica_->Stamp(&change);
    committer_->Submit(std::move(change));
  });

  {
    Committer::Scope settled(committer_.get());
    auto restore = engine_->Restore(std::move(*restored), clock_.Now());
    if (!restore.ok()) {
      return Refuse(absl::StrCat("cannot restore the stored state from ", flags_.data_dir), restore.status());
    }
    const absl::Status saved = settled.Await();
    if (!saved.ok()) return Refuse("cannot save the restored state", saved);
  }
  metrics_->AddChains(*engine_->snapshot());
  log::Info("state restored", {{"data_dir", flags_.data_dir},
                               {"instance", store_->instance_id()},
                               {"targets", engine_->snapshot()->targets.size()},
                               {"chains", engine_->snapshot()->chains.size()},
                               {"generation", restored->generation},
                               {"next_sequence", restored->next_sequence},
                               {"took", absl::FormatDuration(clock_.Now() - restore_start)}});
  *restored = RestoredState();
  api::ReleaseFreedMemory();  // the stored state was read whole; give back what it took
  // The reports the kept Changes were counted from count nothing again after
  // the restart (a client's batch sent again once failoverd is back).
  report_ids_ = std::make_unique<api::ReportIdWindow>();
  {
    absl::StatusOr<std::vector<CountedReport>> counted = store_->CountedReports();
    if (!counted.ok()) return Refuse("cannot read the stored report ids", counted.status());
    report_ids_->Note(*counted);
  }
  if (replica_) {
    replica_->SetLogHealthHook([this](bool applies) {
      std::lock_guard<std::mutex> lock(health_mu_);
      log_applies_ = applies;
      UpdateServingLocked();
    });
    // The reports behind each Change the log brings count nothing again here
    // (a follower's relay sent again after the leader that counted it died).
    replica_->SetCountedReportsHook(
        [ids = report_ids_.get()](const std::vector<CountedReport>& counted) { ids->Note(counted); });
    replica_->Prepare(restored_index, committer_.get(), changes_.get(), absl::Seconds(5));
    replica_metrics_ = std::make_shared<cluster::ReplicaCollector>(replica_.get());
  }

  if (!flags_.config.empty()) {
    reloader_ = std::make_unique<ConfigReloader>(flags_.config, engine_.get(), &clock_, committer_.get(),
                                                 [this](bool accepted) { metrics_->OnConfigReload(accepted); });
    if (replica_) reloader_->SetGate([this] { return replica_->IsLeader(); });
    const absl::Status applied = reloader_->Apply();
    if (!applied.ok()) return Refuse("bad config", applied);
    if (flags_.config_poll_seconds > 0) reloader_->Watch(absl::Seconds(flags_.config_poll_seconds));
  }
  trace_ = std::make_unique<api::OutcomeTrace>(flags_.trace_keep, absl::Hours(flags_.trace_max_age_hours));
  ticker_ = std::make_unique<Ticker>(engine_.get(), &clock_, store_.get(), flags_.events_keep,
                                     absl::Hours(flags_.events_max_age_hours), [this] {
                                       changes_->Heartbeat();
                                       FlushTrace();
                                       api::ReleaseFreedMemoryIfAsked([this] {
                                         const absl::Status flushed = store_->FlushMemtables();
                                         if (flushed.ok()) return;
                                         log::Warn(absl::StrCat("could not flush the data dir's memtables after a "
                                                                "config change (their memory stays in use): ",
                                                                flushed.message()));
                                       });
                                     });

  prometheus::BuildGauge()
      .Name("failover_build_info")
      .Help("Build information; always 1.")
      .Register(*registry_)
      .Add({{"version", FAILOVERD_VERSION},
            {"grpc", grpc::Version()},
            {"protobuf", google::protobuf::internal::VersionString(GOOGLE_PROTOBUF_VERSION)}})
      .Set(1);
  if (!flags_.metrics_listen.empty()) {
    try {
      exposer_ = std::make_unique<prometheus::Exposer>(flags_.metrics_listen);
      exposer_->RegisterCollectable(registry_);
      exposer_->RegisterCollectable(state_gauges_);
      exposer_->RegisterCollectable(metrics_->chain_counters());
      exposer_->RegisterCollectable(process_metrics_);
      exposer_->RegisterCollectable(shadow_metrics_);
      if (replica_metrics_) exposer_->RegisterCollectable(replica_metrics_);
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("cannot listen for metrics on ", flags_.metrics_listen, ": ", e.what()));
    }
  }

  if (!flags_.tokens_file.empty()) {
    auto loaded = api::Authorizer::FromFile(flags_.tokens_file);
    if (!loaded.ok()) return Refuse("bad --tokens-file", loaded.status());
    auth_ = std::move(loaded).value();
    log::Info("bearer tokens required", {{"tokens_file", flags_.tokens_file},
                                         {"tokens", auth_->token_count()}});
  } else {
    log::Warn("no --tokens-file: every caller that reaches the port may make decisions and change the config");
  }
  auto credentials = ServerCredentials(flags_);
  if (!credentials.ok()) return credentials.status();
  api::ServiceContext context;
  context.engine = engine_.get();
  context.clock = &clock_;
  context.events = events_.get();
  context.changes = changes_.get();
  context.committer = committer_.get();
  context.metrics = metrics_.get();
  context.trace = trace_.get();
  context.read_trace = [this](absl::Time from, absl::Time to, absl::string_view chain, size_t limit, uint64_t after) {
    return trace_->Read(store_.get(), from, to, chain, limit, after);
  };
  context.auth = auth_.get();
  context.leader = replica_.get();
  context.report_ids = report_ids_.get();
  // Enough for every admin caller a deployment has at once; beyond the queue
  // a change is refused (RESOURCE_EXHAUSTED) rather than held without bound.
  blocking_ = std::make_unique<api::BlockingCalls>(16, 10000);
  context.blocking = blocking_.get();
  context.started = clock_.Now();
  context.version = FAILOVERD_VERSION;
  api::WatchOptions watch;
  watch.queue_limit = flags_.watch_queue;
  watch.queue_bytes = flags_.watch_queue_bytes;
  watch.stall_timeout = absl::Seconds(flags_.watch_stall_timeout_seconds);
  watch.max_watchers = flags_.max_watchers;
  watch.history = [this](uint64_t after, size_t limit, bool* complete) {
    return store_->EventsAfter(after, limit, complete);
  };
  api::FollowOptions follow;
  follow.max_followers = flags_.max_watchers;
  decision_service_ = std::make_unique<api::DecisionService>(context, watch, follow);
  admin_service_ = std::make_unique<api::AdminService>(context);

  // Our own health service (its Watch streams are capped), not gRPC's default.
  grpc::EnableDefaultHealthCheckService(false);
  health_service_ = std::make_unique<api::HealthService>(flags_.max_watchers, [this](size_t n) {
    if (metrics_) metrics_->SetHealthWatchers(n);
  });
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(flags_.listen, *credentials, &port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(flags_.max_message_bytes));
  builder.RegisterService(decision_service_.get());
  builder.RegisterService(admin_service_.get());
  builder.RegisterService(health_service_.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) return absl::UnavailableError(absl::StrCat("cannot listen on ", flags_.listen));
  {
    std::lock_guard<std::mutex> lock(health_mu_);
    server_ = std::move(server);
    serving_ = true;
    UpdateServingLocked();
  }
  if (!flags_.http_listen.empty()) {
    // The HTTP port calls the gRPC services in-process: the same roles, checks and errors.
    http::HttpOptions http_options;
    http_options.listen = flags_.http_listen;
    http_options.tls_cert = flags_.tls_cert;
    http_options.tls_key = flags_.tls_key;
    http_options.tls_client_ca = flags_.tls_client_ca;
    http_options.max_body = flags_.max_message_bytes;
    http_options.allowed_hosts = flags_.http_allowed_hosts;
    http_options.header_timeout = std::chrono::milliseconds(
        static_cast<int64_t>(std::ceil(flags_.http_header_timeout_seconds * 1000)));
    grpc::ChannelArguments channel_args;
    channel_args.SetMaxReceiveMessageSize(-1);
    auto http = http::HttpServer::Start(http_options, server_->InProcessChannel(channel_args));
    if (!http.ok()) return http.status();
    http_ = std::move(http).value();
  }
  if (replica_) {
    std::string advertise = flags_.advertise_address;
    if (advertise.empty()) {
      advertise = flags_.listen.substr(0, flags_.listen.rfind(':') + 1) + std::to_string(port);
    }
    replica_->Run(advertise, auth_ ? auth_->TokenFor(api::Role::kPeer) : "", [this] {
      if (reloader_) reloader_->Reload("this replica became the cluster's leader");
    });
  }
  log::Fields serving{{"listen", flags_.listen}, {"port", port}};
  if (http_) serving.emplace_back("http_port", http_->port());
  if (exposer_ && !exposer_->GetListeningPorts().empty()) {
    serving.emplace_back("metrics_port", static_cast<int>(exposer_->GetListeningPorts()[0]));
  }
  log::Info("failoverd serving", serving);
  if (!flags_.port_file.empty()) {
    // Written whole under a temp name, then renamed, so readers never see half a number.
    const std::string tmp = flags_.port_file + ".tmp";
    std::ofstream(tmp) << port << "\n";
    std::rename(tmp.c_str(), flags_.port_file.c_str());
  }
  return absl::OkStatus();
}

void Daemon::Reload() {
  if (auth_) {
    // A tokens file that no longer parses keeps the old tokens.
    const absl::Status reloaded = auth_->Reload();
    if (reloaded.ok()) {
      log::Info("tokens reloaded", {{"tokens_file", flags_.tokens_file},
                                    {"tokens", auth_->token_count()}});
    } else {
      log::Error(absl::StrCat("tokens not reloaded, the previous ones stay: ", reloaded.message()));
    }
  }
  if (reloader_) {
    reloader_->Reload("SIGHUP");
  } else {
    log::Info("SIGHUP received; no --config to reload");
  }
}

absl::Status Daemon::Stop() {
  if (stopped_) return absl::OkStatus();
  stopped_ = true;
  // In reverse of Start: the port first (watchers end, calls in flight get the
  // grace), then whatever makes changes, then the committer (it saves what is
  // queued), then the store.
  if (server_ != nullptr) {
    {
      std::lock_guard<std::mutex> lock(health_mu_);
      serving_ = false;
      UpdateServingLocked();
    }
    if (events_) events_->CloseWatchers();
    if (changes_) changes_->CloseFollowers();
    if (http_) http_->Stop();  // its event streams ended with the watchers
    health_service_->Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(static_cast<int64_t>(flags_.shutdown_grace_seconds * 1000)));
    server_->Wait();
    blocking_.reset();  // every call it ran has answered; its threads end here
    log::Debug("grpc server drained");
  }
  if (replica_) {
    // What is queued reaches etcd while the lease still holds, then the
    // replica resigns so another takes over at once. Before the reloader
    // goes: becoming the leader applies the config files.
    (void)committer_->AwaitIdle(absl::Seconds(2));
    replica_->Stop();
  }
  reloader_.reset();
  if (ticker_) ticker_->Stop();
  if (trace_) FlushTrace();
  if (committer_) committer_->Stop();
  absl::Status closed = absl::OkStatus();
  if (store_) closed = store_->Close();
  if (!closed.ok()) return Refuse("closing the data dir failed", closed);
  return absl::OkStatus();
}

void Daemon::FlushTrace() {
  // Shadow policies see what the trace records: what this replica counted.
  const absl::Time now = clock_.Now();
  shadows_->Configure(*engine_->snapshot(), now);
  std::vector<ShadowEvent> shadow_events;
  // Called every time, with nothing written too: the runs still move on to now.
  const absl::Status flushed = trace_->Flush(store_.get(), now, [&](absl::Span<const TraceEntry> written) {
    shadow_events = shadows_->Feed(written, now);
  });
  if (!flushed.ok() && !trace_failing_) log::Warn(absl::StrCat("outcome trace not written: ", flushed.message()));
  if (flushed.ok() && trace_failing_) log::Info("outcome trace written again");
  trace_failing_ = !flushed.ok();
  events_->PublishShadow(shadow_events);
}

}  // namespace failover
