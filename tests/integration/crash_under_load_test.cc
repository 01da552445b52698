// SIGKILL in the middle of load (DESIGN 3.10, 3.11): clients pick and report
// (their failures trip targets and switch chains) while an admin client applies
// config, pins, unpins and fails targets over by hand, and a watcher records
// every event. failoverd is killed mid-flight and restarted on the same data
// dir. Everything acknowledged must be there; an operation that was in flight
// may have landed or not, but nothing else; and no event sequence is reused.
#include <signal.h>

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "gmock/gmock.h"
#include "tests/support/api_test.h"

namespace failover::testing {
namespace {

constexpr int kBaseChains = 6;
constexpr int kLoadThreads = 4;
constexpr int kAcknowledgedBeforeKill = 60;

// What the admin client was told succeeded, and the one operation it had in
// flight when the server died.
struct AdminLedger {
  std::mutex mu;
  std::set<std::string> created_chains;                   // acknowledged Apply
  std::map<std::string, std::string> pinned;              // chain -> target ("" = unpinned), last ack
  std::map<std::string, bool> manual;                     // target -> manual failover on, last ack
  std::optional<std::pair<std::string, std::string>> in_flight;  // (what, name) not acknowledged
  std::atomic<int> acknowledged{0};
};

class CrashUnderLoadTest : public ApiTest {
 protected:
  static std::string BaseChain(int i) { return "c" + std::to_string(i); }
  static std::string BaseTarget(int i) { return "t" + std::to_string(i); }

  void ApplyBaseConfig() {
    v1::ApplyRequest req;
    for (int i = 0; i < kBaseChains + 1; ++i) AddTarget(&req, BaseTarget(i));
    for (int i = 0; i < kBaseChains; ++i) {
      v1::Chain* chain = req.add_chains();
      chain->set_name(BaseChain(i));
      chain->add_targets(BaseTarget(i));
      chain->add_targets(BaseTarget(i + 1));
      chain->mutable_policy()->mutable_trip()->set_errors(2);
      *chain->mutable_policy()->mutable_recovery()->mutable_min_dwell() = Millis(50);
    }
    ASSERT_TRUE(Apply(req).ok());
  }

  // The caller's loop on every base chain: pick, then report; one target in
  // three fails with 503, so targets trip and chains switch all the time.
  void Load(int thread, std::atomic<bool>* stop, std::atomic<long>* loops) {
    auto stub = v1::DecisionService::NewStub(proc_->Channel());
    for (long i = thread; !stop->load(); i += kLoadThreads) {
      v1::PickTargetRequest pick;
      pick.set_chain(BaseChain(static_cast<int>(i % kBaseChains)));
      v1::PickTargetResponse plan;
      if (!stub->PickTarget(Ctx().get(), pick, &plan).ok() || plan.attempts_size() == 0) continue;
      v1::ReportOutcomeRequest report;
      report.set_decision_id(plan.decision_id());
      report.set_target(plan.attempts(0).target());
      report.set_attempt(1);
      if (i % 3 == 0) {
        report.mutable_failure()->set_http_status(503);
      } else {
        report.mutable_success();
      }
      v1::ReportOutcomeResponse verdict;
      if (stub->ReportOutcome(Ctx().get(), report, &verdict).ok()) loops->fetch_add(1);
    }
  }

