// Restore time and memory after a restart: a data dir holding 10,000 chains
// of 8 targets (20,000 targets, 80,000 references) with health and chain-state
// records, then the real failoverd started on it. Reports the time from spawn
// to serving (port written, which happens after the restore) and its RSS.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "storage/store.h"
#include "tests/support/failoverd_process.h"

namespace {

constexpr int kChains = 10000;
constexpr int kTargetsPerChain = 8;
constexpr int kTargets = 20000;

long RssKib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

}  // namespace

int main() {
  using failover::testing::FailoverdProcess;
  failover::testing::TempDir data;
  const absl::Time now = absl::Now();
  {
    auto store = failover::storage::Store::Open(data.path());
    if (!store.ok()) return 1;
    failover::Mutation config;
    config.generation = 1;
    std::vector<failover::TargetStatus> health;
    for (int i = 0; i < kTargets; ++i) {
      failover::TargetConfig t;
      t.name = absl::StrCat("provider-", i % 7, "/model-", i);
      t.labels["base_url"] = absl::StrCat("https://provider-", i % 7, ".example/v1");
      config.put_targets.push_back(t);
      failover::TargetStatus s;
      s.name = t.name;
      s.automatic = i % 50 == 0 ? failover::HealthState::kDown : failover::HealthState::kHealthy;
      s.since = now;
      health.push_back(s);
    }
    std::vector<failover::ChainStatus> chains;
    for (int c = 0; c < kChains; ++c) {
      failover::ChainConfig chain;
      chain.name = absl::StrCat("chain-", c);
      for (int k = 0; k < kTargetsPerChain; ++k) {
        chain.targets.push_back(config.put_targets[(c * 2 + k * 2503) % kTargets].name);
      }
      failover::ChainStatus s;
      s.name = chain.name;
      s.active_target = chain.targets[0];
      s.active_since = now;
      s.last_switch = now;
      chains.push_back(s);
      config.put_chains.push_back(std::move(chain));
    }
    if (!(*store)->Commit(config).ok() || !(*store)->WriteTransitions(health, chains, {}).ok()) return 1;
    if (!(*store)->Close().ok()) return 1;
  }
  for (int run = 1; run <= 3; ++run) {
    FailoverdProcess proc({data.path(), {}});
    const auto start = std::chrono::steady_clock::now();
    std::string error;
    if (!proc.Start(&error, 60)) {
      std::fprintf(stderr, "failoverd did not start: %s\n", error.c_str());
      return 1;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("run %d: ready to serve in %.3f s, RSS %.1f MiB (%d chains x %d targets, %d targets)\n", run, seconds,
                RssKib(proc.pid()) / 1024.0, kChains, kTargetsPerChain, kTargets);
    proc.Stop(SIGTERM);
  }
  return 0;
}
