// Cluster mode (DESIGN 3.12) with real processes: one 3-member etcd on
// loopback shared by the suite, and per test three failoverd replicas under a
// prefix of their own (which also shows that clusters with different
// prefixes share an etcd without seeing each other). Leases are 2 s so a lost
// leader is replaced quickly; every wait is on a condition with a deadline.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <fstream>
#include <atomic>
#include <condition_variable>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "log_entry.pb.h"  // generated from server/cluster/log_entry.proto
#include "server/cluster/replica.h"
#include "tests/support/api_test.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/etcd_proxy.h"
#include "tests/support/small_disk.h"

namespace failover::testing {
namespace {

using v1::ClusterStatus;
using ::testing::HasSubstr;

constexpr int kReplicas = 3;

// Stands in for a leader the replicas relay outcomes to: records what each
// call brought, and answers the first with an error after reading all of it
// (a leader that counted a batch whose answer was lost). `batches`: it takes
// ReportOutcomes, as failoverd does; without, it is a leader from before it
// (UNIMPLEMENTED), which takes StreamOutcomes only.
class FakeLeader final : public v1::DecisionService::Service {
 public:
  explicit FakeLeader(bool batches) : batches_(batches) {}

  grpc::Status ReportOutcomes(grpc::ServerContext* ctx, const v1::ReportOutcomesRequest* batch,
                              v1::StreamOutcomesResponse* summary) override {
    if (!batches_) {
      std::lock_guard<std::mutex> lock(mu_);
      ++refused_;
      return v1::DecisionService::Service::ReportOutcomes(ctx, batch, summary);
    }
    return Took({batch->outcomes().begin(), batch->outcomes().end()}, /*streamed=*/false, summary);
  }
  grpc::Status StreamOutcomes(grpc::ServerContext*, grpc::ServerReader<v1::ReportOutcomeRequest>* reader,
                              v1::StreamOutcomesResponse* summary) override {
    std::vector<v1::ReportOutcomeRequest> got;
    v1::ReportOutcomeRequest report;
    while (reader->Read(&report)) got.push_back(report);
    return Took(std::move(got), /*streamed=*/true, summary);
  }
  std::vector<std::vector<v1::ReportOutcomeRequest>> Calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  int streamed() {
    std::lock_guard<std::mutex> lock(mu_);
    return streamed_;
  }
  int refused() {  // ReportOutcomes calls answered UNIMPLEMENTED
    std::lock_guard<std::mutex> lock(mu_);
    return refused_;
  }

 private:
  grpc::Status Took(std::vector<v1::ReportOutcomeRequest> got, bool streamed, v1::StreamOutcomesResponse* summary) {
    std::lock_guard<std::mutex> lock(mu_);
    streamed_ += streamed;
    calls_.push_back(got);
    if (calls_.size() == 1) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the answer was lost");
    summary->set_accepted(static_cast<uint32_t>(got.size()));
    return grpc::Status::OK;
  }

  const bool batches_;
  std::mutex mu_;
  std::vector<std::vector<v1::ReportOutcomeRequest>> calls_;
  int streamed_ = 0;
  int refused_ = 0;
};

// Waits up to `seconds` for `check`.
template <typename F>
bool Within(double seconds, F check) {
  return WaitUntil(seconds, [&] { return check(); });
}

std::unique_ptr<grpc::ClientContext> Ctx(int seconds = 5) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  return ctx;
}

class ClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!EtcdCluster::Installed()) return;
    etcd_ = new EtcdCluster(3);
    std::string error;
    if (!etcd_->Start(&error)) {
      delete etcd_;
      etcd_ = nullptr;
      FAIL() << error;
    }
  }
  static void TearDownTestSuite() {
    delete etcd_;
    etcd_ = nullptr;
  }

  void SetUp() override {
    if (!EtcdCluster::Installed()) GTEST_SKIP() << "etcd is not installed (scripts/deps installs etcd-server)";
    ASSERT_NE(etcd_, nullptr);
    ASSERT_TRUE(etcd_->WaitHealthy(20)) << "etcd lost its quorum in an earlier test";
    prefix_ = std::string("/test/") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (int i = 0; i < kReplicas; ++i) {
      ports_.push_back(FreePort());
      data_.push_back(std::make_unique<TempDir>());
      procs_.emplace_back();
    }
    for (int i = 0; i < kReplicas; ++i) StartReplica(i);
    leader_ = AwaitLeader();
    ASSERT_GE(leader_, 0) << "no leader elected";
  }

  void TearDown() override {
    if (!HasFailure()) return;
    for (size_t i = 0; i < procs_.size(); ++i) {
      if (!procs_[i]) continue;
      const std::string err = procs_[i]->Stderr();
      std::fprintf(stderr, "--- replica %zu (%s) stderr, last 3000 bytes:\n%s\n", i,
                   Address(static_cast<int>(i)).c_str(), err.substr(err.size() > 3000 ? err.size() - 3000 : 0).c_str());
    }
  }

  // `data_dir`: another than the replica's own (a small disk, say);
  // `endpoints`: other than etcd's own (proxies, say).
  void StartReplica(int i, std::vector<std::string> extra = {}, const std::string& data_dir = "",
                    const std::string& endpoints = "") {
    std::vector<std::string> args = {"--etcd-endpoints", endpoints.empty() ? etcd_->Endpoints() : endpoints,
                                     "--etcd-prefix", prefix_, "--leader-lease", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    procs_[static_cast<size_t>(i)] = std::make_unique<FailoverdProcess>(FailoverdProcess::Options{
        data_dir.empty() ? data_[static_cast<size_t>(i)]->path() : data_dir, args,
        "127.0.0.1:" + std::to_string(ports_[static_cast<size_t>(i)])});
    std::string error;
    ASSERT_TRUE(procs_[static_cast<size_t>(i)]->Start(&error)) << error;
  }

  FailoverdProcess& proc(int i) { return *procs_[static_cast<size_t>(i)]; }
  std::string Address(int i) const { return "127.0.0.1:" + std::to_string(ports_[static_cast<size_t>(i)]); }
  std::unique_ptr<v1::AdminService::Stub> Admin(int i) {
    return v1::AdminService::NewStub(grpc::CreateChannel(Address(i), grpc::InsecureChannelCredentials()));
  }
  std::unique_ptr<v1::DecisionService::Stub> Decide(int i) {
    return v1::DecisionService::NewStub(grpc::CreateChannel(Address(i), grpc::InsecureChannelCredentials()));
  }

  // This replica's view of the cluster; role UNSPECIFIED when it does not answer.
  ClusterStatus Status(int i) {
    v1::GetStatusRequest req;
    v1::StatusResponse resp;
    if (!Admin(i)->GetStatus(Ctx(2).get(), req, &resp).ok()) return ClusterStatus();
    return resp.cluster();
  }

  // The replica every live one agrees is the leader, or -1 after `seconds`.
  int AwaitLeader(double seconds = 10, const std::set<int>& skip = {}) {
    int found = -1;
    Within(seconds, [&] {
      found = -1;
      std::string leader_address;
      for (int i = 0; i < kReplicas; ++i) {
        if (skip.count(i) != 0) continue;
        const ClusterStatus s = Status(i);
        if (s.role() == ClusterStatus::ROLE_LEADER) {
          if (found >= 0) return false;
          found = i;
        }
        if (s.leader().empty()) return false;
        if (!leader_address.empty() && s.leader() != leader_address) return false;
        leader_address = s.leader();
      }
      return found >= 0 && leader_address == Address(found);
    });
    return found;
  }

  int Follower(int not_this = -1) const {
    for (int i = 0; i < kReplicas; ++i) {
      if (i != leader_ && i != not_this) return i;
    }
    return -1;
  }

  // A follower that finds a fake leader (`batches`: one that takes
  // ReportOutcomes) relays three failures to it; the batch whose answer was
  // lost goes again with the same report ids.
  void RelayToAFakeLeader(bool batches);

  // Applies `config` at the leader and waits until every replica that answers
  // has applied it too: a follower applies the log a moment after the leader
  // answers, and one that started a moment ago a little later still.
  void ApplyAtLeader(const v1::ApplyRequest& config) {
    ASSERT_TRUE(ApplyConfig(Admin(leader_).get(), config).ok());
    const uint64_t index = Status(leader_).applied_index();
    for (int i = 0; i < kReplicas; ++i) {
      ClusterStatus s;
      EXPECT_TRUE(Within(5, [&] {
        s = Status(i);
        return s.role() == ClusterStatus::ROLE_UNSPECIFIED || s.applied_index() >= index;
      })) << "replica " << i << " did not apply entry " << index << ": " << s.DebugString();
    }
  }

  // Chain "ch" of "a" then "b"; `errors` counted failures within a minute trip a target.
  static v1::ApplyRequest Config(uint32_t errors) {
    v1::ApplyRequest config = TwoTargetConfig();
    config.mutable_chains(0)->mutable_policy()->mutable_trip()->set_errors(errors);
    *config.mutable_chains(0)->mutable_policy()->mutable_trip()->mutable_window() = Millis(60000);
    return config;
  }

  v1::PickTargetResponse Pick(int i, const std::string& chain = "ch") {
    v1::PickTargetRequest req;
    req.set_chain(chain);
    v1::PickTargetResponse resp;
    const grpc::Status s = Decide(i)->PickTarget(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << "replica " << i << ": " << s.error_message();
    return resp;
  }

  std::string Active(int i) {
    v1::PickTargetRequest req;
    req.set_chain("ch");
    v1::PickTargetResponse resp;
    if (!Decide(i)->PickTarget(Ctx(2).get(), req, &resp).ok()) return "";
    return resp.active_target();
  }

  v1::ReportOutcomeResponse Fail(int i, const std::string& target) {
    const v1::PickTargetResponse plan = Pick(i);
    v1::ReportOutcomeRequest req;
    req.set_decision_id(plan.decision_id());
    req.set_target(target);
    req.mutable_failure()->set_http_status(503);
    v1::ReportOutcomeResponse resp;
    const grpc::Status s = Decide(i)->ReportOutcome(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << "replica " << i << ": " << s.error_message();
    return resp;
  }

  grpc::Status Pin(int i, const std::string& target) {
    v1::PinChainRequest req;
    req.set_chain("ch");
    req.set_target(target);
    v1::ChainView view;
    return Admin(i)->PinChain(Ctx().get(), req, &view);
  }

  std::string Pinned(int i) {
    v1::GetChainRequest req;
    req.set_name("ch");
    v1::ChainView view;
    if (!Admin(i)->GetChain(Ctx(2).get(), req, &view).ok()) return "?";
    return view.status().pinned_target();
  }

  std::unique_ptr<etcdserverpb::KV::Stub> Kv() {
    return etcdserverpb::KV::NewStub(grpc::CreateChannel(etcd_->Endpoints().substr(0, etcd_->Endpoints().find(',')),
                                                         grpc::InsecureChannelCredentials()));
  }
  std::string LogKey(uint64_t index) const {
    std::string digits = std::to_string(index);
    return prefix_ + "/log/" + std::string(20 - digits.size(), '0') + digits;
  }
  // The bytes etcd holds at log entry `index` ("" when there is none).
  std::string LogValue(uint64_t index) {
    etcdserverpb::RangeRequest req;
    req.set_key(LogKey(index));
    etcdserverpb::RangeResponse resp;
    EXPECT_TRUE(Kv()->Range(Ctx().get(), req, &resp).ok());
    return resp.kvs_size() > 0 ? resp.kvs(0).value() : "";
  }
  void PutLog(uint64_t index, const std::string& value) {
    etcdserverpb::PutRequest put;
    put.set_key(LogKey(index));
    put.set_value(value);
    etcdserverpb::PutResponse written;
    ASSERT_TRUE(Kv()->Put(Ctx().get(), put, &written).ok());
  }
  // What the replica's health check says (SERVING, NOT_SERVING; UNKNOWN when it does not answer).
  grpc::health::v1::HealthCheckResponse::ServingStatus Health(int i) {
    auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(Address(i), grpc::InsecureChannelCredentials()));
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    if (!stub->Check(Ctx(2).get(), req, &resp).ok()) return grpc::health::v1::HealthCheckResponse::UNKNOWN;
    return resp.status();
  }

  // The Change log as etcd holds it: index -> the term that wrote it.
  std::map<uint64_t, int64_t> LogTerms() {
    auto kv = etcdserverpb::KV::NewStub(grpc::CreateChannel(
        etcd_->Endpoints().substr(0, etcd_->Endpoints().find(',')), grpc::InsecureChannelCredentials()));
    etcdserverpb::RangeRequest req;
    req.set_key(prefix_ + "/log/");
    req.set_range_end(prefix_ + "/log0");  // '0' follows '/'
    etcdserverpb::RangeResponse resp;
    std::map<uint64_t, int64_t> out;
    const grpc::Status s = kv->Range(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    for (const auto& item : resp.kvs()) {
      cluster::LogEntry entry;
      EXPECT_TRUE(entry.ParseFromString(item.value()));
      out[std::stoull(item.key().substr(prefix_.size() + 5))] = entry.term();
    }
    return out;
  }

  // The log entries a call to etcd writes (0: none; it is not a log write).
  size_t LogPuts(const std::string& method, const google::protobuf::Message& request) const {
    if (method != "Txn") return 0;
    size_t puts = 0;
    for (const auto& op : static_cast<const etcdserverpb::TxnRequest&>(request).success()) {
      if (op.has_request_put() && op.request_put().key().rfind(prefix_ + "/log/", 0) == 0) ++puts;
    }
    return puts;
  }
  // Whether a call to etcd is a campaign: a transaction that puts the leader key.
  bool Campaigns(const std::string& method, const google::protobuf::Message& request) const {
    if (method != "Txn") return false;
    for (const auto& op : static_cast<const etcdserverpb::TxnRequest&>(request).success()) {
      if (op.has_request_put() && op.request_put().key() == prefix_ + "/leader") return true;
    }
    return false;
  }
  // Stops every replica, then starts replica 0 alone, reaching etcd through
  // `proxy` (on the first member), and waits until it leads.
  void LeadAloneThrough(EtcdProxy* proxy, const std::vector<std::string>& extra = {}) {
    for (int i = 0; i < kReplicas; ++i) proc(i).Stop(SIGTERM);
    ASSERT_TRUE(proxy->Start());
    ASSERT_NO_FATAL_FAILURE(StartReplica(0, extra, "", proxy->address()));
    ASSERT_TRUE(Within(10, [&] { return Status(0).role() == ClusterStatus::ROLE_LEADER; }));
  }
  std::string FirstMember() const { return etcd_->Endpoints().substr(0, etcd_->Endpoints().find(',')); }

  // Once armed, holds each write to the Change log at `proxy` until released
  // (or 1.5 s, below etcd's 2 s call timeout, so the write still goes through).
  class HeldLogWrites {
   public:
    HeldLogWrites(EtcdProxy* proxy, const ClusterTest* test) {
      proxy->SetHook([this, test](const std::string& method, const google::protobuf::Message& request) {
        const bool writes_log = test->LogPuts(method, request) > 0;
        std::unique_lock<std::mutex> lock(mu_);
        if (!armed_ || !writes_log || released_) return EtcdProxy::Fault::kNone;
        holding_ = true;
        cv_.notify_all();
        cv_.wait_for(lock, std::chrono::milliseconds(1500), [&] { return released_; });
        holding_ = false;
        return EtcdProxy::Fault::kNone;
      });
    }
    void Arm() {
      std::lock_guard<std::mutex> lock(mu_);
      armed_ = true;
    }
    // Waits until a write is held.
    bool Holding() {
      std::unique_lock<std::mutex> lock(mu_);
      return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return holding_; });
    }
    // Lets every write go; true when one was still held.
    bool Release() {
      std::lock_guard<std::mutex> lock(mu_);
      const bool was_holding = holding_;
      released_ = true;
      cv_.notify_all();
      return was_holding;
    }

   private:
    std::mutex mu_;
    std::condition_variable cv_;
    bool armed_ = false;
    bool holding_ = false;
    bool released_ = false;
  };

  // Picks "ch" at replica 0 while `held` holds a write, then lets the writes
  // go; `while_held`: the pick was answered before that.
  grpc::Status PickWhileHeld(HeldLogWrites* held, bool* while_held) {
    v1::PickTargetRequest req;
    req.set_chain("ch");
    v1::PickTargetResponse plan;
    const grpc::Status picked = Decide(0)->PickTarget(Ctx().get(), req, &plan);
    *while_held = held->Release();
    return picked;
  }

  static EtcdCluster* etcd_;
  std::string prefix_;
  std::vector<int> ports_;
  std::vector<std::unique_ptr<TempDir>> data_;
  std::vector<std::unique_ptr<FailoverdProcess>> procs_;
  int leader_ = -1;
};

