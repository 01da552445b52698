// Cluster mode (DESIGN 3.12) measured with real processes: a 3-member etcd on
// loopback, three failoverd replicas, and a single-node failoverd beside them.
//   convergence:  a ReportOutcome that trips a target at a follower, to the
//                 chain's switch event on every replica (WatchEvents on each);
//   throughput:   the caller's loop (PickTarget, ReportOutcome; a share of
//                 first attempts fail) against a follower and against the
//                 single node, taking turns in rounds, same threads;
//   leader loss:  SIGKILL the leader, then a trip is attempted at a follower
//                 every 20 ms: the time until one is decided.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/bench_util.h"
#include "failover/v1/admin.grpc.pb.h"
#include "failover/v1/decision.grpc.pb.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/failoverd_process.h"

namespace {

namespace v1 = ::failover::v1;
using failover::bench::Percentile;
using failover::bench::RssKib;
using failover::bench::SettledRssKib;
using failover::testing::EtcdCluster;
using failover::testing::FailoverdProcess;
using failover::testing::TempDir;
using Clock = std::chrono::steady_clock;

struct Options {
  int trips = 200;          // convergence samples
  double seconds = 3;       // per throughput round and mode
  int rounds = 3;
  int threads = 8;
  double failure_share = 0.05;
  int chains = 1000;
  int leader_losses = 3;
  int lease = 2;            // seconds
};

std::unique_ptr<grpc::ClientContext> Ctx(int seconds = 5) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  return ctx;
}

// Chains c<i> of targets a<i> then b<i> for the load, and l<i> (targets
// la<i>, lb<i>) that only the leader-loss runs trip; one counted failure trips
// a target.
constexpr int kLeaderLossChains = 500;

void AddChain(v1::ApplyRequest* req, const std::string& prefix, int i) {
  const std::string a = prefix + "a" + std::to_string(i), b = prefix + "b" + std::to_string(i);
  req->add_targets()->set_name(a);
  req->add_targets()->set_name(b);
  v1::Chain* c = req->add_chains();
  c->set_name((prefix.empty() ? "c" : prefix) + std::to_string(i));
  c->add_targets(a);
  c->add_targets(b);
  c->mutable_policy()->mutable_trip()->set_errors(1);
}

v1::ApplyRequest World(int chains) {
  v1::ApplyRequest req;
  for (int i = 0; i < chains; ++i) AddChain(&req, "", i);
  for (int i = 0; i < kLeaderLossChains; ++i) AddChain(&req, "l", i);
  return req;
}

struct Replica {
  TempDir data;
  int port = failover::testing::FreePort();
  std::unique_ptr<FailoverdProcess> proc;
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
};

