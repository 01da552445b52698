// A real etcd cluster on loopback (Debian's etcd-server) for the cluster-mode
// tests: members on free ports with temp data dirs, killed and restarted on
// the same ports, tuned to elect an etcd leader within a second.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "tests/support/failoverd_process.h"

namespace failover::testing {

class EtcdCluster {
 public:
  // etcd's --max-request-bytes for the test members: smaller than etcd's
  // default, so a test can pass it with a modest apply.
  static constexpr int kMaxRequestBytes = 512 << 10;
  // etcd's own default (1.5 MiB), what a production member refuses above.
  static constexpr int kDefaultMaxRequestBytes = 1536 << 10;
  explicit EtcdCluster(int members = 3, int max_request_bytes = kMaxRequestBytes);
  ~EtcdCluster();  // SIGKILLs every member

  // Whether an etcd binary is installed.
  static bool Installed();
  // Starts every member and waits until the cluster answers.
  bool Start(std::string* error, double timeout_s = 30);
  // "127.0.0.1:p1,127.0.0.1:p2,..."
  std::string Endpoints() const;
  int size() const { return static_cast<int>(members_.size()); }
  pid_t pid(int member) const { return members_[static_cast<size_t>(member)].pid; }  // -1 while killed
  void Kill(int member);  // SIGKILL
  // Starts a killed member again on its data dir and ports.
  bool Restart(int member, std::string* error);
  // Waits until the cluster answers a write (it has a quorum and a leader).
  bool WaitHealthy(double timeout_s);

 private:
  struct Member {
    std::string name;
    int client_port = 0;
    int peer_port = 0;
    pid_t pid = -1;
  };
  bool Launch(int member, const std::string& state);

  TempDir dir_;
  std::vector<Member> members_;
  std::string initial_cluster_;
  int max_request_bytes_;
};

}  // namespace failover::testing