EtcdCluster* ClusterTest::etcd_ = nullptr;

// Followers pass admin calls on with the caller's token and relay outcomes
// with one from the tokens file: over plaintext only when the operator says so.
TEST_F(ClusterTest, TokensCrossBetweenReplicasInTheClearOnlyWhenAskedTo) {
  TempDir data, secrets;
  const std::string tokens = secrets.path() + "/tokens";
  std::ofstream(tokens) << "admin adm-secret\npeer peer-secret\n";
  const std::vector<std::string> args = {"--etcd-endpoints", etcd_->Endpoints(), "--etcd-prefix", prefix_ + "-tokens",
                                         "--tokens-file", tokens};
  FailoverdProcess refused({data.path(), args});
  std::string error;
  EXPECT_FALSE(refused.Start(&error));
  EXPECT_THAT(error, HasSubstr("--tokens-file in cluster mode without TLS"));
  EXPECT_THAT(error, HasSubstr("--peer-plaintext"));
  std::vector<std::string> accepted = args;
  accepted.push_back("--peer-plaintext");
  FailoverdProcess started({data.path(), accepted});
  ASSERT_TRUE(started.Start(&error)) << error;
  const CommandResult status =
      RunCommand({FailoverctlBinary(), "--server", started.address(), "--token", "adm-secret", "status"});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_THAT(status.out, HasSubstr("cluster: this replica"));
}

TEST_F(ClusterTest, AnAdminChangeOnAFollowerIsSeenEverywhere) {
  const int follower = Follower();
  ASSERT_TRUE(ApplyConfig(Admin(follower).get(), Config(3)).ok());
  // Answered once durable in etcd: the follower that took it already has it.
  EXPECT_EQ(Pick(follower).active_target(), "a");
  ASSERT_TRUE(Pin(follower, "b").ok());
  EXPECT_EQ(Pinned(follower), "b");
  for (int i = 0; i < kReplicas; ++i) {
    EXPECT_TRUE(Within(5, [&] { return Pinned(i) == "b" && Active(i) == "b"; })) << "replica " << i;
  }
  // A bad change made on a follower gets the leader's refusal, naming the field.
  v1::PinChainRequest bad;
  bad.set_chain("ch");
  bad.set_target("nope");
  v1::ChainView view;
  const grpc::Status refused = Admin(follower)->PinChain(Ctx().get(), bad, &view);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << refused.error_message();
  EXPECT_NE(refused.error_message().find("nope"), std::string::npos) << refused.error_message();
  // GetStatus says who is who.
  const ClusterStatus status = Status(follower);
  EXPECT_EQ(status.role(), ClusterStatus::ROLE_FOLLOWER);
  EXPECT_EQ(status.leader(), Address(leader_));
  EXPECT_EQ(status.self(), Address(follower));
  EXPECT_GE(status.applied_index(), 2u);
  EXPECT_TRUE(status.etcd_error().empty()) << status.etcd_error();
  // Every replica is listed, by address, with the leader marked.
  ClusterStatus listed;
  ASSERT_TRUE(Within(5, [&] { return (listed = Status(follower)).replicas_size() == kReplicas; }))
      << listed.DebugString();
  std::set<std::string> addresses;
  for (const ClusterStatus::Replica& r : listed.replicas()) {
    addresses.insert(r.address());
    EXPECT_EQ(r.leader(), r.address() == Address(leader_)) << r.DebugString();
    EXPECT_FALSE(r.version().empty()) << r.DebugString();
    EXPECT_GT(r.started().seconds(), 0) << r.DebugString();
  }
  EXPECT_EQ(addresses, (std::set<std::string>{Address(0), Address(1), Address(2)}));
  const CommandResult ctl = RunCommand({FailoverctlBinary(), "--server", Address(follower), "status"});
  EXPECT_EQ(ctl.exit_code, 0) << ctl.err;
  EXPECT_NE(ctl.out.find("is a follower; leader " + Address(leader_)), std::string::npos) << ctl.out;
  EXPECT_NE(ctl.out.find("replicas (3): "), std::string::npos) << ctl.out;
  EXPECT_NE(ctl.out.find(Address(leader_) + " (leader"), std::string::npos) << ctl.out;
  EXPECT_NE(ctl.out.find("rpm caps: leased from the leader as callers use them; 1/3 (rank "), std::string::npos) << ctl.out;
}

TEST_F(ClusterTest, ATripReportedAtAFollowerChangesPlansOnEveryReplica) {
  ASSERT_NO_FATAL_FAILURE(ApplyAtLeader(Config(1)));
  const int follower = Follower();
  ASSERT_TRUE(Within(5, [&] { return Active(follower) == "a"; }));
  const v1::ReportOutcomeResponse verdict = Fail(follower, "a");
  // The follower's own verdict already sees the trip it caused, as one process would.
  EXPECT_TRUE(verdict.counted());
  EXPECT_EQ(verdict.target_health(), v1::HEALTH_STATE_DOWN);
  EXPECT_EQ(Active(follower), "b");
  for (int i = 0; i < kReplicas; ++i) EXPECT_TRUE(Within(5, [&] { return Active(i) == "b"; })) << "replica " << i;
}

// What the chart's alerts and dashboard read (helm/failoverd): every replica
// exports the same chain state and counts the same switch, which is why they
// take those once with max by; exactly one says it leads.
TEST_F(ClusterTest, EveryReplicaExportsTheSeriesTheAlertsRead) {
  for (int i = 0; i < kReplicas; ++i) {
    proc(i).Stop(SIGTERM);
    StartReplica(i, {"--metrics-listen", "127.0.0.1:0"});
  }
  leader_ = AwaitLeader();
  ASSERT_GE(leader_, 0);
  ASSERT_NO_FATAL_FAILURE(ApplyAtLeader(Config(1)));
  const int follower = Follower();
  ASSERT_TRUE(Within(5, [&] { return Active(follower) == "a"; }));
  Fail(follower, "a");
  // A scrape's value for a series named exactly (labels in name order), or -1.
  auto value = [&](int i, const std::string& series) {
    const std::string scrape = HttpGet(proc(i).MetricsPort(), "/metrics");
    const size_t at = scrape.find("\n" + series + " ");
    return at == std::string::npos ? -1.0 : std::stod(scrape.substr(at + series.size() + 2));
  };
  for (int i = 0; i < kReplicas; ++i) {
    EXPECT_TRUE(Within(5, [&] {
      return value(i, R"(failover_chain_state{chain="ch",state="fallback"})") == 1 &&
             value(i, R"(failover_switches_total{chain="ch",from="a",reason="trip",to="b"})") == 1;
    })) << "replica " << i;
    EXPECT_EQ(value(i, "failover_cluster_leader"), i == leader_ ? 1 : 0) << "replica " << i;
    EXPECT_TRUE(Within(5, [&] { return value(i, "failover_cluster_lag_entries") == 0; })) << "replica " << i;
    EXPECT_GE(value(i, "failover_cluster_applied_index"), 2) << "replica " << i;
    for (const char* counter : {"failover_cluster_etcd_errors_total", "failover_cluster_leader_changes_total",
                                "failover_cluster_relay_dropped_total"}) {
      EXPECT_GE(value(i, counter), 0) << "replica " << i << " does not export " << counter;
    }
  }
}

TEST_F(ClusterTest, FailuresSpreadOverReplicasTripAtTheThreshold) {
  ASSERT_NO_FATAL_FAILURE(ApplyAtLeader(Config(3)));
  for (int i = 0; i < kReplicas; ++i) ASSERT_TRUE(Within(5, [&] { return Active(i) == "a"; }));
  // Two failures, on two replicas: below the threshold of three.
  Fail(Follower(), "a");
  Fail(leader_, "a");
  for (int i = 0; i < kReplicas; ++i) EXPECT_EQ(Active(i), "a") << "replica " << i;
  // The third, on the other follower, trips it everywhere.
  Fail(Follower(Follower()), "a");
  for (int i = 0; i < kReplicas; ++i) EXPECT_TRUE(Within(5, [&] { return Active(i) == "b"; })) << "replica " << i;
  // The outcome trace is the leader's, asked through any replica: the three
  // failures, each once, wherever they were reported.
  for (int i = 0; i < kReplicas; ++i) {
    v1::ListTraceRequest req;
    req.set_chain("ch");
    v1::ListTraceResponse trace;
    const grpc::Status s = Admin(i)->ListTrace(Ctx().get(), req, &trace);
    ASSERT_TRUE(s.ok()) << "replica " << i << ": " << s.error_message();
    ASSERT_EQ(trace.entries_size(), 3) << "replica " << i << ": " << trace.DebugString();
    for (const v1::TraceEntry& e : trace.entries()) EXPECT_EQ(e.target(), "a") << "replica " << i;
  }
}

TEST_F(ClusterTest, ProbeLeasesStayOnePerTargetWithProbersOnEveryReplica) {
  v1::ApplyRequest config = Config(3);
  *config.mutable_chains(0)->mutable_policy()->mutable_probe()->mutable_interval() = Millis(60000);
  ASSERT_NO_FATAL_FAILURE(ApplyAtLeader(config));
  std::map<std::string, int> handed;
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < kReplicas; ++i) {
      v1::ProbeRequest req;
      req.set_prober_id("prober-" + std::to_string(i));
      v1::ProbeResponse resp;
      const grpc::Status s = Decide(i)->Probe(Ctx().get(), req, &resp);
      ASSERT_TRUE(s.ok()) << "replica " << i << ": " << s.error_message();
      for (const auto& task : resp.tasks()) ++handed[task.target()];
    }
  }
  // Each target is due once, and its lease is held: one task each, whichever replica was asked.
  EXPECT_EQ(handed["a"], 1);
  EXPECT_EQ(handed["b"], 1);
}

TEST_F(ClusterTest, LosingTheLeaderElectsAnotherAndLosesNothing) {
  ASSERT_NO_FATAL_FAILURE(ApplyAtLeader(Config(1)));
  ASSERT_TRUE(Pin(leader_, "b").ok());  // acknowledged by the leader that is about to die
  const int watched = Follower();
  // A watcher on one replica, to resume on another after the leader is gone.
  uint64_t last_seen = 0;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::WatchEventsRequest req;
    req.set_after_sequence(0);
    auto stream = Decide(watched)->WatchEvents(&ctx, req);
    v1::Event e;
    while (stream->Read(&e)) {
      if (e.has_chain_switched() && e.chain_switched().reason() == v1::SWITCH_REASON_PIN) {
        last_seen = e.sequence();
        break;
      }
    }
    ctx.TryCancel();
  }
  ASSERT_GT(last_seen, 0u);

  // Decisions go on on the survivors all along (each has the chain first:
  // a follower applies the log a moment after the leader answers).
  for (int i = 0; i < kReplicas; ++i) ASSERT_TRUE(Within(5, [&] { return Pinned(i) == "b"; })) << "replica " << i;
  const int old_leader = leader_;
  std::atomic<bool> stop{false};
  std::atomic<int> failed_picks{0};
  std::string first_failure;  // the picker's, read after it joins
  std::thread picker([&] {
    while (!stop) {
      for (int i = 0; i < kReplicas; ++i) {
        if (i == old_leader) continue;
        v1::PickTargetRequest req;
        req.set_chain("ch");
        v1::PickTargetResponse resp;
        const grpc::Status picked = Decide(i)->PickTarget(Ctx(2).get(), req, &resp);
        if (!picked.ok() && failed_picks++ == 0) {
          first_failure = absl::StrCat("replica ", i, ": ", picked.error_code(), " ", picked.error_message());
        }
      }
    }
  });
  const auto killed_at = std::chrono::steady_clock::now();
  proc(old_leader).Stop(SIGKILL);
  leader_ = AwaitLeader(10, {old_leader});
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  stop = true;
  picker.join();
  ASSERT_GE(leader_, 0);
  EXPECT_LT(took, 2.0 + 1.0 + 1.0) << "lease 2 s; a new leader took " << took << " s";
  EXPECT_EQ(failed_picks.load(), 0) << first_failure;
  for (int i = 0; i < kReplicas; ++i) {
    if (i == old_leader) continue;
    EXPECT_EQ(Pinned(i), "b") << "replica " << i;
    // The dead one drops out of the replicas listed with its lease.
    ClusterStatus listed;
    EXPECT_TRUE(Within(5, [&] {
      listed = Status(i);
      if (listed.replicas_size() != kReplicas - 1) return false;
      for (const ClusterStatus::Replica& r : listed.replicas()) {
        if (r.address() == Address(old_leader) || r.leader() != (r.address() == Address(leader_))) return false;
      }
      return true;
    })) << "replica " << i << ": " << listed.DebugString();
  }
  // The new leader decides: unpinning and a trip still work.
  v1::UnpinChainRequest unpin;
  unpin.set_chain("ch");
  v1::ChainView view;
  ASSERT_TRUE(Admin(Follower(old_leader))->UnpinChain(Ctx().get(), unpin, &view).ok());
  // The watcher resumes on another replica: no gap, no repeat.
  const int resumed = watched == leader_ ? Follower(old_leader) : leader_;
  std::vector<uint64_t> sequences;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::WatchEventsRequest req;
    req.set_after_sequence(last_seen);
    auto stream = Decide(resumed)->WatchEvents(&ctx, req);
    v1::Event e;
    while (stream->Read(&e)) {
      sequences.push_back(e.sequence());
      if (e.has_chain_switched() && e.chain_switched().reason() == v1::SWITCH_REASON_UNPIN) break;
    }
    ctx.TryCancel();
  }
  ASSERT_FALSE(sequences.empty());
  EXPECT_EQ(sequences.front(), last_seen + 1);
  for (size_t i = 1; i < sequences.size(); ++i) EXPECT_EQ(sequences[i], sequences[i - 1] + 1);
}

