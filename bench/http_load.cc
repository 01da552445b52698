// The HTTP port against the gRPC port. Against one real failoverd on loopback,
// in one run, the same client threads alternate two loops:
//   grpc:  PickTarget then ReportOutcome over gRPC (a channel per thread);
//   http:  POST /v1/pick then POST /v1/report as JSON over one kept-alive
//          HTTP/1.1 connection per thread.
// A share of first attempts fail (HTTP 500), which trips targets and takes the
// TRY_NEXT path (one more report, outside the timed pair). It prints pairs per
// second, pair latency percentiles and failoverd's CPU time per pair for both,
// and HTTP's ratios to gRPC. By default the client is pinned to one core and
// failoverd to the other.
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/bench_util.h"
#include "failover/v1/admin.grpc.pb.h"
#include "failover/v1/decision.grpc.pb.h"

namespace {

namespace v1 = ::failover::v1;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using failover::bench::Percentile;
using failover::bench::Totals;
using Clock = std::chrono::steady_clock;

struct Options {
  double seconds = 4;  // per round and transport
  int rounds = 3;
  int threads = 4;
  double failure_share = 0.05;
  int chains = 100;
  int server_cpu = 0;  // -1: not pinned
  int client_cpu = 1;
};


enum class Transport { kGrpc, kHttp };

// What a pair needs from an answer, whichever the transport.
struct Plan {
  std::string decision_id;
  std::string target;
};
struct Verdict {
  bool try_next = false;
  std::string next_target;
};

// The value of the first "key":"value" in a JSON answer (enough for the
// fields read here, which are plain names and ids).
std::string JsonString(const std::string& json, const std::string& key) {
  const std::string needle = "\"" + key + "\":\"";
  const size_t at = json.find(needle);
  if (at == std::string::npos) return "";
  const size_t start = at + needle.size();
  return json.substr(start, json.find('"', start) - start);
}

class GrpcCaller {
 public:
  explicit GrpcCaller(const std::string& address) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
    stub_ = v1::DecisionService::NewStub(
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  }
  bool Pick(const std::string& chain, Plan* plan) {
    v1::PickTargetRequest req;
    req.set_chain(chain);
    v1::PickTargetResponse resp;
    grpc::ClientContext ctx;
    if (!stub_->PickTarget(&ctx, req, &resp).ok() || resp.attempts_size() == 0) return false;
    plan->decision_id = resp.decision_id();
    plan->target = resp.attempts(0).target();
    return true;
  }
  bool Report(const Plan& plan, const std::string& target, int attempt, bool fail, Verdict* verdict) {
    v1::ReportOutcomeRequest req;
    req.set_decision_id(plan.decision_id);
    req.set_target(target);
    req.set_attempt(static_cast<uint32_t>(attempt));
    if (fail) {
      req.mutable_failure()->set_http_status(500);
    } else {
      req.mutable_success();
    }
    v1::ReportOutcomeResponse resp;
    grpc::ClientContext ctx;
    if (!stub_->ReportOutcome(&ctx, req, &resp).ok()) return false;
    verdict->try_next = resp.verdict() == v1::VERDICT_TRY_NEXT;
    verdict->next_target = resp.next_attempt().target();
    return true;
  }

