// Outcomes and verdicts: ReportOutcome (DESIGN 3.5).
#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/engine/engine.h"
#include "absl/strings/escaping.h"
#include "server/engine/change_writer.h"
#include "server/engine/decisions.h"
#include "server/engine/engine_internal.h"

namespace failover {

using namespace internal;  // NOLINT: the engine's own helpers

absl::Status Engine::Report(const ReportRequest& req, absl::Time now, ReportResult* out, Events* events) {
  std::shared_ptr<const Snapshot> snap = Load();
  const TargetEntry* target = snap->FindTarget(req.target);
  if (target == nullptr) return NotFound("target", req.target);

  // A decision id that failoverd cannot have issued is refused. A well-formed
  // one that expired or predates a restart is still counted: the outcome
  // happened, and decision_known=false tells the caller.
  DecisionId id;
  const bool parsed = DecisionId::Parse(req.decision_id, &id);
  if (!parsed && !req.decision_id.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("decision_id: \"", absl::CHexEscape(req.decision_id.substr(0, 64)),
                                                   "\" is not a decision id that PickTarget returned"));
  }
  // Ids carry the time they were made on this process's monotonic clock: one
  // from the future was not made here.
  bool known = parsed && id.epoch == epoch_ && id.time <= now && now - id.time < options_.decision_ttl;
  const ChainEntry* chain = known ? snap->FindChain(id.chain) : nullptr;
  if (chain == nullptr) known = false;
  if (chain == nullptr && !req.chain.empty()) {
    chain = snap->FindChain(req.chain);
    if (chain == nullptr) return NotFound("chain", req.chain);
  }
  const int position = chain ? PositionOf(*chain, *target) : -1;
  if (chain != nullptr && position < 0) {
    return absl::InvalidArgumentError(absl::StrCat("target: \"", req.target, "\" is not a target of chain \"",
                                                   chain->config->name, "\""));
  }
  static const FailoverRules* const kDefaultRules = new FailoverRules();
  static const Policy* const kDefaultPolicy = new Policy();
  const FailoverRules& rules = chain ? *chain->rules : *kDefaultRules;
  const Policy& policy = chain ? *chain->config->policy : *kDefaultPolicy;

  const Classification c = rules.Classify(req.facts);
  out->reason = c.reason;
  out->classified = c.reason;
  out->counted = c.counts;
  out->decision_known = known;
  out->chain = chain != nullptr ? chain->config->name : "";
  const std::string summary = req.facts.success ? "" : FailoverRules::Summarize(req.facts);
  // A rate limit that resets later than the target's max_hold (a per-day
  // quota) takes it DOWN until the reset instead of holding it.
  const bool limited_long =
      c.reason == Reason::kRateLimit && req.facts.retry_after > target->health->rate_limit_max_hold;

