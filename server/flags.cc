#include "server/flags.h"

#include <cmath>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace failover {
namespace {

// A duration flag takes a bare number of `unit`s, as it always did, or a
// duration as config files write them ("500ms", "2m", "1h30m").
CLI::Validator DurationIn(absl::Duration unit, const std::string& unit_name) {
  return CLI::Validator(
      [unit, unit_name](std::string& in) -> std::string {
        double bare = 0;
        if (absl::SimpleAtod(in, &bare)) {
          return std::isfinite(bare) ? "" : absl::StrCat("must be finite, got ", in);
        }
        absl::Duration d;
        if (!absl::ParseDuration(in, &d) || d == absl::InfiniteDuration() || d == -absl::InfiniteDuration()) {
          return absl::StrCat("must be a number of ", unit_name, " or a duration such as \"15s\", got \"", in,
                              "\"");
        }
        in = absl::StrCat(absl::FDivDuration(d, unit));
        return "";
      },
      absl::StrCat(unit_name, "|DURATION"));
}

}  // namespace

std::optional<int> ParseFlags(int argc, char** argv, Flags* flags) {
  CLI::App app{"failoverd: failover decisions for callers that do their own I/O"};
  app.footer("Examples:\n  failoverd --data-dir ./data --config examples/config\n"
             "  failoverd --listen 0.0.0.0:50051 --tokens-file /etc/failoverd/tokens --log-format json");
  app.set_version_flag("--version",
                       "failoverd " FAILOVERD_VERSION " (commit " FAILOVERD_COMMIT ", built " FAILOVERD_BUILD_DATE ")",
                       "Print the version, commit and build date, and exit");
  app.add_option("--listen", flags->listen, "gRPC listen address (host:port; port 0 picks a free one)")
      ->capture_default_str();
  app.add_option("--data-dir", flags->data_dir, "Directory of the embedded RocksDB database")->capture_default_str();
  app.add_option("--config", flags->config,
                 "Config file or directory of *.yaml files declaring targets and chains; applied at start and "
                 "reloaded on SIGHUP or when the files change");
  app.add_option("--check-config", flags->check_config,
                 "Check the config files at this path (file or directory) as --config would load them, print the "
                 "result and exit: 0 valid, 1 not. Needs no data dir and changes nothing");
  app.add_option("--config-poll", flags->config_poll_seconds,
                 "Seconds (or a duration: 500ms) between checks of the config files for changes; 0 = only on "
                 "SIGHUP")
      ->transform(DurationIn(absl::Seconds(1), "SECONDS"))
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--metrics-listen", flags->metrics_listen, "Prometheus metrics address (host:port); empty disables")
      ->capture_default_str();
  app.add_option("--log-level", flags->log_level, "debug, info, warn or error")
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}))
      ->capture_default_str();
  app.add_option("--log-format", flags->log_format, "text (one line per record) or json (JSON lines)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app.add_option("--port-file", flags->port_file, "Write the bound gRPC port to this file once serving (for port 0)");
  app.add_option("--shutdown-grace", flags->shutdown_grace_seconds,
                 "Seconds (or a duration: 1m) in-flight calls get to finish on SIGTERM/SIGINT")
      ->transform(DurationIn(absl::Seconds(1), "SECONDS"))
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--min-free-mb", flags->min_free_mb,
                 "Free space (MiB) kept on the data dir's disk: below it, changes are refused and failoverd "
                 "reports NOT_SERVING until space is back; 0 = no check")
      ->capture_default_str();
  app.add_option("--events-keep", flags->events_keep, "Events kept in the data dir, newest first")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--watch-queue", flags->watch_queue,
                 "Events queued per WatchEvents stream before a slow watcher is resynced with a snapshot")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--watch-queue-bytes", flags->watch_queue_bytes,
                 "Bytes of events queued per WatchEvents stream before a slow watcher is resynced with a snapshot")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--watch-stall-timeout", flags->watch_stall_timeout_seconds,
                 "A WatchEvents client that reads nothing for this long while an event waits for it is dropped "
                 "(frees what it holds; it resumes by sequence); 0 = never")
      ->transform(DurationIn(absl::Seconds(1), "SECONDS"))
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--http-listen", flags->http_listen,
                 "Also serve the status page and the JSON API on this host:port (off when empty); same tokens "
                 "and TLS as the gRPC port");
  app.add_option("--http-allowed-hosts", flags->http_allowed_hosts,
                 "Host names the HTTP port answers (comma-separated) besides its listen address, localhost and IP "
                 "addresses; other Host headers get 403 (DNS rebinding). \"*\" answers any")
      ->delimiter(',');
  app.add_option("--http-header-timeout", flags->http_header_timeout_seconds,
                 "Seconds (or a duration such as 500ms) an HTTP client has for a request's whole header section "
                 "(and its TLS hello), counted from when the connection waits for it; then it is closed")
      ->transform(DurationIn(absl::Seconds(1), "SECONDS"))
      ->check(CLI::Range(0.001, 3600.0))
      ->capture_default_str();
  app.add_option("--tokens-file", flags->tokens_file,
                 "File of \"decide <token>\" / \"admin <token>\" lines; when set, calls need a bearer token");
  app.add_option("--tls-cert", flags->tls_cert, "Server certificate chain (PEM); with --tls-key enables TLS");
  app.add_option("--tls-key", flags->tls_key, "Server private key (PEM)");
  app.add_option("--tls-client-ca", flags->tls_client_ca, "CA (PEM) that client certificates must chain to (mTLS)");
  app.add_option("--events-max-age", flags->events_max_age_hours,
                 "Hours (or a duration such as 720h) an event is kept in the data dir")
      ->transform(DurationIn(absl::Hours(1), "HOURS"))
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--trace-keep", flags->trace_keep,
                 "Counted outcomes kept in the outcome trace (for failoverctl trace), newest first; 0 = no trace")
      ->capture_default_str();
  app.add_option("--trace-max-age", flags->trace_max_age_hours,
                 "Hours (or a duration such as 30m) an outcome is kept in the trace")
      ->transform(DurationIn(absl::Hours(1), "HOURS"))
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-message-bytes", flags->max_message_bytes,
                 "Largest request accepted, in bytes; larger ones get RESOURCE_EXHAUSTED")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30))
      ->capture_default_str();
  app.add_option("--max-targets", flags->max_targets, "Targets in all; an apply that would pass it is refused")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-chains", flags->max_chains, "Chains in all; an apply that would pass it is refused")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI::Option* max_watchers = app.add_option(
      "--max-watchers", flags->max_watchers,
      "Concurrent WatchEvents streams, and apart from them concurrent grpc.health.v1 Watch streams; one more of "
      "either gets RESOURCE_EXHAUSTED. Unset: 10000, or less when the descriptor limit cannot hold that many (two "
      "descriptors each, 256 kept for the rest)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--etcd-endpoints", flags->etcd_endpoints,
                 "Cluster mode: etcd v3 endpoints (host:port,host:port,...); several failoverd replicas then share "
                 "one state in etcd. Empty: a single node on --data-dir");
  app.add_option("--etcd-prefix", flags->etcd_prefix,
                 "Cluster mode: the etcd key prefix of this cluster (clusters with different prefixes share an etcd)")
      ->check([](const std::string& p) {
        return p.size() >= 2 && p[0] == '/' ? std::string() : std::string("must start with / and name something");
      })
      ->capture_default_str();
  app.add_option("--advertise-address", flags->advertise_address,
                 "Cluster mode: host:port the other replicas reach this one's gRPC port at (default: the listen "
                 "address; required when listening on all interfaces)");
  app.add_option("--leader-lease", flags->leader_lease_seconds,
                 "Cluster mode: the leader's etcd lease; another replica takes over this long after the leader is "
                 "lost (whole seconds, at least 2)")
      ->transform(DurationIn(absl::Seconds(1), "SECONDS"))
      ->check(CLI::Range(2.0, 3600.0))
      ->capture_default_str();
  app.add_option("--etcd-log-keep", flags->etcd_log_keep,
                 "Cluster mode: Change log entries kept in etcd; every this many the leader writes a snapshot of "
                 "the state and deletes older entries (a replica further behind starts from the snapshot)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--etcd-max-request-bytes", flags->etcd_max_request_bytes,
                 "Cluster mode: etcd's --max-request-bytes; failoverd keeps every write to etcd below it (log "
                 "entries in groups of up to two thirds of it, snapshot parts of a third)")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30))
      ->capture_default_str();
  app.add_option("--etcd-ca", flags->etcd_ca, "Cluster mode: CA (PEM) of etcd's server certificates; enables TLS");
  app.add_option("--etcd-cert", flags->etcd_cert, "Cluster mode: client certificate (PEM) for etcd");
  app.add_option("--etcd-key", flags->etcd_key, "Cluster mode: client key (PEM) for etcd");
  app.add_option("--etcd-user", flags->etcd_user, "Cluster mode: etcd user (with --etcd-password-file)");
  app.add_option("--etcd-password-file", flags->etcd_password_file,
                 "Cluster mode: file holding the etcd user's password (one line)");
  app.add_option("--peer-ca", flags->peer_ca,
                 "Cluster mode with TLS: CA (PEM) of the other replicas' server certificates (default: --tls-client-ca)");
  app.add_flag("--peer-plaintext", flags->peer_plaintext,
               "Cluster mode with --tokens-file and no TLS: start anyway, though replicas then send callers' tokens "
               "and their relay token to each other in the clear (only on a network no one else can read)");
  try {
    app.parse(argc, argv);
    flags->max_watchers_given = max_watchers->count() > 0;
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return std::nullopt;
}

}  // namespace failover