// A relay whose answer was lost is sent again to whoever leads next (DESIGN
// 3.14, invariant 4): a report that tripped its target at the leader that
// died counts nothing again at the next one, which knows it from the log.
TEST_F(ClusterTest, AReportThatTrippedCountsNothingAgainAtTheNextLeader) {
  ASSERT_NO_FATAL_FAILURE(ApplyAtLeader(Config(1)));
  auto send = [&](int i) {  // as a follower's relay sends it
    v1::ReportOutcomeRequest report;
    report.set_chain("ch");
    report.set_target("a");
    report.mutable_failure()->set_http_status(503);
    report.mutable_report_id()->set_sender("relay-of-a-follower");
    report.mutable_report_id()->set_sequence(7);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::StreamOutcomesResponse summary;
    auto writer = Decide(i)->StreamOutcomes(&ctx, &summary);
    EXPECT_TRUE(writer->Write(report));
    writer->WritesDone();
    const grpc::Status done = writer->Finish();
    EXPECT_TRUE(done.ok()) << done.error_message();
    return summary;
  };
  const v1::StreamOutcomesResponse first = send(leader_);
  ASSERT_EQ(first.accepted(), 1u);
  ASSERT_EQ(first.duplicates(), 0u);
  for (int i = 0; i < kReplicas; ++i) {
    ASSERT_TRUE(Within(5, [&] { return Status(i).applied_index() >= first.cluster_log_index(); })) << "replica " << i;
  }
  const int old_leader = leader_;
  proc(old_leader).Stop(SIGKILL);
  leader_ = AwaitLeader(10, {old_leader});
  ASSERT_GE(leader_, 0);
  const v1::StreamOutcomesResponse again = send(leader_);
  EXPECT_EQ(again.accepted(), 1u);
  EXPECT_EQ(again.duplicates(), 1u) << "the new leader counted again the report that tripped a";
  // A report the dead leader never saw still counts.
  const int other = Follower(old_leader);
  v1::ReportOutcomeRequest fresh;
  fresh.set_chain("ch");
  fresh.set_target("b");
  fresh.mutable_failure()->set_http_status(503);
  fresh.mutable_report_id()->set_sender("relay-of-a-follower");
  fresh.mutable_report_id()->set_sequence(6);
  v1::ReportOutcomeResponse resp;
  ASSERT_TRUE(Decide(leader_)->ReportOutcome(Ctx().get(), fresh, &resp).ok());
  EXPECT_TRUE(resp.counted()) << resp.ShortDebugString();
  EXPECT_TRUE(Within(5, [&] {
    v1::GetTargetRequest req;
    req.set_name("b");
    v1::TargetView view;
    return Admin(other)->GetTarget(Ctx(2).get(), req, &view).ok() && view.status().health() == v1::HEALTH_STATE_DOWN;
  })) << "b did not trip";
}

TEST_F(ClusterTest, APausedLeaderWritesNothingAfterItsLease) {
  ASSERT_NO_FATAL_FAILURE(ApplyAtLeader(Config(1)));
  const int paused = leader_;
  ASSERT_EQ(kill(proc(paused).pid(), SIGSTOP), 0);
  leader_ = AwaitLeader(10, {paused});
  ASSERT_GE(leader_, 0);
  ASSERT_TRUE(Pin(leader_, "b").ok());
  ASSERT_EQ(kill(proc(paused).pid(), SIGCONT), 0);
  // Woken, it still takes itself for the leader for a moment: a failure it is
  // told of would trip "a" there, but that change must not reach the log.
  v1::ReportOutcomeRequest req;
  req.set_target("a");
  req.set_chain("ch");
  req.mutable_failure()->set_http_status(503);
  v1::ReportOutcomeResponse resp;
  (void)Decide(paused)->ReportOutcome(Ctx().get(), req, &resp);
  // It steps down and follows the new leader's log.
  EXPECT_TRUE(Within(10, [&] {
    const ClusterStatus s = Status(paused);
    return s.role() == ClusterStatus::ROLE_FOLLOWER && s.leader() == Address(leader_) && Pinned(paused) == "b";
  }));
  // In the log, terms only grow: nothing was written by the old term after the new one began.
  const std::map<uint64_t, int64_t> terms = LogTerms();
  ASSERT_FALSE(terms.empty());
  int64_t previous = 0;
  for (const auto& [index, term] : terms) {
    EXPECT_GE(term, previous) << "log entry " << index;
    previous = term;
  }
  // Every replica ends with the same state.
  for (int i = 0; i < kReplicas; ++i) {
    EXPECT_TRUE(Within(5, [&] { return Active(i) == Active(leader_) && Pinned(i) == "b"; })) << "replica " << i;
  }
}

TEST_F(ClusterTest, ALeaderWhoseKeyWasTakenWritesNothing) {
  ASSERT_NO_FATAL_FAILURE(ApplyAtLeader(Config(1)));
  const size_t entries = LogTerms().size();
  // Another replica's key replaces this leader's while its lease still runs
  // (as after a pause). Its writes are fenced on the key it created, and its
  // watch shows it the key is gone: it steps down, whichever comes first.
  auto kv_channel = grpc::CreateChannel(etcd_->Endpoints().substr(0, etcd_->Endpoints().find(',')),
                                       grpc::InsecureChannelCredentials());
  auto kv = etcdserverpb::KV::NewStub(kv_channel);
  // (The followers are paused meanwhile, so none of them stands in between.)
  for (int i = 0; i < kReplicas; ++i) {
    if (i != leader_) {
      ASSERT_EQ(kill(proc(i).pid(), SIGSTOP), 0);
    }
  }
  etcdserverpb::DeleteRangeRequest drop;
  drop.set_key(prefix_ + "/leader");
  etcdserverpb::DeleteRangeResponse dropped;
  ASSERT_TRUE(kv->DeleteRange(Ctx().get(), drop, &dropped).ok());
  // On a lease of its own, as every replica's key is (a key on none counts as vacant).
  etcdserverpb::LeaseGrantRequest grant;
  grant.set_ttl(60);
  etcdserverpb::LeaseGrantResponse granted;
  ASSERT_TRUE(etcdserverpb::Lease::NewStub(kv_channel)->LeaseGrant(Ctx().get(), grant, &granted).ok());
  etcdserverpb::PutRequest put;
  put.set_key(prefix_ + "/leader");
  put.set_value("127.0.0.1:1");
  put.set_lease(granted.id());
  etcdserverpb::PutResponse taken;
  ASSERT_TRUE(kv->Put(Ctx().get(), put, &taken).ok());
  // Refused as the leader (the fence), or as a follower passing it on to the
  // impostor's address, where nothing answers: either way, not made.
  const grpc::Status refused = Pin(leader_, "b");
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  EXPECT_EQ(LogTerms().size(), entries);
  // It steps down and drops what it made.
  EXPECT_TRUE(Within(5, [&] { return Status(leader_).role() == ClusterStatus::ROLE_FOLLOWER; }));
  EXPECT_TRUE(Within(5, [&] { return Pinned(leader_).empty(); }));
  for (int i = 0; i < kReplicas; ++i) {
    if (i != leader_) {
      ASSERT_EQ(kill(proc(i).pid(), SIGCONT), 0);
    }
  }
  // Once the impostor's key is gone a replica leads again.
  etcdserverpb::DeleteRangeRequest release;
  release.set_key(prefix_ + "/leader");
  etcdserverpb::DeleteRangeResponse released;
  ASSERT_TRUE(kv->DeleteRange(Ctx().get(), release, &released).ok());
  leader_ = AwaitLeader();
  ASSERT_GE(leader_, 0);
  EXPECT_TRUE(Pin(Follower(), "b").ok());
}

// A leader key written by hand, on no lease, would never expire: after the
// leader dies the survivors clear it and elect one of themselves, and admin
// calls reach that one, not the hand-written address.
TEST_F(ClusterTest, ALeaderKeyOnNoLeaseIsTakenOver) {
  ASSERT_NO_FATAL_FAILURE(ApplyAtLeader(Config(1)));
  const int old_leader = leader_;
  ASSERT_EQ(kill(proc(old_leader).pid(), SIGKILL), 0);
  proc(old_leader).WaitExit(10);
  auto kv = etcdserverpb::KV::NewStub(grpc::CreateChannel(
      etcd_->Endpoints().substr(0, etcd_->Endpoints().find(',')), grpc::InsecureChannelCredentials()));
  etcdserverpb::PutRequest put;  // replaces the dead leader's key; no lease
  put.set_key(prefix_ + "/leader");
  put.set_value("garbage:1");
  etcdserverpb::PutResponse written;
  ASSERT_TRUE(kv->Put(Ctx().get(), put, &written).ok());
  leader_ = AwaitLeader(20, {old_leader});
  ASSERT_GE(leader_, 0) << "no replica took over from a leader key on no lease";
  EXPECT_NE(leader_, old_leader);
  const int follower = Follower(old_leader);
  ASSERT_GE(follower, 0);
  EXPECT_TRUE(Pin(follower, "b").ok()) << "an admin call at a follower reaches the new leader";
  EXPECT_TRUE(Within(5, [&] { return Pinned(leader_) == "b"; }));
}

// The same hand-written key over a live leader's: its lease still runs and
// the key keeps the revision it was created at, so its fenced writes on the
// create revision alone would pass. It sees its key is no longer its own and
// steps down at once, and (the followers being paused) stands again and makes
// the key anew. Before, it went on answering as the leader beside the one the
// followers elected, until a write of its failed: with no writes, never, and
// the key stayed on no lease.
TEST_F(ClusterTest, ALiveLeaderWhoseKeyIsWrittenOverStepsDownAtOnce) {
  ASSERT_NO_FATAL_FAILURE(ApplyAtLeader(Config(1)));
  for (int i = 0; i < kReplicas; ++i) {
    if (i != leader_) {
      ASSERT_EQ(kill(proc(i).pid(), SIGSTOP), 0);
    }
  }
  etcdserverpb::PutRequest put;
  put.set_key(prefix_ + "/leader");
  put.set_value("garbage:1");
  etcdserverpb::PutResponse written;
  ASSERT_TRUE(Kv()->Put(Ctx().get(), put, &written).ok());
  const bool made_anew = Within(10, [&] {
    etcdserverpb::RangeRequest get;
    get.set_key(prefix_ + "/leader");
    etcdserverpb::RangeResponse read;
    if (!Kv()->Range(Ctx().get(), get, &read).ok() || read.kvs_size() == 0) return false;
    return read.kvs(0).lease() != 0 && read.kvs(0).create_revision() > written.header().revision();
  });
  for (int i = 0; i < kReplicas; ++i) {
    if (i != leader_) {
      ASSERT_EQ(kill(proc(i).pid(), SIGCONT), 0);
    }
  }
  EXPECT_TRUE(made_anew) << "the leader stayed in office on a key written over by hand";
  leader_ = AwaitLeader(10);
  ASSERT_GE(leader_, 0) << "not exactly one replica says it leads, or they name different leaders";
  EXPECT_TRUE(Pin(Follower(), "b").ok());
  EXPECT_TRUE(Within(5, [&] { return Pinned(leader_) == "b"; }));
}

// The campaign's transaction took effect in etcd but its answer was lost; the
// etcd client asked the next endpoint, whose answer is "the leader key is
// there, on your lease". That key is this replica's election won, not a term
// it left: it leads on it. (It took the key for one of its old terms, revoked
// its own lease, and so ended the term it had just won.)
TEST_F(ClusterTest, ACampaignWhoseAnswerWasLostIsWonAllTheSame) {
  for (int i = 0; i < kReplicas; ++i) proc(i).Stop(SIGTERM);  // each gives up its key
  const std::string member = etcd_->Endpoints().substr(0, etcd_->Endpoints().find(','));
  EtcdProxy first(member);
  EtcdProxy second(member);
  ASSERT_TRUE(first.Start() && second.Start());
  std::mutex mu;
  bool lost = false;
  int revokes = 0;
  auto hook = [&](const std::string& method, const google::protobuf::Message& request) {
    std::lock_guard<std::mutex> lock(mu);
    if (method == "LeaseRevoke") ++revokes;
    if (lost || !Campaigns(method, request)) return EtcdProxy::Fault::kNone;
    lost = true;
    return EtcdProxy::Fault::kLoseAnswer;
  };
  first.SetHook(hook);
  second.SetHook(hook);
  ASSERT_NO_FATAL_FAILURE(StartReplica(0, {}, "", first.address() + "," + second.address()));
  ASSERT_TRUE(Within(10, [&] {
    std::lock_guard<std::mutex> lock(mu);
    return lost;
  }));
  etcdserverpb::RangeRequest read;
  read.set_key(prefix_ + "/leader");
  etcdserverpb::RangeResponse key;
  // (The hook runs before the proxy passes the Txn on: etcd may not have it yet.)
  ASSERT_TRUE(Within(10, [&] { return Kv()->Range(Ctx().get(), read, &key).ok() && key.kvs_size() == 1; }))
      << "the lost campaign wrote the key";
  const int64_t won_at = key.kvs(0).create_revision();
  ASSERT_TRUE(Within(10, [&] { return Status(0).role() == ClusterStatus::ROLE_LEADER; }));
  EXPECT_TRUE(ApplyConfig(Admin(0).get(), Config(1)).ok()) << "it leads: admin writes go through";
  ASSERT_TRUE(Kv()->Range(Ctx().get(), read, &key).ok());
  ASSERT_EQ(key.kvs_size(), 1);
  EXPECT_EQ(key.kvs(0).create_revision(), won_at) << "it gave up the key it won and stood again";
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(revokes, 0) << "it revoked the lease it had just won on";
}

