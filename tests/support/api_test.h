// A fixture for integration tests that talk to a real failoverd over gRPC:
// stubs for both services and small helpers for the common calls.
#pragma once

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "failover/v1/admin.grpc.pb.h"
#include "failover/v1/decision.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/support/failoverd_process.h"

namespace failover::testing {

namespace v1 = ::failover::v1;

inline google::protobuf::Duration Millis(int64_t ms) {
  google::protobuf::Duration d;
  d.set_seconds(ms / 1000);
  d.set_nanos(static_cast<int32_t>((ms % 1000) * 1'000'000));
  return d;
}

// Polls `check` until it holds or `timeout` (10 s) passes: tests wait on a
// condition with a deadline, never on a fixed sleep.
template <typename F>
bool Eventually(F check, std::chrono::seconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (check()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return check();
}

// Chain "ch" of targets "a" and "b", the config most client tests start from.
// limits.rpm counts per wall-clock minute: a test of a cap starts no later
// than `second` seconds into one, so the minute does not turn under it.
// Polls the clock (up to a minute); false if it never got there.
inline bool AwaitEarlyInAMinute(int second) {
  const absl::Time give_up = absl::Now() + absl::Seconds(61);
  while (absl::ToUnixSeconds(absl::Now()) % 60 > second) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return true;
}

inline v1::ApplyRequest TwoTargetConfig() {
  v1::ApplyRequest config;
  config.add_targets()->set_name("a");
  config.add_targets()->set_name("b");
  v1::Chain* chain = config.add_chains();
  chain->set_name("ch");
  chain->add_targets("a");
  chain->add_targets("b");
  return config;
}

inline grpc::Status ApplyConfig(v1::AdminService::StubInterface* admin, const v1::ApplyRequest& config) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ApplyResponse resp;
  return admin->Apply(&ctx, config, &resp);
}

class ApiTest : public ::testing::Test {
 protected:
  // Starts (or restarts) failoverd on this test's data dir.
  //
  // With FAILOVERD_TEST_ETCD set (etcd endpoints), the test runs against a
  // cluster follower instead (DESIGN 3.12): a leader replica with the same
  // flags is started first, under a prefix of this test's own, and the
  // stubs talk to a follower; restarts restart the follower.
  void StartServer(std::vector<std::string> extra_args = {}) {
    if (const char* etcd = std::getenv("FAILOVERD_TEST_ETCD"); etcd != nullptr && *etcd != '\0') {
      const std::string prefix =
          std::string("/semantics/") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
      extra_args.insert(extra_args.end(), {"--etcd-endpoints", etcd, "--etcd-prefix", prefix, "--leader-lease", "2"});
      if (!cluster_leader_) {
        cluster_leader_ = std::make_unique<FailoverdProcess>(
            FailoverdProcess::Options{cluster_leader_data_.path(), extra_args});
        std::string error;
        ASSERT_TRUE(cluster_leader_->Start(&error)) << error;
        auto admin = v1::AdminService::NewStub(cluster_leader_->Channel());
        ASSERT_TRUE(Eventually([&] {
          v1::StatusResponse status;
          return admin->GetStatus(Ctx().get(), v1::GetStatusRequest(), &status).ok() &&
                 status.cluster().role() == v1::ClusterStatus::ROLE_LEADER;
        })) << "the leader replica was not elected";
      }
    }
    proc_ = std::make_unique<FailoverdProcess>(FailoverdProcess::Options{data_.path(), std::move(extra_args)});
    std::string error;
    ASSERT_TRUE(proc_->Start(&error)) << error;
    auto channel = proc_->Channel();
    decide_ = v1::DecisionService::NewStub(channel);
    admin_ = v1::AdminService::NewStub(channel);
  }

  // A failed test shows the end of what failoverd wrote (a sanitizer's
  // finding, a refusal), which the test's own messages cannot.
  void TearDown() override {
    if (!HasFailure()) return;
    auto tail = [](const std::string& text) { return text.size() > 6000 ? text.substr(text.size() - 6000) : text; };
    if (proc_) std::cerr << "--- failoverd stderr (end) ---\n" << tail(proc_->Stderr()) << "\n";
    if (cluster_leader_) std::cerr << "--- leader replica stderr (end) ---\n" << tail(cluster_leader_->Stderr()) << "\n";
  }

  std::unique_ptr<grpc::ClientContext> Ctx() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return ctx;
  }

  grpc::Status Apply(const v1::ApplyRequest& req, v1::ApplyResponse* resp = nullptr) {
    v1::ApplyResponse ignored;
    return admin_->Apply(Ctx().get(), req, resp ? resp : &ignored);
  }

  static v1::Target* AddTarget(v1::ApplyRequest* req, const std::string& name,
                               v1::TargetKind kind = v1::TARGET_KIND_REMOTE) {
    v1::Target* t = req->add_targets();
    t->set_name(name);
    t->set_kind(kind);
    return t;
  }

  static v1::Chain* AddChain(v1::ApplyRequest* req, const std::string& name,
                             const std::vector<std::string>& targets) {
    v1::Chain* c = req->add_chains();
    c->set_name(name);
    for (const std::string& t : targets) c->add_targets(t);
    return c;
  }

  v1::TargetView Target(const std::string& name) {
    v1::GetTargetRequest req;
    req.set_name(name);
    v1::TargetView view;
    grpc::Status s = admin_->GetTarget(Ctx().get(), req, &view);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return view;
  }

  v1::PickTargetResponse Pick(const std::string& chain) {
    v1::PickTargetRequest req;
    req.set_chain(chain);
    v1::PickTargetResponse resp;
    grpc::Status s = decide_->PickTarget(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  v1::ReportOutcomeResponse Report(const std::string& decision, const std::string& target, uint32_t http_status,
                                   const std::string& message = "") {
    v1::ReportOutcomeRequest req;
    req.set_decision_id(decision);
    req.set_target(target);
    if (http_status == 0) {
      req.mutable_success();
    } else {
      req.mutable_failure()->set_http_status(http_status);
      req.mutable_failure()->set_message(message);
    }
    v1::ReportOutcomeResponse resp;
    grpc::Status s = decide_->ReportOutcome(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  std::vector<v1::Event> Events(const std::string& chain = "") {
    v1::ListEventsRequest req;
    req.set_limit(100);
    if (!chain.empty()) req.add_chains(chain);
    v1::ListEventsResponse resp;
    grpc::Status s = admin_->ListEvents(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return {resp.events().begin(), resp.events().end()};
  }

  std::vector<v1::ChainSwitched> Switches(const std::string& chain) {
    std::vector<v1::ChainSwitched> out;
    for (const auto& e : Events(chain)) {
      if (e.has_chain_switched()) out.push_back(e.chain_switched());
    }
    return out;
  }

  v1::ChainView Chain(const std::string& name) {
    v1::GetChainRequest req;
    req.set_name(name);
    v1::ChainView view;
    grpc::Status s = admin_->GetChain(Ctx().get(), req, &view);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return view;
  }


  pid_t proc_pid() const { return proc_->pid(); }

  TempDir data_;
  std::unique_ptr<FailoverdProcess> proc_;
  TempDir cluster_leader_data_;
  std::unique_ptr<FailoverdProcess> cluster_leader_;  // FAILOVERD_TEST_ETCD only
  std::unique_ptr<v1::DecisionService::Stub> decide_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
};

}  // namespace failover::testing
