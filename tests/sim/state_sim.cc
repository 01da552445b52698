// The state path searched from seeds (DESIGN 3.14). One process, one thread:
// the real engine, committer (caller-driven), event log and service handlers
// run on a simulated clock against a simulated disk that can refuse writes
// and, on a machine crash, lose what was not synced. Each seed draws a few
// thousand steps (picks and reports, resent reports, probe results, admin
// calls, ticks, config reloads, disk faults, process and machine crashes) and
// checks the invariants after every step:
//   1 no crash (and under ASan, no memory error);
//   2 acknowledged means durable: an admin call answered OK is on the synced
//     disk; with nothing left to write, the written state is the engine's;
//   3 one history: a watcher sees every sequence once, rising by one, never
//     one reused after a restart, and only events already on disk;
//   4 counted once: the engine fed resent reports (with their ids) holds the
//     same state as a reference engine fed each report once, and after a
//     restart a resend of a report whose change the disk kept counts nothing;
//   6 a report always gets its verdict and a pick its plan.
// Invariant 5 is what keeps 1 and 4: a pre-check that disagreed with its
// mutation crashed (a null events vector) or diverged from the reference.
//
//   state_sim --seed N [--steps K] [-v]   replays one seed
//   state_sim --seeds A-B [--steps K]     a range (CI runs a fixed one)
// A failure prints the one command that replays it.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "storage/state_mirror.h"
#include "server/api/admin_service.h"
#include "server/api/decision_service.h"
#include "server/api/event_log.h"
#include "server/api/report_ids.h"
#include "server/committer/committer.h"
#include "server/engine/engine.h"
#include "server/log/log.h"
#include "tests/sim/rng.h"

namespace failover::sim {
namespace {

namespace v1 = ::failover::v1;

// What the crash handler prints: set before each seed runs.
char g_replay[256] = "";

void OnFatalSignal(int sig) {
  const char prefix[] = "\nstate_sim: crashed; replay with: ";
  (void)!write(STDERR_FILENO, prefix, sizeof(prefix) - 1);
  (void)!write(STDERR_FILENO, g_replay, strlen(g_replay));
  (void)!write(STDERR_FILENO, "\n", 1);
  signal(sig, SIG_DFL);
  raise(sig);
}

// The data dir, by storage::Store's rules: admin changes (config, pins,
// manual failovers) are synced and so is a write that reserves the next block
// of event sequences; state changes only reach the WAL, which a process crash
// keeps and a machine crash may lose (everything after the last sync).
class SimDisk {
 public:
  static constexpr uint64_t kSequenceBlock = 4096;  // as storage/store.cc

  void set_refusing(bool refusing) { refusing_ = refusing; }
  bool refusing() const { return refusing_; }

  absl::Status Write(const std::vector<const Change*>& batch) {
    if (refusing_) return absl::UnavailableError("cannot write to the data dir: No space left on device");
    bool admin = false;
    uint64_t next = 0;
    for (const Change* c : batch) {
      admin = admin || c->config_generation != 0 || !c->pins.empty() || !c->manual.empty();
      next = std::max(next, c->next_sequence);
      log_.push_back(*c);
      written_.Apply(*c);
      for (const Event& e : c->events) highest_written_ = std::max(highest_written_, e.sequence);
    }
    const bool reserve = next > reserved_;
    if (reserve) reserved_ = next + kSequenceBlock;
    if (admin || reserve) Sync();
    return absl::OkStatus();
  }

  // A machine crash: the writes after the last sync are gone.
  void LoseUnsynced() {
    log_.resize(synced_);
    written_ = StateMirror();
    for (const Change& c : log_) written_.Apply(c);
    highest_written_ = 0;
    for (const Change& c : log_) {
      for (const Event& e : c.events) highest_written_ = std::max(highest_written_, e.sequence);
    }
  }