// A replica taking office reads its leader key once (what its watch showed
// before it led went by unchecked). That read comes after it takes changes:
// a caller that sees it lead is never refused while the read is on its way.
TEST_F(ClusterTest, AReplicaSeenLeadingTakesChangesAtOnce) {
  EtcdProxy proxy(FirstMember());
  std::mutex mu;
  std::condition_variable cv;
  bool stood = false;
  bool reading = false;
  bool released = false;
  // Once the replica has stood, its reads of the leader key wait until the
  // test has made its change (or 5 s, so a replica that does wait for the read
  // still comes to lead and the test fails on its refused change).
  proxy.SetHook([&](const std::string& method, const google::protobuf::Message& request) {
    std::unique_lock<std::mutex> lock(mu);
    if (Campaigns(method, request)) stood = true;
    if (method != "Range" || !stood || released ||
        static_cast<const etcdserverpb::RangeRequest&>(request).key() != prefix_ + "/leader") {
      return EtcdProxy::Fault::kNone;
    }
    reading = true;
    cv.wait_for(lock, std::chrono::seconds(5), [&] { return released; });
    return EtcdProxy::Fault::kNone;
  });
  ASSERT_NO_FATAL_FAILURE(LeadAloneThrough(&proxy));
  const grpc::Status applied = ApplyConfig(Admin(0).get(), Config(1));
  EXPECT_TRUE(Within(10, [&] {
    std::lock_guard<std::mutex> lock(mu);
    return reading;
  })) << "the replica took office without reading its key";
  {
    std::lock_guard<std::mutex> lock(mu);
    released = true;
    cv.notify_all();
  }
  EXPECT_TRUE(applied.ok()) << applied.error_message();
}

// Snapshot parts are written under the leader's fence like the pointer to
// them: a leader deposed while it compacts (another replica's key took the
// leader key just before its part reached etcd) writes no part. (A plain Put
// let a deposed leader overwrite what the new leader wrote.)
TEST_F(ClusterTest, ADeposedLeaderWritesNoSnapshotPart) {
  for (int i = 0; i < kReplicas; ++i) proc(i).Stop(SIGTERM);
  const std::string member = etcd_->Endpoints().substr(0, etcd_->Endpoints().find(','));
  EtcdProxy proxy(member);
  ASSERT_TRUE(proxy.Start());
  const std::string parts = prefix_ + "/snapshot-parts/";
  auto writes_a_part = [&](const std::string& method, const google::protobuf::Message& request) {
    if (method == "Put") {
      return static_cast<const etcdserverpb::PutRequest&>(request).key().rfind(parts, 0) == 0;
    }
    if (method != "Txn") return false;
    for (const auto& op : static_cast<const etcdserverpb::TxnRequest&>(request).success()) {
      if (op.has_request_put() && op.request_put().key().rfind(parts, 0) == 0) return true;
    }
    return false;
  };
  std::mutex mu;
  int64_t deposed_at = 0;  // the revision at which another key took the leader's
  std::string error;
  proxy.SetHook([&](const std::string& method, const google::protobuf::Message& request) {
    std::lock_guard<std::mutex> lock(mu);
    if (deposed_at != 0 || !writes_a_part(method, request)) return EtcdProxy::Fault::kNone;
    auto channel = grpc::CreateChannel(member, grpc::InsecureChannelCredentials());
    etcdserverpb::LeaseGrantRequest grant;
    grant.set_ttl(60);
    etcdserverpb::LeaseGrantResponse granted;
    // The rival's key replaces the leader's (whose session thread waits in
    // this very call, so it cannot stand again in between).
    etcdserverpb::DeleteRangeRequest drop;
    drop.set_key(prefix_ + "/leader");
    etcdserverpb::DeleteRangeResponse dropped;
    etcdserverpb::PutRequest put;
    put.set_key(prefix_ + "/leader");
    put.set_value("127.0.0.1:1");
    etcdserverpb::PutResponse taken;
    auto kv = etcdserverpb::KV::NewStub(channel);
    grpc::Status s = etcdserverpb::Lease::NewStub(channel)->LeaseGrant(Ctx().get(), grant, &granted);
    if (s.ok()) s = kv->DeleteRange(Ctx().get(), drop, &dropped);
    if (s.ok()) {
      put.set_lease(granted.id());
      s = kv->Put(Ctx().get(), put, &taken);
    }
    if (!s.ok()) error = s.error_message();
    deposed_at = s.ok() ? taken.header().revision() : -1;
    return EtcdProxy::Fault::kNone;
  });
  ASSERT_NO_FATAL_FAILURE(StartReplica(0, {"--etcd-log-keep", "2"}, "", proxy.address()));
  ASSERT_TRUE(Within(10, [&] { return Status(0).role() == ClusterStatus::ROLE_LEADER; }));
  // Entries past the kept two: the leader compacts within a third of its lease.
  ASSERT_TRUE(ApplyConfig(Admin(0).get(), Config(1)).ok());
  ASSERT_TRUE(Pin(0, "b").ok());
  ASSERT_TRUE(Pin(0, "a").ok());
  ASSERT_TRUE(Within(10, [&] {
    std::lock_guard<std::mutex> lock(mu);
    return deposed_at != 0;
  }));
  ASSERT_GT(deposed_at, 0) << error;
  EXPECT_TRUE(Within(10, [&] { return Status(0).role() == ClusterStatus::ROLE_FOLLOWER; }));
  etcdserverpb::RangeRequest read;
  read.set_key(parts);
  read.set_range_end(prefix_ + "/snapshot-parts0");  // '0' follows '/'
  etcdserverpb::RangeResponse found;
  ASSERT_TRUE(Kv()->Range(Ctx().get(), read, &found).ok());
  for (const auto& kv : found.kvs()) {
    EXPECT_LT(kv.mod_revision(), deposed_at) << "written after the leader was deposed: " << kv.key();
  }
}

// A write of many Changes reaches etcd in several fenced transactions, each
// under etcd's request limit (--etcd-max-request-bytes, here so small that
// each entry goes alone). When a
// later one fails, the earlier ones are in the log all the same: their callers
// hear OK and the state keeps them; the rest hear UNAVAILABLE and are made
// nowhere. (Reporting the whole write dropped would deny changes that stand.)
TEST_F(ClusterTest, AWriteSplitOverTransactionsAnswersEachCallerByWhatReachedEtcd) {
  EtcdProxy proxy(FirstMember());
  std::mutex mu;
  std::condition_variable cv;
  bool armed = false;
  bool released = false;
  int log_txns = 0;  // since armed
  size_t passed_entries = 0;  // in the transaction just before the refused one
  size_t refused_entries = 0;
  proxy.SetHook([&](const std::string& method, const google::protobuf::Message& request) {
    const size_t entries = LogPuts(method, request);
    std::unique_lock<std::mutex> lock(mu);
    if (!armed || entries == 0) return EtcdProxy::Fault::kNone;
    switch (++log_txns) {
      case 1:  // the first pin's write waits while the others queue behind it
        cv.notify_all();
        cv.wait_for(lock, std::chrono::milliseconds(1200), [&] { return released; });
        return EtcdProxy::Fault::kNone;
      case 2:  // the first group of the next write goes through
        passed_entries = entries;
        return EtcdProxy::Fault::kNone;
      case 3:  // and the second is refused
        refused_entries = entries;
        cv.notify_all();
        return EtcdProxy::Fault::kRefuse;
      default:
        return EtcdProxy::Fault::kNone;
    }
  });
  ASSERT_NO_FATAL_FAILURE(LeadAloneThrough(&proxy, {"--etcd-max-request-bytes", "1024"}));
  // Long names make each entry larger than a transaction takes (two thirds
  // of 1 KiB): the entries of a write go one by one.
  constexpr int kChains = 40;
  auto chain_name = [](int c) { return "ch" + std::to_string(c) + "-" + std::string(100, 'x'); };
  const std::string a = "a-" + std::string(120, 'y');
  const std::string b = "b-" + std::string(120, 'z');
  v1::ApplyRequest config;
  config.add_targets()->set_name(a);
  config.add_targets()->set_name(b);
  for (int c = 0; c < kChains; ++c) {
    v1::Chain* chain = config.add_chains();
    chain->set_name(chain_name(c));
    chain->add_targets(a);
    chain->add_targets(b);
  }
  ASSERT_TRUE(ApplyConfig(Admin(0).get(), config).ok());
  // Each caller on a channel of its own, connected before the write is held.
  std::vector<std::unique_ptr<v1::AdminService::Stub>> stubs;
  for (int c = 0; c < kChains; ++c) {
    stubs.push_back(Admin(0));
    v1::GetStatusRequest status;
    v1::StatusResponse got;
    ASSERT_TRUE(stubs.back()->GetStatus(Ctx().get(), status, &got).ok());
  }
  auto pin = [&](int c) {
    v1::PinChainRequest req;
    req.set_chain(chain_name(c));
    req.set_target(b);
    v1::ChainView view;
    return stubs[static_cast<size_t>(c)]->PinChain(Ctx(10).get(), req, &view);
  };
  // Read on a channel connected now: the hold is short (below etcd's call
  // timeout), and a new connection per read was too slow under ASan and load
  // to see the pins made in it.
  auto reader = Admin(0);
  {
    v1::GetStatusRequest status;
    v1::StatusResponse got;
    ASSERT_TRUE(reader->GetStatus(Ctx().get(), status, &got).ok());
  }
  auto pinned = [&](int c) {
    v1::GetChainRequest req;
    req.set_name(chain_name(c));
    v1::ChainView view;
    if (!reader->GetChain(Ctx(2).get(), req, &view).ok()) return std::string("?");
    return view.status().pinned_target();
  };
  {
    std::lock_guard<std::mutex> lock(mu);
    armed = true;
  }
  std::vector<grpc::Status> answers(kChains);
  std::vector<std::thread> callers;
  callers.emplace_back([&] { answers[0] = pin(0); });
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return log_txns >= 1; }));
  }
  for (int c = 1; c < kChains; ++c) callers.emplace_back([&, c] { answers[c] = pin(c); });
  // The pins are made in memory and wait for the write behind the held one
  // (all of them, unless the hold ends first).
  size_t made = 0;
  Within(1, [&] {
    made = 0;
    for (int c = 1; c < kChains; ++c) made += pinned(c) == b ? 1 : 0;
    return made == kChains - 1;
  });
  {
    std::lock_guard<std::mutex> lock(mu);
    released = true;
    cv.notify_all();
  }
  for (std::thread& t : callers) t.join();
  std::set<int> acknowledged;
  for (int c = 1; c < kChains; ++c) {
    if (answers[c].ok()) {
      acknowledged.insert(c);
    } else {
      EXPECT_EQ(answers[c].error_code(), grpc::StatusCode::UNAVAILABLE) << "ch" << c << ": " << answers[c].error_message();
    }
  }
  EXPECT_TRUE(answers[0].ok()) << answers[0].error_message();
  {
    std::lock_guard<std::mutex> lock(mu);
    // The next write takes every change queued, so when its first
    // transaction holds fewer the refused one is its second.
    ASSERT_GE(log_txns, 3);
    ASSERT_GT(made, passed_entries) << "the write was not split";
    EXPECT_GT(passed_entries, 0u);
    EXPECT_GT(refused_entries, 0u);
    // The callers acknowledged are exactly those whose entries went through.
    EXPECT_EQ(acknowledged.size(), passed_entries);
  }
  EXPECT_LT(acknowledged.size(), static_cast<size_t>(kChains - 1)) << "nothing was refused";
  // The leader stepped down and leads again from the log: what was
  // acknowledged stands, the rest was made nowhere; and a replica that reads
  // the log afresh agrees.
  auto differences = [&](int replica) {
    std::string out;
    for (int c = 1; c < kChains; ++c) {
      const std::string want = acknowledged.count(c) != 0 ? b : "";
      v1::GetChainRequest req;
      req.set_name(chain_name(c));
      v1::ChainView view;
      const grpc::Status s = Admin(replica)->GetChain(Ctx(2).get(), req, &view);
      if (!s.ok() || view.status().pinned_target() != want) {
        absl::StrAppend(&out, " ch", c, s.ok() ? (view.status().pinned_target().empty() ? " unpinned" : " pinned")
                                                   : " " + s.error_message(),
                        want.empty() ? " (want unpinned)" : " (want pinned)");
      }
    }
    return out;
  };
  std::string wrong;
  ASSERT_TRUE(Within(10, [&] { return Status(0).role() == ClusterStatus::ROLE_LEADER; }));
  EXPECT_TRUE(Within(10, [&] { return (wrong = differences(0)).empty(); })) << wrong;
  ASSERT_NO_FATAL_FAILURE(StartReplica(1));
  EXPECT_TRUE(Within(10, [&] { return (wrong = differences(1)).empty(); })) << "a fresh replica:" << wrong;
}

// Changes waiting for etcd hold no thread that decisions need: with a log
// write stuck and admin calls queued behind it, PickTarget still answers at
// once. (Admin calls waited on gRPC's few callback threads, two on a
// two-core machine, so two of them stalled every decision.)
TEST_F(ClusterTest, DecisionsGoOnWhileChangesWaitForEtcd) {
  EtcdProxy proxy(FirstMember());
  HeldLogWrites held(&proxy, this);
  bool answered_while_held = false;
  ASSERT_NO_FATAL_FAILURE(LeadAloneThrough(&proxy));
  ASSERT_TRUE(ApplyConfig(Admin(0).get(), Config(1)).ok());
  held.Arm();
  std::vector<std::thread> admins;
  for (int i = 0; i < 4; ++i) admins.emplace_back([&] { (void)Pin(0, "b"); });
  ASSERT_TRUE(held.Holding());
  const grpc::Status picked = PickWhileHeld(&held, &answered_while_held);
  for (std::thread& t : admins) t.join();
  EXPECT_TRUE(picked.ok()) << picked.error_message();
  EXPECT_TRUE(answered_while_held) << "PickTarget waited for the stuck write";
  EXPECT_TRUE(Within(5, [&] { return Pinned(0) == "b"; }));
}