 private:
  std::unique_ptr<v1::DecisionService::Stub> stub_;
};

class HttpCaller {
 public:
  explicit HttpCaller(int port) : stream_(ioc_) {
    stream_.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)));
    stream_.socket().set_option(net::ip::tcp::no_delay(true));
  }
  bool Pick(const std::string& chain, Plan* plan) {
    std::string body;
    if (!Post("/v1/pick", "{\"chain\":\"" + chain + "\"}", &body)) return false;
    plan->decision_id = JsonString(body, "decisionId");
    plan->target = JsonString(body, "target");
    return !plan->target.empty();
  }
  bool Report(const Plan& plan, const std::string& target, int attempt, bool fail, Verdict* verdict) {
    const std::string outcome = fail ? "\"failure\":{\"httpStatus\":500}" : "\"success\":{}";
    std::string body;
    if (!Post("/v1/report",
              "{\"decisionId\":\"" + plan.decision_id + "\",\"target\":\"" + target +
                  "\",\"attempt\":" + std::to_string(attempt) + "," + outcome + "}",
              &body)) {
      return false;
    }
    verdict->try_next = JsonString(body, "verdict") == "VERDICT_TRY_NEXT";
    const size_t next = body.find("\"nextAttempt\"");
    verdict->next_target = next == std::string::npos ? "" : JsonString(body.substr(next), "target");
    return true;
  }

 private:
  bool Post(const std::string& path, std::string json, std::string* out) {
    bhttp::request<bhttp::string_body> req(bhttp::verb::post, path, 11);
    req.set(bhttp::field::host, "127.0.0.1");
    req.set(bhttp::field::content_type, "application/json");
    req.body() = std::move(json);
    req.prepare_payload();
    beast::error_code ec;
    bhttp::write(stream_, req, ec);
    if (ec) return false;
    bhttp::response<bhttp::string_body> res;
    bhttp::read(stream_, buffer_, res, ec);
    if (ec || res.result() != bhttp::status::ok) return false;
    *out = std::move(res.body());
    return true;
  }

  net::io_context ioc_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
};

template <class Caller>
void Pairs(Caller& caller, const Options& options, int thread, const std::atomic<bool>& stop,
           std::vector<double>* latencies, long* errors) {
  std::mt19937_64 random(static_cast<uint64_t>(thread) + 1);
  std::uniform_real_distribution<double> unit(0, 1);
  Plan plan;
  Verdict verdict;
  for (long i = thread; !stop.load(std::memory_order_relaxed); i += options.threads) {
    const auto start = Clock::now();
    if (!caller.Pick("chain-" + std::to_string(i % options.chains), &plan)) {
      ++*errors;
      continue;
    }
    bool fail = unit(random) < options.failure_share;
    std::string target = plan.target;
    double pair_us = 0;
    bool ok = true;
    for (int attempt = 1; attempt <= 3 && ok; ++attempt) {
      ok = caller.Report(plan, target, attempt, fail, &verdict);
      if (attempt == 1) pair_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
      if (!verdict.try_next) break;
      target = verdict.next_target;
      fail = false;
    }
    if (!ok) {
      ++*errors;
      continue;
    }
    latencies->push_back(pair_us);
  }
}

