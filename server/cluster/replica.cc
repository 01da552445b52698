#include "server/cluster/replica.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/report_sender.h"
#include "common/utf8.h"
#include "proto/model_convert.h"
#include "server/cluster/replica_internal.h"
#include "server/log/log.h"

namespace failover::cluster {
namespace {

std::string ReadFileOrEmpty(const std::string& path) {
  if (path.empty()) return "";
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

Replica::Replica(ReplicaOptions options, std::unique_ptr<Etcd> etcd, Engine* engine, const Clock* clock)
    : options_(std::move(options)),
      keys_(options_.prefix),
      etcd_(std::move(etcd)),
      engine_(engine),
      clock_(clock),
      relay_sender_(NewReportSender()),
      relay_batch_(kRelayBatch) {
  if (!options_.peer_ca.empty() || !options_.peer_cert.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFileOrEmpty(options_.peer_ca);
    ssl.pem_cert_chain = ReadFileOrEmpty(options_.peer_cert);
    ssl.pem_private_key = ReadFileOrEmpty(options_.peer_key);
    peer_credentials_ = grpc::SslCredentials(ssl);
  } else {
    peer_credentials_ = grpc::InsecureChannelCredentials();
  }
}

Replica::~Replica() { Stop(); }

// --- start and stop ---

void Replica::Prepare(uint64_t restored_index, Committer* committer, api::ChangeFeed* feed,
                      absl::Duration catch_up) {
  committer_ = committer;
  feed_ = feed;
  cursor_.Start(restored_index);
  // Catch up before serving, so a replica that was away starts from what the
  // cluster decided meanwhile; without etcd it serves its own copy.
  const absl::Time give_up = Now() + catch_up;
  for (;;) {
    int64_t revision = 0;
    const absl::Status caught_up = CatchUp(&revision);
    if (caught_up.ok()) break;
    NoteEtcd(caught_up);
    if (Now() >= give_up) {
      log::Warn(absl::StrCat("cannot read the change log from etcd yet, serving the local copy meanwhile: ",
                             caught_up.message()),
                {{"applied_index", cursor_.applied()}});
      break;
    }
    if (!SleepFor(absl::Milliseconds(200))) break;
  }
}

void Replica::Run(std::string advertise, std::string peer_token, std::function<void()> on_leader) {
  advertise_ = std::move(advertise);
  peer_token_ = std::move(peer_token);
  on_leader_ = std::move(on_leader);
  log::Info("cluster replica running", {{"prefix", keys_.prefix()},
                                        {"advertise", advertise_},
                                        {"applied_index", cursor_.applied()}});
  log_thread_ = StartThread(options_.pacer, [this] { RunLog(); });
  session_thread_ = StartThread(options_.pacer, [this] { RunSession(); });
  relay_thread_ = StartThread(options_.pacer, [this] { RunRelay(); });
  engine_->LeaseRpm(true);
  rpm_thread_ = StartThread(options_.pacer, [this] { RunRpmLeases(); });
}

void Replica::Stop() {
  if (stopping_.exchange(true)) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (watch_) watch_->Cancel();
    changed_.NotifyAll();
    relay_ready_.NotifyAll();
  }
  for (std::thread* thread : {&log_thread_, &session_thread_, &relay_thread_, &rpm_thread_}) {
    JoinThread(options_.pacer, *thread);
  }
  cursor_.Depose();
  if (leader_.exchange(false)) engine_->SetAcceptingChanges(false, "failoverd is shutting down");
  // Resign at once, so another replica takes over without waiting out the lease.
  const int64_t lease = lease_.exchange(0);
  if (lease != 0) etcd_->Revoke(lease);
}

bool Replica::SleepFor(absl::Duration d) {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.WaitFor(lock, d, [&] { return stopping_.load(); });
  return !stopping_.load();
}

// --- what the replica says about itself ---

void Replica::NoteEtcd(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  etcd_error_ = status.ok() ? "" : std::string(status.message());
  if (status.ok()) etcd_answered_ = Now();
}

void Replica::Describe(failover::v1::ClusterStatus* out) const {
  out->set_role(IsLeader() ? failover::v1::ClusterStatus::ROLE_LEADER : failover::v1::ClusterStatus::ROLE_FOLLOWER);
  out->set_self(advertise_);
  out->set_applied_revision(cursor_.applied_revision());
  out->set_applied_index(cursor_.applied());
  out->set_lag(cursor_.lag());
  out->set_leader_changes(leader_changes_.load());
  out->set_rpm_rank(engine_->rpm_rank());
  out->set_rpm_replicas(engine_->rpm_replicas());
  std::lock_guard<std::mutex> lock(mu_);
  // Both come from etcd (the leader key's value, its error messages): sent
  // only as valid, bounded UTF-8.
  out->set_leader(SanitizeUtf8(leader_address_, 256));
  out->set_etcd_error(SanitizeUtf8(etcd_error_, 1024));
  out->set_log_error(SanitizeUtf8(log_error_, 1024));
  for (const ReplicaCard& card : replicas_) {
    failover::v1::ClusterStatus::Replica* replica = out->add_replicas();
    replica->set_address(SanitizeUtf8(card.address, 256));
    replica->set_version(SanitizeUtf8(card.version, 64));
    if (card.started != absl::InfinitePast()) api::TimeToProto(card.started, replica->mutable_started());
    replica->set_leader(!card.address.empty() && card.address == leader_address_);
  }
}

std::vector<prometheus::MetricFamily> Replica::CollectMetrics() const {
  std::vector<prometheus::MetricFamily> out;
  auto add = [&](const char* name, const char* help, prometheus::MetricType type, double value) {
    prometheus::MetricFamily& family = out.emplace_back();
    family.name = name;
    family.help = help;
    family.type = type;
    prometheus::ClientMetric& metric = family.metric.emplace_back();
    (type == prometheus::MetricType::Counter ? metric.counter.value : metric.gauge.value) = value;
  };
  uint64_t dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dropped = relay_dropped_;
  }
  using prometheus::MetricType;
  add("failover_cluster_leader", "1 while this replica is the cluster's leader.", MetricType::Gauge,
      IsLeader() ? 1 : 0);
  add("failover_cluster_lag_entries", "Change log entries in etcd this replica has not applied yet.",
      MetricType::Gauge, static_cast<double>(cursor_.lag()));
  add("failover_cluster_applied_index", "The last Change log entry this replica applied.", MetricType::Gauge,
      static_cast<double>(cursor_.applied()));
  add("failover_cluster_etcd_errors_total", "etcd calls that failed (each endpoint tried counts).",
      MetricType::Counter, static_cast<double>(etcd_->errors()));
  add("failover_cluster_leader_changes_total", "Times this replica became or stopped being the leader.",
      MetricType::Counter, static_cast<double>(leader_changes_.load()));
  add("failover_cluster_relay_dropped_total",
      "Outcomes not passed on to the leader because too many were waiting.", MetricType::Counter,
      static_cast<double>(dropped));
  return out;
}

bool Replica::WaitApplied(uint64_t index, absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return changed_.WaitFor(lock, timeout, [&] { return cursor_.applied() >= index; });
}

}  // namespace failover::cluster
