// What failoverd costs the caller's whole loop. A real HTTP upstream on
// loopback (cpp-httplib), called with libcurl over a kept-alive connection
// per caller thread, and a real failoverd; in one run, side by side:
//   direct:  the upstream call alone;
//   remote:  the client library's Run, every plan and verdict from failoverd;
//   local:   the same Run deciding from the library's live copy of the state.
// Each with 1 and 16 caller threads. One line per case:
//   mode=<direct|remote|local> c=<N> p50_us=<x> p99_us=<y> rps=<z>
// and the decision alone (Run with an attempt that calls nothing) for remote
// and local at c=1. A request that did not take its mode's path (remote served
// fail-static or from a copy, local without its copy) is counted as off_path=N;
// a ratio to direct is printed only for modes with none, else refused.
// Then convergence: a trip reported by one local caller, until another
// local caller's plan has changed (p50 and p99 over --trips trips).
#include <curl/curl.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/bench_util.h"
#include "client/client.h"
#include "client/local_decisions.h"
#include "failover/v1/admin.grpc.pb.h"

namespace {

namespace v1 = ::failover::v1;
namespace client = ::failover::client;
using Clock = std::chrono::steady_clock;

size_t Discard(char*, size_t size, size_t n, void*) { return size * n; }

// One caller thread's connection to the upstream, kept alive across calls.
class Upstream {
 public:
  explicit Upstream(int port) : curl_(curl_easy_init()), url_("http://127.0.0.1:" + std::to_string(port) + "/v1/chat") {
    curl_easy_setopt(curl_, CURLOPT_URL, url_.c_str());
    curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, &Discard);
    curl_easy_setopt(curl_, CURLOPT_NOSIGNAL, 1L);
  }
  ~Upstream() { curl_easy_cleanup(curl_); }
  bool Call() {
    long status = 0;
    if (curl_easy_perform(curl_) != CURLE_OK) return false;
    curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &status);
    return status == 200;
  }

 private:
  CURL* curl_;
  std::string url_;
};

struct Result {
  std::vector<double> latencies_us;
  double seconds = 0;
  int64_t failed = 0;
  int64_t off_path = 0;  // requests that did not take the path the mode names
};

// What one request did.
enum class Took { kOk, kFailed, kOffPath };

// Runs `request` on `threads` threads for `seconds`, each with its own Upstream.
template <typename Request>
Result Measure(int port, int threads, double seconds, Request request) {
  std::vector<std::vector<double>> per_thread(threads);
  std::atomic<int64_t> failed{0}, off_path{0};
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      Upstream upstream(port);
      upstream.Call();  // connect before timing
      while (Clock::now() < end) {
        const auto t0 = Clock::now();
        const Took took = request(upstream);
        if (took == Took::kFailed) ++failed;
        if (took == Took::kOffPath) ++off_path;
        per_thread[t].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
    });
  }
  for (auto& th : pool) th.join();
  Result r;
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (auto& v : per_thread) r.latencies_us.insert(r.latencies_us.end(), v.begin(), v.end());
  r.failed = failed.load();
  r.off_path = off_path.load();
  return r;
}

double Rps(const Result& r) { return static_cast<double>(r.latencies_us.size()) / r.seconds; }

void Print(const char* mode, int threads, const Result& r) {
  std::string notes;
  if (r.failed) notes += " failed=" + std::to_string(r.failed);
  if (r.off_path) notes += " off_path=" + std::to_string(r.off_path) + " (these figures mix in another path)";
  std::printf("mode=%s c=%d p50_us=%.2f p99_us=%.2f rps=%.0f%s\n", mode, threads,
              failover::bench::Percentile(r.latencies_us, 0.5), failover::bench::Percentile(r.latencies_us, 0.99),
              Rps(r), notes.c_str());
  std::fflush(stdout);
}

// The throughput ratio to direct, only when every request took the mode's path.
void PrintRatio(const char* mode, int threads, const Result& r, const Result& direct) {
  if (r.off_path > 0) {
    std::printf("ratio %s/direct c=%d refused: %lld of %zu requests did not take the %s path\n", mode, threads,
                static_cast<long long>(r.off_path), r.latencies_us.size(), mode);
  } else {
    std::printf("ratio %s/direct c=%d rps=%.2f\n", mode, threads, Rps(r) / Rps(direct));
  }
}

