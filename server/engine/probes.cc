// Health checks handed to probers (DESIGN 3.6).
#include <algorithm>
#include <map>
#include <set>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/engine/engine.h"
#include "server/engine/change_writer.h"
#include "server/engine/engine_internal.h"

namespace failover {

using namespace internal;  // NOLINT: the engine's own helpers

namespace {

// What a check found, for the status views: the result and, as a check's
// output, its failure or how long it took.
std::string CheckLine(ProbeOutcome outcome, const std::string& failure, absl::Duration latency) {
  std::string took;
  if (latency >= absl::ZeroDuration()) {
    const absl::Duration unit = latency >= absl::Milliseconds(1) ? absl::Milliseconds(1) : absl::Microseconds(1);
    took = absl::StrCat(" in ", absl::FormatDuration(absl::Trunc(latency, unit)));
  }
  switch (outcome) {
    case ProbeOutcome::kPass: return absl::StrCat("passed", took);
    case ProbeOutcome::kNotLoaded: return absl::StrCat("answered", took, "; model not loaded");
    case ProbeOutcome::kThrottled: return absl::StrCat("rate limited", took, " (not judged)");
    case ProbeOutcome::kFail: return absl::StrCat("failed", took, ": ", failure);
  }
  return "";
}

}  // namespace

absl::Time Engine::ProbeDueLocked(const TargetEntry& t, absl::Time now) const {
  const TargetRuntime& rt = *t.rt;
  if (!t.config->enabled || !t.health->has_health_check) return absl::InfiniteFuture();
  // One lease at a time; a lease holds until strictly after its expiry.
  if (rt.LeasedAt(now)) return absl::InfiniteFuture();
  if (rt.probe_now) return now;
  switch (rt.health.state()) {
    case HealthState::kDown:
      return rt.health.probe_due();
    case HealthState::kRecovering:
      return rt.occasional().last_probe + t.health->probe_interval;
    default: {
      // Only a quiet target is probed: traffic counts as a check.
      const absl::Time activity = CompactTime::FromNanos(rt.last_activity_ns.load(std::memory_order_relaxed));
      return std::max(activity, rt.occasional().last_probe) + t.health->probe_interval;
    }
  }
}

bool Engine::ApplyProbeResult(const Snapshot& snap, const ProbeResult& result, uint64_t prober, absl::Time now,
                              ProbeResponse* response, Events* events, std::set<std::string>* observed) {
  // Lease ids are "<random>:<target>", so a result finds its target without a global map.
  const size_t colon = result.lease_id.find(':');
  const TargetEntry* t = colon == std::string::npos ? nullptr : snap.FindTarget(result.lease_id.substr(colon + 1));
  if (t == nullptr) {
    ++response->ignored;
    return true;
  }
  const bool warm_local = t->config->kind == TargetKind::kLocal && t->config->warm;
  HealthTransition tr;
  bool changed = false;
  {
    TargetRuntime& rt = *t->rt;
    std::lock_guard<SmallMutex> lock(rt.mu);
    // Unknown, expired or superseded lease, another prober's, or the target's
    // config changed since: ignored.
    const TargetRuntime::Occasional& lease = rt.occasional();
    if (lease.lease_id != result.lease_id || lease.lease_expires < now ||
        lease.lease_generation != t->config_generation || lease.lease_prober != prober) {
      ++response->ignored;
      return true;
    }
    // A probe that met a plain rate limit learned nothing about health: as
    // THROTTLED. (An exhausted quota or an overload is a failed check.)
    static const FailoverRules* const kDefaultRules = new FailoverRules();
    const ProbeOutcome outcome =
        result.outcome == ProbeOutcome::kFail && kDefaultRules->Classify(result.facts).reason == Reason::kRateLimit
            ? ProbeOutcome::kThrottled
            : result.outcome;
    // The result's effect on health, dry or applied: one function decides both.
    auto apply = [&](HealthMode mode, const std::string& summary) {
      switch (outcome) {
        case ProbeOutcome::kPass: return rt.health.OnPass(*t->health, now, /*strong=*/rt.lease_recovery, &tr, mode);
        // A warm local backend answered but the model is not loaded: alive.
        case ProbeOutcome::kNotLoaded:
          return warm_local && rt.health.OnPass(*t->health, now, /*strong=*/false, &tr, mode);
        case ProbeOutcome::kThrottled: return false;  // neither a pass nor a failure
        case ProbeOutcome::kFail: return rt.health.OnFailedCheck(*t->health, now, summary, t->seed, &tr, mode);
      }
      return false;
    };
    const std::string summary = outcome == ProbeOutcome::kFail ? FailoverRules::Summarize(result.facts) : "";
    // A transition is made under the single writer: leave the result for that
    // pass. While changes are refused the check is recorded without one.
    const bool transitions = apply(HealthMode::kDryRun, summary);
    if (transitions && events == nullptr && accepting_changes()) return false;
    rt.VoidLease();
    ++response->accepted;
    response->checks.push_back(AcceptedCheck{&result, t->config->name, outcome, rt.lease_recovery});
    rt.SetLastCheck(now, CheckLine(outcome, summary, result.latency));
    observed->insert(t->config->name);
    if (outcome == ProbeOutcome::kFail) {
      rt.last_error = absl::StrCat("probe: ", summary);
      rt.last_error_time = now;
    }
    const HealthState before = rt.Effective();
    if (!transitions || events != nullptr) changed = apply(HealthMode::kApply, summary);
    if (changed) PublishLocked(*t, before, Source::kProbe, tr.reason, now, events);
  }
  if (changed) {
    EvalContext ctx;
    ctx.reason = IsUsable(tr.to) ? SwitchReason::kRecovery : SwitchReason::kTrip;
    ctx.detail = absl::StrCat(t->config->name, " probe: ", tr.reason);
    EvaluateChainsOf(snap, *t, now, ctx, events);
  }
  return true;
}

absl::Status Engine::Probe(const ProbeRequest& req, absl::Time now, ProbeResponse* response, Events* events) {
  std::shared_ptr<const Snapshot> snap = Load();
  const uint64_t prober = absl::HashOf(req.prober_id);
  std::vector<const ProbeResult*> transitions;
  std::set<std::string> observed;  // targets whose check results were taken
  for (const ProbeResult& r : req.results) {
    if (!ApplyProbeResult(*snap, r, prober, now, response, nullptr, &observed)) transitions.push_back(&r);
  }
  if (!transitions.empty() || (!observed.empty() && accepting_changes())) {
    ChangeWriter w(*this);
    snap = Load();  // a config change may have come first
    for (const ProbeResult* r : transitions) ApplyProbeResult(*snap, *r, prober, now, response, w.events(), &observed);
    // What a check found (its time, its error) is stored even when it changed
    // no state, so it survives a restart and reaches cluster followers.
    if (accepting_changes()) {
      for (const std::string& name : observed) w.TouchTarget(name);
    }
    w.Finish(events);
  }
  const uint32_t max_tasks = req.max_tasks == 0 ? 16 : req.max_tasks;
  absl::Time next_due = absl::InfiniteFuture();
  for (const TargetEntry& t : snap->targets) {
    TargetRuntime& rt = *t.rt;
    std::lock_guard<SmallMutex> lock(rt.mu);
    const absl::Time due = ProbeDueLocked(t, now);
    if (due > now || response->tasks.size() >= max_tasks) {
      next_due = std::min(next_due, due);
      continue;
    }
    ProbeTask task;
    // Unguessable, so a prober cannot answer for a lease it was not given.
    task.lease_id = absl::StrCat(absl::Hex(Random(), absl::kZeroPad16), ":", t.config->name);
    task.target = &t;
    task.kind = rt.health.state() == HealthState::kRecovering ? ProbeKind::kRecovery : ProbeKind::kLiveness;
    task.timeout = t.health->probe_timeout;
    task.generation = t.config_generation;
    TargetRuntime::Occasional& lease = rt.MutableOccasional();
    lease.lease_id = task.lease_id;
    lease.lease_expires = now + task.timeout + options_.lease_grace;
    rt.lease_recovery = task.kind == ProbeKind::kRecovery;
    lease.lease_generation = t.config_generation;
    lease.lease_prober = prober;
    rt.probe_now = false;
    response->tasks.push_back(std::move(task));
  }
  // Call again when the next check falls due, at least once a minute.
  response->next_call_after = std::clamp(next_due - now, absl::ZeroDuration(), absl::Minutes(1));
  response->snapshot = std::move(snap);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> Engine::ProbeNow(absl::string_view target) {
  std::shared_ptr<const Snapshot> snap = Load();
  if (!target.empty() && snap->FindTarget(target) == nullptr) return NotFound("target", target);
  std::vector<std::string> made_due;
  for (const TargetEntry& t : snap->targets) {
    if (!target.empty() && t.config->name != target) continue;
    if (!t.config->enabled || !t.health->has_health_check) continue;
    std::lock_guard<SmallMutex> lock(t.rt->mu);
    t.rt->probe_now = true;
    made_due.push_back(t.config->name);
  }
  if (!target.empty() && made_due.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "target \"", target, "\" has no health check (a local target that is not warm, or disabled)"));
  }
  return made_due;
}

size_t Engine::OutstandingLeases(absl::Time now) const {
  std::shared_ptr<const Snapshot> snap = Load();
  size_t n = 0;
  for (const TargetEntry& t : snap->targets) {
    std::lock_guard<SmallMutex> lock(t.rt->mu);
    n += t.rt->LeasedAt(now);
  }
  return n;
}


}  // namespace failover