// The same for outcomes: a failure that trips its target is answered once
// the trip is in etcd's log, but no gRPC thread waits for that meanwhile, so
// many trips waiting on a slow etcd do not stall picks (and each is answered
// with the plan change it caused once it is saved).
TEST_F(ClusterTest, PicksGoOnWhileTripsWaitForEtcd) {
  constexpr int kTrips = 6;
  v1::ApplyRequest config = Config(1);
  for (int k = 0; k < kTrips; ++k) {
    const std::string target = "x" + std::to_string(k);
    config.add_targets()->set_name(target);
    v1::Chain* chain = config.add_chains();
    *chain = config.chains(0);
    chain->set_name("k" + std::to_string(k));
    chain->clear_targets();
    chain->add_targets(target);
    chain->add_targets("a");
  }
  EtcdProxy proxy(FirstMember());
  HeldLogWrites held(&proxy, this);
  bool answered_while_held = false;
  ASSERT_NO_FATAL_FAILURE(LeadAloneThrough(&proxy));
  ASSERT_TRUE(ApplyConfig(Admin(0).get(), config).ok());
  held.Arm();
  std::atomic<int> tripped{0};
  std::vector<std::thread> reporters;
  for (int k = 0; k < kTrips; ++k) {
    reporters.emplace_back([&, k] {
      v1::ReportOutcomeRequest req;
      req.set_chain("k" + std::to_string(k));
      req.set_target("x" + std::to_string(k));
      req.mutable_failure()->set_http_status(503);
      v1::ReportOutcomeResponse resp;
      const grpc::Status s = Decide(0)->ReportOutcome(Ctx().get(), req, &resp);
      EXPECT_TRUE(s.ok()) << s.error_message();
      EXPECT_TRUE(resp.not_saved().empty()) << resp.not_saved();
      if (resp.target_health() == v1::HEALTH_STATE_DOWN && resp.active_target() == "a") ++tripped;
    });
  }
  ASSERT_TRUE(held.Holding());
  const grpc::Status picked = PickWhileHeld(&held, &answered_while_held);
  for (std::thread& t : reporters) t.join();
  EXPECT_TRUE(picked.ok()) << picked.error_message();
  EXPECT_TRUE(answered_while_held) << "PickTarget waited behind the trips waiting for etcd";
  EXPECT_EQ(tripped.load(), kTrips);
  for (int k = 0; k < kTrips; ++k) EXPECT_EQ(Pick(0, "k" + std::to_string(k)).active_target(), "a");
}

// Nor do watchers opening meanwhile: an opening first waits (up to 2 s) until
// what was answered is published, which a stuck write delays. That wait was
// on gRPC's callback threads, so two watchers opening stalled every decision.
// A watcher that hangs up during its opening leaves no subscription behind.
TEST_F(ClusterTest, PicksGoOnWhileWatchersOpenBehindAStuckWrite) {
  constexpr int kWatchers = 4;
  EtcdProxy proxy(FirstMember());
  HeldLogWrites held(&proxy, this);
  ASSERT_NO_FATAL_FAILURE(LeadAloneThrough(&proxy, {"--metrics-listen", "127.0.0.1:0"}));
  ASSERT_TRUE(ApplyConfig(Admin(0).get(), Config(1)).ok());
  auto watchers_gauge = [this] {
    const std::string metrics = HttpGet(proc(0).MetricsPort(), "/metrics");
    const size_t at = metrics.find("\nfailover_watchers ");
    return at == std::string::npos ? std::string("?") : metrics.substr(at + 19, metrics.find('\n', at + 1) - at - 19);
  };
  held.Arm();
  std::thread pin([&] { EXPECT_TRUE(Pin(0, "b").ok()); });
  ASSERT_TRUE(held.Holding());
  // One connection: the watchers' calls reach failoverd before the pick.
  auto stub = Decide(0);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::Event>>> watchers;
  for (int w = 0; w <= kWatchers; ++w) {
    contexts.push_back(Ctx(10));
    watchers.push_back(stub->WatchEvents(contexts.back().get(), v1::WatchEventsRequest()));
  }
  v1::PickTargetRequest req;
  req.set_chain("ch");
  v1::PickTargetResponse plan;
  const grpc::Status picked = stub->PickTarget(Ctx().get(), req, &plan);
  contexts.back()->TryCancel();  // the last hangs up before its opening
  EXPECT_EQ(watchers.back()->Finish().error_code(), grpc::StatusCode::CANCELLED);
  const bool answered_while_held = held.Release();
  pin.join();
  EXPECT_TRUE(picked.ok()) << picked.error_message();
  EXPECT_TRUE(answered_while_held) << "PickTarget waited behind the watchers' openings";
  for (int w = 0; w < kWatchers; ++w) {
    v1::Event opening;
    EXPECT_TRUE(watchers[static_cast<size_t>(w)]->Read(&opening)) << "watcher " << w << " got no opening";
  }
  std::string gauge;
  EXPECT_TRUE(Within(5, [&] { return (gauge = watchers_gauge()) == std::to_string(kWatchers); })) << gauge;
  for (int w = 0; w < kWatchers; ++w) {
    contexts[static_cast<size_t>(w)]->TryCancel();
    (void)watchers[static_cast<size_t>(w)]->Finish();
  }
  EXPECT_TRUE(Within(5, [&] { return (gauge = watchers_gauge()) == "0"; })) << gauge;
  EXPECT_TRUE(Within(5, [&] { return Pinned(0) == "b"; }));
}

// A history check in Jepsen's manner, kept lean for CI: three replicas under
// admin writes and failure reports, at replicas picked at random, while the
// leader is killed (and restarted) and paused past its lease, and an etcd
// member is cut. Afterwards: each chain's pin is what its last acknowledged
// write set (or a later write whose answer was lost), every replica agrees
// with the leader, and a watcher that resumed on whichever replica was up saw
// one numbered history without a gap or a repeat.
TEST_F(ClusterTest, UnderKillsAndPausesAcknowledgedWritesStayAndTheHistoryIsOne) {
  constexpr int kChains = 6;
  v1::ApplyRequest config = Config(3);
  const v1::Chain shape = config.chains(0);
  config.clear_chains();
  for (int c = 0; c < kChains; ++c) {
    v1::Chain* chain = config.add_chains();
    *chain = shape;
    chain->set_name("k" + std::to_string(c));
  }
  ASSERT_NO_FATAL_FAILURE(ApplyAtLeader(config));

  std::mutex mu;
  std::set<int> away;  // replicas killed or paused: callers go elsewhere
  std::atomic<bool> stop{false};  // the load
  std::atomic<bool> watched{false};  // the watcher
  std::atomic<int> acknowledged{0};
  auto any_replica = [&](std::mt19937& rng) {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<int> up;
    for (int i = 0; i < kReplicas; ++i) {
      if (away.count(i) == 0) up.push_back(i);
    }
    return up[rng() % up.size()];
  };

  // Writers: one per chain, so each chain's writes are ordered.
  struct Write {
    std::string target;  // "" unpins
    grpc::StatusCode code;
  };
  std::vector<std::vector<Write>> writes(kChains);
  std::vector<std::thread> load;
  for (int c = 0; c < kChains; ++c) {
    load.emplace_back([&, c] {
      std::mt19937 rng(static_cast<uint32_t>(c + 1));
      const std::string chain = "k" + std::to_string(c);
      while (!stop.load()) {
        const std::string target = std::vector<std::string>{"a", "b", ""}[rng() % 3];
        const int at = any_replica(rng);
        v1::ChainView view;
        grpc::Status s;
        if (target.empty()) {
          v1::UnpinChainRequest req;
          req.set_chain(chain);
          s = Admin(at)->UnpinChain(Ctx(3).get(), req, &view);
        } else {
          v1::PinChainRequest req;
          req.set_chain(chain);
          req.set_target(target);
          s = Admin(at)->PinChain(Ctx(3).get(), req, &view);
        }
        writes[static_cast<size_t>(c)].push_back({target, s.error_code()});
        if (s.ok()) {
          ++acknowledged;
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));  // a caller's backoff
        }
      }
    });
  }
  // A reporter: failures of both targets, so trips and recoveries interleave with the writes.
  load.emplace_back([&] {
    std::mt19937 rng(99);
    while (!stop.load()) {
      const int at = any_replica(rng);
      v1::PickTargetRequest pick;
      pick.set_chain("k" + std::to_string(rng() % kChains));
      v1::PickTargetResponse plan;
      if (!Decide(at)->PickTarget(Ctx(2).get(), pick, &plan).ok()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      v1::ReportOutcomeRequest report;
      report.set_decision_id(plan.decision_id());
      report.set_target(rng() % 2 == 0 ? "a" : "b");
      report.mutable_failure()->set_http_status(503);
      v1::ReportOutcomeResponse verdict;
      (void)Decide(at)->ReportOutcome(Ctx(2).get(), report, &verdict);
    }
  });
  // A watcher that resumes after each drop on any replica up.
  uint64_t last = 0;
  int resyncs = 0;
  std::vector<std::string> breaks;
  std::shared_ptr<grpc::ClientContext> watching;
  std::thread watcher([&] {
    std::mt19937 rng(7);
    while (!watched.load()) {
      const int at = any_replica(rng);
      auto ctx = std::make_shared<grpc::ClientContext>();
      {
        std::lock_guard<std::mutex> lock(mu);
        if (watched.load()) break;
        watching = ctx;
      }
      v1::WatchEventsRequest req;
      if (last > 0) req.set_after_sequence(last);
      auto stream = Decide(at)->WatchEvents(ctx.get(), req);
      v1::Event event;
      while (stream->Read(&event)) {
        std::lock_guard<std::mutex> lock(mu);
        if (event.has_snapshot()) {
          if (last > 0) ++resyncs;  // announced (a replica that stepped down starts over)
          last = event.sequence();
        } else if (event.sequence() != last + 1) {
          breaks.push_back(absl::StrCat("replica ", at, ": ", event.sequence(), " after ", last));
          last = std::max(last, event.sequence());
        } else {
          last = event.sequence();
        }
      }
      (void)stream->Finish();
    }
  });

  auto progress = [&](int more) {
    const int from = acknowledged.load();
    return Within(20, [&] { return acknowledged.load() >= from + more; });
  };
  auto set_away = [&](int i, bool is_away) {
    std::lock_guard<std::mutex> lock(mu);
    if (is_away) {
      away.insert(i);
    } else {
      away.erase(i);
    }
  };
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(progress(10)) << "round " << round << ": no write acknowledged";
    // The leader is killed, replaced, and started again.
    int old = leader_;
    set_away(old, true);
    proc(old).Stop(SIGKILL);
    leader_ = AwaitLeader(15, {old});
    ASSERT_GE(leader_, 0) << "round " << round << ": no leader after a kill";
    ASSERT_NO_FATAL_FAILURE(StartReplica(old));
    set_away(old, false);
    ASSERT_TRUE(progress(10)) << "round " << round << ": no write acknowledged after the kill";
    // The leader is paused past its lease, replaced, and wakes as a follower.
    old = leader_;
    set_away(old, true);
    ASSERT_EQ(kill(proc(old).pid(), SIGSTOP), 0);
    leader_ = AwaitLeader(15, {old});
    ASSERT_EQ(kill(proc(old).pid(), SIGCONT), 0);
    ASSERT_GE(leader_, 0) << "round " << round << ": no leader after a pause";
    EXPECT_TRUE(Within(10, [&] { return Status(old).role() == ClusterStatus::ROLE_FOLLOWER; }));
    set_away(old, false);
    // An etcd member is cut (the first round the one the replicas list
    // first) and comes back; the other two keep a quorum meanwhile.
    const int member = round % etcd_->size();
    etcd_->Kill(member);
    ASSERT_TRUE(progress(10)) << "round " << round << ": no write acknowledged with etcd member " << member << " cut";
    std::string error;
    ASSERT_TRUE(etcd_->Restart(member, &error)) << error;
    ASSERT_TRUE(etcd_->WaitHealthy(15)) << "etcd member " << member << " did not rejoin";
  }
  ASSERT_TRUE(progress(5));
  stop = true;
  for (std::thread& t : load) t.join();

  leader_ = AwaitLeader(15);
  ASSERT_GE(leader_, 0);
  // Every chain: the last acknowledged write, or one after it whose answer was lost.
  for (int c = 0; c < kChains; ++c) {
    const std::vector<Write>& history = writes[static_cast<size_t>(c)];
    std::set<std::string> allowed;
    size_t from = 0;
    for (size_t i = 0; i < history.size(); ++i) {
      if (history[i].code == grpc::StatusCode::OK) from = i;
    }
    const bool any_ok = std::any_of(history.begin(), history.end(),
                                    [](const Write& w) { return w.code == grpc::StatusCode::OK; });
    if (!any_ok) allowed.insert("");
    for (size_t i = any_ok ? from : 0; i < history.size(); ++i) allowed.insert(history[i].target);
    v1::GetChainRequest req;
    req.set_name("k" + std::to_string(c));
    v1::ChainView view;
    ASSERT_TRUE(Admin(leader_)->GetChain(Ctx().get(), req, &view).ok());
    EXPECT_EQ(allowed.count(view.status().pinned_target()), 1u)
        << "k" << c << " pinned to '" << view.status().pinned_target() << "' after " << history.size()
        << " writes; the last acknowledged set '" << (any_ok ? history[from].target : "-") << "'";
  }
  // Every replica agrees with the leader, entry for entry and chain for chain.
  auto chains_at = [&](int i) {
    std::string out;
    for (int c = 0; c < kChains; ++c) {
      v1::GetChainRequest req;
      req.set_name("k" + std::to_string(c));
      v1::ChainView view;
      if (!Admin(i)->GetChain(Ctx(2).get(), req, &view).ok()) return std::string("?");
      absl::StrAppend(&out, " k", c, ":", view.status().active_target(), "/", view.status().pinned_target(), "/",
                      view.status().state());
    }
    return out;
  };
  for (int i = 0; i < kReplicas; ++i) {
    std::string theirs;
    std::string leaders;
    EXPECT_TRUE(Within(15, [&] {
      leaders = chains_at(leader_);
      theirs = chains_at(i);
      return Status(i).applied_index() == Status(leader_).applied_index() && theirs == leaders;
    })) << "replica " << i << ":" << theirs << " vs the leader's:" << leaders;
  }
  // The watcher reaches the end of the one history.
  v1::WatchEventsRequest fresh;
  grpc::ClientContext snapshot_ctx;
  snapshot_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  auto snapshot = Decide(leader_)->WatchEvents(&snapshot_ctx, fresh);
  v1::Event first;
  ASSERT_TRUE(snapshot->Read(&first));
  snapshot_ctx.TryCancel();
  (void)snapshot->Finish();
  EXPECT_TRUE(Within(15, [&] {
    std::lock_guard<std::mutex> lock(mu);
    return last >= first.sequence();
  })) << "the watcher stopped at " << last << " of " << first.sequence();
  {
    std::lock_guard<std::mutex> lock(mu);
    watched = true;
    if (watching) watching->TryCancel();
  }
  watcher.join();
  EXPECT_THAT(breaks, ::testing::IsEmpty()) << resyncs << " resyncs";
  size_t sent = 0;
  for (const auto& history : writes) sent += history.size();
  std::printf("history: %zu writes, %d acknowledged; the watcher read to %llu with %d resyncs\n", sent,
              acknowledged.load(), static_cast<unsigned long long>(last), resyncs);
}

