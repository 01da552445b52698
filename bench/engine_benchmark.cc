// PickTarget and ReportOutcome in the engine with 10,000 chains of 8 targets,
// with the default policy and with rate trips (failure rate and slow calls)
// on every target. Counts heap allocations per operation by wrapping the
// global operator new. Last, the cost of applying one chain's edit there.
#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "server/api/outcome_trace.h"
#include "server/engine/engine.h"
#include "server/engine/replay.h"
#include "server/engine/shadows.h"
#include "storage/store.h"
#include "tests/support/failoverd_process.h"

namespace {
std::atomic<uint64_t> g_allocations{0};
}  // namespace

void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace failover {
namespace {

constexpr int kChains = 10000;
constexpr int kTargetsPerChain = 8;
constexpr int kTargets = 20000;  // shared: each target is in about 4 chains
const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

struct World {
  Engine engine;
  std::vector<std::string> chains;
  std::vector<std::string> first_targets;

  explicit World(bool rates) {
    ConfigChange config;
    for (int i = 0; i < kTargets; ++i) {
      TargetConfig t;
      t.name = absl::StrCat("provider-", i % 7, "/model-", i);
      config.targets.push_back(t);
    }
    for (int c = 0; c < kChains; ++c) {
      ChainConfig chain;
      chain.name = absl::StrCat("chain-", c);
      if (rates) {
        // Every outcome is tallied; none trips (the successes are fast).
        chain.policy.Mutable().trip_errors = 0;
        chain.policy.Mutable().trip_failure_rate = 50;
        chain.policy.Mutable().trip_min_calls = 100;
        chain.policy.Mutable().trip_slow_call_duration = absl::Seconds(2);
        chain.policy.Mutable().trip_slow_call_rate = 50;
      }
      for (int k = 0; k < kTargetsPerChain; ++k) {
        chain.targets.push_back(config.targets[(c * 2 + k * 2503) % kTargets].name);
      }
      first_targets.push_back(chain.targets[0]);
      chains.push_back(chain.name);
      config.chains.push_back(std::move(chain));
    }
    auto applied = engine.Apply(config, ApplyOptions{}, kStart);
    if (!applied.ok()) std::abort();
    // One success per target: every target HEALTHY, so later reports change nothing.
    for (int c = 0; c < kChains; ++c) {
      for (const std::string& t : config.chains[c].targets) {
        ReportRequest r;
        r.chain = chains[c];
        r.target = t;
        r.facts.success = true;
        ReportResult result;
        Events events;
        (void)engine.Report(r, kStart, &result, &events);
      }
    }
  }
};

World& TheWorld() {
  static World* world = new World(/*rates=*/false);
  return *world;
}

World& TheRateWorld() {
  static World* world = new World(/*rates=*/true);
  return *world;
}

void BM_PickTarget(benchmark::State& state) {
  World& w = TheWorld();
  PickRequest req;
  Plan plan;
  Events events;
  uint64_t i = static_cast<uint64_t>(state.thread_index()) * 7919;
  const uint64_t allocs_before = g_allocations.load();
  for (auto _ : state) {
    req.chain = w.chains[i % kChains];
    const absl::Status s = w.engine.Pick(req, kStart + absl::Nanoseconds(i), &plan, &events);
    benchmark::DoNotOptimize(s);
    benchmark::DoNotOptimize(plan.attempts.data());
    ++i;
  }
  if (state.thread_index() == 0) {
    state.counters["allocs_per_op"] = benchmark::Counter(
        static_cast<double>(g_allocations.load() - allocs_before), benchmark::Counter::kAvgIterations);
  }
}
BENCHMARK(BM_PickTarget)->Threads(1)->Threads(2)->UseRealTime();

void ReportSuccess(benchmark::State& state, World& w) {
  ReportRequest req;
  req.facts.success = true;
  req.latency = absl::Milliseconds(120);
  ReportResult result;
  Events events;
  uint64_t i = static_cast<uint64_t>(state.thread_index()) * 7919;
  const uint64_t allocs_before = g_allocations.load();
  for (auto _ : state) {
    const size_t c = i % kChains;
    req.chain = w.chains[c];
    req.target = w.first_targets[c];
    const absl::Status s = w.engine.Report(req, kStart + absl::Nanoseconds(i), &result, &events);
    benchmark::DoNotOptimize(s);
    ++i;
  }
  if (state.thread_index() == 0) {
    state.counters["allocs_per_op"] = benchmark::Counter(
        static_cast<double>(g_allocations.load() - allocs_before), benchmark::Counter::kAvgIterations);
  }
}
void BM_ReportSuccess(benchmark::State& state) { ReportSuccess(state, TheWorld()); }
BENCHMARK(BM_ReportSuccess)->Threads(1)->Threads(2)->UseRealTime();

// The same with trip.failure_rate and trip.slow_call on: each report is
// tallied in its target's window.
void BM_ReportSuccessWithRateTrips(benchmark::State& state) { ReportSuccess(state, TheRateWorld()); }
BENCHMARK(BM_ReportSuccessWithRateTrips)->Threads(1)->Threads(2)->UseRealTime();

// A pick followed by a report with the pick's decision id: the caller's loop.
void BM_PickThenReport(benchmark::State& state) {
  World& w = TheWorld();
  PickRequest pick;
  Plan plan;
  ReportRequest report;
  report.facts.success = true;
  ReportResult result;
  Events events;
  uint64_t i = static_cast<uint64_t>(state.thread_index()) * 7919;
  for (auto _ : state) {
    pick.chain = w.chains[i % kChains];
    const absl::Time now = kStart + absl::Nanoseconds(i);
    (void)w.engine.Pick(pick, now, &plan, &events);
    report.decision_id = plan.decision_id;
    report.target = plan.attempts[0].target->config->name;
    (void)w.engine.Report(report, now, &result, &events);
    ++i;
  }
}
BENCHMARK(BM_PickThenReport)->Threads(1)->Threads(2)->UseRealTime();

// What the outcome trace adds to a counted report (DESIGN 3.17): the entry
// built from the report (names copied, facts moved) and appended to the
// buffer. The buffer is written to a real data dir every 4096 entries, with
// the clock stopped, as the ticker would once a second.
void BM_TraceAdd(benchmark::State& state) {
  static testing::TempDir* dir = new testing::TempDir();
  static storage::Store* store = storage::Store::Open(dir->path()).value().release();
  static api::OutcomeTrace* trace = new api::OutcomeTrace(1 << 20, absl::Hours(1));
  World& w = TheWorld();
  uint64_t i = static_cast<uint64_t>(state.thread_index()) * 7919;
  for (auto _ : state) {
    const size_t c = i % kChains;
    OutcomeFacts facts;
    facts.success = true;
    trace->Add(TraceEntry{0, kStart + absl::Nanoseconds(i), w.chains[c], w.first_targets[c], 1, Reason::kNone,
                          absl::Milliseconds(120), std::move(facts)});
    if (++i % 4096 == 0 && state.thread_index() == 0) {
      state.PauseTiming();
      (void)trace->Flush(store, kStart + absl::Nanoseconds(i));
      state.ResumeTiming();
    }
  }
}
BENCHMARK(BM_TraceAdd)->Threads(1)->Threads(2)->UseRealTime();

// `failoverctl simulate`'s work for one column: an hour of a two-target chain
// at `range(0)` outcomes a second (one in twenty failing, a check every 5 s)
// replayed on the simulated clock. items = trace entries replayed.
void BM_ReplayHour(benchmark::State& state) {
  ReplayInput input;
  input.chain.name = "chat";
  input.chain.targets = {"noisy", "steady"};
  input.targets.resize(2);
  input.targets[0].name = "noisy";
  input.targets[1].name = "steady";
  input.from = kStart;
  input.to = kStart + absl::Hours(1);
  const int64_t per_second = state.range(0);
  for (int64_t s = 0; s < 3600; ++s) {
    for (int64_t k = 0; k < per_second; ++k) {
      TraceEntry e;
      e.at = kStart + absl::Seconds(s) + absl::Milliseconds(k * 1000 / per_second);
      e.chain = "chat";
      e.target = "noisy";
      e.facts.success = (s * per_second + k) % 20 != 7;
      if (!e.facts.success) e.facts.http_status = 503;
      input.entries.push_back(std::move(e));
    }
    if (s % 5 == 0) {
      TraceEntry check;
      check.at = kStart + absl::Seconds(s);
      check.target = "noisy";
      check.source = TraceSource::kProbePass;
      input.entries.push_back(std::move(check));
    }
  }
  for (auto _ : state) {
    absl::StatusOr<ReplaySummary> run = Replay(input);
    if (!run.ok()) state.SkipWithError("replay failed");
    benchmark::DoNotOptimize(run);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(input.entries.size()));
}
BENCHMARK(BM_ReplayHour)->Arg(2)->Arg(100)->Unit(benchmark::kMillisecond);

// Shadow policies' work on the flush thread: one second of a two-target
// chain's trace (range(1) outcomes, one in twenty failing) fed to range(0)
// shadows, each a rate policy, as the daemon feeds them once a second. Off
// the request path; items = trace entries fed (each to every shadow).
void BM_ShadowSecond(benchmark::State& state) {
  const int shadows = static_cast<int>(state.range(0));
  const int per_second = static_cast<int>(state.range(1));
  Engine engine{EngineOptions{}};
  ConfigChange config;
  config.targets.resize(2);
  config.targets[0].name = "noisy";
  config.targets[1].name = "steady";
  ChainConfig chain;
  chain.name = "chat";
  chain.targets = {"noisy", "steady"};
  for (int i = 0; i < shadows; ++i) {
    ShadowPolicy shadow;
    shadow.name = absl::StrCat("rate", i);
    shadow.policy.Mutable().trip_errors = 0;
    shadow.policy.Mutable().trip_failure_rate = 10 + i * 5;
    chain.shadows.push_back(shadow);
  }
  config.chains = {chain};
  if (!engine.Apply(config, ApplyOptions{}, kStart).ok()) return state.SkipWithError("apply failed");
  ShadowPolicies live;
  live.Configure(*engine.snapshot(), kStart);
  absl::Time now = kStart;
  uint64_t n = 0;
  size_t decisions = 0;
  for (auto _ : state) {
    std::vector<TraceEntry> second;
    second.reserve(per_second);
    for (int k = 0; k < per_second; ++k, ++n) {
      TraceEntry e;
      e.at = now + absl::Milliseconds(k * 1000 / per_second);
      e.chain = "chat";
      e.target = "noisy";
      e.facts.success = n % 20 != 7;
      if (!e.facts.success) e.facts.http_status = 503;
      second.push_back(std::move(e));
    }
    now += absl::Seconds(1);
    decisions += live.Feed(second, now).size();
  }
  benchmark::DoNotOptimize(decisions);
  state.SetItemsProcessed(state.iterations() * per_second);
}
BENCHMARK(BM_ShadowSecond)->Args({1, 100})->Args({4, 100})->Args({4, 1000})->Unit(benchmark::kMicrosecond);

// One chain's edit applied in the 10,000-chain world: what an operator's
// `failoverctl apply` of one object costs the engine (a follower pays it
// again for the Change). Runs last: it changes the world's config.
void BM_ApplyOneChain(benchmark::State& state) {
  World& w = TheWorld();
  ChainConfig chain = *w.engine.snapshot()->FindChain(w.chains[0])->config;
  absl::Time now = kStart;
  for (auto _ : state) {
    chain.failover_enabled = !chain.failover_enabled;
    ConfigChange change;
    change.chains.push_back(chain);
    now += absl::Seconds(1);
    auto applied = w.engine.Apply(change, ApplyOptions{}, now);
    if (!applied.ok()) state.SkipWithError(std::string(applied.status().message()).c_str());
  }
}
BENCHMARK(BM_ApplyOneChain)->Unit(benchmark::kMillisecond);

// The same edit as a cluster follower applies it: the Change from the log,
// on a world of its own.
void BM_FollowOneChainEdit(benchmark::State& state) {
  static World* follower = new World(false);
  ChainConfig chain = *follower->engine.snapshot()->FindChain(follower->chains[0])->config;
  uint64_t generation = follower->engine.snapshot()->generation;
  absl::Time now = kStart;
  for (auto _ : state) {
    chain.failover_enabled = !chain.failover_enabled;
    Change change;
    change.config_generation = ++generation;
    change.put_chains.push_back(chain);
    now += absl::Seconds(1);
    const absl::Status applied = follower->engine.ApplyChange(change, now);
    if (!applied.ok()) state.SkipWithError(std::string(applied.message()).c_str());
  }
}
BENCHMARK(BM_FollowOneChainEdit)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace failover

BENCHMARK_MAIN();
