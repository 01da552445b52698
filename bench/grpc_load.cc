// The gRPC load generator. Against one real failoverd on loopback, in one run,
// it alternates two loops, each driven by the same client threads over the
// same channels:
//   baseline:  two calls of the standard health check, a no-op RPC of the same
//              server: what gRPC itself costs on this machine;
//   decision:  the caller's loop, PickTarget then ReportOutcome; a share of
//              first attempts fail (HTTP 500), which trips the target, switches
//              its chain and takes the TRY_NEXT path: one more report, made
//              inside the loop but outside the timed pair.
// It prints pairs per second, pair latency percentiles and failoverd's CPU time
// per pair for both, and their ratios. By default the client is pinned to one
// core and failoverd to the other; --own-baseline runs the baseline on a
// second failoverd, so a decision round's leftover work cannot reach it.
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/bench_util.h"
#include "failover/v1/admin.grpc.pb.h"
#include "failover/v1/decision.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/support/failoverd_process.h"

namespace {

namespace v1 = ::failover::v1;
using failover::bench::Percentile;
using failover::bench::Pin;
using failover::bench::PinProcess;
using failover::bench::Totals;
using failover::bench::World;
using Clock = std::chrono::steady_clock;

// Decision pairs' latencies (us) by their first report: a failed one takes
// the trip path (its answer may wait for a save), a succeeded one does not.
struct ByFirstReport {
  std::vector<double> failed;
  std::vector<double> succeeded;
};

struct Options {
  double seconds = 5;       // per round and mode
  int rounds = 3;           // baseline and decision alternate this many times
  int threads = 8;          // concurrent loops
  int channels = 4;         // connections they share
  double failure_share = 0.05;
  int chains = 1000;
  std::string strategy = "failover";  // or least_latency
  int server_cpu = 0;       // -1: not pinned
  int client_cpu = 1;
  std::vector<std::string> server_args;  // passed on to failoverd
  bool own_baseline = false;  // the baseline on a second failoverd
};


enum class Mode { kBaseline, kDecision };

class Load {
 public:
  Load(const Options& options, const std::string& address) : options_(options) {
    for (int c = 0; c < options.channels; ++c) {
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
      args.SetInt("load.channel", c);
      channels_.push_back(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
    }
  }

  // Runs `mode` for `seconds` on every thread; appends to `totals` unless
  // warming up, and each decision pair's latency also to `by_first` when given.
  void Run(Mode mode, double seconds, pid_t server, Totals* totals, ByFirstReport* by_first = nullptr) {
    std::atomic<bool> stop{false};
    std::vector<std::vector<double>> latencies(options_.threads);
    std::vector<std::vector<bool>> first_failed(options_.threads);
    std::vector<long> errors(options_.threads, 0), extra(options_.threads, 0);
    std::vector<std::thread> threads;
    const double cpu_before = failover::bench::CpuSeconds(server);
    const auto start = Clock::now();
    for (int t = 0; t < options_.threads; ++t) {
      threads.emplace_back([&, t] {
        auto channel = channels_[t % channels_.size()];
        latencies[t].reserve(200000);
        if (mode == Mode::kBaseline) {
          Baseline(channel, stop, &latencies[t], &errors[t]);
        } else {
          Decisions(channel, t, stop, &latencies[t], &first_failed[t], &errors[t], &extra[t]);
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));  // the measurement window
    stop = true;
    for (auto& th : threads) th.join();
    if (totals == nullptr) return;
    totals->seconds += std::chrono::duration<double>(Clock::now() - start).count();
    totals->server_cpu_seconds += failover::bench::CpuSeconds(server) - cpu_before;
    for (int t = 0; t < options_.threads; ++t) {
      totals->latencies_us.insert(totals->latencies_us.end(), latencies[t].begin(), latencies[t].end());
      if (by_first != nullptr) {
        for (size_t i = 0; i < first_failed[t].size(); ++i) {
          (first_failed[t][i] ? by_first->failed : by_first->succeeded).push_back(latencies[t][i]);
        }
      }
      totals->errors += errors[t];
      totals->extra_calls += extra[t];
    }
  }

 private:
  static double Since(Clock::time_point start) {
    return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  }

  void Baseline(const std::shared_ptr<grpc::Channel>& channel, const std::atomic<bool>& stop,
                std::vector<double>* latencies, long* errors) {
    auto stub = grpc::health::v1::Health::NewStub(channel);
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
    while (!stop.load(std::memory_order_relaxed)) {
      const auto start = Clock::now();
      bool ok = true;
      for (int call = 0; call < 2; ++call) {
        grpc::ClientContext ctx;
        ok &= stub->Check(&ctx, request, &response).ok();
      }
      if (!ok) {
        ++*errors;
        continue;
      }
      latencies->push_back(Since(start));
    }
  }

  void Decisions(const std::shared_ptr<grpc::Channel>& channel, int thread, const std::atomic<bool>& stop,
                 std::vector<double>* latencies, std::vector<bool>* first_failed, long* errors, long* extra) {
    auto stub = v1::DecisionService::NewStub(channel);
    std::mt19937_64 random(static_cast<uint64_t>(thread) + 1);
    std::uniform_real_distribution<double> unit(0, 1);
    v1::PickTargetRequest pick;
    v1::PickTargetResponse plan;
    v1::ReportOutcomeRequest report;
    v1::ReportOutcomeResponse verdict;
    for (long i = thread; !stop.load(std::memory_order_relaxed); i += options_.threads) {
      const auto start = Clock::now();
      pick.set_chain("chain-" + std::to_string(i % options_.chains));
      grpc::ClientContext pick_ctx;
      if (!stub->PickTarget(&pick_ctx, pick, &plan).ok() || plan.attempts_size() == 0) {
        ++*errors;
        continue;
      }
      std::string target = plan.attempts(0).target();
      bool fail = unit(random) < options_.failure_share;
      const bool failed = fail;
      bool ok = true;
      double pair_us = 0;
      for (int attempt = 1; attempt <= 3; ++attempt) {
        report.Clear();
        report.set_decision_id(plan.decision_id());
        report.set_target(target);
        report.set_attempt(static_cast<uint32_t>(attempt));
        if (fail) {
          report.mutable_failure()->set_http_status(500);
        } else {
          report.mutable_success();
          // An upstream latency for least_latency's average: 50-250 ms.
          report.mutable_latency()->set_nanos(static_cast<int32_t>(50'000'000 + unit(random) * 200'000'000));
        }
        grpc::ClientContext ctx;
        if (!stub->ReportOutcome(&ctx, report, &verdict).ok()) {
          ok = false;
          break;
        }
        if (attempt == 1) pair_us = Since(start);  // the pair: PickTarget and its first report
        if (verdict.verdict() != v1::VERDICT_TRY_NEXT) break;
        ++*extra;
        target = verdict.next_attempt().target();
        fail = false;  // the next target serves it
      }
      if (!ok) {
        ++*errors;
        continue;
      }
      latencies->push_back(pair_us);
      first_failed->push_back(failed);
    }
  }

  const Options& options_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
};

uint64_t LastSequence(failover::testing::FailoverdProcess& proc) {
  v1::ListEventsRequest req;
  req.set_limit(1);
  v1::ListEventsResponse resp;
  grpc::ClientContext ctx;
  if (!v1::AdminService::NewStub(proc.Channel())->ListEvents(&ctx, req, &resp).ok() || resp.events_size() == 0) {
    return 0;
  }
  return resp.events(0).sequence();
}

void PrintRow(const char* name, const Totals& t) {
  const double loops_per_s = static_cast<double>(t.loops()) / t.seconds;
  std::printf("| %-30s | %9.0f | %6.0f | %6.0f | %8.0f | %13.1f | %6ld |\n", name, loops_per_s,
              Percentile(t.latencies_us, 0.5), Percentile(t.latencies_us, 0.99), Percentile(t.latencies_us, 0.999),
              t.server_cpu_seconds * 1e6 / static_cast<double>(t.loops()), t.errors);
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"gRPC load generator: the caller's loop against a no-op baseline on one failoverd"};
  app.add_option("--seconds", options.seconds, "Length of each measured round per mode")->capture_default_str();
  app.add_option("--rounds", options.rounds, "Rounds; baseline and decision alternate")->capture_default_str();
  app.add_option("--threads", options.threads, "Concurrent loops (client threads)")->capture_default_str();
  app.add_option("--channels", options.channels, "Connections the threads share")->capture_default_str();
  app.add_option("--failure-share", options.failure_share, "Share of first attempts reported as HTTP 500")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--chains", options.chains, "Chains of 2 targets, picked in turn")->capture_default_str();
  app.add_option("--strategy", options.strategy, "The chains' strategy")
      ->check(CLI::IsMember({"failover", "least_latency"}))
      ->capture_default_str();
  app.add_option("--server-cpu", options.server_cpu, "CPU failoverd is pinned to; -1 = not pinned")
      ->capture_default_str();
  app.add_option("--client-cpu", options.client_cpu, "CPU the load generator is pinned to; -1 = not pinned")
      ->capture_default_str();
  app.add_option("--server-arg", options.server_args,
                 "A flag passed on to failoverd, such as --server-arg=--trace-keep=0; repeatable");
  app.add_flag("--own-baseline", options.own_baseline,
               "Run the baseline on a second failoverd (same flags and CPU, no chains), so work a decision round "
               "leaves behind (the outcome trace's flush, trips' writes) cannot reach into it");
  CLI11_PARSE(app, argc, argv);
  const int cpus = static_cast<int>(std::thread::hardware_concurrency());
  if (options.server_cpu >= cpus || options.client_cpu >= cpus) {
    std::fprintf(stderr, "this machine has %d CPUs\n", cpus);
    return 2;
  }

  failover::testing::TempDir data;
  auto started = failover::bench::StartFailoverd(data, options.server_args);
  if (started == nullptr) return 1;
  failover::testing::FailoverdProcess& proc = *started;
  if (options.server_cpu >= 0 && !PinProcess(proc.pid(), options.server_cpu)) std::perror("pinning failoverd");
  // The baseline's server: the same one, or one of its own.
  failover::testing::TempDir baseline_data;
  std::unique_ptr<failover::testing::FailoverdProcess> own_baseline;
  if (options.own_baseline) {
    own_baseline = failover::bench::StartFailoverd(baseline_data, options.server_args);
    if (own_baseline == nullptr) return 1;
    if (options.server_cpu >= 0 && !PinProcess(own_baseline->pid(), options.server_cpu)) {
      std::perror("pinning the baseline's failoverd");
    }
  }
  failover::testing::FailoverdProcess& baseline_proc = own_baseline ? *own_baseline : proc;
  if (options.client_cpu >= 0 && !Pin(0, options.client_cpu)) std::perror("pinning the load generator");
  {
    grpc::ClientContext ctx;
    v1::ApplyResponse resp;
    grpc::Status s = v1::AdminService::NewStub(proc.Channel())->Apply(&ctx, World(options.chains, options.strategy == "least_latency"
                                                                                 ? v1::STRATEGY_LEAST_LATENCY
                                                                                 : v1::STRATEGY_FAILOVER),
                                                               &resp);
    if (!s.ok()) {
      std::fprintf(stderr, "apply: %s\n", s.error_message().c_str());
      return 1;
    }
  }

  Load load(options, proc.address());
  std::optional<Load> own_baseline_load;  // else the baseline shares the decision loop's channels
  if (own_baseline) own_baseline_load.emplace(options, own_baseline->address());
  Load& baseline_load = own_baseline_load ? *own_baseline_load : load;
  baseline_load.Run(Mode::kBaseline, 1, baseline_proc.pid(), nullptr);  // warm-up: connections, caches, thread pools
  load.Run(Mode::kDecision, 1, proc.pid(), nullptr);
  const uint64_t events_before = LastSequence(proc);
  Totals baseline, decision;
  ByFirstReport by_first;
  for (int round = 0; round < options.rounds; ++round) {
    baseline_load.Run(Mode::kBaseline, options.seconds, baseline_proc.pid(), &baseline);
    load.Run(Mode::kDecision, options.seconds, proc.pid(), &decision, &by_first);
  }
  const uint64_t events = LastSequence(proc) - events_before;

  std::printf("%d client threads over %d channels, %d %s chains, %.0f%% of first attempts fail, %d x %.0f s per mode\n",
              options.threads, options.channels, options.chains, options.strategy.c_str(),
              options.failure_share * 100, options.rounds, options.seconds);
  std::printf("load generator on CPU %d, failoverd on CPU %d (of %d); baseline on %s\n\n", options.client_cpu,
              options.server_cpu, cpus, options.own_baseline ? "a failoverd of its own" : "the same failoverd");
  std::printf("| %-30s | %9s | %6s | %6s | %8s | %13s | %6s |\n", "pair", "pairs/s", "p50 us", "p99 us",
              "p99.9 us", "server CPU us", "errors");
  std::printf("|%s|%s|%s|%s|%s|%s|%s|\n", std::string(32, '-').c_str(), std::string(11, '-').c_str(),
              std::string(8, '-').c_str(), std::string(8, '-').c_str(), std::string(10, '-').c_str(),
              std::string(15, '-').c_str(), std::string(8, '-').c_str());
  PrintRow("2 x Health/Check (baseline)", baseline);
  PrintRow("PickTarget + ReportOutcome", decision);
  const double throughput_ratio = (static_cast<double>(decision.loops()) / decision.seconds) /
                                  (static_cast<double>(baseline.loops()) / baseline.seconds);
  std::printf("\nthroughput ratio (decision / baseline): %.2f   (goal >= 0.80)\n", throughput_ratio);
  std::printf("p99 ratio (decision / baseline):        %.2f   (goal <= 1.50)\n",
              Percentile(decision.latencies_us, 0.99) / Percentile(baseline.latencies_us, 0.99));
  std::printf("p99.9 ratio (decision / baseline):      %.2f\n",
              Percentile(decision.latencies_us, 0.999) / Percentile(baseline.latencies_us, 0.999));
  // Where the tail is: the trip path (a failed first report) or every pair.
  if (!by_first.failed.empty() && !by_first.succeeded.empty()) {
    std::printf("decision pairs whose first report failed: %zu, p50 %.0f us, p99 %.0f us; "
                "the others: p50 %.0f us, p99 %.0f us\n",
                by_first.failed.size(), Percentile(by_first.failed, 0.5), Percentile(by_first.failed, 0.99),
                Percentile(by_first.succeeded, 0.5), Percentile(by_first.succeeded, 0.99));
  }
  std::printf("decision loops that took TRY_NEXT (one more ReportOutcome each, included in the CPU column): %ld\n"
              "events written (trips, switches, recoveries): %llu\n",
              decision.extra_calls, static_cast<unsigned long long>(events));
  if (own_baseline) own_baseline->Stop(SIGTERM);
  proc.Stop(SIGTERM);
  return 0;
}