  // Health first: the verdict's next target must see this outcome. Most
  // outcomes change no state and take no writer lock; one that would trip or
  // recover the target is recorded under the single writer instead, so its
  // events are numbered in the order state changed. The dry run that decides
  // this is the same code as the recording (HealthMode), so the two agree.
  const CallOutcome call{req.latency};
  // The error is kept where the state is made. An engine that makes no
  // transitions (a cluster follower, a local copy) shows the one that comes
  // with failoverd's Changes, so every replica shows the same; the deciding
  // engine saves it with its next Change or tick.
  auto note_error = [&](TargetRuntime& rt) {
    if (!accepting_changes()) return;
    if (!(c.counts || c.reason == Reason::kRateLimit || c.reason == Reason::kCapabilityGap)) return;
    rt.last_error = absl::StrCat(ReasonName(c.reason), ": ", summary);
    rt.last_error_time = now;
    rt.record_unsaved = true;
  };
  // A rate-limit hold (a long one is a transition instead) is cluster state
  // (DESIGN 3.12): it moves only when it starts or moves later by more than a
  // second, so a 429 storm makes a Change a second at most. The deciding
  // engine makes that move a Change; a follower or a local copy moves its own
  // hold only when failoverd's has not come first (it waits for the leader's
  // Change, so it does not, unless the leader is out of reach).
  auto moved_hold = [&](const TargetEntry& t) -> int64_t {
    if (req.facts.success || c.reason != Reason::kRateLimit || limited_long) return INT64_MIN;
    const absl::Duration hold =
        std::min(req.facts.retry_after > absl::ZeroDuration() ? req.facts.retry_after : t.health->rate_limit_hold,
                 t.health->rate_limit_max_hold);
    const int64_t until = absl::ToUnixNanos(now + hold);
    const int64_t held = t.rt->held_until_ns.load(std::memory_order_relaxed);
    return held == INT64_MIN || until > held + absl::ToInt64Nanoseconds(absl::Seconds(1)) ? until : INT64_MIN;
  };
  auto record_outcome = [&](const TargetEntry& t, HealthMode mode, HealthTransition* tr) {
    TargetRuntime& rt = *t.rt;
    TargetHealth& health = rt.health;
    const bool dry = mode == HealthMode::kDryRun;
    if (!dry) rt.RecordTraffic(now, !req.facts.success, req.latency);
    if (req.facts.success) {
      if (!dry) {
        rt.last_activity_ns.store(absl::ToUnixNanos(now), std::memory_order_relaxed);
        if (req.latency > absl::ZeroDuration()) RecordLatency(rt, req.latency);
      }
      return health.OnCallSuccess(*t.health, now, call, t.seed, tr, mode);
    }
    bool changed = c.counts && health.OnFailure(*t.health, now, summary, t.seed, tr, mode);
    if (dry && changed) return true;
    // After a counted failure that tripped the target this keeps its check
    // from coming before the limit resets.
    if (limited_long) changed = health.OnLimitedUntil(now, now + req.facts.retry_after, summary, tr, mode) || changed;
    if (dry) return changed;
    rt.last_activity_ns.store(absl::ToUnixNanos(now), std::memory_order_relaxed);
    note_error(rt);
    // The hold is the target's (its health settings), shared by every chain.
    // Moved outside the writer (changes refused), it waits for the next tick
    // that accepts them; under the writer, the Change that touches the target
    // saves it and clears the mark.
    if (const int64_t until = moved_hold(t); until != INT64_MIN) {
      rt.held_until_ns.store(until, std::memory_order_relaxed);
      rt.record_unsaved = true;
    }
    return changed;
  };
  // While changes are refused, an outcome that would make a transition is
  // recorded without it: tallied for the rates, its error kept.
  auto record_refused = [&](const TargetEntry& t) {
    TargetRuntime& rt = *t.rt;
    rt.RecordTraffic(now, !req.facts.success, req.latency);
    rt.last_activity_ns.store(absl::ToUnixNanos(now), std::memory_order_relaxed);
    if (req.facts.success && req.latency > absl::ZeroDuration()) RecordLatency(rt, req.latency);
    if (!req.facts.success) note_error(rt);
    if (req.facts.success || c.counts) rt.health.Tally(*t.health, now, /*failed=*/!req.facts.success, call);
  };
  bool needs_writer = false;
  if (!req.count) {
    out->counted = false;
    out->target_health = target->rt->Effective();
  } else {
    TargetRuntime& rt = *target->rt;
    std::lock_guard<SmallMutex> lock(rt.mu);
    HealthTransition none;
    out->target_health = rt.Effective();
    // Read once: a hold move taken for the writer must not meet a closed gate
    // below (it would be answered as a refused trip).
    const bool accepting = accepting_changes();
    const bool hold_change = accepting && moved_hold(*target) != INT64_MIN;
    if (!hold_change && !record_outcome(*target, HealthMode::kDryRun, &none)) {
      record_outcome(*target, HealthMode::kApply, &none);  // makes no transition: the dry run just said so
      out->target_health = rt.Effective();
    } else if (!accepting) {
      record_refused(*target);
      // The transition is not made here (a local copy, a follower, a refused
      // disk: failoverd's leader makes it), but the verdict is the one the
      // transition gives: a failure that trips its target moves on, as
      // failoverd's own answer does (DESIGN 3.13).
      if (!req.facts.success) out->target_health = HealthState::kDown;
    } else {
      needs_writer = true;
    }
  }
  if (needs_writer) {
    ChangeWriter w(*this);
    // A config change may have come first: work on the current snapshot.
    std::shared_ptr<const Snapshot> current = Load();
    const TargetEntry* t = current->FindTarget(req.target);
    if (t != nullptr) {
      HealthTransition tr;
      bool changed = false;
      bool held = false;
      {
        std::lock_guard<SmallMutex> lock(t->rt->mu);
        const HealthState before = t->rt->Effective();
        const int64_t held_before = t->rt->held_until_ns.load(std::memory_order_relaxed);
        changed = record_outcome(*t, HealthMode::kApply, &tr);
        held = t->rt->held_until_ns.load(std::memory_order_relaxed) != held_before;
        if (changed) PublishLocked(*t, before, Source::kAuto, tr.reason, now, w.events());
        out->target_health = t->rt->Effective();
      }
      if (changed || held) w.TouchTarget(t->config->name);
      if (changed) {
        EvalContext ctx;
        ctx.reason = IsUsable(tr.to) ? SwitchReason::kRecovery : SwitchReason::kTrip;
        ctx.detail = absl::StrCat(t->config->name, " ", tr.reason);
        EvaluateChainsOf(*current, *t, now, ctx, w.events());
      }
    }
    if (req.id.sequence != 0) w.change().counted_reports.push_back(req.id);  // kept only if something changed
    w.Finish(events);
  }

  auto finish_chain_state = [&]() {
    if (chain == nullptr) return;
    std::lock_guard<SmallMutex> lock(chain->rt->mu);
    out->chain_state = chain->rt->state;
    out->active_target = chain->rt->active;
  };

