#include "tests/support/failoverd_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace failover::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Polls `done` every few milliseconds until it is true or the deadline passes.
template <typename F>
bool WaitFor(double timeout_s, F done) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (Clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

std::vector<char*> CStrings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Starts argv with stdin from /dev/null, stdout and stderr to the given files
// ("" = /dev/null) and the current environment plus `extra_env`. -1 on failure.
pid_t Spawn(std::vector<std::string> args, const std::string& out_file, const std::string& err_file,
            const std::vector<std::string>& extra_env = {}) {
  std::vector<char*> argv = CStrings(args);
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  for (const auto& e : extra_env) env.push_back(e);
  std::vector<char*> envp = CStrings(env);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_file.empty() ? "/dev/null" : out_file.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_file.empty() ? "/dev/null" : err_file.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data()) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

}  // namespace

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base ? base : "/tmp") + "/failoverd-test-XXXXXX";
  char* made = mkdtemp(tmpl.data());
  path_ = made ? made : "";
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

// FAILOVERD_BIN in the environment runs another build (a benchmark's "before").
std::string FailoverdBinary() {
  const char* other = std::getenv("FAILOVERD_BIN");
  return other != nullptr && *other != '\0' ? other : FAILOVERD_BIN;
}
std::string ReadmePath() { return README_MD; }

std::string FailoverctlBinary() { return FAILOVERCTL_BIN; }

FailoverdProcess::FailoverdProcess(Options options) : options_(std::move(options)) {}

FailoverdProcess::~FailoverdProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

bool FailoverdProcess::Start(std::string* error, double timeout_s) {
  const std::string port_file = scratch_.path() + "/port";
  const std::string err_file = scratch_.path() + "/stderr";
  std::error_code ec;
  std::filesystem::remove(port_file, ec);
  std::vector<std::string> args = {FailoverdBinary(), "--listen", options_.listen,
                                   "--data-dir", options_.data_dir, "--port-file", port_file};
  if (std::find(options_.extra_args.begin(), options_.extra_args.end(), "--metrics-listen") ==
      options_.extra_args.end()) {
    args.insert(args.end(), {"--metrics-listen", ""});  // no fixed port to collide on
  }
  for (const auto& a : options_.extra_args) args.push_back(a);
  pid_ = Spawn(args, "", err_file);
  if (pid_ < 0) {
    *error = "cannot start " + args[0];
    return false;
  }
  bool exited = false;
  const bool ready = WaitFor(timeout_s, [&] {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited = true;
      return true;
    }
    return std::filesystem::exists(port_file);
  });
  if (exited) {
    pid_ = -1;
    *error = "failoverd exited during start: " + Stderr();
    return false;
  }
  if (!ready) {
    *error = "failoverd did not write its port in time: " + Stderr();
    return false;
  }
  port_ = std::atoi(ReadFile(port_file).c_str());
  return port_ > 0;
}

std::shared_ptr<grpc::Channel> FailoverdProcess::Channel() const {
  return grpc::CreateChannel(address(), grpc::InsecureChannelCredentials());
}

int FailoverdProcess::WaitExit(double timeout_s) {
  int status = -1;
  const bool done = WaitFor(timeout_s, [&] { return waitpid(pid_, &status, WNOHANG) == pid_; });
  if (!done) return -1;
  pid_ = -1;
  return status;
}

int FailoverdProcess::Stop(int sig, double timeout_s) {
  if (pid_ <= 0) return -1;
  kill(pid_, sig);
  return WaitExit(timeout_s);
}

int FailoverdProcess::LoggedPort(const std::string& key) const {
  const std::string err = Stderr();
  const size_t at = err.find(key + "=");
  return at == std::string::npos ? 0 : std::atoi(err.c_str() + at + key.size() + 1);
}

std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    (void)!write(fd, req.data(), req.size());
    char buf[4096];
    for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

pid_t SpawnProcess(const std::vector<std::string>& argv, const std::string& out_file, const std::string& err_file) {
  return Spawn(argv, out_file, err_file);
}

bool WaitUntil(double timeout_s, const std::function<bool()>& done) { return WaitFor(timeout_s, done); }

std::string FailoverdProcess::Stderr() const { return ReadFile(scratch_.path() + "/stderr"); }

CommandResult RunCommand(const std::vector<std::string>& argv_in, const std::vector<std::string>& env_in) {
  TempDir scratch;
  const std::string out_file = scratch.path() + "/out";
  const std::string err_file = scratch.path() + "/err";
  CommandResult result;
  const pid_t pid = Spawn(argv_in, out_file, err_file, env_in);
  if (pid < 0) {
    result.err = "cannot start " + argv_in[0];
    return result;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = ReadFile(out_file);
  result.err = ReadFile(err_file);
  return result;
}

}  // namespace failover::testing

namespace failover::testing {

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  pid_ = Spawn(argv, "", scratch_.path() + "/stderr", env);
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
}

std::string ChildProcess::Stderr() const { return ReadFile(scratch_.path() + "/stderr"); }

}  // namespace failover::testing