  // What a start reads back (Store::Load).
  RestoredState Restore() const {
    RestoredState state = written_.State();
    state.next_sequence = std::max(state.next_sequence, reserved_);
    return state;
  }
  // What a start reads back as counted (Store::CountedReports): the report
  // ids of the Changes kept that have events to store them with.
  std::vector<CountedReport> CountedReports() const {
    std::vector<CountedReport> out;
    for (const Change& c : log_) {
      if (!c.events.empty()) out.insert(out.end(), c.counted_reports.begin(), c.counted_reports.end());
    }
    return out;
  }
  bool HoldsEvent(uint64_t sequence) const {
    for (const Change& c : log_) {
      for (const Event& e : c.events) {
        if (e.sequence == sequence) return true;
      }
    }
    return false;
  }
  const StateMirror& written() const { return written_; }
  const StateMirror& synced() const { return synced_mirror_; }
  uint64_t highest_written() const { return highest_written_; }

 private:
  void Sync() {
    for (; synced_ < log_.size(); ++synced_) synced_mirror_.Apply(log_[synced_]);
  }

  bool refusing_ = false;
  std::vector<Change> log_;
  size_t synced_ = 0;
  StateMirror written_;        // everything in the WAL
  StateMirror synced_mirror_;  // what a machine crash keeps
  uint64_t reserved_ = 0;      // synced with the write that set it
  uint64_t highest_written_ = 0;
};

// A watcher of the event log: every sequence once, in order, only what is on
// disk, and after a restart nothing that was already handed out.
class SimWatcher final : public api::EventLog::Watcher {
 public:
  explicit SimWatcher(const SimDisk* disk) : disk_(disk) {}
  void Deliver(const Events& events, const std::vector<grpc::ByteBuffer>&) override {
    for (const Event& e : events) {
      if (last_ != 0 && e.sequence != last_ + 1 && error_.empty()) {
        error_ = absl::StrCat("watcher: sequence ", e.sequence, " after ", last_, " (a gap or a repeat)");
      }
      if (e.sequence <= highest_before_restart_ && error_.empty()) {
        error_ = absl::StrCat("watcher: sequence ", e.sequence, " was handed out before the restart (up to ",
                              highest_before_restart_, ")");
      }
      if (e.sequence > disk_->highest_written() && error_.empty()) {
        error_ = absl::StrCat("watcher: sequence ", e.sequence, " delivered before it was on disk");
      }
      last_ = e.sequence;
      highest_ = std::max(highest_, e.sequence);
    }
  }
  void Close() override {}
  // A new process: sequences start afresh after everything handed out.
  void Restarted() {
    highest_before_restart_ = highest_;
    last_ = 0;
  }
  const std::string& error() const { return error_; }

 private:
  const SimDisk* disk_;
  uint64_t last_ = 0;
  uint64_t highest_ = 0;
  uint64_t highest_before_restart_ = 0;
  std::string error_;
};

// One failoverd process, wired as server/daemon.cc wires it. Without a disk
// it is the reference: no committer, every change kept in memory.
class Node {
 public:
  Node(const RestoredState& state, SimulatedClock* clock, uint64_t random_seed, SimDisk* disk,
       SimWatcher* watcher)
      : random_(random_seed), engine_(Options()), events_(1000, state.next_sequence - 1), watcher_(watcher) {
    api::ServiceContext ctx;
    if (disk != nullptr) {  // as the daemon seeds its window before it serves
      report_ids_.Note(disk->CountedReports());
    }
    ctx.report_ids = &report_ids_;
    ctx.engine = &engine_;
    ctx.clock = clock;
    ctx.events = &events_;
    if (disk != nullptr) {
      committer_ = std::make_unique<Committer>(
          [disk](const std::vector<const Change*>& changes) { return disk->Write(changes); },
          [this](const Change& c) { events_.Publish(c.events); },
          [this](const absl::Status& s) { engine_.SetAcceptingChanges(s.ok(), std::string(s.message())); },
          absl::Seconds(1), Committer::Mode::kCallerDriven);
      engine_.SetChangeSink([this](Change&& c) {
        if (!c.events.empty()) last_event_made_ = c.events.back().sequence;
        committer_->Submit(std::move(c));
      });
      ctx.committer = committer_.get();
      if (watcher_ != nullptr) (void)events_.Subscribe(watcher_, 10);
    }
    decide_ = std::make_unique<api::DecisionService>(ctx, api::WatchOptions());
    admin_ = std::make_unique<api::AdminService>(ctx);
    Committer::Scope settled(committer_.get());
    restored_ = engine_.Restore(state, clock->Now()).status();
    if (restored_.ok()) restored_ = settled.Await();
  }
  ~Node() {
    if (committer_ != nullptr) committer_->Stop();
    if (watcher_ != nullptr && committer_ != nullptr) events_.Unsubscribe(watcher_);
  }

