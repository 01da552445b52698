// Restore time and memory: a data dir holding 10,000 chains of 8 targets
// (20,000 targets, 80,000 references) with health and chain-state records,
// then the real failoverd started on it. Reports the time from spawn to
// serving (port written, which happens after the restore) and the RSS growth
// per chain over a failoverd on an empty data dir; then the same world applied
// through the API to a running failoverd, and its RSS growth.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "failover/v1/admin.grpc.pb.h"
#include "storage/store.h"
#include "tests/support/failoverd_process.h"

namespace {

using failover::bench::RssKib;
using failover::bench::SettledRssKib;

constexpr int kChains = 10000;
constexpr int kTargetsPerChain = 8;
constexpr int kTargets = 20000;

// RSS of a failoverd that has started on `dir` and is serving.
long ServingRssKib(const std::string& dir) {
  failover::testing::FailoverdProcess proc({dir, {"--log-level", "warn"}});
  std::string error;
  if (!proc.Start(&error, 60)) {
    std::fprintf(stderr, "failoverd did not start: %s\n", error.c_str());
    return -1;
  }
  const long rss = RssKib(proc.pid());
  proc.Stop(SIGTERM);
  return rss;
}

// The world as API requests: every target in one, the chains in slices that
// stay under the default 4 MiB message limit.
std::vector<failover::v1::ApplyRequest> AsRequests(const failover::Change& world) {
  std::vector<failover::v1::ApplyRequest> requests(1);
  for (const failover::TargetConfig& t : world.put_targets) {
    failover::v1::Target* out = requests[0].add_targets();
    out->set_name(t.name);
    out->mutable_labels()->insert(t.labels.begin(), t.labels.end());
  }
  for (size_t c = 0; c < world.put_chains.size(); ++c) {
    if (c % 2000 == 0) requests.emplace_back();
    failover::v1::Chain* out = requests.back().add_chains();
    out->set_name(world.put_chains[c].name);
    for (const std::string& t : world.put_chains[c].targets) out->add_targets(t);
  }
  return requests;
}

bool ApplyWorld(const std::shared_ptr<grpc::Channel>& channel, const failover::Change& world) {
  auto admin = failover::v1::AdminService::NewStub(channel);
  for (const failover::v1::ApplyRequest& request : AsRequests(world)) {
    grpc::ClientContext ctx;
    failover::v1::ApplyResponse response;
    const grpc::Status s = admin->Apply(&ctx, request, &response);
    if (!s.ok()) {
      std::fprintf(stderr, "apply: %s\n", s.error_message().c_str());
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using failover::testing::FailoverdProcess;
  failover::testing::TempDir empty, temp_data;
  // For profiling failoverd on the world: --write-world DIR only writes the
  // data dir; --apply-to HOST:PORT only applies the world to a running failoverd.
  const bool write_only = argc == 3 && std::string(argv[1]) == "--write-world";
  const bool apply_only = argc == 3 && std::string(argv[1]) == "--apply-to";
  const std::string data_dir = write_only ? argv[2] : temp_data.path();
  failover::Change world;
  const absl::Time now = absl::Now();
  {
    auto store = failover::storage::Store::Open(data_dir);
    if (!store.ok()) return 1;
    failover::Change& config = world;
    config.config_generation = 1;
    for (int i = 0; i < kTargets; ++i) {
      failover::TargetConfig t;
      t.name = absl::StrCat("provider-", i % 7, "/model-", i);
      t.labels["base_url"] = absl::StrCat("https://provider-", i % 7, ".example/v1");
      config.put_targets.push_back(t);
      failover::TargetStateRecord s;
      s.name = t.name;
      s.automatic = i % 50 == 0 ? failover::HealthState::kDown : failover::HealthState::kHealthy;
      s.since = now;
      config.targets.push_back(s);
    }
    for (int c = 0; c < kChains; ++c) {
      failover::ChainConfig chain;
      chain.name = absl::StrCat("chain-", c);
      for (int k = 0; k < kTargetsPerChain; ++k) {
        chain.targets.push_back(config.put_targets[(c * 2 + k * 2503) % kTargets].name);
      }
      config.chains.push_back(failover::ChainStateRecord{chain.name, chain.targets[0], failover::ChainState::kPrimary,
                                                         now, now});
      config.put_chains.push_back(std::move(chain));
    }
    if (!(*store)->Write({&config}).ok()) return 1;
    if (!(*store)->Close().ok()) return 1;
  }
  if (write_only) return 0;
  if (apply_only) {
    return ApplyWorld(grpc::CreateChannel(argv[2], grpc::InsecureChannelCredentials()), world) ? 0 : 1;
  }
  const long empty_rss = ServingRssKib(empty.path());
  std::printf("empty data dir: RSS %.1f MiB\n", empty_rss / 1024.0);
  for (int run = 1; run <= 3; ++run) {
    FailoverdProcess proc({data_dir, {"--log-level", "warn"}});
    const auto start = std::chrono::steady_clock::now();
    std::string error;
    if (!proc.Start(&error, 60)) {
      std::fprintf(stderr, "failoverd did not start: %s\n", error.c_str());
      return 1;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const long rss = RssKib(proc.pid());
    std::printf("restore run %d: ready to serve in %.3f s, RSS %.1f MiB, growth %.2f KiB per chain "
                "(%d chains x %d targets, %d targets)\n",
                run, seconds, rss / 1024.0, static_cast<double>(rss - empty_rss) / kChains, kChains,
                kTargetsPerChain, kTargets);
    proc.Stop(SIGTERM);
  }

  // The same world applied live through the API.
  failover::testing::TempDir live;
  FailoverdProcess proc({live.path(), {"--log-level", "warn"}});
  std::string error;
  if (!proc.Start(&error, 60)) return 1;
  const long before = RssKib(proc.pid());
  if (!ApplyWorld(proc.Channel(), world)) return 1;
  const long after = SettledRssKib(proc.pid());
  std::printf("applied live: RSS %.1f MiB -> %.1f MiB, growth %.2f KiB per chain\n", before / 1024.0,
              after / 1024.0, static_cast<double>(after - before) / kChains);
  proc.Stop(SIGTERM);
  return 0;
}
