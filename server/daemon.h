// The failoverd process: owns every part and their lifetimes. Start() brings
// them up in order (data dir, engine restore, committer, config files,
// ticker, metrics, gRPC server, HTTP port); Stop() takes them down in reverse, so
// nothing runs against a closed store.
#pragma once

#include <memory>
#include <mutex>

#include "absl/status/status.h"
#include "common/clock.h"
#include "server/flags.h"

namespace grpc {
class Server;
}
namespace prometheus {
class Exposer;
class Registry;
}

namespace failover::cluster {
class Replica;
class ReplicaCollector;
}  // namespace failover::cluster

namespace failover {

class Committer;
class ConfigReloader;
class Engine;
class ShadowPolicies;
class Ticker;
namespace storage {
class Store;
}
namespace api {
class AdminService;
class Authorizer;
class BlockingCalls;
class DecisionService;
class EventLog;
class ChangeFeed;
class HealthService;
class Metrics;
class OutcomeTrace;
class ProcessCollector;
class ReportIdWindow;
class ShadowCollector;
class StateCollector;
}  // namespace api
namespace http {
class HttpServer;
}

class Daemon {
 public:
  explicit Daemon(Flags flags);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Errors name the flag, file or dir at fault; nothing is left running.
  [[nodiscard]] absl::Status Start();
  // SIGHUP: tokens and config files are read again.
  void Reload();
  // Safe to call twice.
  [[nodiscard]] absl::Status Stop();

 private:
  // The committer's health callback: writes failing (an error) or working again (OK).
  void OnWrites(const absl::Status& status);
  // SERVING while listening, the data dir takes writes and (cluster mode)
  // the Change log applies; health_mu_ held.
  void UpdateServingLocked();
  // Writes the outcome trace's waiting entries (each tick, and once at stop)
  // and feeds what was written to the shadow policies.
  void FlushTrace();

  const Flags flags_;
  RealClock clock_;
  std::unique_ptr<storage::Store> store_;
  std::unique_ptr<Engine> engine_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<api::Metrics> metrics_;
  std::unique_ptr<api::OutcomeTrace> trace_;
  bool trace_failing_ = false;  // the last trace write was refused (ticker thread only)
  std::unique_ptr<ShadowPolicies> shadows_;  // judged on what the trace records
  std::shared_ptr<api::ShadowCollector> shadow_metrics_;
  std::shared_ptr<api::StateCollector> state_gauges_;
  std::shared_ptr<api::ProcessCollector> process_metrics_;
  std::unique_ptr<api::EventLog> events_;
  std::unique_ptr<api::ChangeFeed> changes_;  // FollowState
  std::unique_ptr<Committer> committer_;
  // Reports counted, seeded from the store; in cluster mode the replica's log
  // follower adds to it too (declared before both: it outlives them).
  std::unique_ptr<api::ReportIdWindow> report_ids_;
  std::unique_ptr<cluster::Replica> replica_;  // cluster mode (--etcd-endpoints)
  std::shared_ptr<cluster::ReplicaCollector> replica_metrics_;
  std::unique_ptr<ConfigReloader> reloader_;
  std::unique_ptr<Ticker> ticker_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::unique_ptr<api::Authorizer> auth_;
  std::unique_ptr<api::DecisionService> decision_service_;
  std::unique_ptr<api::AdminService> admin_service_;
  std::unique_ptr<api::HealthService> health_service_;
  // Admin writes and calls passed to the leader. Stop's drain of server_
  // waits for what it runs; declared after the services so its threads are
  // joined before they go.
  std::unique_ptr<api::BlockingCalls> blocking_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<http::HttpServer> http_;  // --http-listen; before server_ in teardown order below

  std::mutex health_mu_;
  bool writes_ok_ = true;     // guarded by health_mu_
  bool log_applies_ = true;   // guarded by health_mu_; cluster mode
  bool serving_ = false;      // guarded by health_mu_
  bool stopped_ = false;
};

}  // namespace failover