  EngineOptions Options() {
    EngineOptions o;
    o.random = [this] { return random_(); };
    return o;
  }
  Engine& engine() { return engine_; }
  api::DecisionService& decide() { return *decide_; }
  api::AdminService& admin() { return *admin_; }
  Committer* committer() { return committer_.get(); }
  const absl::Status& restored() const { return restored_; }
  // The sequence of the last event a Change made here carried (0: none yet).
  uint64_t last_event_made() const { return last_event_made_; }
  std::vector<v1::ProbeTask>& leases() { return leases_; }

 private:
  std::mt19937_64 random_;
  Engine engine_;
  api::EventLog events_;
  SimWatcher* watcher_;
  std::unique_ptr<Committer> committer_;
  api::ReportIdWindow report_ids_;
  std::unique_ptr<api::DecisionService> decide_;
  std::unique_ptr<api::AdminService> admin_;
  absl::Status restored_;
  uint64_t last_event_made_ = 0;
  std::vector<v1::ProbeTask> leases_;  // handed out by the last Probe call
};

const std::vector<std::string> kTargets = {"t0", "t1", "t2", "t3", "t4", "t5"};
const std::vector<std::string> kChains = {"counted", "rated"};

ConfigChange InitialConfig(Rng& rng) {
  ConfigChange c;
  for (const std::string& name : kTargets) {
    TargetConfig t;
    t.name = name;
    if (name == "t2") {  // a warm local backend: checked, NOT_LOADED is alive
      t.kind = TargetKind::kLocal;
      t.warm = true;
    }
    if (name == "t3") t.kind = TargetKind::kLocal;  // cold local: no health check, back after the dwell
    c.targets.push_back(t);
  }
  ChainConfig counted;
  counted.name = "counted";
  counted.targets = {"t0", "t1", "t3"};
  counted.policy.Mutable().trip_errors = 1 + static_cast<uint32_t>(rng.Below(3));
  counted.policy.Mutable().recovery_probes = 2;
  counted.policy.Mutable().recovery_min_dwell = absl::Seconds(20);
  counted.policy.Mutable().probe_interval = absl::Seconds(5);
  counted.policy.Mutable().backoff_factor = 2;
  counted.policy.Mutable().rate_limit_max_hold = absl::Seconds(30);
  ChainConfig rated;
  rated.name = "rated";
  rated.targets = {"t4", "t5", "t2"};
  rated.policy.Mutable().trip_errors = 0;  // rates only, as examples/config/traffic-policies.yaml
  rated.policy.Mutable().trip_failure_rate = 50;
  rated.policy.Mutable().trip_min_calls = 4;
  rated.policy.Mutable().trip_slow_call_duration = absl::Seconds(2);
  rated.policy.Mutable().trip_slow_call_rate = 50;
  rated.policy.Mutable().recovery_probes = 1 + static_cast<uint32_t>(rng.Below(2));
  rated.policy.Mutable().recovery_min_dwell = absl::Seconds(10);
  rated.policy.Mutable().probe_interval = absl::Seconds(5);
  c.chains = {counted, rated};
  return c;
}

// The outcome of one attempt, as a caller reports it.
void RandomOutcome(Rng& rng, v1::ReportOutcomeRequest* req) {
  const size_t kind = rng.Below(10);
  if (kind < 5) {
    req->mutable_success();
    const int64_t ms = rng.Chance(0.3) ? 2500 : 100;  // slow calls for the slow-call trip
    req->mutable_latency()->set_seconds(ms / 1000);
    req->mutable_latency()->set_nanos(static_cast<int32_t>(ms % 1000 * 1000000));
    return;
  }
  v1::Failure* f = req->mutable_failure();
  switch (kind) {
    case 5: f->set_http_status(503); break;
    case 6: f->set_transport_error(v1::TRANSPORT_ERROR_TIMEOUT); break;
    case 7: f->set_http_status(500); break;
    case 8:  // a rate limit: a short hold, or longer than max_hold (down until it resets)
      f->set_http_status(429);
      f->mutable_retry_after()->set_seconds(rng.Chance(0.5) ? 5 : 120);
      break;
    default: f->set_http_status(400); break;  // the caller's fault: not counted
  }
}

class Simulation {
 public:
  Simulation(uint64_t seed, int steps, bool verbose)
      : seed_(seed), steps_(steps), verbose_(verbose), rng_(seed), watcher_(&disk_) {}