// Not a byte of garbage in an entry every replica applied long ago: a
// replica that has to read it again (here, restarted on an empty data dir)
// cannot get past it. It keeps what it applied, names the entry and its lag,
// and reports NOT_SERVING (it would serve a plan that ignores the pin) until
// the entry reads again; then it catches up and serves.
TEST_F(ClusterTest, AReplicaThatCannotApplyTheLogSaysWhichEntryAndIsNotServing) {
  ASSERT_NO_FATAL_FAILURE(ApplyAtLeader(Config(1)));
  ASSERT_TRUE(Pin(leader_, "b").ok());
  const uint64_t last = Status(leader_).applied_index();
  ASSERT_GE(last, 2u);
  const int away = Follower();
  ASSERT_TRUE(Within(5, [&] { return Status(away).applied_index() == last; }));
  proc(away).Stop(SIGKILL);
  const std::string second = LogValue(2);
  ASSERT_FALSE(second.empty());
  PutLog(2, std::string("\x0a\xff\xff\xff\xff", 5));  // a length that runs past the end: never parses
  TempDir empty;
  StartReplica(away, {}, empty.path() + "/data");
  EXPECT_TRUE(Within(10, [&] {
    const ClusterStatus s = Status(away);
    return s.log_error().find("entry 2 ") != std::string::npos && s.log_error().find("behind") != std::string::npos;
  })) << "log_error: " << Status(away).log_error();
  EXPECT_EQ(Status(away).applied_index(), 1u);
  EXPECT_EQ(Health(away), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  const CommandResult status = RunCommand({FailoverctlBinary(), "--server", Address(away), "status"});
  EXPECT_NE(status.out.find("log: cannot apply change log entry 2 "), std::string::npos) << status.out;
  EXPECT_EQ(Health(leader_), grpc::health::v1::HealthCheckResponse::SERVING);

  PutLog(2, second);  // repaired: it catches up and serves
  EXPECT_TRUE(Within(10, [&] { return Status(away).applied_index() >= last && Status(away).log_error().empty(); }));
  EXPECT_EQ(Pinned(away), "b");
  EXPECT_TRUE(Within(5, [&] { return Health(away) == grpc::health::v1::HealthCheckResponse::SERVING; }));
  proc(away).Stop(SIGKILL);  // before its data dir goes
}

// Garbage at the next index of the log, where no replica has applied
// anything: every replica is stuck on it, so a new leader could never read
// the log up to its term. The one elected overwrites it with an empty entry
// under its fence, and the cluster goes on: a leader, changes, every replica
// at the same index.
TEST_F(ClusterTest, GarbageAtTheNextLogIndexDoesNotStopElections) {
  ASSERT_NO_FATAL_FAILURE(ApplyAtLeader(Config(1)));
  const uint64_t last = Status(leader_).applied_index();
  for (int i = 0; i < kReplicas; ++i) ASSERT_TRUE(Within(5, [&] { return Status(i).applied_index() == last; }));
  PutLog(last + 1, std::string("\x0a\xff\xff\xff\xff", 5));
  EXPECT_TRUE(Within(30, [&] { return Pin(Follower(), "b").ok(); })) << "no leader takes changes";
  leader_ = AwaitLeader(10);
  ASSERT_GE(leader_, 0);
  for (int i = 0; i < kReplicas; ++i) {
    EXPECT_TRUE(Within(10, [&] { return Pinned(i) == "b" && Status(i).log_error().empty(); })) << "replica " << i;
  }
  cluster::LogEntry entry;
  EXPECT_TRUE(entry.ParseFromString(LogValue(last + 1))) << "the garbage is still there";
}

// A follower relays outcomes to the leader in batches; when a batch's answer
// is lost (the leader may have counted it) the batch is sent again. Every
// relayed report carries an id, the same each time it is sent, so the leader
// counts it once (it was counted again on every resend: one failure's trip
// showed three times).
TEST_F(ClusterTest, ARelayedBatchSentAgainCarriesTheSameReportIds) {
  ASSERT_NO_FATAL_FAILURE(RelayToAFakeLeader(/*batches=*/true));
}

// The same to a leader from before ReportOutcomes (a rolling upgrade): the
// batches go as streams, and keep their ids; the refused call is not made
// again before each batch.
TEST_F(ClusterTest, ALeaderWithoutReportOutcomesGetsTheBatchesAsStreams) {
  ASSERT_NO_FATAL_FAILURE(RelayToAFakeLeader(/*batches=*/false));
}

void ClusterTest::RelayToAFakeLeader(bool batches) {
  ASSERT_NO_FATAL_FAILURE(ApplyAtLeader(Config(1000)));
  const int f = Follower();
  ASSERT_TRUE(Within(5, [&] { return Status(f).applied_index() == Status(leader_).applied_index(); }));
  FakeLeader fake(batches);
  int fake_port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &fake_port);
  builder.RegisterService(&fake);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  // The follower, paused, wakes up to a cluster whose leader key (on a live
  // lease) names the fake.
  ASSERT_EQ(kill(proc(f).pid(), SIGSTOP), 0);
  for (int i = 0; i < kReplicas; ++i) {
    if (i != f) proc(i).Stop(SIGKILL);
  }
  auto channel = grpc::CreateChannel(etcd_->Endpoints().substr(0, etcd_->Endpoints().find(',')),
                                     grpc::InsecureChannelCredentials());
  etcdserverpb::LeaseGrantRequest grant;
  grant.set_ttl(60);
  etcdserverpb::LeaseGrantResponse lease;
  ASSERT_TRUE(etcdserverpb::Lease::NewStub(channel)->LeaseGrant(Ctx().get(), grant, &lease).ok());
  etcdserverpb::TxnRequest take;  // once the dead leader's key is gone
  etcdserverpb::Compare* absent = take.add_compare();
  absent->set_key(prefix_ + "/leader");
  absent->set_target(etcdserverpb::Compare::CREATE);
  absent->set_result(etcdserverpb::Compare::EQUAL);
  absent->set_create_revision(0);
  etcdserverpb::PutRequest* put = take.add_success()->mutable_request_put();
  put->set_key(prefix_ + "/leader");
  put->set_value("127.0.0.1:" + std::to_string(fake_port));
  put->set_lease(lease.id());
  ASSERT_TRUE(Within(10, [&] {
    etcdserverpb::TxnResponse taken;
    return Kv()->Txn(Ctx().get(), take, &taken).ok() && taken.succeeded();
  }));
  ASSERT_EQ(kill(proc(f).pid(), SIGCONT), 0);
  ASSERT_TRUE(Within(10, [&] { return Status(f).leader() == "127.0.0.1:" + std::to_string(fake_port); }));

  for (int i = 0; i < 3; ++i) Fail(f, "a");
  ASSERT_TRUE(Within(10, [&] {
    size_t relayed = 0;
    for (const auto& call : fake.Calls()) relayed += call.size();
    return fake.Calls().size() >= 2 && relayed >= 4;
  }));
  const auto calls = fake.Calls();
  std::map<std::pair<std::string, uint64_t>, std::string> ids;  // id -> the report it stands for
  for (const auto& call : calls) {
    for (const v1::ReportOutcomeRequest& r : call) {
      ASSERT_TRUE(r.has_report_id()) << r.ShortDebugString();
      v1::ReportOutcomeRequest without_id = r;
      without_id.clear_report_id();
      const auto [at, fresh] =
          ids.emplace(std::make_pair(r.report_id().sender(), r.report_id().sequence()), without_id.SerializeAsString());
      EXPECT_TRUE(fresh || at->second == without_id.SerializeAsString()) << "one id, two reports";
    }
  }
  // What the first (lost) call carried went again with the same ids.
  for (const v1::ReportOutcomeRequest& r : calls[0]) {
    bool again = false;
    for (size_t c = 1; c < calls.size() && !again; ++c) {
      for (const v1::ReportOutcomeRequest& later : calls[c]) {
        again = again || (later.report_id().sender() == r.report_id().sender() &&
                          later.report_id().sequence() == r.report_id().sequence());
      }
    }
    EXPECT_TRUE(again) << "not sent again: " << r.ShortDebugString();
  }
  EXPECT_EQ(ids.size(), 3u) << "three failures, three ids";
  EXPECT_EQ(fake.streamed(), batches ? 0 : static_cast<int>(calls.size()));
  // An older leader is asked for ReportOutcomes once, not before every batch.
  EXPECT_EQ(fake.refused(), batches ? 0 : 1);
  server->Shutdown();
}

// Failures that trip nothing, reported at different replicas: once the
// cluster has settled every replica shows the same last error (the leader's,
// saved with its next tick), not each its own callers' last one.
TEST_F(ClusterTest, EveryReplicaShowsTheSameLastError) {
  ASSERT_NO_FATAL_FAILURE(ApplyAtLeader(Config(1000)));
  const int f1 = Follower();
  const int f2 = Follower(f1);
  auto fail = [&](int i, const std::string& message) {
    v1::ReportOutcomeRequest req;
    req.set_decision_id(Pick(i).decision_id());
    req.set_target("a");
    req.mutable_failure()->set_http_status(503);
    req.mutable_failure()->set_message(message);
    v1::ReportOutcomeResponse resp;
    EXPECT_TRUE(Decide(i)->ReportOutcome(Ctx().get(), req, &resp).ok());
  };
  fail(f1, "from the first follower");
  fail(f2, "from the second follower");
  fail(leader_, "from the leader");
  fail(f1, "last, from the first follower");
  auto last_error = [&](int i) {
    v1::GetTargetRequest req;
    req.set_name("a");
    v1::TargetView view;
    if (!Admin(i)->GetTarget(Ctx(2).get(), req, &view).ok()) return std::string("(no answer)");
    return view.status().last_error();
  };
  EXPECT_TRUE(Within(10, [&] {
    const std::string leader = last_error(leader_);
    return leader.find("last, from the first follower") != std::string::npos && last_error(f1) == leader &&
           last_error(f2) == leader;
  })) << "leader: " << last_error(leader_) << "; followers: " << last_error(f1) << " / " << last_error(f2);
}

// A rate-limit hold is cluster state (DESIGN 3.12): a 429 met through one
// follower puts the target last in the plans every replica makes, and every
// replica shows the same hold (each used to hold only after its own callers met it).
TEST_F(ClusterTest, ARateLimitMetThroughOneReplicaHoldsTheTargetOnEvery) {
  ASSERT_NO_FATAL_FAILURE(ApplyAtLeader(Config(1000)));
  const int f1 = Follower();
  const int f2 = Follower(f1);
  auto first = [&](int i) {
    const v1::PickTargetResponse plan = Pick(i);
    return plan.attempts_size() > 0 ? plan.attempts(0).target() : std::string("(empty plan)");
  };
  auto held_until = [&](int i) {
    v1::GetTargetRequest req;
    req.set_name("a");
    v1::TargetView view;
    if (!Admin(i)->GetTarget(Ctx(2).get(), req, &view).ok()) return int64_t{-1};
    return int64_t{view.status().held_until().seconds()};
  };
  for (int i = 0; i < kReplicas; ++i) ASSERT_TRUE(Within(5, [&] { return first(i) == "a"; })) << "replica " << i;

  v1::ReportOutcomeRequest req;
  req.set_decision_id(Pick(f1).decision_id());
  req.set_target("a");
  req.mutable_failure()->set_http_status(429);
  *req.mutable_failure()->mutable_retry_after() = Millis(40000);
  v1::ReportOutcomeResponse resp;
  ASSERT_TRUE(Decide(f1)->ReportOutcome(Ctx().get(), req, &resp).ok());

  for (int i = 0; i < kReplicas; ++i) {
    EXPECT_TRUE(Within(5, [&] { return first(i) == "b" && held_until(i) > 0; }))
        << "replica " << i << " (" << (i == leader_ ? "leader" : i == f1 ? "reported here" : "follower")
        << ") plans " << first(i) << " first, holds a until " << held_until(i);
  }
  // The same hold everywhere: the one the leader decided replaces the one the
  // follower took at once for its own caller.
  EXPECT_TRUE(Within(5, [&] {
    const int64_t leader = held_until(leader_);
    return held_until(f1) == leader && held_until(f2) == leader;
  })) << "leader " << held_until(leader_) << ", followers " << held_until(f1) << " / " << held_until(f2);
}

TEST_F(ClusterTest, AnRpmCapIsLeasedToTheReplicasWhoseCallersUseItAndNeverPlannedTwice) {
  constexpr uint32_t kCap = 12;
  // Each replica sizes what it asks for by how many share the cap: the cap
  // comes once they all know of each other.
  for (int i = 0; i < kReplicas; ++i) {
    ASSERT_TRUE(Within(10, [&] { return Status(i).replicas_size() == kReplicas; })) << "replica " << i;
  }
  v1::ApplyRequest config = Config(1000);
  config.mutable_targets(0)->mutable_limits()->set_rpm(kCap);
  ASSERT_NO_FATAL_FAILURE(ApplyAtLeader(config));
  // Every caller goes through one follower (a balancer that spreads them
  // unevenly). Its share follows them: it plans "a" first for all of the cap
  // but the small part each idle replica holds (a quarter of its even part,
  // at least one), where an even split would have stopped it at 4. Caps count
  // per wall-clock minute, so a round starts early in a minute no round has
  // used; one that runs into the next minute is taken again.
  const int busy = Follower();
  constexpr int kIdleHold = 1;
  constexpr int kBusyPlans = kCap - (kReplicas - 1) * kIdleHold;
  auto minute_now = [] { return absl::ToUnixSeconds(absl::Now()) / 60; };
  auto plans_a = [&](int i) {
    const v1::PickTargetResponse plan = Pick(i);
    return plan.attempts_size() > 0 && plan.attempts(0).target() == "a";
  };
  std::vector<int> planned;
  int64_t used = -1;
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(Within(70, [&] { return minute_now() > used && absl::ToUnixSeconds(absl::Now()) % 60 < 40; }));
    const int64_t minute = minute_now();
    planned.assign(kReplicas, 0);
    // Until the busy replica's grants add up to its part (each refill within
    // a tenth of a second of its grant running low), then 200 picks more:
    // the leader has no more to grant.
    const absl::Time deadline = absl::Now() + absl::Seconds(15);
    while (planned[static_cast<size_t>(busy)] < kBusyPlans && absl::Now() < deadline) {
      planned[static_cast<size_t>(busy)] += plans_a(busy);
    }
    for (int k = 0; k < 200; ++k) planned[static_cast<size_t>(busy)] += plans_a(busy);
    // The idle replicas still plan what they hold, and no more.
    for (int i = 0; i < kReplicas; ++i) {
      if (i == busy) continue;
      for (int k = 0; k < 5; ++k) planned[static_cast<size_t>(i)] += plans_a(i);
    }
    used = minute_now();
    if (used == minute) break;
  }
  // (An idle replica that asked only after the busy one took the cap's rest
  // holds nothing: the busy one then planned its part too.)
  EXPECT_GE(planned[static_cast<size_t>(busy)], kBusyPlans) << "the busy replica's share did not follow its callers";
  for (int i = 0; i < kReplicas; ++i) {
    if (i == busy) continue;
    EXPECT_LE(planned[static_cast<size_t>(i)], kIdleHold) << "idle replica " << i;
  }
  EXPECT_EQ(planned[0] + planned[1] + planned[2], static_cast<int>(kCap))
      << "replicas planned a first " << planned[0] << ", " << planned[1] << " and " << planned[2] << " times";
  for (int i = 0; i < kReplicas; ++i) EXPECT_EQ(Status(i).rpm_replicas(), static_cast<uint32_t>(kReplicas));
}

