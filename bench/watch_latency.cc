// 1,000 concurrent WatchEvents streams on one failoverd: the time from a
// ReportOutcome that trips a target to each watcher receiving the
// chain.switched event, while another thread keeps calling PickTarget.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
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

constexpr int kWatchers = 1000;
constexpr int kChannels = 8;
constexpr int kRounds = 5;

struct Round {
  std::mutex mu;
  Clock::time_point start;
  std::vector<double> latencies_ms;
};

class Watcher final : public grpc::ClientReadReactor<v1::Event> {
 public:
  Watcher(v1::DecisionService::Stub* stub, std::vector<Round>* rounds, std::atomic<int>* ready)
      : rounds_(rounds), ready_(ready) {
    stub->async()->WatchEvents(&ctx_, &req_, this);
    StartRead(&event_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    const auto now = Clock::now();
    if (event_.has_snapshot()) {
      ready_->fetch_add(1);
    } else if (event_.has_chain_switched() && event_.chain_switched().reason() == v1::SWITCH_REASON_TRIP) {
      const int round = std::atoi(event_.chain_switched().chain().c_str() + 6);  // "chain-N"
      Round& r = (*rounds_)[round];
      std::lock_guard<std::mutex> lock(r.mu);
      r.latencies_ms.push_back(std::chrono::duration<double, std::milli>(now - r.start).count());
    }
    StartRead(&event_);
  }
  void OnDone(const grpc::Status&) override {
    std::lock_guard<std::mutex> lock(done_mu_);
    done_ = true;
    done_cv_.notify_all();
  }
  void Stop() {
    ctx_.TryCancel();
    std::unique_lock<std::mutex> lock(done_mu_);
    done_cv_.wait(lock, [&] { return done_; });
  }

 private:
  grpc::ClientContext ctx_;
  v1::WatchEventsRequest req_;
  v1::Event event_;
  std::vector<Round>* rounds_;
  std::atomic<int>* ready_;
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  bool done_ = false;
};

}  // namespace

int main() {
  failover::testing::TempDir data;
  auto started = failover::bench::StartFailoverd(data);
  if (started == nullptr) return 1;
  failover::testing::FailoverdProcess& proc = *started;
  auto admin = v1::AdminService::NewStub(proc.Channel());
  v1::ApplyRequest config;
  for (int r = 0; r < kRounds; ++r) {
    for (const char* side : {"a", "b"}) config.add_targets()->set_name("t" + std::to_string(r) + side);
    v1::Chain* c = config.add_chains();
    c->set_name("chain-" + std::to_string(r));
    c->add_targets("t" + std::to_string(r) + "a");
    c->add_targets("t" + std::to_string(r) + "b");
  }
  {
    grpc::ClientContext ctx;
    v1::ApplyResponse resp;
    if (!admin->Apply(&ctx, config, &resp).ok()) return 1;
  }

  std::vector<std::unique_ptr<v1::DecisionService::Stub>> stubs;
  for (int i = 0; i < kChannels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection per channel
    stubs.push_back(v1::DecisionService::NewStub(
        grpc::CreateCustomChannel(proc.address(), grpc::InsecureChannelCredentials(), args)));
  }
  std::vector<Round> rounds(kRounds);
  std::atomic<int> ready{0};
  std::vector<std::unique_ptr<Watcher>> watchers;
  const auto open_start = Clock::now();
  for (int i = 0; i < kWatchers; ++i) {
    watchers.push_back(std::make_unique<Watcher>(stubs[i % kChannels].get(), &rounds, &ready));
  }
  while (ready.load() < kWatchers && Clock::now() - open_start < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double open_s = std::chrono::duration<double>(Clock::now() - open_start).count();
  std::printf("%d watchers received their snapshot in %.2f s\n", ready.load(), open_s);

  // Decisions keep flowing during the measurement.
  std::atomic<bool> stop{false};
  std::atomic<long> picks{0}, pick_errors{0};
  std::thread picker([&] {
    auto decide = v1::DecisionService::NewStub(proc.Channel());
    while (!stop.load()) {
      grpc::ClientContext ctx;
      v1::PickTargetRequest req;
      req.set_chain("chain-0");
      v1::PickTargetResponse resp;
      (decide->PickTarget(&ctx, req, &resp).ok() ? picks : pick_errors).fetch_add(1);
    }
  });

  auto decide = v1::DecisionService::NewStub(proc.Channel());
  const auto measure_start = Clock::now();
  std::vector<double> all;
  for (int r = 0; r < kRounds; ++r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // spacing between rounds, not a wait for state
    v1::ReportOutcomeRequest report;
    report.set_chain("chain-" + std::to_string(r));
    report.set_target("t" + std::to_string(r) + "a");
    report.mutable_failure()->set_http_status(500);
    v1::ReportOutcomeResponse resp;
    grpc::ClientContext ctx;
    {
      std::lock_guard<std::mutex> lock(rounds[r].mu);
      rounds[r].start = Clock::now();
    }
    if (!decide->ReportOutcome(&ctx, report, &resp).ok()) return 1;
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(rounds[r].mu);
        if (rounds[r].latencies_ms.size() >= static_cast<size_t>(kWatchers)) break;
      }
      if (Clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::lock_guard<std::mutex> lock(rounds[r].mu);
    std::printf("round %d: %zu/%d watchers, p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", r, rounds[r].latencies_ms.size(),
                kWatchers, Percentile(rounds[r].latencies_ms, 0.5), Percentile(rounds[r].latencies_ms, 0.99),
                Percentile(rounds[r].latencies_ms, 1.0));
    all.insert(all.end(), rounds[r].latencies_ms.begin(), rounds[r].latencies_ms.end());
  }
  stop = true;
  picker.join();
  const double measure_s = std::chrono::duration<double>(Clock::now() - measure_start).count();
  std::printf("all rounds: %zu deliveries, p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms\n", all.size(),
              Percentile(all, 0.5), Percentile(all, 0.9), Percentile(all, 0.99), Percentile(all, 1.0));
  std::printf("PickTarget during the measurement: %ld ok (%.0f/s on one client thread), %ld errors\n", picks.load(),
              static_cast<double>(picks.load()) / measure_s, pick_errors.load());
  for (auto& w : watchers) w->Stop();
  proc.Stop(SIGTERM);
  return 0;
}