  // Empty when every invariant held.
  std::string Run() {
    config_ = InitialConfig(rng_);
    StartNodes(RestoredState());
    if (!failure_.empty()) return failure_;
    {
      Committer::Scope scope(sut_->committer());
      const auto applied = sut_->engine().Apply(config_, ApplyOptions(), clock_.Now());
      if (!applied.ok()) return Fail(absl::StrCat("initial apply: ", applied.status().ToString()));
      (void)scope.Await();
      (void)ref_->engine().Apply(config_, ApplyOptions(), clock_.Now());
    }
    for (step_ = 0; step_ < steps_ && failure_.empty(); ++step_) {
      Step();
      if (failure_.empty()) Check();
    }
    return failure_;
  }

 private:
  std::string Fail(const std::string& what) {
    if (failure_.empty()) failure_ = absl::StrCat("step ", step_, " (", last_op_, "): ", what);
    return failure_;
  }
  void Log(const std::string& what) {
    last_op_ = what;
    if (verbose_) fprintf(stderr, "%5d %s\n", step_, what.c_str());
  }

  void StartNodes(const RestoredState& state) {
    const uint64_t random_seed = rng_.Next();
    ref_.reset();
    sut_.reset();
    watcher_.Restarted();
    sut_ = std::make_unique<Node>(state, &clock_, random_seed, &disk_, &watcher_);
    ref_ = std::make_unique<Node>(state, &clock_, random_seed, nullptr, nullptr);
    if (!sut_->restored().ok()) Fail(absl::StrCat("restart: ", sut_->restored().ToString()));

  }

  void Step() {
    const size_t r = rng_.Below(100);
    if (r < 50) return Report();
    if (r < 58) return Resend();
    if (r < 68) return Probe();
    if (r < 78) return Admin();
    if (r < 90) return Tick();
    if (r < 93) return Reload();
    if (r < 98) return DiskFault();
    return Crash();
  }

  void Report() {
    const std::string chain = rng_.Pick(kChains);
    v1::PickTargetRequest pick;
    pick.set_chain(chain);
    v1::PickTargetResponse plan, ref_plan;
    Mirror();
    const absl::Status ref_picked = ref_->decide().Pick(pick, &ref_plan);
    const absl::Status picked = sut_->decide().Pick(pick, &plan);
    // No plan only when an admin left nothing to try, as the reference says too.
    if (!picked.ok() && picked.code() == absl::StatusCode::kUnavailable && picked == ref_picked) {
      Log(absl::StrCat("pick ", chain, ": nothing to try"));
      return Tick();
    }
    if (!picked.ok() || plan.attempts_size() == 0) {
      Fail(absl::StrCat("pick ", chain, " gave no plan: ", picked.ToString(), "; the reference: ", ref_picked.ToString()));
      return;
    }
    v1::ReportOutcomeRequest req;
    req.set_decision_id(plan.decision_id());
    req.set_target(rng_.Chance(0.8) ? plan.attempts(0).target() : plan.attempts(rng_.Below(plan.attempts_size())).target());
    req.set_attempt(1);
    RandomOutcome(rng_, &req);
    Log(absl::StrCat("report ", chain, "/", req.target(), " ", req.has_success() ? "success" : "failure"));
    v1::ReportOutcomeResponse ref_answer;
    Mirror();
    (void)ref_->decide().Report(req, &ref_answer);
    req.mutable_report_id()->set_sender("sim-client");
    req.mutable_report_id()->set_sequence(++report_sequence_);
    const uint64_t events_before = sut_->last_event_made();
    SendToSut(req, /*resent=*/false);
    // Seen from outside: this report's call made a Change with events.
    if (sut_->last_event_made() != events_before) changed_by_[report_sequence_] = sut_->last_event_made();
    sent_.push_back(req);
    if (sent_.size() > 64) sent_.erase(sent_.begin());
  }

