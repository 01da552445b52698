// Helpers shared by the benchmark programs that drive a real failoverd.
#pragma once

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "failover/v1/admin.pb.h"
#include "tests/support/failoverd_process.h"

namespace failover::bench {

// The p-th quantile (0..1) of `v`; -1 when empty.
inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// What a load run measured, summed over its rounds.
struct Totals {
  std::vector<double> latencies_us;
  double seconds = 0;
  double server_cpu_seconds = 0;
  long errors = 0;
  long extra_calls = 0;  // TRY_NEXT reports beyond the pair
  size_t loops() const { return latencies_us.size(); }
};

// User + system CPU seconds a process has used.
inline double CpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces) start after the last ')'.
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 3; fields >> field; ++i) {
    if (i == 14) utime = std::stol(field);
    if (i == 15) {
      stime = std::stol(field);
      break;
    }
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Resident memory of a process, KiB (-1 when it cannot be read).
inline long RssKib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// RSS once it has settled: failoverd gives back what a change freed on the
// tick after next (ticks are a second apart), so this waits until two
// readings 2.5 s apart agree within 1%, at most 50 s.
inline long SettledRssKib(pid_t pid) {
  long rss = RssKib(pid);
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    const long next = RssKib(pid);
    if (std::labs(next - rss) * 100 <= rss) return next;
    rss = next;
  }
  return rss;
}

// Starts failoverd on a fresh data dir (quiet logs unless `log_level` says
// otherwise); null (and a message) on failure.
inline std::unique_ptr<testing::FailoverdProcess> StartFailoverd(const testing::TempDir& data,
                                                                 std::vector<std::string> extra_args = {},
                                                                 const std::string& log_level = "warn") {
  extra_args.insert(extra_args.begin(), {"--log-level", log_level});
  auto proc = std::make_unique<testing::FailoverdProcess>(
      testing::FailoverdProcess::Options{data.path(), std::move(extra_args)});
  std::string error;
  if (!proc->Start(&error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return nullptr;
  }
  return proc;
}

// Pins a thread (0: the calling one) to one CPU.
inline bool Pin(pid_t tid, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(tid, sizeof(set), &set) == 0;
}

// Pins every thread failoverd has now; threads it starts later inherit it.
inline bool PinProcess(pid_t pid, int cpu) {
  bool ok = true;
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    ok &= Pin(static_cast<pid_t>(std::stol(task.path().filename().string())), cpu);
  }
  return ok;
}

// 1 target in 2 per chain is remote, 1 local; a tripped target comes back
// after a short dwell, so switches keep happening for the whole run.
inline failover::v1::ApplyRequest World(int chains, failover::v1::Strategy strategy) {
  failover::v1::ApplyRequest config;
  for (int c = 0; c < chains; ++c) {
    const std::string a = "model-" + std::to_string(c) + "-a", b = "model-" + std::to_string(c) + "-b";
    config.add_targets()->set_name(a);
    failover::v1::Target* local = config.add_targets();
    local->set_name(b);
    local->set_kind(failover::v1::TARGET_KIND_LOCAL);
    failover::v1::Chain* chain = config.add_chains();
    chain->set_name("chain-" + std::to_string(c));
    chain->add_targets(a);
    chain->add_targets(b);
    chain->set_strategy(strategy);
    chain->mutable_policy()->mutable_recovery()->mutable_min_dwell()->set_nanos(200'000'000);
    chain->mutable_policy()->mutable_recovery()->set_probes(1);
  }
  return config;
}

}  // namespace failover::bench
