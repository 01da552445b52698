#include "server/engine/replay.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/engine/classify.h"
#include "server/engine/engine.h"

namespace failover {
namespace {

// The engine as a replay drives it: a check answered whenever the trace has
// one, and nothing random, so a replay repeats exactly.
EngineOptions ReplayEngineOptions() {
  EngineOptions o;
  o.probe_jitter = 0;
  o.instance_epoch = 1;
  o.lease_grace = absl::InfiniteDuration();
  o.random = [n = uint64_t{0}]() mutable { return ++n; };
  return o;
}

ProbeOutcome CheckOutcome(TraceSource source) {
  switch (source) {
    case TraceSource::kProbeFail: return ProbeOutcome::kFail;
    case TraceSource::kProbeThrottled: return ProbeOutcome::kThrottled;
    case TraceSource::kProbeNotLoaded: return ProbeOutcome::kNotLoaded;
    default: return ProbeOutcome::kPass;
  }
}

bool InService(HealthState h) { return h == HealthState::kHealthy || h == HealthState::kUnknown; }

}  // namespace

class PolicyRun::Impl {
 public:
  explicit Impl(const ReplayInput& setup)
      : chain_(setup.chain.name),
        flap_window_(setup.flap_window),
        engine_(ReplayEngineOptions()),
        now_(setup.from),
        tick_(setup.from),
        state_since_(setup.from) {}

  absl::Status Start(const ReplayInput& setup) {
    ConfigChange config{setup.targets, {setup.chain}};
    for (TargetConfig& t : config.targets) t.managed_by.clear();
    config.chains[0].managed_by.clear();
    absl::StatusOr<ApplyResult> applied = engine_.Apply(config, ApplyOptions{}, setup.from);
    if (!applied.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("the policy cannot be replayed: ", applied.status().message()));
    }
    Take(applied->events);
    return absl::OkStatus();
  }

  void Feed(TraceEntry e) {
    e.at = std::max(e.at, now_);
    AdvanceTo(e.at);
    // Checks fall due, are handed out and are answered between ticks: a
    // prober asks often, so take what is due at every moment the trace has.
    Probe(ProbeRequest{}, e.at);
    NoteFailureRun(e);
    if (e.source == TraceSource::kOutcome) {
      Outcome(e);
    } else {
      Check(e);
    }
  }

  // The ticker's work (holds ending, dwells passing, checks falling due)
  // once a second, as failoverd does it, up to `now`.
  void AdvanceTo(absl::Time now) {
    for (; tick_ <= now; tick_ += absl::Seconds(1)) TickAt(tick_);
    now_ = std::max(now_, now);
  }

  ReplaySummary Finish(absl::Time to) {
    AdvanceTo(to);
    CloseChainState(to);
    return std::move(summary_);
  }

  Events TakeEvents() { return std::exchange(summary_.events, {}); }
  std::vector<ReplayTrip> TakeTrips() { return std::exchange(summary_.trips, {}); }
  const ReplaySummary& summary() const { return summary_; }

 private:
  void TickAt(absl::Time now) {
    Events events;
    engine_.Tick(now, &events);
    Take(events);
    Probe(ProbeRequest{}, now);
  }

  // Takes the checks that fell due (their leases never expire here: a
  // recorded result answers one whenever it comes).
  void Probe(ProbeRequest request, absl::Time now) {
    request.prober_id = "replay";
    request.max_tasks = 1000;
    ProbeResponse response;
    Events events;
    if (engine_.Probe(request, now, &response, &events).ok()) {
      for (const ProbeTask& task : response.tasks) leases_[task.target->config->name] = task.lease_id;
    }
    Take(events);
  }

  void Check(const TraceEntry& e) {
    auto lease = leases_.find(e.target);
    if (lease == leases_.end()) {
      ++summary_.checks_unused;
      return;
    }
    ProbeRequest request;
    ProbeResult& result = request.results.emplace_back();
    result.lease_id = std::move(lease->second);
    result.outcome = CheckOutcome(e.source);
    result.facts = e.facts;
    result.latency = e.latency;
    leases_.erase(lease);
    ++summary_.checks_used;
    Probe(std::move(request), e.at);
  }

  void Outcome(const TraceEntry& e) {
    // Every outcome followed a pick. A pick is also where a chain whose dwell
    // has passed moves back, so the replay picks too, and learns the target
    // this policy would have tried first.
    const std::string first = FirstAttempt(e.at);
    if (!e.facts.success && default_rules_.Classify(e.facts).counts && e.target == first) {
      summary_.requests_to_failing += e.count;
    }
    if (e.target != first) summary_.elsewhere += e.count;
    ReportRequest request;
    request.chain = chain_;
    request.target = e.target;
    request.facts = e.facts;
    request.latency = e.latency;
    for (uint32_t i = 0; i < e.count; ++i) {
      ReportResult result;
      Events events;
      if (!engine_.Report(request, e.at, &result, &events).ok()) return;  // a target no longer in the chain
      Take(events);
      ++summary_.outcomes;
    }
  }