  if (req.facts.success) {
    out->verdict = Verdict::kDone;
    if (known) decisions_->Erase(id.seq);
    finish_chain_state();
    return absl::OkStatus();
  }

  DecisionRecord record;
  if (!known || !decisions_->Get(id.seq, &record)) record.tried_mask = known ? id.exclude_mask : 0;
  if (position >= 0) record.tried_mask |= Bit(position);
  record.AddFailure(target->config->name, summary);

  const uint32_t retries_used = record.retries_used[target->config->name];
  // Same-target retries (and rate-limit waits) only while the target stays
  // usable: one that this report took out (it tripped) or that an admin took
  // out (MANUAL, DISABLED) is not tried again (DESIGN 3.5).
  const bool stays_usable = IsUsable(out->target_health);
  if (!c.moves_on) {
    out->verdict = Verdict::kFail;
    out->error = absl::StrCat(target->config->name, ": ", summary);
  } else if (stays_usable && c.reason == Reason::kRateLimit && policy.rate_limit_on == RateLimitMode::kWait) {
    out->verdict = Verdict::kRetrySame;
    out->retry_delay = std::min(
        req.facts.retry_after > absl::ZeroDuration() ? req.facts.retry_after : target->health->rate_limit_hold,
        target->health->rate_limit_max_hold);
  } else if (stays_usable && retries_used < c.same_target_retries) {
    record.retries_used[target->config->name] = retries_used + 1;
    out->verdict = Verdict::kRetrySame;
    out->retry_delay = req.facts.retry_after > absl::ZeroDuration()
                           ? std::min(req.facts.retry_after, target->health->rate_limit_max_hold)
                           : absl::Milliseconds(250) * (1 << std::min<uint32_t>(retries_used, 5));
  } else if (chain == nullptr) {
    out->verdict = Verdict::kFail;
    out->error = absl::StrCat(target->config->name, ": ", summary, " (no chain known for this report)");
  } else if ((known && id.single_attempt) || !chain->config->failover_enabled) {
    out->verdict = Verdict::kFail;
    out->error = absl::StrCat(target->config->name, ": ", summary,
                              !chain->config->failover_enabled ? " (failover disabled for this chain)"
                                                              : " (request too large to replay)");
  } else {
    const uint64_t excluded = known ? id.exclude_mask : 0;
    const int fallbacks_used = absl::popcount(record.tried_mask & ~excluded) - 1;
    absl::InlinedVector<PlannedAttempt, 8> next;
    absl::Status built = absl::OkStatus();
    if (policy.max_attempts > 0 && fallbacks_used >= static_cast<int>(policy.max_attempts)) {
      out->verdict = Verdict::kFail;
      out->error = absl::StrCat("max_attempts (", policy.max_attempts, ") reached: ", record.Describe());
    } else {
      {
        std::lock_guard<SmallMutex> lock(chain->rt->mu);
        built = BuildAttemptsLocked(*snap, *chain, now, record.tried_mask, "", /*for_next=*/true, &next);
      }
      if (!built.ok() || next.empty()) {
        out->verdict = Verdict::kFail;
        out->error = absl::StrCat("every target failed: ", record.Describe());
      } else {
        out->verdict = Verdict::kTryNext;
        out->has_next = true;
        out->next = next.front();
        record.tried_mask |= Bit(out->next.position);
      }
    }
  }
  // A retry of either kind spends the chain's retry budget, if it has one.
  if ((out->verdict == Verdict::kRetrySame || out->verdict == Verdict::kTryNext) && chain != nullptr &&
      chain->hot.retry_budget_ratio > 0) {
    std::string why;
    bool spent = false;
    {
      std::lock_guard<SmallMutex> lock(chain->rt->mu);
      if (!chain->rt->retry_budget) chain->rt->retry_budget = std::make_unique<RetryBudget>();
      spent = chain->rt->retry_budget->TrySpend(chain->hot.retry_budget_ratio,
                                                 chain->hot.retry_budget_min_per_second, now, &why);
    }
    if (!spent) {
      out->verdict = Verdict::kFail;
      out->reason = Reason::kRetryBudget;
      out->refused_chain = chain->config->name;
      out->has_next = false;
      out->retry_delay = absl::ZeroDuration();
      out->error = absl::StrCat("chain \"", chain->config->name, "\": ", why, "; last: ", target->config->name, ": ",
                                summary);
    }
  }
  if (out->verdict == Verdict::kTryNext) CountRequest(*out->next.target, now);
  if (known && out->verdict != Verdict::kFail) {
    decisions_->Put(id.seq, id.time, std::move(record));
  } else if (known) {
    decisions_->Erase(id.seq);
  }
  finish_chain_state();
  out->snapshot = std::move(snap);
  return absl::OkStatus();
}


}  // namespace failover