  // A report sent again with its id (a batch resent after its call failed).
  void Resend() {
    if (sent_.empty()) return Tick();
    const v1::ReportOutcomeRequest req = rng_.Pick(sent_);
    Log(absl::StrCat("resend report ", req.report_id().sequence()));
    SendToSut(req, /*resent=*/true);
  }

  void SendToSut(const v1::ReportOutcomeRequest& req, bool resent) {
    v1::ReportOutcomeResponse answer;
    const absl::Status status = sut_->decide().Report(req, &answer);
    if (!status.ok()) {
      Fail(absl::StrCat("a report got an error instead of its verdict: ", status.ToString()));
    } else if (answer.verdict() == v1::VERDICT_UNSPECIFIED) {
      Fail("a report got no verdict");
    } else if (resent && !answer.duplicate()) {
      Fail("a resent report was not recognised as counted before");
    }
  }

  void Probe() {
    v1::ProbeRequest req;
    req.set_prober_id("sim-prober");
    for (const v1::ProbeTask& task : sut_->leases()) {
      if (rng_.Chance(0.2)) continue;  // lost, or still running
      v1::ProbeResult* r = req.add_results();
      r->set_lease_id(task.lease_id());
      const size_t kind = rng_.Below(10);
      if (kind < 5) {
        r->set_outcome(v1::PROBE_OUTCOME_PASS);
      } else if (kind < 8) {
        r->set_outcome(v1::PROBE_OUTCOME_FAIL);
        r->mutable_failure()->set_http_status(503);
      } else if (kind < 9) {
        r->set_outcome(v1::PROBE_OUTCOME_THROTTLED);
      } else {
        r->set_outcome(v1::PROBE_OUTCOME_NOT_LOADED);
      }
    }
    Log(absl::StrCat("probe with ", req.results_size(), " results"));
    v1::ProbeResponse answer, ref_answer;
    Mirror();
    (void)ref_->decide().DoProbe(req, &ref_answer);
    const absl::Status status = sut_->decide().DoProbe(req, &answer);
    // Results are applied (in memory) even when their change is not saved;
    // the prober is told so by the error and its tasks are those of the reference.
    sut_->leases().assign(ref_answer.tasks().begin(), ref_answer.tasks().end());
    if (status.ok() && answer.tasks_size() != ref_answer.tasks_size()) {
      Fail(absl::StrCat("probe handed out ", answer.tasks_size(), " tasks, the reference ", ref_answer.tasks_size()));
    }
  }

  // The last admin call on each key (a pin's chain, a target's manual
  // failover or enabled flag) and whether it was acknowledged.
  struct Acknowledged {
    std::string value;
    bool ok = false;
  };