  std::string FirstAttempt(absl::Time now) {
    PickRequest pick;
    pick.chain = chain_;
    Plan plan;
    Events events;
    if (!engine_.Pick(pick, now, &plan, &events).ok()) return "";
    Take(events);
    return plan.attempts.empty() ? "" : plan.attempts[0].target->config->name;
  }

  // Where each target's current run of failures began: the same for every
  // policy, so failures are those the default rules count against a target.
  void NoteFailureRun(const TraceEntry& e) {
    const bool failed = e.source == TraceSource::kOutcome
                            ? !e.facts.success && default_rules_.Classify(e.facts).counts
                            : e.source == TraceSource::kProbeFail;
    const bool succeeded = e.source == TraceSource::kOutcome ? e.facts.success : e.source == TraceSource::kProbePass;
    if (succeeded) failing_since_.erase(e.target);
    if (failed) failing_since_.emplace(e.target, e.at);
  }

  void Take(const Events& events) {
    for (const Event& e : events) {
      if (e.kind == EventKind::kTargetState) OnTargetState(e);
      if (e.kind == EventKind::kChainSwitched) OnSwitch(e);
      if (e.kind != EventKind::kConfigChanged) summary_.events.push_back(e);
    }
  }

  void OnTargetState(const Event& e) {
    if (InService(e.from_health) && e.to_health == HealthState::kDown) {
      auto start = failing_since_.find(e.target);
      const absl::Duration detection = start == failing_since_.end() ? absl::ZeroDuration() : e.time - start->second;
      summary_.trips.push_back(ReplayTrip{e.target, e.time, detection});
    }
    if (!InService(e.from_health) && InService(e.to_health)) ++summary_.recoveries;
  }

  void OnSwitch(const Event& e) {
    CloseChainState(e.time);
    state_ = e.to_chain_state;
    active_ = e.to_target;
    if (e.switch_reason == SwitchReason::kInitial) return;
    ++summary_.switches;
    if (e.from_target == switched_to_ && e.time - switched_at_ < flap_window_) ++summary_.flaps;
    switched_to_ = e.to_target;
    switched_at_ = e.time;
  }

  // Adds the time since the last switch to the chain state's total.
  void CloseChainState(absl::Time now) {
    const absl::Duration span = now - state_since_;
    if (state_ == ChainState::kFallback) summary_.in_fallback += span;
    if (state_ == ChainState::kDegraded) summary_.in_degraded += span;
    state_since_ = now;
  }

  const std::string chain_;
  const absl::Duration flap_window_;
  const FailoverRules default_rules_;
  Engine engine_;
  absl::Time now_;   // the latest moment handed to the engine
  absl::Time tick_;  // the ticker's next run
  ReplaySummary summary_;
  std::map<std::string, std::string> leases_;  // target -> outstanding check
  std::map<std::string, absl::Time> failing_since_;
  std::string active_;
  ChainState state_ = ChainState::kPrimary;
  absl::Time state_since_;
  std::string switched_to_;
  absl::Time switched_at_ = absl::InfinitePast();
};

absl::StatusOr<std::unique_ptr<PolicyRun>> PolicyRun::Start(const ReplayInput& setup) {
  auto impl = std::make_unique<Impl>(setup);
  if (absl::Status started = impl->Start(setup); !started.ok()) return started;
  return std::unique_ptr<PolicyRun>(new PolicyRun(std::move(impl)));
}

PolicyRun::PolicyRun(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PolicyRun::~PolicyRun() = default;
void PolicyRun::Feed(const TraceEntry& entry) { impl_->Feed(entry); }
void PolicyRun::AdvanceTo(absl::Time now) { impl_->AdvanceTo(now); }
Events PolicyRun::TakeEvents() { return impl_->TakeEvents(); }
std::vector<ReplayTrip> PolicyRun::TakeTrips() { return impl_->TakeTrips(); }
ReplaySummary PolicyRun::Finish(absl::Time to) { return impl_->Finish(to); }
const ReplaySummary& PolicyRun::summary() const { return impl_->summary(); }

absl::Status CheckReplayWindow(absl::Time from, absl::Time to) {
  if (to <= from) {
    return absl::InvalidArgumentError(
        absl::StrCat("to: must be after from (", absl::FormatTime(from), "), got ", absl::FormatTime(to)));
  }
  if (to - from > kMaxReplayWindow) {
    return absl::InvalidArgumentError(absl::StrCat("from: a window of ", absl::FormatDuration(to - from),
                                                   " is longer than a replay covers (",
                                                   absl::FormatDuration(kMaxReplayWindow), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ReplaySummary> Replay(const ReplayInput& input) {
  if (absl::Status window = CheckReplayWindow(input.from, input.to); !window.ok()) return window;
  absl::StatusOr<std::unique_ptr<PolicyRun>> run = PolicyRun::Start(input);
  if (!run.ok()) return run.status();
  for (const TraceEntry& e : input.entries) {
    if (e.at >= input.from && e.at <= input.to) (*run)->Feed(e);
  }
  return (*run)->Finish(input.to);
}

ReplayInput WithPolicy(ReplayInput input, const Policy& policy) {
  input.chain.policy = policy;
  for (TargetConfig& t : input.targets) t.health = HealthPolicy::Of(policy);
  return input;
}

}  // namespace failover