void Run(Transport transport, const Options& options, const std::string& address, int http_port, pid_t server,
         double seconds, Totals* totals) {
  std::atomic<bool> stop{false};
  std::vector<std::vector<double>> latencies(options.threads);
  std::vector<long> errors(options.threads, 0);
  std::vector<std::thread> threads;
  const double cpu_before = failover::bench::CpuSeconds(server);
  const auto start = Clock::now();
  for (int t = 0; t < options.threads; ++t) {
    threads.emplace_back([&, t] {
      latencies[t].reserve(100000);
      if (transport == Transport::kGrpc) {
        GrpcCaller caller(address);
        Pairs(caller, options, t, stop, &latencies[t], &errors[t]);
      } else {
        HttpCaller caller(http_port);
        Pairs(caller, options, t, stop, &latencies[t], &errors[t]);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));  // the measurement window
  stop = true;
  for (auto& th : threads) th.join();
  if (totals == nullptr) return;
  totals->seconds += std::chrono::duration<double>(Clock::now() - start).count();
  totals->server_cpu_seconds += failover::bench::CpuSeconds(server) - cpu_before;
  for (int t = 0; t < options.threads; ++t) {
    totals->latencies_us.insert(totals->latencies_us.end(), latencies[t].begin(), latencies[t].end());
    totals->errors += errors[t];
  }
}

double PairsPerSecond(const Totals& t) { return static_cast<double>(t.latencies_us.size()) / t.seconds; }

void PrintRow(const char* name, const Totals& t) {
  std::printf("| %-22s | %8.0f | %6.0f | %6.0f | %13.1f | %6ld |\n", name, PairsPerSecond(t),
              Percentile(t.latencies_us, 0.5), Percentile(t.latencies_us, 0.99),
              t.server_cpu_seconds * 1e6 / static_cast<double>(t.latencies_us.size()), t.errors);
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"Decision pairs over the HTTP port against the same pairs over gRPC, on one failoverd"};
  app.add_option("--seconds", options.seconds, "Length of each measured round per transport")->capture_default_str();
  app.add_option("--rounds", options.rounds, "Rounds; gRPC and HTTP alternate")->capture_default_str();
  app.add_option("--threads", options.threads, "Concurrent loops, each with its own connection")
      ->capture_default_str();
  app.add_option("--failure-share", options.failure_share, "Share of first attempts reported as HTTP 500")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--chains", options.chains, "Chains of 2 targets, picked in turn")->capture_default_str();
  app.add_option("--server-cpu", options.server_cpu, "CPU failoverd is pinned to; -1 = not pinned")
      ->capture_default_str();
  app.add_option("--client-cpu", options.client_cpu, "CPU the load generator is pinned to; -1 = not pinned")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  failover::testing::TempDir data;
  auto started = failover::bench::StartFailoverd(data, {"--http-listen", "127.0.0.1:0"}, "info");
  if (started == nullptr) return 1;
  failover::testing::FailoverdProcess& proc = *started;
  const int http_port = proc.HttpPort();
  if (http_port == 0) {
    std::fprintf(stderr, "failoverd logged no http_port:\n%s\n", proc.Stderr().c_str());
    return 1;
  }
  if (options.server_cpu >= 0 && !failover::bench::PinProcess(proc.pid(), options.server_cpu)) {
    std::perror("pinning failoverd");
  }
  if (options.client_cpu >= 0 && !failover::bench::Pin(0, options.client_cpu)) {
    std::perror("pinning the load generator");
  }
  {
    grpc::ClientContext ctx;
    v1::ApplyResponse resp;
    const grpc::Status s = v1::AdminService::NewStub(proc.Channel())
                               ->Apply(&ctx, failover::bench::World(options.chains, v1::STRATEGY_FAILOVER), &resp);
    if (!s.ok()) {
      std::fprintf(stderr, "apply: %s\n", s.error_message().c_str());
      return 1;
    }
  }

  // Warm-up: connections, caches, thread pools.
  Run(Transport::kGrpc, options, proc.address(), http_port, proc.pid(), 1, nullptr);
  Run(Transport::kHttp, options, proc.address(), http_port, proc.pid(), 1, nullptr);
  Totals grpc_totals, http_totals;
  for (int round = 0; round < options.rounds; ++round) {
    Run(Transport::kGrpc, options, proc.address(), http_port, proc.pid(), options.seconds, &grpc_totals);
    Run(Transport::kHttp, options, proc.address(), http_port, proc.pid(), options.seconds, &http_totals);
  }

  std::printf("%d threads, %d chains, %.0f%% first attempts failing, %d rounds of %.1f s per transport\n\n",
              options.threads, options.chains, options.failure_share * 100, options.rounds, options.seconds);
  std::printf("| %-22s | %8s | %6s | %6s | %13s | %6s |\n", "transport", "pairs/s", "p50 us", "p99 us",
              "server CPU us", "errors");
  std::printf("|%s|%s|%s|%s|%s|%s|\n", std::string(24, '-').c_str(), std::string(10, '-').c_str(),
              std::string(8, '-').c_str(), std::string(8, '-').c_str(), std::string(15, '-').c_str(),
              std::string(8, '-').c_str());
  PrintRow("gRPC", grpc_totals);
  PrintRow("HTTP/JSON, kept alive", http_totals);
  if (grpc_totals.errors + http_totals.errors > 0 || grpc_totals.latencies_us.empty() ||
      http_totals.latencies_us.empty()) {
    std::printf("\nerrors or no pairs: no ratios reported\n");
    return 1;
  }
  const auto cpu_per_pair = [](const Totals& t) {
    return t.server_cpu_seconds / static_cast<double>(t.latencies_us.size());
  };
  std::printf("\nHTTP / gRPC: throughput %.2f, p50 %.2f, p99 %.2f, server CPU per pair %.2f\n",
              PairsPerSecond(http_totals) / PairsPerSecond(grpc_totals),
              Percentile(http_totals.latencies_us, 0.5) / Percentile(grpc_totals.latencies_us, 0.5),
              Percentile(http_totals.latencies_us, 0.99) / Percentile(grpc_totals.latencies_us, 0.99),
              cpu_per_pair(http_totals) / cpu_per_pair(grpc_totals));
  return 0;
}