bool Apply(v1::AdminService::Stub* admin, const v1::ApplyRequest& config) {
  grpc::ClientContext ctx;
  v1::ApplyResponse resp;
  const grpc::Status s = admin->Apply(&ctx, config, &resp);
  if (!s.ok()) std::fprintf(stderr, "apply: %s\n", s.error_message().c_str());
  return s.ok();
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 3;
  int trips = 50;
  std::string only;  // one mode (for profiling)
  CLI::App app{"The caller's loop with failoverd: direct, remote and local decisions"};
  app.add_option("--seconds", seconds, "Per case")->capture_default_str();
  app.add_option("--trips", trips, "Trips timed for convergence")->capture_default_str();
  app.add_option("--only", only,
                 "Run one mode: direct, remote, local or local-decision (the decision alone; no convergence)");
  CLI11_PARSE(app, argc, argv);
  curl_global_init(CURL_GLOBAL_DEFAULT);

  httplib::Server upstream;
  upstream.new_task_queue = [] { return new httplib::ThreadPool(32); };
  upstream.set_tcp_nodelay(true);  // else Nagle and delayed ACKs add 40 ms to each reply
  upstream.Get("/v1/chat", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"choices":[{"message":{"content":"ok"}}]})", "application/json");
  });
  const int port = upstream.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { upstream.listen_after_bind(); });  // bound and listening already

  failover::testing::TempDir data;
  auto proc = failover::bench::StartFailoverd(data);
  if (proc == nullptr) return 1;
  auto admin = v1::AdminService::NewStub(proc->Channel());
  v1::ApplyRequest config;
  config.add_targets()->set_name("a");
  config.add_targets()->set_name("b");
  v1::Chain* chain = config.add_chains();
  chain->set_name("ch");
  chain->add_targets("a");
  chain->add_targets("b");
  // Convergence: one chain per timed trip, each tripped once.
  for (int i = 0; i < trips; ++i) {
    const std::string x = "x" + std::to_string(i), y = "y" + std::to_string(i);
    config.add_targets()->set_name(x);
    config.add_targets()->set_name(y);
    v1::Chain* c = config.add_chains();
    c->set_name("conv" + std::to_string(i));
    c->add_targets(x);
    c->add_targets(y);
  }
  if (!Apply(admin.get(), config)) return 1;

  client::ClientOptions options;
  options.connection.server = proc->address();
  auto remote = client::Client::Connect(options);
  auto local = client::ConnectLocal(options);
  auto other = client::ConnectLocal(options);  // a second caller, for convergence
  if (!remote.ok() || !local.ok() || !other.ok()) return 1;
  auto* local_copy = static_cast<client::LocalDecisions*>((*local)->local());
  auto* other_copy = static_cast<client::LocalDecisions*>((*other)->local());
  if (!local_copy->WaitReady(absl::Seconds(10)) || !other_copy->WaitReady(absl::Seconds(10))) {
    std::fprintf(stderr, "no copy of the state: %s\n", local_copy->last_error().c_str());
    return 1;
  }

  // Whether a Run took the path its mode names: every decision from failoverd
  // (remote) or from the caller's copy (local), none fail-static.
  auto took = [](const client::LoopResult& r, bool local_mode) {
    if (r.fail_static || r.decided_locally != local_mode) return Took::kOffPath;
    return r.ok ? Took::kOk : Took::kFailed;
  };
  auto run = [&took](client::Client& c, bool local_mode) {
    return [&c, &took, local_mode](Upstream& up) {
      return took(c.Run("ch",
                        [&](const v1::Attempt&) {
                          client::AttemptOutcome o;
                          o.ok = up.Call();
                          if (!o.ok) o.failure.set_http_status(502);
                          return o;
                        }),
                  local_mode);
    };
  };
  // The modes take turns in short rounds, so drift over the run (caches,
  // the heap, failoverd's backlog) weighs on each alike.
  const int rounds = 6;
  for (int threads : {1, 16}) {
    std::vector<std::pair<std::string, std::function<Took(Upstream&)>>> modes;
    if (only.empty() || only == "direct") {
      modes.emplace_back("direct", [](Upstream& up) { return up.Call() ? Took::kOk : Took::kFailed; });
    }
    if (only.empty() || only == "remote") modes.emplace_back("remote", run(**remote, false));
    if (only.empty() || only == "local") modes.emplace_back("local", run(**local, true));
    std::vector<Result> results(modes.size());
    for (int r = 0; r < rounds; ++r) {
      for (size_t m = 0; m < modes.size(); ++m) {
        Result part = Measure(port, threads, seconds / rounds, modes[m].second);
        results[m].latencies_us.insert(results[m].latencies_us.end(), part.latencies_us.begin(),
                                       part.latencies_us.end());
        results[m].seconds += part.seconds;
        results[m].failed += part.failed;
        results[m].off_path += part.off_path;
      }
    }
    for (size_t m = 0; m < modes.size(); ++m) Print(modes[m].first.c_str(), threads, results[m]);
    if (only.empty()) {
      for (size_t m = 1; m < modes.size(); ++m) PrintRatio(modes[m].first.c_str(), threads, results[m], results[0]);
    }
  }
  // The decision alone: Run with an attempt that makes no call.
  auto decide_only = [&took](client::Client& c, bool local_mode) {
    return [&c, &took, local_mode](Upstream&) {
      return took(c.Run("ch",
                        [](const v1::Attempt&) {
                          client::AttemptOutcome o;
                          o.ok = true;
                          return o;
                        }),
                  local_mode);
    };
  };
  if (only.empty()) Print("remote-decision-only", 1, Measure(port, 1, seconds, decide_only(**remote, false)));
  if (only.empty() || only == "local-decision") {
    Print("local-decision-only", 1, Measure(port, 1, seconds, decide_only(**local, true)));
  }
  if (!only.empty()) trips = 0;

  // Convergence: `local` reports conv<i>'s first target failing (it trips at
  // one error); time until `other` plans conv<i> around it.
  std::vector<double> converge_ms;
  for (int i = 0; i < trips; ++i) {
    const std::string chain_name = "conv" + std::to_string(i), second = "y" + std::to_string(i);
    const auto t0 = Clock::now();
    (*local)->Run(chain_name, [&](const v1::Attempt& a) {
      client::AttemptOutcome o;
      o.ok = a.target() == second;
      if (!o.ok) o.failure.set_http_status(500);
      return o;
    });
    v1::PickTargetRequest pick;
    pick.set_chain(chain_name);
    while (true) {
      v1::PickTargetResponse plan;
      if (other_copy->Pick(pick, &plan).ok() && plan.active_target() == second) break;
      if (Clock::now() - t0 > std::chrono::seconds(10)) {
        std::fprintf(stderr, "trip %d did not converge in 10 s\n", i);
        return 1;
      }
      std::this_thread::yield();
    }
    converge_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  if (trips > 0) std::printf("convergence trips=%d p50_ms=%.2f p99_ms=%.2f\n", trips, failover::bench::Percentile(converge_ms, 0.5),
              failover::bench::Percentile(converge_ms, 0.99));
  upstream.stop();
  serving.join();
  return 0;
}
