// The gRPC load generator: client threads run the caller's loop (PickTarget,
// then ReportOutcome with the decision id) against the real failoverd over
// loopback for a fixed time, and report throughput and latency. One chain in
// ten has a failing primary, so some loops take the TRY_NEXT path.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "failover/v1/admin.grpc.pb.h"
#include "failover/v1/decision.grpc.pb.h"
#include "bench/bench_util.h"
#include "tests/support/failoverd_process.h"

namespace {

namespace v1 = ::failover::v1;
using failover::bench::Percentile;
using Clock = std::chrono::steady_clock;

constexpr int kChains = 1000;
constexpr int kThreads = 4;
constexpr double kSeconds = 5;

}  // namespace

int main() {
  failover::testing::TempDir data;
  auto started = failover::bench::StartFailoverd(data);
  if (started == nullptr) return 1;
  failover::testing::FailoverdProcess& proc = *started;
  v1::ApplyRequest config;
  for (int c = 0; c < kChains; ++c) {
    const std::string a = "model-" + std::to_string(c) + "-a", b = "model-" + std::to_string(c) + "-b";
    config.add_targets()->set_name(a);
    config.add_targets()->set_name(b);
    v1::Chain* chain = config.add_chains();
    chain->set_name("chain-" + std::to_string(c));
    chain->add_targets(a);
    chain->add_targets(b);
  }
  {
    grpc::ClientContext ctx;
    v1::ApplyResponse resp;
    if (!v1::AdminService::NewStub(proc.Channel())->Apply(&ctx, config, &resp).ok()) return 1;
  }

  std::atomic<bool> stop{false};
  std::vector<std::vector<double>> latencies(kThreads);
  std::vector<long> errors(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      auto stub = v1::DecisionService::NewStub(
          grpc::CreateCustomChannel(proc.address(), grpc::InsecureChannelCredentials(), args));
      for (long i = t; !stop.load(); i += kThreads) {
        const int c = static_cast<int>(i % kChains);
        const auto start = Clock::now();
        v1::PickTargetRequest pick;
        pick.set_chain("chain-" + std::to_string(c));
        v1::PickTargetResponse plan;
        grpc::ClientContext pick_ctx;
        if (!stub->PickTarget(&pick_ctx, pick, &plan).ok()) {
          ++errors[t];
          continue;
        }
        std::string target = plan.attempts(0).target();
        for (int attempt = 1; attempt <= 3; ++attempt) {
          v1::ReportOutcomeRequest report;
          report.set_decision_id(plan.decision_id());
          report.set_target(target);
          report.set_attempt(attempt);
          if (c % 10 == 0 && target.back() == 'a') {
            report.mutable_failure()->set_http_status(500);
          } else {
            report.mutable_success();
          }
          v1::ReportOutcomeResponse verdict;
          grpc::ClientContext ctx;
          if (!stub->ReportOutcome(&ctx, report, &verdict).ok()) {
            ++errors[t];
            break;
          }
          if (verdict.verdict() != v1::VERDICT_TRY_NEXT) break;
          target = verdict.next_attempt().target();
        }
        latencies[t].push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(kSeconds));  // the measurement window
  stop = true;
  for (auto& th : threads) th.join();
  std::vector<double> all;
  long errs = 0;
  for (int t = 0; t < kThreads; ++t) {
    all.insert(all.end(), latencies[t].begin(), latencies[t].end());
    errs += errors[t];
  }
  const size_t loops = all.size();
  std::printf("%d client threads, %.0f s: %zu caller loops (%.0f/s), %ld errors\n", kThreads, kSeconds, loops,
              static_cast<double>(loops) / kSeconds, errs);
  std::printf("loop latency (pick + report, incl. TRY_NEXT on 1 chain in 10): p50 %.0f us, p99 %.0f us, max %.0f us\n",
              Percentile(all, 0.5), Percentile(all, 0.99), Percentile(all, 1.0));
  proc.Stop(SIGTERM);
  return 0;
}
