// failoverd's command line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace failover {

struct Flags {
  std::string listen = "127.0.0.1:50051";
  std::string data_dir = "./data";
  std::string config;
  std::string check_config;  // set: check these config files offline and exit
  double config_poll_seconds = 2;
  std::string metrics_listen = "127.0.0.1:9464";
  std::string log_level = "info";
  std::string log_format = "text";
  std::string port_file;
  double shutdown_grace_seconds = 10;
  size_t events_keep = 10000;
  uint64_t min_free_mb = 64;
  size_t watch_queue = 1024;
  size_t watch_queue_bytes = 1 << 20;
  double watch_stall_timeout_seconds = 30;
  std::string http_listen;  // empty: no HTTP port
  std::vector<std::string> http_allowed_hosts;  // Host names the HTTP port answers besides its own
  double http_header_timeout_seconds = 10;
  std::string tokens_file;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  double events_max_age_hours = 168;
  size_t trace_keep = 100000;  // outcome trace entries kept; 0 = no trace
  double trace_max_age_hours = 24;
  size_t max_message_bytes = 4 << 20;
  size_t max_watchers = 10000;
  bool max_watchers_given = false;  // set on the command line (else sized to the descriptor limit)
  size_t max_targets = 100000;
  size_t max_chains = 100000;
  // Cluster mode (DESIGN 3.12): on when etcd endpoints are given.
  std::string etcd_endpoints;  // host:port,host:port
  std::string etcd_prefix = "/failoverd/default";
  std::string advertise_address;  // empty: the listen address
  double leader_lease_seconds = 5;
  uint64_t etcd_log_keep = 10000;
  size_t etcd_max_request_bytes = 1536 << 10;  // etcd's own default
  std::string etcd_ca;
  std::string etcd_cert;
  std::string etcd_key;
  std::string etcd_user;
  std::string etcd_password_file;
  std::string peer_ca;  // verifies the other replicas' server certificates
  bool peer_plaintext = false;  // tokens may cross between replicas without TLS
};

// Parses the command line into `flags`. Returns an exit code when failoverd
// should exit at once (--help, or a bad flag, already reported).
std::optional<int> ParseFlags(int argc, char** argv, Flags* flags);

}  // namespace failover