  // Config changes, pins and manual failovers, one at a time, each recorded
  // only once acknowledged.
  void Administer(std::atomic<bool>* stop, AdminLedger* ledger) {
    auto stub = v1::AdminService::NewStub(proc_->Channel());
    for (int i = 0; !stop->load(); ++i) {
      const std::string chain = BaseChain(i % kBaseChains);
      std::pair<std::string, std::string> op;
      grpc::Status s;
      switch (i % 4) {
        case 0: {  // a new target and a chain over it
          const std::string name = "n" + std::to_string(i);
          op = {"chain", name};
          { std::lock_guard<std::mutex> lock(ledger->mu); ledger->in_flight = op; }
          v1::ApplyRequest req;
          AddTarget(&req, name + "-t");
          v1::Chain* c = req.add_chains();
          c->set_name(name);
          c->add_targets(name + "-t");
          c->add_targets(BaseTarget(0));
          v1::ApplyResponse resp;
          s = stub->Apply(Ctx().get(), req, &resp);
          break;
        }
        case 1: {  // pin to the chain's second target
          op = {"pin", chain};
          { std::lock_guard<std::mutex> lock(ledger->mu); ledger->in_flight = op; }
          v1::PinChainRequest req;
          req.set_chain(chain);
          req.set_target(BaseTarget(i % kBaseChains + 1));
          v1::ChainView view;
          s = stub->PinChain(Ctx().get(), req, &view);
          break;
        }
        case 2: {  // unpin every other time
          if (i % 8 != 2) continue;
          op = {"unpin", chain};
          { std::lock_guard<std::mutex> lock(ledger->mu); ledger->in_flight = op; }
          v1::UnpinChainRequest req;
          req.set_chain(chain);
          v1::ChainView view;
          s = stub->UnpinChain(Ctx().get(), req, &view);
          break;
        }
        case 3: {  // manual failover on, or off again
          const std::string target = BaseTarget(i % (kBaseChains + 1));
          bool on;
          {
            std::lock_guard<std::mutex> lock(ledger->mu);
            on = !ledger->manual[target];
            op = {on ? "trigger" : "cancel", target};
            ledger->in_flight = op;
          }
          v1::TargetView view;
          if (on) {
            v1::TriggerFailoverRequest req;
            req.set_target(target);
            req.set_reason("drill " + std::to_string(i));
            s = stub->TriggerFailover(Ctx().get(), req, &view);
          } else {
            v1::CancelFailoverRequest req;
            req.set_target(target);
            s = stub->CancelFailover(Ctx().get(), req, &view);
          }
          break;
        }
      }
      if (s.error_code() == grpc::StatusCode::UNAVAILABLE || s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
        return;  // the server is gone; `in_flight` stays as the one whose fate is unknown
      }
      std::lock_guard<std::mutex> lock(ledger->mu);
      if (!s.ok()) {  // refused on its merits (say, unpinning a chain that is not pinned): nothing changed
        ledger->in_flight.reset();
        continue;
      }
      const auto& [what, name] = op;
      if (what == "chain") ledger->created_chains.insert(name);
      if (what == "pin") ledger->pinned[name] = BaseTarget(i % kBaseChains + 1);
      if (what == "unpin") ledger->pinned[name] = "";
      if (what == "trigger") ledger->manual[name] = true;
      if (what == "cancel") ledger->manual[name] = false;
      ledger->in_flight.reset();
      ledger->acknowledged.fetch_add(1);
    }
  }
};

TEST_F(CrashUnderLoadTest, SigkillMidLoadKeepsEveryAcknowledgedChangeAndNeverReusesASequence) {
  StartServer();
  ApplyBaseConfig();

  // A watcher records every event it is sent before the crash.
  std::map<uint64_t, std::string> seen;  // sequence -> the event, serialized without its time
  std::mutex seen_mu;
  grpc::ClientContext watch_ctx;
  auto watch = decide_->WatchEvents(&watch_ctx, v1::WatchEventsRequest());
  std::thread watcher([&] {
    v1::Event e;
    while (watch->Read(&e)) {
      if (e.has_snapshot()) continue;
      e.clear_time();
      std::lock_guard<std::mutex> lock(seen_mu);
      seen[e.sequence()] = e.SerializeAsString();
    }
  });

  std::atomic<bool> stop{false};
  std::atomic<long> loops{0};
  AdminLedger ledger;
  std::vector<std::thread> threads;
  for (int t = 0; t < kLoadThreads; ++t) threads.emplace_back([&, t] { Load(t, &stop, &loops); });
  threads.emplace_back([&] { Administer(&stop, &ledger); });

  ASSERT_TRUE(Eventually([&] { return ledger.acknowledged.load() >= kAcknowledgedBeforeKill && loops.load() > 200; }));
  ASSERT_NE(proc_->Stop(SIGKILL), -1);
  stop = true;
  for (std::thread& t : threads) t.join();
  watcher.join();
  watch->Finish();
  ASSERT_FALSE(seen.empty());
  RecordProperty("events_seen", static_cast<int>(seen.size()));
  RecordProperty("admin_acknowledged", ledger.acknowledged.load());
  RecordProperty("caller_loops", static_cast<int>(loops.load()));

  StartServer();
  std::lock_guard<std::mutex> lock(ledger.mu);
  auto in_flight = [&](const std::string& what, const std::string& name) {
    return ledger.in_flight && ledger.in_flight->first == what && ledger.in_flight->second == name;
  };
  // Every acknowledged chain is there; an unacknowledged one only if it was the one in flight.
  std::set<std::string> chains;
  v1::ListChainsResponse listed;
  ASSERT_TRUE(admin_->ListChains(Ctx().get(), v1::ListChainsRequest(), &listed).ok());
  for (const auto& c : listed.chains()) chains.insert(c.config().name());
  for (const std::string& name : ledger.created_chains) EXPECT_TRUE(chains.count(name)) << name;
  for (const std::string& name : chains) {
    if (name[0] != 'n') continue;
    EXPECT_TRUE(ledger.created_chains.count(name) || in_flight("chain", name)) << name << " appeared from nowhere";
  }
  for (const auto& [chain, target] : ledger.pinned) {
    const std::string now = Chain(chain).status().pinned_target();
    if (in_flight("pin", chain) || in_flight("unpin", chain)) continue;
    EXPECT_EQ(now, target) << "pin of " << chain;
  }
  for (const auto& [target, on] : ledger.manual) {
    if (in_flight("trigger", target) || in_flight("cancel", target)) continue;
    EXPECT_EQ(Target(target).status().health() == v1::HEALTH_STATE_MANUAL, on) << "manual failover of " << target;
  }

  // Every event a watcher was sent is stored as it was sent, and what comes
  // next continues after the highest sequence ever handed out.
  // Read back from the stored log by resuming a watch just before the first
  // event seen.
  std::map<uint64_t, std::string> after;
  {
    auto ctx = Ctx();
    v1::WatchEventsRequest resume;
    resume.set_after_sequence(seen.begin()->first - 1);
    auto replay = decide_->WatchEvents(ctx.get(), resume);
    v1::Event e;
    while (replay->Read(&e)) {
      ASSERT_FALSE(e.has_snapshot()) << "the stored log no longer reaches back to " << seen.begin()->first;
      e.clear_time();
      after[e.sequence()] = e.SerializeAsString();
      if (e.sequence() >= seen.rbegin()->first) break;
    }
    ctx->TryCancel();
    replay->Finish();
  }
  for (const auto& [sequence, event] : seen) {
    auto stored = after.find(sequence);
    ASSERT_NE(stored, after.end()) << "event " << sequence << " was streamed but is not in the stored log";
    EXPECT_EQ(stored->second, event) << "event " << sequence << " is stored differently from how it was streamed";
  }
  const uint64_t highest = std::max(seen.rbegin()->first, after.rbegin()->first);
  v1::PinChainRequest pin;
  pin.set_chain(BaseChain(0));
  pin.set_target(BaseTarget(0));
  v1::ChainView view;
  ASSERT_TRUE(admin_->PinChain(Ctx().get(), pin, &view).ok());
  v1::UnpinChainRequest unpin;
  unpin.set_chain(BaseChain(0));
  ASSERT_TRUE(admin_->UnpinChain(Ctx().get(), unpin, &view).ok());
  const std::vector<v1::Event> newest = Events();
  ASSERT_FALSE(newest.empty());
  EXPECT_GT(newest.back().sequence(), highest);
}

}  // namespace
}  // namespace failover::testing