  void Admin() {
    const size_t kind = rng_.Below(6);
    absl::Status status;
    std::string key, value;
    if (kind < 2) {
      const std::string chain = rng_.Pick(kChains);
      const ChainConfig& c = ChainOf(chain);
      v1::ChainView view;
      if (kind == 0) {
        v1::PinChainRequest pin;
        pin.set_chain(chain);
        pin.set_target(rng_.Pick(c.targets));
        Log(absl::StrCat("pin ", chain, " ", pin.target()));
        Mirror();
        (void)ref_->admin().DoPinChain(pin, &view);
        status = sut_->admin().DoPinChain(pin, &view);
        value = pin.target();
      } else {
        v1::UnpinChainRequest unpin;
        unpin.set_chain(chain);
        Log(absl::StrCat("unpin ", chain));
        Mirror();
        (void)ref_->admin().DoUnpinChain(unpin, &view);
        status = sut_->admin().DoUnpinChain(unpin, &view);
      }
      key = "pin/" + chain;
    } else {
      const std::string target = rng_.Pick(kTargets);
      v1::TargetView view;
      absl::Status ref_status;
      if (kind == 2) {
        v1::TriggerFailoverRequest trigger;
        trigger.set_target(target);
        trigger.set_reason("sim");
        Log(absl::StrCat("trigger ", target));
        Mirror();
        ref_status = ref_->admin().DoTriggerFailover(trigger, &view);
        status = sut_->admin().DoTriggerFailover(trigger, &view);
        key = "manual/" + target;
        value = "on";
      } else if (kind == 3) {
        v1::CancelFailoverRequest cancel;
        cancel.set_target(target);
        Log(absl::StrCat("cancel ", target));
        Mirror();
        ref_status = ref_->admin().DoCancelFailover(cancel, &view);
        status = sut_->admin().DoCancelFailover(cancel, &view);
        key = "manual/" + target;
      } else {
        v1::SetTargetEnabledRequest enable;
        enable.set_target(target);
        enable.set_enabled(kind == 4);
        Log(absl::StrCat(kind == 4 ? "enable " : "disable ", target));
        Mirror();
        ref_status = ref_->admin().DoSetTargetEnabled(enable, &view);
        status = sut_->admin().DoSetTargetEnabled(enable, &view);
        key = "enabled/" + target;
        value = kind == 4 ? "on" : "";
      }
      // Refused for what it asks (no chain to fail over to), not for the disk:
      // then nothing changed, and the key keeps its last acknowledged value.
      if (status.code() == absl::StatusCode::kFailedPrecondition) return;
    }
    acknowledged_[key] = Acknowledged{value, status.ok()};
  }

  void Tick() {
    const int64_t ms = rng_.Chance(0.7) ? static_cast<int64_t>(rng_.Below(3000)) : static_cast<int64_t>(rng_.Below(40000));
    clock_.Advance(absl::Milliseconds(ms));
    Log(absl::StrCat("tick +", ms, "ms"));
    // The committer's thread would retry a failed write about now.
    if (sut_->committer() != nullptr) sut_->committer()->Step();
    Events events;
    Mirror();
    ref_->engine().Tick(clock_.Now(), &events);
    Committer::Scope scope(sut_->committer());
    sut_->engine().Tick(clock_.Now(), &events);
    (void)scope.Await();
    // A tick that may write saves what outcomes changed without a Change.
    if (sut_->engine().accepting_changes() && !sut_->engine().AllRecordsSaved()) {
      Fail("a tick accepting changes left an error or a hold unsaved");
    }
  }

  // A config file changed: one chain's trip settings move.
  void Reload() {
    ChainConfig& c = config_.chains[rng_.Below(config_.chains.size())];
    if (c.name == "counted") {
      c.policy.Mutable().trip_errors = 1 + static_cast<uint32_t>(rng_.Below(3));
    } else {
      c.policy.Mutable().trip_failure_rate = rng_.Chance(0.5) ? 50 : 30;
    }
    Log(absl::StrCat("reload ", c.name));
    // The chains only: an API apply leaves targets it does not name alone.
    ConfigChange chains;
    chains.chains = config_.chains;
    Mirror();
    (void)ref_->engine().Apply(chains, ApplyOptions(), clock_.Now());
    Committer::Scope scope(sut_->committer());
    const auto applied = sut_->engine().Apply(chains, ApplyOptions(), clock_.Now());
    (void)scope.AwaitWithEarlier();
    if (!applied.ok() && applied.status().code() != absl::StatusCode::kUnavailable) {
      Fail(absl::StrCat("reload: ", applied.status().ToString()));
    }
  }

  void DiskFault() {
    disk_.set_refusing(!disk_.refusing());
    Log(disk_.refusing() ? "the disk refuses writes" : "the disk takes writes again");
    if (!disk_.refusing()) sut_->committer()->Step();
  }

