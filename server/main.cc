// failoverd: parses the flags, starts the daemon (server/daemon.h) and waits
// for signals: SIGHUP reloads, SIGTERM and SIGINT stop it.
#include <signal.h>
#include <sys/resource.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/stubs/logging.h"
#include "grpc/support/log.h"
#include "server/accept_guard.h"
#include "server/api/release_memory.h"
#include "server/config/check.h"
#include "server/daemon.h"
#include "server/flags.h"
#include "server/log/log.h"

namespace {

namespace log = failover::log;

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

// gRPC core writes its own lines to stderr ("E1202 ... Handshake failed" when
// a client speaks plaintext to a TLS port): route them through failoverd's
// log so --log-format json stays JSON. A client's failed handshake is not
// failoverd's error, so gRPC's errors are warnings here.
void RouteGrpcLogs() {
  gpr_set_log_function([](gpr_log_func_args* args) {
    const log::Level to = args->severity == GPR_LOG_SEVERITY_ERROR ? log::Level::kWarn : log::Level::kDebug;
    log::Write(to, absl::StrCat("grpc: ", args->message), {{"at", absl::StrCat(args->file, ":", args->line)}});
  });
}

// Every connection and watcher holds a descriptor: take the most the system
// allows, and say what that is (server/accept_guard.h covers running out).
// An unset --max-watchers is sized to what the limit holds; a set one that it
// cannot hold is warned about.
void RaiseDescriptorLimit(failover::Flags& flags) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
    getrlimit(RLIMIT_NOFILE, &limit);
  }
  log::Info("descriptor limit", {{"nofile", limit.rlim_cur}});
  constexpr rlim_t kKept = 256;  // listeners, files, connections besides the watchers
  if (!flags.max_watchers_given && limit.rlim_cur < 2 * flags.max_watchers + kKept) {
    flags.max_watchers = std::max<size_t>(16, (limit.rlim_cur > kKept ? limit.rlim_cur - kKept : 0) / 2);
    log::Info("--max-watchers sized to the descriptor limit",
              {{"max_watchers", flags.max_watchers}, {"nofile", limit.rlim_cur}});
  } else if (limit.rlim_cur < 2 * flags.max_watchers + kKept) {
    log::Warn(absl::StrCat("the descriptor limit (", limit.rlim_cur, ") is low for --max-watchers ",
                           flags.max_watchers, ": raise it (ulimit -n) or lower --max-watchers"));
  }
}

// --check-config: the offline check, for CI and for an init container that
// fails the rollout instead of the running pod.
int CheckConfig(const std::string& path) {
  const absl::StatusOr<failover::config::CheckSummary> checked = failover::config::CheckConfigPath(path);
  if (!checked.ok()) {
    std::fprintf(stderr, "failoverd: %s: invalid: %s\n", path.c_str(), std::string(checked.status().message()).c_str());
    return 1;
  }
  std::printf("%s: valid (%zu files, %zu targets, %zu chains)\n", path.c_str(), checked->files, checked->targets,
              checked->chains);
  return 0;
}

sigset_t HandledSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  return set;
}

}  // namespace

int main(int argc, char** argv) {
  failover::Flags flags;
  if (std::optional<int> exit_code = failover::ParseFlags(argc, argv, &flags)) return *exit_code;

  if (!flags.check_config.empty()) return CheckConfig(flags.check_config);

  log::Level level = log::Level::kInfo;
  log::ParseLevel(flags.log_level, &level);
  log::Configure(level, flags.log_format == "json");
  RouteProtobufLogs();
  RouteGrpcLogs();
  // Debian's Abseil checks every absl::Mutex acquisition against a global
  // lock graph (deadlock detection); it showed in the profile of every call.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  failover::api::KeepLargeAllocationsSeparate();
  RaiseDescriptorLimit(flags);
  failover::InstallAcceptGuard();

  // Block the shutdown and reload signals in every thread; they are waited for below.
  const sigset_t signals = HandledSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  failover::Daemon daemon(flags);
  const absl::Status started = daemon.Start();
  if (!started.ok()) {
    log::Error(std::string(started.message()));
    (void)daemon.Stop();
    return 1;
  }
  for (;;) {
    int sig = 0;
    sigwait(&signals, &sig);
    if (sig != SIGHUP) {
      log::Info(absl::StrCat("signal ", sig, " received; shutting down"));
      break;
    }
    daemon.Reload();
  }
  const absl::Status stopped = daemon.Stop();
  if (!stopped.ok()) {
    log::Error(std::string(stopped.message()));
    return 1;
  }
  log::Info("failoverd stopped cleanly");
  return 0;
}
