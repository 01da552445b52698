#include "tests/support/etcd_cluster.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace failover::testing {
namespace {

constexpr char kEtcd[] = "/usr/bin/etcd";
constexpr char kEtcdctl[] = "/usr/bin/etcdctl";

}  // namespace

EtcdCluster::EtcdCluster(int members, int max_request_bytes) : max_request_bytes_(max_request_bytes) {
  for (int i = 0; i < members; ++i) {
    Member m;
    m.name = "m" + std::to_string(i);
    m.client_port = FreePort();
    m.peer_port = FreePort();
    if (!initial_cluster_.empty()) initial_cluster_ += ",";
    initial_cluster_ += m.name + "=http://127.0.0.1:" + std::to_string(m.peer_port);
    members_.push_back(m);
  }
}

EtcdCluster::~EtcdCluster() {
  for (int i = 0; i < size(); ++i) Kill(i);
}

bool EtcdCluster::Installed() { return access(kEtcd, X_OK) == 0 && access(kEtcdctl, X_OK) == 0; }

bool EtcdCluster::Launch(int member, const std::string& state) {
  Member& m = members_[static_cast<size_t>(member)];
  const std::string client = "http://127.0.0.1:" + std::to_string(m.client_port);
  const std::string peer = "http://127.0.0.1:" + std::to_string(m.peer_port);
  m.pid = SpawnProcess({kEtcd, "--name", m.name, "--data-dir", dir_.path() + "/" + m.name,
                        "--listen-client-urls", client, "--advertise-client-urls", client,
                        "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                        "--initial-cluster", initial_cluster_, "--initial-cluster-state", state,
                        "--initial-cluster-token", "failoverd-test",
                        // Short Raft timers: a lost member or leader is noticed in well under a second.
                        "--heartbeat-interval", "50", "--election-timeout", "500",
                        "--max-request-bytes", std::to_string(max_request_bytes_),
                        "--logger", "zap", "--log-outputs", dir_.path() + "/" + m.name + ".log"},
                       "", "");
  return m.pid > 0;
}

bool EtcdCluster::Start(std::string* error, double timeout_s) {
  for (int i = 0; i < size(); ++i) {
    if (!Launch(i, "new")) {
      *error = "cannot start etcd";
      return false;
    }
  }
  if (!WaitHealthy(timeout_s)) {
    *error = "etcd did not become healthy";
    return false;
  }
  return true;
}

std::string EtcdCluster::Endpoints() const {
  std::string out;
  for (const Member& m : members_) {
    if (!out.empty()) out += ",";
    out += "127.0.0.1:" + std::to_string(m.client_port);
  }
  return out;
}

void EtcdCluster::Kill(int member) {
  Member& m = members_[static_cast<size_t>(member)];
  if (m.pid <= 0) return;
  kill(m.pid, SIGKILL);
  waitpid(m.pid, nullptr, 0);
  m.pid = -1;
}

bool EtcdCluster::Restart(int member, std::string* error) {
  if (!Launch(member, "existing")) {
    *error = "cannot start etcd";
    return false;
  }
  return true;
}

bool EtcdCluster::WaitHealthy(double timeout_s) {
  return WaitUntil(timeout_s, [&] {
    const CommandResult r = RunCommand({kEtcdctl, "--endpoints", Endpoints(), "--command-timeout", "1s", "put",
                                        "/failoverd-test/health", "ok"},
                                       {"ETCDCTL_API=3"});
    return r.exit_code == 0;
  });
}

}  // namespace failover::testing