TEST_F(ClusterTest, AnRpmCapOutlivesItsLeaderSharesHeldArePlannedAndTheNewBooksKeepTheCap) {
  constexpr int kCap = 12;
  for (int i = 0; i < kReplicas; ++i) {
    ASSERT_TRUE(Within(10, [&] { return Status(i).replicas_size() == kReplicas; })) << "replica " << i;
  }
  v1::ApplyRequest config = Config(1000);
  config.mutable_targets(0)->mutable_limits()->set_rpm(kCap);
  ASSERT_NO_FATAL_FAILURE(ApplyAtLeader(config));
  auto plans_a = [&](int i) {
    const v1::PickTargetResponse plan = Pick(i);
    return plan.attempts_size() > 0 && plan.attempts(0).target() == "a";
  };
  // Early in a minute: the kill and the election fit in it.
  ASSERT_TRUE(Within(70, [&] { return absl::ToUnixSeconds(absl::Now()) % 60 < 30; }));
  const int64_t minute = absl::ToUnixSeconds(absl::Now()) / 60;
  const int busy = Follower();
  const int idle = Follower(busy);
  int busy_planned = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (busy_planned < kCap - 2 && absl::Now() < deadline) busy_planned += plans_a(busy);
  ASSERT_GE(busy_planned, kCap - 2);

  const int old_leader = leader_;
  proc(old_leader).Stop(SIGKILL);
  // No leader: the busy replica plans what it holds (decisions go on).
  for (int k = 0; k < 50; ++k) busy_planned += plans_a(busy);
  leader_ = AwaitLeader(10, {old_leader});
  ASSERT_GE(leader_, 0);
  // The new leader's books start from what the busy replica says it holds and
  // planned: it may grant what is left of the cap, and at most the idle
  // replica's small part again (until that one asks), never a fresh cap.
  const absl::Time settle = absl::Now() + absl::Seconds(2);
  while (absl::Now() < settle) busy_planned += plans_a(busy);
  int idle_planned = 0;
  for (int k = 0; k < 5; ++k) idle_planned += plans_a(idle);
  if (absl::ToUnixSeconds(absl::Now()) / 60 != minute) GTEST_SKIP() << "the minute turned under the test";
  EXPECT_LE(idle_planned, 1);
  EXPECT_LE(busy_planned + idle_planned, kCap + 1)
      << "busy replica " << busy_planned << ", idle replica " << idle_planned << ": the new leader granted the cap again";
}

TEST_F(ClusterTest, LeaseRpmIsTheLeadersAndChecksItsFields) {
  v1::ApplyRequest config = Config(1000);
  config.mutable_targets(0)->mutable_limits()->set_rpm(10);
  ASSERT_NO_FATAL_FAILURE(ApplyAtLeader(config));
  const int64_t minute = absl::ToUnixSeconds(absl::Now()) / 60;
  auto lease = [&](int replica, const v1::LeaseRpmRequest& req, v1::LeaseRpmResponse* resp) {
    return Decide(replica)->LeaseRpm(Ctx().get(), req, resp);
  };
  v1::LeaseRpmRequest req;
  req.set_requester("a-caller");
  v1::RpmAsk* ask = req.add_asks();
  ask->set_target("a");
  ask->set_minute(minute + 1);  // the next minute: no replica's books hold any of it before 45 s
  ask->set_want(3);
  req.add_asks()->set_target("no-such-target");
  req.mutable_asks(1)->set_minute(minute);
  // Asked at a follower, answered by the leader's books: the same share again.
  for (int replica : {Follower(), leader_}) {
    v1::LeaseRpmResponse resp;
    const grpc::Status ok = lease(replica, req, &resp);
    ASSERT_TRUE(ok.ok()) << ok.error_message();
    ASSERT_EQ(resp.grants_size(), 1) << resp.DebugString();  // the unknown target gets none
    EXPECT_EQ(resp.grants(0).target(), "a");
    EXPECT_EQ(resp.grants(0).minute(), minute + 1);
    EXPECT_GE(resp.grants(0).requests(), 1u);
    EXPECT_LE(resp.grants(0).requests(), 3u);
  }
  v1::LeaseRpmRequest bad = req;
  bad.mutable_asks(0)->set_minute(minute + 5);
  v1::LeaseRpmResponse resp;
  grpc::Status refused = lease(Follower(), bad, &resp);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find("asks[0].minute"), std::string::npos) << refused.error_message();
  bad = req;
  bad.clear_requester();
  refused = lease(leader_, bad, &resp);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find("requester"), std::string::npos) << refused.error_message();
}

TEST_F(ClusterTest, AChangeEtcdRefusesIsMadeNowhere) {
  ASSERT_NO_FATAL_FAILURE(ApplyAtLeader(Config(1)));
  for (int i = 0; i < kReplicas; ++i) ASSERT_TRUE(Within(5, [&] { return Active(i) == "a"; }));
  // One apply larger than etcd takes in a request (the suite's etcd: 512 KiB).
  v1::ApplyRequest huge = Config(1);
  for (int t = 0; huge.ByteSizeLong() < EtcdCluster::kMaxRequestBytes + (64 << 10); ++t) {
    huge.add_targets()->set_name("big-" + std::to_string(t) + "-" + std::string(100, 'x'));
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1::ApplyResponse resp;
  const grpc::Status refused = Admin(Follower())->Apply(&ctx, huge, &resp);
  // etcd's refusal, with its reason ("request is too large", or gRPC's "larger than max").
  EXPECT_TRUE(refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED ||
              refused.error_code() == grpc::StatusCode::INVALID_ARGUMENT)
      << refused.error_code() << " " << refused.error_message();
  EXPECT_NE(refused.error_message().find("etcd"), std::string::npos) << refused.error_message();
  EXPECT_NE(refused.error_message().find("large"), std::string::npos) << refused.error_message();
  // Made nowhere: no replica lists the new targets.
  for (int i = 0; i < kReplicas; ++i) {
    EXPECT_TRUE(Within(5, [&] {
      v1::ListTargetsRequest req;
      v1::ListTargetsResponse list;
      return Admin(i)->ListTargets(Ctx().get(), req, &list).ok() && list.targets_size() == 2;
    })) << "replica " << i;
  }
  // The cluster goes on: a leader, and ordinary changes.
  leader_ = AwaitLeader();
  ASSERT_GE(leader_, 0);
  EXPECT_TRUE(Within(5, [&] { return Pin(Follower(), "b").ok(); }));
  for (int i = 0; i < kReplicas; ++i) EXPECT_TRUE(Within(5, [&] { return Pinned(i) == "b"; })) << "replica " << i;
}

TEST_F(ClusterTest, LosingAnEtcdMemberChangesNothing) {
  ASSERT_NO_FATAL_FAILURE(ApplyAtLeader(Config(1)));
  for (int i = 0; i < kReplicas; ++i) ASSERT_TRUE(Within(5, [&] { return Active(i) == "a"; }));
  etcd_->Kill(0);
  for (int i = 0; i < kReplicas; ++i) EXPECT_EQ(Active(i), "a");
  ASSERT_TRUE(Pin(Follower(), "b").ok());
  for (int i = 0; i < kReplicas; ++i) EXPECT_TRUE(Within(5, [&] { return Pinned(i) == "b"; })) << "replica " << i;
  std::string error;
  ASSERT_TRUE(etcd_->Restart(0, &error)) << error;
  ASSERT_TRUE(etcd_->WaitHealthy(20));
}

TEST_F(ClusterTest, WithoutEtcdDecisionsGoOnAndAdminIsRefusedUntilItReturns) {
  ASSERT_NO_FATAL_FAILURE(ApplyAtLeader(Config(1)));
  for (int i = 0; i < kReplicas; ++i) ASSERT_TRUE(Within(5, [&] { return Active(i) == "a"; }));
  for (int m = 0; m < etcd_->size(); ++m) etcd_->Kill(m);
  // Decisions: from each replica's last state.
  for (int i = 0; i < kReplicas; ++i) EXPECT_EQ(Active(i), "a") << "replica " << i;
  // Admin writes: UNAVAILABLE, naming etcd (once the leader's lease is gone, naming that there is none).
  const int follower = Follower();
  grpc::Status refused;
  EXPECT_TRUE(Within(10, [&] {
    refused = Pin(follower, "b");
    return refused.error_code() == grpc::StatusCode::UNAVAILABLE;
  })) << refused.error_message();
  EXPECT_NE(refused.error_message().find("etcd"), std::string::npos) << refused.error_message();
  // A refused change is made nowhere (the leader drops what it could not write).
  for (int i = 0; i < kReplicas; ++i) EXPECT_TRUE(Within(5, [&] { return Pinned(i).empty(); })) << "replica " << i;
  EXPECT_FALSE(Status(follower).etcd_error().empty());
  // etcd returns: a leader again, admin works, everything converges.
  for (int m = 0; m < etcd_->size(); ++m) {
    std::string error;
    ASSERT_TRUE(etcd_->Restart(m, &error)) << error;
  }
  ASSERT_TRUE(etcd_->WaitHealthy(20));
  leader_ = AwaitLeader(15);
  ASSERT_GE(leader_, 0);
  ASSERT_TRUE(Within(10, [&] { return Pin(Follower(), "b").ok(); }));
  for (int i = 0; i < kReplicas; ++i) EXPECT_TRUE(Within(5, [&] { return Pinned(i) == "b"; })) << "replica " << i;
  EXPECT_TRUE(Within(5, [&] { return Status(follower).etcd_error().empty(); })) << Status(follower).etcd_error();
}

TEST_F(ClusterTest, ARestartedReplicaCatchesUp) {
  ASSERT_NO_FATAL_FAILURE(ApplyAtLeader(Config(1)));
  const int away = Follower();
  ASSERT_TRUE(Within(5, [&] { return Active(away) == "a"; }));
  proc(away).Stop(SIGKILL);
  ASSERT_TRUE(Pin(leader_, "b").ok());
  Fail(leader_, "a");
  StartReplica(away);
  EXPECT_EQ(Pinned(away), "b");  // caught up before it served
  EXPECT_EQ(Status(away).applied_index(), Status(leader_).applied_index());
  v1::GetTargetRequest req;
  req.set_name("a");
  v1::TargetView view;
  ASSERT_TRUE(Admin(away)->GetTarget(Ctx().get(), req, &view).ok());
  EXPECT_EQ(view.status().health(), v1::HEALTH_STATE_DOWN);
}

// A leader whose own disk refuses writes would refuse every change in the
// cluster while it held on: it hands leadership on, and another replica
// takes the changes.
TEST_F(ClusterTest, ALeaderWhoseDiskRefusesWritesStepsDown) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  SmallDisk disk(32);
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here";
  ASSERT_NO_FATAL_FAILURE(ApplyAtLeader(Config(1)));
  // A follower moves onto the small disk and is made the leader: the other
  // follower is paused while the leader dies.
  const int small = Follower();
  const int other = Follower(small);
  proc(small).Stop(SIGKILL);
  StartReplica(small, {"--min-free-mb", "1"}, disk.path() + "/data");
  ASSERT_TRUE(Within(10, [&] { return Status(small).applied_index() == Status(leader_).applied_index(); }));
  ASSERT_EQ(kill(proc(other).pid(), SIGSTOP), 0);
  const int dead = leader_;
  proc(dead).Stop(SIGKILL);
  leader_ = AwaitLeader(15, {dead, other});
  ASSERT_EQ(kill(proc(other).pid(), SIGCONT), 0);
  ASSERT_EQ(leader_, small);
  ASSERT_TRUE(Within(10, [&] { return Status(other).leader() == Address(small); }));

  disk.FillLeaving(0);
  const grpc::Status refused = Pin(small, "b");  // in etcd, but not on its own disk
  EXPECT_FALSE(refused.ok());
  leader_ = AwaitLeader(15, {dead, small});  // (small may not follow while its disk is full)
  EXPECT_EQ(leader_, other) << "the leader with a full disk kept the leadership";
  EXPECT_TRUE(Within(10, [&] { return Pin(other, "a").ok(); })) << "changes are refused cluster-wide";
  EXPECT_EQ(Pinned(other), "a");
}