bool Start(Replica& r, const std::string& etcd, const Options& o) {
  r.proc = std::make_unique<FailoverdProcess>(FailoverdProcess::Options{
      r.data.path(),
      {"--log-level", "warn", "--etcd-endpoints", etcd, "--etcd-prefix", "/bench", "--leader-lease",
       std::to_string(o.lease)},
      r.address()});
  std::string error;
  if (!r.proc->Start(&error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return false;
  }
  return true;
}

v1::ClusterStatus Status(const std::string& address) {
  auto admin = v1::AdminService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  v1::StatusResponse resp;
  if (!admin->GetStatus(Ctx(1).get(), v1::GetStatusRequest(), &resp).ok()) return v1::ClusterStatus();
  return resp.cluster();
}

int Leader(std::vector<Replica>& replicas, const std::set<int>& skip = {}) {
  for (size_t i = 0; i < replicas.size(); ++i) {
    if (skip.count(static_cast<int>(i)) != 0) continue;
    if (Status(replicas[i].address()).role() == v1::ClusterStatus::ROLE_LEADER) return static_cast<int>(i);
  }
  return -1;
}

int AwaitLeader(std::vector<Replica>& replicas, const std::set<int>& skip = {}) {
  int leader = -1;
  failover::testing::WaitUntil(20, [&] { return (leader = Leader(replicas, skip)) >= 0; });
  return leader;
}

bool Fail(v1::DecisionService::Stub* stub, const std::string& chain, const std::string& target,
          v1::ReportOutcomeResponse* resp) {
  v1::ReportOutcomeRequest req;
  req.set_chain(chain);
  req.set_target(target);
  req.mutable_failure()->set_http_status(503);
  return stub->ReportOutcome(Ctx().get(), req, resp).ok();
}

std::string Active(v1::DecisionService::Stub* stub, const std::string& chain) {
  v1::PickTargetRequest req;
  req.set_chain(chain);
  v1::PickTargetResponse resp;
  return stub->PickTarget(Ctx().get(), req, &resp).ok() ? resp.active_target() : "";
}

// --- convergence ---------------------------------------------------------

void Convergence(std::vector<Replica>& replicas, int leader, const Options& o) {
  const int follower = leader == 0 ? 1 : 0;
  std::mutex mu;
  std::map<std::string, std::vector<Clock::time_point>> seen;  // chain -> arrival on each replica
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::thread> watchers;
  std::atomic<int> open{0};
  for (Replica& r : replicas) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    grpc::ClientContext* ctx = contexts.back().get();
    watchers.emplace_back([&, ctx, address = r.address()] {
      auto stub = v1::DecisionService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
      auto stream = stub->WatchEvents(ctx, v1::WatchEventsRequest());
      v1::Event e;
      bool counted = false;
      while (stream->Read(&e)) {
        if (e.has_snapshot() && !e.snapshot().more() && !counted) {
          counted = true;
          ++open;
        }
        if (e.has_chain_switched() && e.chain_switched().reason() == v1::SWITCH_REASON_TRIP) {
          std::lock_guard<std::mutex> lock(mu);
          seen[e.chain_switched().chain()].push_back(Clock::now());
        }
      }
    });
  }
  failover::testing::WaitUntil(10, [&] { return open.load() == static_cast<int>(replicas.size()); });
  auto stub = v1::DecisionService::NewStub(
      grpc::CreateChannel(replicas[static_cast<size_t>(follower)].address(), grpc::InsecureChannelCredentials()));
  std::vector<double> all_ms;
  std::vector<double> here_ms;
  for (int i = 0; i < o.trips && i < o.chains; ++i) {
    const std::string chain = "c" + std::to_string(i);
    const auto start = Clock::now();
    v1::ReportOutcomeResponse resp;
    if (!Fail(stub.get(), chain, "a" + std::to_string(i), &resp)) continue;
    here_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    const bool everywhere = failover::testing::WaitUntil(5, [&] {
      std::lock_guard<std::mutex> lock(mu);
      return seen[chain].size() == replicas.size();
    });
    if (!everywhere) continue;
    std::lock_guard<std::mutex> lock(mu);
    const auto last = *std::max_element(seen[chain].begin(), seen[chain].end());
    all_ms.push_back(std::chrono::duration<double, std::milli>(last - start).count());
  }
  for (auto& ctx : contexts) ctx->TryCancel();
  for (auto& t : watchers) t.join();
  std::printf("convergence trips=%zu at_follower_answer p50_ms=%.2f p99_ms=%.2f every_replica p50_ms=%.2f "
              "p99_ms=%.2f max_ms=%.2f\n",
              all_ms.size(), Percentile(here_ms, 0.5), Percentile(here_ms, 0.99), Percentile(all_ms, 0.5),
              Percentile(all_ms, 0.99), Percentile(all_ms, 1.0));
}

// --- throughput ----------------------------------------------------------

struct Round {
  uint64_t pairs = 0;
  double seconds = 0;
};