  void Crash() {
    const bool machine = rng_.Chance(0.5);
    Log(machine ? "machine crash" : "process crash");
    // The process dies: what its committer had not written is gone with it
    // (no last try, as a clean stop would make).
    disk_.set_refusing(true);
    sut_.reset();
    ref_.reset();
    disk_.set_refusing(false);
    if (machine) disk_.LoseUnsynced();
    // The new process must know the reports whose change (and its events) the
    // disk kept; a report that changed nothing, or whose change was lost,
    // would count again, so it is not sent again. (Read before the restart:
    // its own changes may take the sequences of lost ones.)
    sent_.erase(std::remove_if(sent_.begin(), sent_.end(),
                               [&](const v1::ReportOutcomeRequest& r) {
                                 auto made = changed_by_.find(r.report_id().sequence());
                                 return made == changed_by_.end() || !disk_.HoldsEvent(made->second);
                               }),
                sent_.end());
    changed_by_.clear();  // the ones kept are known now: resent, they must be duplicates
    // Synced: acknowledged admin calls are there whatever crashed.
    CheckAcknowledged(disk_.Restore());
    if (!failure_.empty()) return;
    StartNodes(disk_.Restore());
  }

  // An acknowledged admin call whose key no later call touched is on the synced disk.
  void CheckAcknowledged(const RestoredState& state) {
    for (const auto& [key, ack] : acknowledged_) {
      if (!ack.ok) continue;
      const std::vector<std::string> parts = absl::StrSplit(key, '/');
      std::string stored;
      if (parts[0] == "pin") {
        auto it = state.pins.find(parts[1]);
        stored = it == state.pins.end() ? "" : it->second;
      } else if (parts[0] == "manual") {
        stored = state.manual.count(parts[1]) ? "on" : "";
      } else {
        for (const TargetConfig& t : state.targets) {
          if (t.name == parts[1]) stored = t.enabled ? "on" : "";
        }
      }
      if (stored != ack.value) {
        Fail(absl::StrCat(key, " was acknowledged as \"", ack.value, "\" but the disk holds \"", stored, "\""));
        return;
      }
    }
  }

  // The reference takes part in the disk's refusals as the real one does:
  // each call pair starts from the accepting state the real engine has then.
  void Mirror() {
    ref_->engine().SetAcceptingChanges(sut_->engine().accepting_changes(), "the disk refuses writes");
  }

  const ChainConfig& ChainOf(const std::string& name) const {
    for (const ChainConfig& c : config_.chains) {
      if (c.name == name) return c;
    }
    return config_.chains[0];
  }

  void Check() {
    if (!watcher_.error().empty()) Fail(watcher_.error());
    CheckAcknowledged(disk_.synced().State());
    // Counted once, decided alike: the same state as the reference.
    for (const std::string& name : kTargets) {
      const auto mine = sut_->engine().GetTargetStatus(name);
      const auto theirs = ref_->engine().GetTargetStatus(name);
      if (!mine.ok() || !theirs.ok()) continue;
      if (mine->health != theirs->health || mine->automatic != theirs->automatic || mine->trips != theirs->trips ||
          mine->recovery_passes != theirs->recovery_passes || mine->held_until != theirs->held_until) {
        Fail(absl::StrCat("target ", name, " is ", HealthStateName(mine->health), "/",
                          HealthStateName(mine->automatic), " trips ", mine->trips, " passes ",
                          mine->recovery_passes, "; the reference (each report once) has ",
                          HealthStateName(theirs->health), "/", HealthStateName(theirs->automatic), " trips ",
                          theirs->trips, " passes ", theirs->recovery_passes));
        return;
      }
    }
    for (const std::string& name : kChains) {
      const auto mine = sut_->engine().GetChainStatus(name);
      const auto theirs = ref_->engine().GetChainStatus(name);
      if (!mine.ok() || !theirs.ok()) continue;
      if (mine->state != theirs->state || mine->active_target != theirs->active_target) {
        Fail(absl::StrCat("chain ", name, " is ", ChainStateName(mine->state), " on ", mine->active_target,
                          "; the reference has ", ChainStateName(theirs->state), " on ", theirs->active_target));
        return;
      }
    }
    // With nothing left to write, the disk holds the engine's state.
    if (sut_->committer()->AwaitIdle(absl::ZeroDuration()) && sut_->engine().accepting_changes()) {
      const RestoredState written = disk_.written().State();
      // Holds moved while the disk refused writes wait for the next tick.
      const bool all_saved = sut_->engine().AllRecordsSaved();
      for (const TargetStateRecord& r : written.health) {
        const auto mine = sut_->engine().GetTargetStatus(r.name);
        if (mine.ok() && mine->automatic != r.automatic) {
          Fail(absl::StrCat("target ", r.name, " is ", HealthStateName(mine->automatic), " in memory but ",
                            HealthStateName(r.automatic), " on disk"));
          return;
        }
        if (mine.ok() && all_saved && mine->held_until != r.held_until) {
          Fail(absl::StrCat("target ", r.name, " is held until ", absl::FormatTime(mine->held_until),
                            " in memory but until ", absl::FormatTime(r.held_until), " on disk"));
          return;
        }
      }
      for (const ChainStateRecord& r : written.chain_states) {
        const auto mine = sut_->engine().GetChainStatus(r.name);
        if (mine.ok() && (mine->active_target != r.active || mine->state != r.state)) {
          Fail(absl::StrCat("chain ", r.name, " is on ", mine->active_target, " in memory but on ", r.active,
                            " on disk"));
          return;
        }
      }
    }
  }