TEST_F(ClusterTest, TheLogStaysShortAndAReplicaFarBehindStartsFromTheSnapshot) {
  // Keep 4 entries: a snapshot every 4, the older entries deleted.
  for (int i = 0; i < kReplicas; ++i) {
    proc(i).Stop(SIGTERM);
    StartReplica(i, {"--etcd-log-keep", "4"});
  }
  leader_ = AwaitLeader();
  ASSERT_GE(leader_, 0);
  ASSERT_NO_FATAL_FAILURE(ApplyAtLeader(Config(1)));
  const int away = Follower();
  // The newest event the away replica has, where a watcher of it would resume.
  ASSERT_TRUE(Within(5, [&] { return Pinned(away).empty() && Active(away) == "a"; }));
  v1::ListEventsRequest newest;
  newest.set_limit(1);
  v1::ListEventsResponse listed;
  ASSERT_TRUE(Admin(away)->ListEvents(Ctx().get(), newest, &listed).ok());
  ASSERT_EQ(listed.events_size(), 1);
  const uint64_t seen_before = listed.events(0).sequence();
  const uint64_t away_applied = Status(away).applied_index();
  proc(away).Stop(SIGKILL);
  // Pins, in pairs ending on "a", until the log is trimmed behind a snapshot
  // (it holds at most twice the kept entries) past the entry the away replica
  // would apply next: it cannot catch up from the log. How many that takes
  // depends on where the leader's session thread happens to trim (a first trim
  // at entry 5 keeps entry 2, and the next comes at entry 9), so the test
  // writes more while there is room rather than a fixed number.
  int pins = 0;
  EXPECT_TRUE(Within(20, [&] {
    const std::map<uint64_t, int64_t> terms = LogTerms();
    const bool trimmed = terms.size() <= 8 && (terms.empty() || terms.begin()->first > away_applied + 1);
    if (pins >= 6 && trimmed) return true;
    if (terms.size() < 8) {
      EXPECT_TRUE(Pin(leader_, "b").ok());
      EXPECT_TRUE(Pin(leader_, "a").ok());
      pins += 2;
    }
    return false;
  })) << LogTerms().size() << " entries from " << (LogTerms().empty() ? 0 : LogTerms().begin()->first)
      << ", the away replica applied " << away_applied << ", after " << pins << " pins";
  Fail(leader_, "a");
  // The replica that was away is behind the trimmed log: it starts from the
  // snapshot and then follows the log.
  StartReplica(away, {"--etcd-log-keep", "4"});
  EXPECT_EQ(Pinned(away), "a");
  v1::GetTargetRequest req;
  req.set_name("a");
  v1::TargetView view;
  ASSERT_TRUE(Admin(away)->GetTarget(Ctx().get(), req, &view).ok());
  EXPECT_EQ(view.status().health(), v1::HEALTH_STATE_DOWN);
  ASSERT_TRUE(Pin(leader_, "b").ok());
  EXPECT_TRUE(Within(5, [&] { return Pinned(away) == "b"; }));
  EXPECT_EQ(Status(away).applied_index(), Status(leader_).applied_index());
  // The events between exist nowhere on it: a watcher resuming from before
  // them gets the whole state (marked resync), not the events after the gap.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::WatchEventsRequest resume;
  resume.set_after_sequence(seen_before);
  auto stream = Decide(away)->WatchEvents(&ctx, resume);
  v1::Event first;
  ASSERT_TRUE(stream->Read(&first));
  EXPECT_TRUE(first.has_snapshot() && first.snapshot().resync())
      << "resumed after " << seen_before << " and got: " << first.DebugString();
  ctx.TryCancel();
  // Listing the events after it says they are not here, not the events after the gap.
  v1::ListEventsRequest after;
  after.set_after_sequence(seen_before);
  const grpc::Status gap = Admin(away)->ListEvents(Ctx().get(), after, &listed);
  EXPECT_EQ(gap.error_code(), grpc::StatusCode::OUT_OF_RANGE) << listed.DebugString();
  EXPECT_THAT(gap.error_message(), HasSubstr("after_sequence: event"));
}

// A follower's etcd watch carries what it applies (the log, the leader key)
// and nothing else: a snapshot the leader writes (the whole state, in parts)
// and the replicas' cards are read when needed, not streamed to every replica.
TEST_F(ClusterTest, AFollowersWatchCarriesTheLogButNoSnapshot) {
  for (int i = 0; i < kReplicas; ++i) proc(i).Stop(SIGTERM);
  ASSERT_NO_FATAL_FAILURE(StartReplica(0, {"--etcd-log-keep", "4"}));
  ASSERT_TRUE(Within(10, [&] { return Status(0).role() == ClusterStatus::ROLE_LEADER; }));
  leader_ = 0;
  EtcdProxy proxy(FirstMember());
  ASSERT_TRUE(proxy.Start());
  ASSERT_NO_FATAL_FAILURE(StartReplica(1, {"--etcd-log-keep", "4"}, "", proxy.address()));
  ASSERT_TRUE(ApplyConfig(Admin(0).get(), Config(1)).ok());
  for (int round = 0; round < 10; ++round) ASSERT_TRUE(Pin(0, round % 2 == 0 ? "b" : "a").ok());
  etcdserverpb::RangeRequest pointer;
  pointer.set_key(prefix_ + "/snapshot");
  ASSERT_TRUE(Within(10, [&] {
    etcdserverpb::RangeResponse found;
    return Kv()->Range(Ctx().get(), pointer, &found).ok() && found.kvs_size() == 1;
  })) << "the leader wrote no snapshot";
  ASSERT_TRUE(Within(10, [&] { return Status(1).applied_index() == Status(0).applied_index(); }));
  EXPECT_EQ(Pinned(1), "a");
  int log_keys = 0;
  std::vector<std::string> others;
  for (const auto& [key, times] : proxy.WatchedKeys()) {
    if (absl::StartsWith(key, prefix_ + "/log/")) {
      ++log_keys;
    } else if (key != prefix_ + "/leader") {
      others.push_back(key);
    }
  }
  EXPECT_GT(log_keys, 0) << "the follower's watch went elsewhere";
  EXPECT_THAT(others, ::testing::IsEmpty());
}

// etcd with TLS (client certificates required) and users: failoverd reaches
// it with --etcd-ca/--etcd-cert/--etcd-key and --etcd-user/--etcd-password-file,
// and says why when it cannot.
class ClusterEtcdSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdCluster::Installed()) GTEST_SKIP() << "etcd is not installed";
    const std::string d = dir_.path();
    auto run = [](const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
      const CommandResult r = RunCommand(argv, env);
      EXPECT_EQ(r.exit_code, 0) << argv[0] << ": " << r.err;
      return r.exit_code == 0;
    };
    ASSERT_TRUE(run({"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", d + "/ca.key",
                     "-out", d + "/ca.crt", "-days", "1", "-subj", "/CN=failoverd-test-ca"}));
    for (const std::string& who : {std::string("server"), std::string("client")}) {
      ASSERT_TRUE(run({"/usr/bin/openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", d + "/" + who + ".key",
                       "-out", d + "/" + who + ".csr", "-subj", who == "server" ? "/CN=etcd" : "/CN=root"}));
      std::ofstream(d + "/" + who + ".ext") << (who == "server" ? "subjectAltName=IP:127.0.0.1\n"
                                                                  : "extendedKeyUsage=clientAuth\n");
      ASSERT_TRUE(run({"/usr/bin/openssl", "x509", "-req", "-in", d + "/" + who + ".csr", "-CA", d + "/ca.crt",
                       "-CAkey", d + "/ca.key", "-CAcreateserial", "-out", d + "/" + who + ".crt", "-days", "1",
                       "-extfile", d + "/" + who + ".ext"}));
    }
    client_port_ = FreePort();
    const int peer = FreePort();
    const std::string client = "https://127.0.0.1:" + std::to_string(client_port_);
    const std::string peer_url = "http://127.0.0.1:" + std::to_string(peer);
    etcd_pid_ = SpawnProcess({"/usr/bin/etcd", "--name", "secure", "--data-dir", d + "/etcd", "--listen-client-urls",
                              client, "--advertise-client-urls", client, "--listen-peer-urls", peer_url,
                              "--initial-advertise-peer-urls", peer_url, "--initial-cluster", "secure=" + peer_url,
                              "--cert-file", d + "/server.crt", "--key-file", d + "/server.key", "--trusted-ca-file",
                              d + "/ca.crt", "--client-cert-auth", "--logger", "zap", "--log-outputs",
                              d + "/etcd.log"},
                             "", "");
    ASSERT_GT(etcd_pid_, 0);
    const std::vector<std::string> ctl = {"/usr/bin/etcdctl", "--endpoints", client, "--cacert", d + "/ca.crt",
                                          "--cert", d + "/client.crt", "--key", d + "/client.key",
                                          "--command-timeout", "2s"};
    auto etcdctl = [&](std::vector<std::string> args) {
      std::vector<std::string> argv = ctl;
      argv.insert(argv.end(), args.begin(), args.end());
      return RunCommand(argv, {"ETCDCTL_API=3"});
    };
    ASSERT_TRUE(WaitUntil(20, [&] { return etcdctl({"endpoint", "health"}).exit_code == 0; }));
    for (const std::vector<std::string>& step : std::vector<std::vector<std::string>>{
             {"user", "add", "root:root-secret"},
             {"user", "add", "failoverd:fo-secret"},
             {"role", "add", "failoverd"},
             {"role", "grant-permission", "failoverd", "--prefix=true", "readwrite", "/secure/"},
             {"user", "grant-role", "failoverd", "failoverd"},
             {"auth", "enable"}}) {
      const CommandResult r = etcdctl(step);
      ASSERT_EQ(r.exit_code, 0) << step[0] << " " << step[1] << ": " << r.err;
    }
    std::ofstream(d + "/password") << "fo-secret\n";
    std::ofstream(d + "/wrong-password") << "guess\n";
  }
  void TearDown() override {
    if (etcd_pid_ > 0) {
      kill(etcd_pid_, SIGKILL);
      waitpid(etcd_pid_, nullptr, 0);
    }
  }

  std::unique_ptr<FailoverdProcess> Start(std::vector<std::string> args) {
    std::vector<std::string> all = {"--etcd-endpoints", "127.0.0.1:" + std::to_string(client_port_), "--etcd-prefix",
                                    "/secure/cluster", "--leader-lease", "2"};
    all.insert(all.end(), args.begin(), args.end());
    auto proc = std::make_unique<FailoverdProcess>(FailoverdProcess::Options{data_.path(), all});
    std::string error;
    EXPECT_TRUE(proc->Start(&error)) << error;
    return proc;
  }
  std::vector<std::string> Tls() const {
    const std::string d = dir_.path();
    return {"--etcd-ca", d + "/ca.crt", "--etcd-cert", d + "/client.crt", "--etcd-key", d + "/client.key"};
  }
  static v1::ClusterStatus StatusOf(FailoverdProcess& proc) {
    v1::StatusResponse resp;
    if (!v1::AdminService::NewStub(proc.Channel())->GetStatus(Ctx(2).get(), v1::GetStatusRequest(), &resp).ok()) {
      return v1::ClusterStatus();
    }
    return resp.cluster();
  }

  TempDir dir_;
  TempDir data_;
  int client_port_ = 0;
  pid_t etcd_pid_ = -1;
};

TEST_F(ClusterEtcdSecurityTest, TlsAndAUserFromAFileReachEtcdAndMistakesAreNamed) {
  std::vector<std::string> good = Tls();
  good.insert(good.end(), {"--etcd-user", "failoverd", "--etcd-password-file", dir_.path() + "/password"});
  {
    auto proc = Start(good);
    ASSERT_TRUE(Within(10, [&] { return StatusOf(*proc).role() == ClusterStatus::ROLE_LEADER; }))
        << proc->Stderr();
    EXPECT_TRUE(ApplyConfig(v1::AdminService::NewStub(proc->Channel()).get(), TwoTargetConfig()).ok());
    proc->Stop(SIGTERM);
  }
  // A wrong password: no leader, and the status says what etcd said.
  std::vector<std::string> wrong = Tls();
  wrong.insert(wrong.end(), {"--etcd-user", "failoverd", "--etcd-password-file", dir_.path() + "/wrong-password"});
  {
    auto proc = Start(wrong);
    ClusterStatus status;
    EXPECT_TRUE(Within(10, [&] {
      status = StatusOf(*proc);
      return status.etcd_error().find("authentication failed") != std::string::npos;
    })) << status.etcd_error();
    EXPECT_EQ(status.role(), ClusterStatus::ROLE_FOLLOWER);
    // It still serves what it had: the chain applied above.
    v1::PickTargetRequest pick;
    pick.set_chain("ch");
    v1::PickTargetResponse plan;
    EXPECT_TRUE(v1::DecisionService::NewStub(proc->Channel())->PickTarget(Ctx().get(), pick, &plan).ok());
    proc->Stop(SIGTERM);
  }
  // Flags that cannot work are refused at start, naming the flag.
  for (const std::vector<std::string>& bad : std::vector<std::vector<std::string>>{
           {"--etcd-user", "failoverd"},
           {"--etcd-user", "failoverd", "--etcd-password-file", dir_.path() + "/missing"},
           {"--etcd-ca", dir_.path() + "/missing.crt"},
           {"--etcd-cert", dir_.path() + "/client.crt"},
           {"--etcd-endpoints", "etcd.example"},
           {"--advertise-address", "replica-1"}}) {
    std::vector<std::string> argv = {FailoverdBinary(), "--data-dir", data_.path() + "/other", "--listen",
                                     "127.0.0.1:0", "--metrics-listen", ""};
    if (bad[0] != "--etcd-endpoints") {
      argv.insert(argv.end(), {"--etcd-endpoints", "127.0.0.1:" + std::to_string(client_port_)});
    }
    argv.insert(argv.end(), bad.begin(), bad.end());
    const CommandResult r = RunCommand(argv);
    EXPECT_EQ(r.exit_code, 1) << bad[0];
    EXPECT_NE(r.err.find(bad[0] == "--etcd-user" ? "--etcd-password-file" : bad[0]), std::string::npos) << r.err;
  }
}

// A change the engine makes just as this replica stops leading (its maker
// passed the accepting gate before the step-down) takes no place in the log:
// the follower's applied cursor is untouched, so it never skips the next real
// entry, and the change is dropped, not written anywhere.
TEST(ReplicaTest, AChangeMadeWhileNotTheLeaderTakesNoPlaceInTheLog) {
  cluster::EtcdOptions etcd;
  etcd.endpoints = {"127.0.0.1:1"};  // never called
  absl::StatusOr<std::unique_ptr<cluster::EtcdClient>> client = cluster::EtcdClient::Create(etcd);
  ASSERT_TRUE(client.ok()) << client.status();
  Engine engine;
  RealClock clock;
  cluster::Replica replica(cluster::ReplicaOptions(), std::move(client).value(), &engine, &clock);
  Change late;
  replica.Stamp(&late);
  EXPECT_EQ(replica.LogIndex(), 0u) << "the applied cursor moved";
  EXPECT_NE(late.log_index, 1u) << "it took the next real entry's place";
  bool stored = false;
  const absl::Status written = replica.Write({&late}, [&](const std::vector<const Change*>&) {
    stored = true;
    return absl::OkStatus();
  });
  EXPECT_FALSE(written.ok());
  EXPECT_FALSE(stored);
}

}  // namespace
}  // namespace failover::testing