Round Load(const std::string& address, const Options& o, int round) {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < 4; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("failoverd.bench.channel", i);  // distinct connections
    channels.push_back(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  }
  std::atomic<uint64_t> pairs{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t) {
    threads.emplace_back([&, t] {
      auto stub = v1::DecisionService::NewStub(channels[static_cast<size_t>(t) % channels.size()]);
      uint64_t n = static_cast<uint64_t>(t) * 7919 + static_cast<uint64_t>(round) * 104729;
      const uint64_t fail_every = o.failure_share > 0 ? static_cast<uint64_t>(1 / o.failure_share) : 0;
      while (!stop.load(std::memory_order_relaxed)) {
        ++n;
        const std::string chain = "c" + std::to_string(n % static_cast<uint64_t>(o.chains));
        v1::PickTargetRequest pick;
        pick.set_chain(chain);
        v1::PickTargetResponse plan;
        if (!stub->PickTarget(Ctx().get(), pick, &plan).ok() || plan.attempts_size() == 0) continue;
        v1::ReportOutcomeRequest report;
        report.set_decision_id(plan.decision_id());
        report.set_target(plan.attempts(0).target());
        if (fail_every != 0 && n % fail_every == 0) {
          report.mutable_failure()->set_http_status(500);
        } else {
          report.mutable_success();
        }
        v1::ReportOutcomeResponse verdict;
        if (stub->ReportOutcome(Ctx().get(), report, &verdict).ok()) pairs.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  const auto start = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));
  stop = true;
  for (auto& t : threads) t.join();
  return Round{pairs.load(), std::chrono::duration<double>(Clock::now() - start).count()};
}

// `others` are the processes a follower's pairs also cost: the other
// replicas and the etcd members.
void Throughput(const std::string& follower, pid_t follower_pid, pid_t leader_pid, const std::vector<pid_t>& others,
                const std::string& single, pid_t single_pid, const Options& o) {
  using failover::bench::CpuSeconds;
  auto others_cpu_seconds = [&] {
    double sum = 0;
    for (pid_t pid : others) sum += pid > 0 ? CpuSeconds(pid) : 0;
    return sum;
  };
  uint64_t follower_pairs = 0, single_pairs = 0;
  double follower_s = 0, single_s = 0;
  double follower_cpu = 0, leader_cpu = 0, others_cpu = 0, single_cpu = 0;
  // Warm-up, not counted: every target's first success is judged (UNKNOWN to HEALTHY) once.
  Load(follower, o, -1);
  Load(single, o, -1);
  for (int round = 0; round < o.rounds; ++round) {
    const double f0 = CpuSeconds(follower_pid), l0 = CpuSeconds(leader_pid), o0 = others_cpu_seconds();
    const Round f = Load(follower, o, round);
    follower_cpu += CpuSeconds(follower_pid) - f0;
    leader_cpu += CpuSeconds(leader_pid) - l0;
    others_cpu += others_cpu_seconds() - o0;
    const double s0 = CpuSeconds(single_pid);
    const Round s = Load(single, o, round);
    single_cpu += CpuSeconds(single_pid) - s0;
    std::printf("round %d follower %.0f pairs/s single %.0f pairs/s\n", round, f.pairs / f.seconds,
                s.pairs / s.seconds);
    follower_pairs += f.pairs;
    follower_s += f.seconds;
    single_pairs += s.pairs;
    single_s += s.seconds;
  }
  const double fr = follower_pairs / follower_s, sr = single_pairs / single_s;
  std::printf("throughput follower %.0f pairs/s single %.0f pairs/s ratio %.2f (failure share %.2f)\n", fr, sr,
              fr / sr, o.failure_share);
  std::printf("cpu per pair: follower %.1f us + leader %.1f us + other replica and etcd %.1f us, single node %.1f us\n",
              1e6 * follower_cpu / static_cast<double>(follower_pairs),
              1e6 * leader_cpu / static_cast<double>(follower_pairs),
              1e6 * others_cpu / static_cast<double>(follower_pairs),
              1e6 * single_cpu / static_cast<double>(single_pairs));
}

// --- leader loss ---------------------------------------------------------

void LeaderLoss(std::vector<Replica>& replicas, const std::string& etcd, const Options& o) {
  std::vector<double> seconds;
  int next_chain = kLeaderLossChains - 1;
  for (int run = 0; run < o.leader_losses; ++run) {
    const int leader = AwaitLeader(replicas);
    if (leader < 0) break;
    const int follower = leader == 0 ? 1 : 0;
    auto stub = v1::DecisionService::NewStub(
        grpc::CreateChannel(replicas[static_cast<size_t>(follower)].address(), grpc::InsecureChannelCredentials()));
    const auto killed = Clock::now();
    replicas[static_cast<size_t>(leader)].proc->Stop(SIGKILL);
    bool decided = false;
    while (!decided && Clock::now() - killed < std::chrono::seconds(30) && next_chain >= 0) {
      v1::ReportOutcomeResponse resp;
      const int i = next_chain--;
      // Decided means the trip is in the log: the follower's verdict alone
      // says DOWN even when its relay to the leader timed out, but the chain
      // switches there only once a leader counted the failure and the
      // follower applied the switch (it answers after that when it can).
      const std::string chain = "l" + std::to_string(i);
      decided = Fail(stub.get(), chain, "la" + std::to_string(i), &resp) &&
                resp.target_health() == v1::HEALTH_STATE_DOWN && Active(stub.get(), chain) == "lb" + std::to_string(i);
      if (!decided) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (decided) seconds.push_back(std::chrono::duration<double>(Clock::now() - killed).count());
    Start(replicas[static_cast<size_t>(leader)], etcd, o);  // back, as a follower
  }
  std::printf("leader loss runs=%zu lease_s=%d trips_decided_again_after p50_s=%.2f max_s=%.2f (goal < %d s)\n",
              seconds.size(), o.lease, Percentile(seconds, 0.5), Percentile(seconds, 1.0), o.lease + 1);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("failoverd cluster mode: convergence, follower throughput, leader loss");
  app.add_option("--trips", o.trips, "convergence samples");
  app.add_option("--seconds", o.seconds, "seconds per throughput round and mode");
  app.add_option("--rounds", o.rounds, "throughput rounds");
  app.add_option("--threads", o.threads, "caller threads");
  app.add_option("--failure-share", o.failure_share, "share of first attempts that fail");
  app.add_option("--chains", o.chains, "chains of two targets");
  app.add_option("--leader-losses", o.leader_losses, "times the leader is killed");
  app.add_option("--lease", o.lease, "leader lease, seconds");
  CLI11_PARSE(app, argc, argv);

  if (!EtcdCluster::Installed()) {
    std::fprintf(stderr, "etcd is not installed (scripts/deps installs etcd-server)\n");
    return 1;
  }
  // etcd's default request limit, as in production: the world's Apply (one
  // Change of every chain) passes the test members' smaller one.
  EtcdCluster etcd(3, EtcdCluster::kDefaultMaxRequestBytes);
  std::string error;
  if (!etcd.Start(&error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  std::vector<Replica> replicas(3);
  for (Replica& r : replicas) {
    if (!Start(r, etcd.Endpoints(), o)) return 1;
  }
  const int leader = AwaitLeader(replicas);
  if (leader < 0) {
    std::fprintf(stderr, "no leader\n");
    return 1;
  }
  TempDir single_data;
  auto single = failover::bench::StartFailoverd(single_data);
  if (!single) return 1;
  const int follower = leader == 0 ? 1 : 0;
  const pid_t leader_pid = replicas[static_cast<size_t>(leader)].proc->pid();
  const pid_t follower_pid = replicas[static_cast<size_t>(follower)].proc->pid();
  const long rss_before[] = {RssKib(leader_pid), RssKib(follower_pid), RssKib(single->pid())};
  const v1::ApplyRequest world = World(o.chains);
  for (const std::string& address : {replicas[static_cast<size_t>(leader)].address(), single->address()}) {
    auto admin = v1::AdminService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    v1::ApplyResponse applied;
    const grpc::Status s = admin->Apply(Ctx(30).get(), world, &applied);
    if (!s.ok()) {
      std::fprintf(stderr, "apply: %s\n", s.error_message().c_str());
      return 1;
    }
  }
  // The world as each applied it: the leader and the single node from the
  // call, the follower from the log.
  const uint64_t applied = Status(replicas[static_cast<size_t>(leader)].address()).applied_index();
  for (int i = 0; i < 300 && Status(replicas[static_cast<size_t>(follower)].address()).applied_index() < applied; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const long rss_after[] = {SettledRssKib(leader_pid), SettledRssKib(follower_pid), SettledRssKib(single->pid())};
  const double chains = o.chains + kLeaderLossChains;
  std::printf("memory applied live, KiB per chain: leader %.2f follower %.2f single node %.2f\n",
              static_cast<double>(rss_after[0] - rss_before[0]) / chains,
              static_cast<double>(rss_after[1] - rss_before[1]) / chains,
              static_cast<double>(rss_after[2] - rss_before[2]) / chains);
  std::printf("cluster: 3-member etcd, 3 replicas (leader %d, measured follower %d), %d chains\n", leader, follower,
              o.chains);
  Convergence(replicas, leader, o);
  std::vector<pid_t> others;
  for (int i = 0; i < static_cast<int>(replicas.size()); ++i) {
    if (i != leader && i != follower) others.push_back(replicas[static_cast<size_t>(i)].proc->pid());
  }
  for (int m = 0; m < etcd.size(); ++m) others.push_back(etcd.pid(m));
  Throughput(replicas[static_cast<size_t>(follower)].address(), follower_pid, leader_pid, others, single->address(),
             single->pid(), o);
  LeaderLoss(replicas, etcd.Endpoints(), o);
  return 0;
}
