// Runs the real failoverd binary for integration tests: a fresh temp data dir,
// port 0 read back from --port-file, and waits that end on a condition or a
// deadline, never on a fixed sleep.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"

namespace failover::testing {

// A fresh directory under $TMPDIR, removed when destroyed.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class FailoverdProcess {
 public:
  struct Options {
    std::string data_dir;  // required
    std::vector<std::string> extra_args;
    std::string listen = "127.0.0.1:0";
  };
  explicit FailoverdProcess(Options options);
  ~FailoverdProcess();  // SIGKILLs a process still running

  // Starts the binary and waits (up to `timeout_s`) until it wrote its port.
  // Returns false and fills `error` (with the process's stderr) on failure.
  bool Start(std::string* error, double timeout_s = 20);
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::shared_ptr<grpc::Channel> Channel() const;

  // Sends `sig` and waits for exit; returns the exit status as from waitpid,
  // or -1 on timeout.
  int Stop(int sig, double timeout_s = 20);
  // Waits for the process to exit by itself.
  int WaitExit(double timeout_s);
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  std::string Stderr() const;
  // The ports failoverd logged when it started serving (with host:0), or 0.
  int MetricsPort() const { return LoggedPort("metrics_port"); }
  int HttpPort() const { return LoggedPort("http_port"); }
  int LoggedPort(const std::string& key) const;

 private:
  Options options_;
  TempDir scratch_;
  pid_t pid_ = -1;
  int port_ = 0;
};

// A loopback port that was free a moment ago (for a server that must come
// back on the same address after a restart).
int FreePort();

// The path of a binary built next to the tests (from compile definitions).
std::string FailoverdBinary();
std::string FailoverctlBinary();
// The project's README (tests that check it documents what the binaries do).
std::string ReadmePath();

// A background child process (for example a probe agent), stopped when destroyed.
class ChildProcess {
 public:
  explicit ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env = {});
  ~ChildProcess();
  std::string Stderr() const;

 private:
  TempDir scratch_;
  pid_t pid_ = -1;
};

// A plain HTTP/1.0 GET on loopback; returns the raw response.
std::string HttpGet(int port, const std::string& path);

// Starts argv in the background with stdin from /dev/null and stdout and stderr
// to the given files ("" = /dev/null); -1 on failure.
pid_t SpawnProcess(const std::vector<std::string>& argv, const std::string& out_file, const std::string& err_file);
// Polls `done` every few milliseconds until it is true or `timeout_s` passes.
bool WaitUntil(double timeout_s, const std::function<bool()>& done);

// Runs a command, captures stdout and stderr, returns the exit code.
struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
CommandResult RunCommand(const std::vector<std::string>& argv, const std::vector<std::string>& env = {});

}  // namespace failover::testing