  const uint64_t seed_;
  const int steps_;
  const bool verbose_;
  Rng rng_;
  SimulatedClock clock_;
  SimDisk disk_;
  SimWatcher watcher_;
  ConfigChange config_;
  std::unique_ptr<Node> sut_;  // the system under test
  std::unique_ptr<Node> ref_;  // the reference: each report once, no disk
  std::vector<v1::ReportOutcomeRequest> sent_;  // recent reports, to resend
  std::map<uint64_t, uint64_t> changed_by_;     // report sequence -> the last event its Change made
  uint64_t report_sequence_ = 0;
  std::map<std::string, Acknowledged> acknowledged_;
  int step_ = 0;
  std::string last_op_ = "start";
  std::string failure_;
};

int Main(int argc, char** argv) {
  uint64_t first = 1, last = 1;
  int steps = 2000;
  bool verbose = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const std::string value = i + 1 < argc ? argv[i + 1] : "";
    if (arg == "--seed" && absl::SimpleAtoi(value, &first)) {
      last = first;
      ++i;
    } else if (arg == "--seeds") {
      const std::vector<std::string> range = absl::StrSplit(value, '-');
      if (range.size() != 2 || !absl::SimpleAtoi(range[0], &first) || !absl::SimpleAtoi(range[1], &last) ||
          last < first) {
        fprintf(stderr, "--seeds: A-B with A <= B, got \"%s\"\n", value.c_str());
        return 2;
      }
      ++i;
    } else if (arg == "--steps" && absl::SimpleAtoi(value, &steps) && steps > 0) {
      ++i;
    } else if (arg == "-v") {
      verbose = true;
    } else {
      fprintf(stderr, "usage: %s [--seed N | --seeds A-B] [--steps K] [-v]\n", argv[0]);
      return 2;
    }
  }
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) signal(sig, OnFatalSignal);
  log::Configure(log::Level::kError, /*json=*/false);  // the events' lines would drown the findings
  int failed = 0;
  for (uint64_t seed = first; seed <= last; ++seed) {
    snprintf(g_replay, sizeof(g_replay), "%s --seed %llu --steps %d -v", argv[0],
             static_cast<unsigned long long>(seed), steps);
    const std::string failure = Simulation(seed, steps, verbose).Run();
    if (!failure.empty()) {
      ++failed;
      fprintf(stderr, "seed %llu: %s\n  replay: %s\n", static_cast<unsigned long long>(seed), failure.c_str(),
              g_replay);
    }
  }
  const uint64_t total = last - first + 1;
  printf("%llu passed, %d failed\n", static_cast<unsigned long long>(total - failed), failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace failover::sim

int main(int argc, char** argv) { return failover::sim::Main(argc, argv); }
