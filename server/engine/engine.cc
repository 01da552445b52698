#include "server/engine/engine.h"

#include <algorithm>
#include <array>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/numeric/bits.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "server/engine/change_writer.h"
#include "server/engine/decisions.h"
#include "server/engine/engine_internal.h"
#include "server/engine/validate.h"


namespace failover {

using namespace internal;  // NOLINT: the engine's own helpers

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kDone: return "done";
    case Verdict::kRetrySame: return "retry_same";
    case Verdict::kTryNext: return "try_next";
    case Verdict::kFail: return "fail";
  }
  return "done";
}

const TargetEntry* Snapshot::FindTarget(absl::string_view name) const {
  auto it = target_index.find(name);
  return it == target_index.end() ? nullptr : &targets[it->second];
}

const ChainEntry* Snapshot::FindChain(absl::string_view name) const {
  auto it = chain_index.find(name);
  return it == chain_index.end() ? nullptr : &chains[it->second];
}

// ---------------------------------------------------------------------------

namespace {
EngineOptions WithDefaults(EngineOptions o) {
  if (!o.random) {
    o.random = [] {
      std::random_device rd;
      return (uint64_t{rd()} << 32) | rd();
    };
  }
  return o;
}

// Policies by value, to keep one of each. The hash takes the settings that
// tell policies apart most often; equality takes them all.
struct PolicyHash {
  size_t operator()(const std::shared_ptr<const Policy>& p) const {
    return absl::HashOf(p->trip_errors, p->trip_window, p->trip_failure_rate, p->recovery_probes,
                        p->recovery_min_dwell, p->probe_interval, p->max_attempts, p->retry_on_statuses.size());
  }
};
struct PolicyEq {
  bool operator()(const std::shared_ptr<const Policy>& a, const std::shared_ptr<const Policy>& b) const {
    return a == b || *a == *b;
  }
};
}  // namespace

Engine::Engine(EngineOptions options)
    : options_(WithDefaults(std::move(options))),
      epoch_(options_.instance_epoch != 0 ? options_.instance_epoch
                                          : static_cast<uint32_t>(options_.random() | 1)),
      decisions_(std::make_unique<DecisionStore>(options_.max_decision_records)),
      snapshot_(std::make_shared<Snapshot>()) {}

Engine::~Engine() = default;

uint64_t Engine::Random() {
  std::lock_guard<std::mutex> lock(random_mu_);
  return options_.random();
}

// ---------------------------------------------------------------------------
// The single writer (DESIGN 2): a state change is made while holding
// writer_mu_, its events are numbered before the lock is released, and the
// Change goes to the sink in that same order.
// ---------------------------------------------------------------------------

void Engine::SetAcceptingChanges(bool accepting, std::string why) {
  {
    std::lock_guard<std::mutex> lock(refusal_mu_);
    refusal_ = std::move(why);
  }
  accepting_.store(accepting, std::memory_order_release);
}

absl::Status Engine::RefuseUnlessAccepting() const {
  if (accepting_changes()) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(refusal_mu_);
  return absl::UnavailableError(absl::StrCat("failoverd is not accepting changes: ", refusal_));
}

TargetStateRecord Engine::RecordOf(const TargetEntry& t) const {
  const TargetRuntime& rt = *t.rt;
  TargetStateRecord r;
  r.name = t.config->name;
  r.automatic = rt.health.state();
  r.since = rt.health.since();
  r.trips = rt.health.trips();
  r.recovery_passes = rt.health.recovery_passes();
  r.source = rt.source;
  r.reason = rt.reason;
  r.last_error = rt.last_error;
  r.last_error_time = rt.last_error_time;
  r.last_probe = rt.occasional().last_probe;
  r.last_check = rt.occasional().last_check;
  r.held_until = CompactTime::FromNanos(rt.held_until_ns.load(std::memory_order_relaxed));
  return r;
}

ChainStateRecord Engine::RecordOf(const ChainEntry& c) const {
  const ChainRuntime& rt = *c.rt;
  return ChainStateRecord{c.config->name, rt.active, rt.state, rt.active_since, rt.last_switch};
}

std::shared_ptr<const Snapshot> Engine::Load() const {
  std::shared_lock<std::shared_mutex> lock(snapshot_mu_);
  return snapshot_;
}

std::shared_ptr<const Snapshot> Engine::snapshot() const { return Load(); }
uint64_t Engine::generation() const { return Load()->generation; }

std::shared_ptr<Snapshot> Engine::BuildSnapshot(std::vector<std::shared_ptr<const TargetConfig>> targets,
                                                std::vector<std::shared_ptr<const ChainConfig>> chains,
                                                uint64_t generation, const Snapshot* previous) const {
  auto snap = std::make_shared<Snapshot>();
  snap->generation = generation;
  auto by_name = [](const auto& a, const auto& b) { return a->name < b->name; };
  std::sort(targets.begin(), targets.end(), by_name);
  std::sort(chains.begin(), chains.end(), by_name);
  snap->targets.reserve(targets.size());
  for (std::shared_ptr<const TargetConfig>& config : targets) {
    TargetEntry e;
    e.config = std::move(config);
    e.seed = absl::HashOf(e.config->name);
    const TargetEntry* old = previous ? previous->FindTarget(e.config->name) : nullptr;
    e.rt = old ? old->rt : std::make_shared<TargetRuntime>();
    const bool same = old && (old->config == e.config || *old->config == *e.config);
    e.config_generation = same ? old->config_generation : generation;
    const auto index = static_cast<uint32_t>(snap->targets.size());
    if (e.config->limit_rpm > 0) snap->rpm_capped.push_back(index);
    snap->targets.push_back(std::move(e));  // reserved: entries stay where they are
    snap->target_index[snap->targets.back().config->name] = index;
  }
  std::vector<bool> has_settings(snap->targets.size(), false);
  absl::flat_hash_map<HealthSettings, std::shared_ptr<const HealthSettings>> settings;
  auto intern = [&](HealthSettings s) {
    std::shared_ptr<const HealthSettings>& shared = settings[s];
    if (shared == nullptr) shared = std::make_shared<const HealthSettings>(std::move(s));
    return shared;
  };
  snap->chains.reserve(chains.size());
  // Most chains classify alike (usually by the defaults): compile each distinct
  // rule set once. A compiled rule set is several KiB.
  absl::flat_hash_map<std::string, std::shared_ptr<const FailoverRules>> compiled;
  // Chains restored or applied one by one each bring their own copy of a
  // policy that others hold alike (360 bytes a chain): keep one of each. The
  // configs the previous snapshot had were interned then, and shared with it
  // they are read-only: their policies go in first.
  absl::flat_hash_set<std::shared_ptr<const Policy>, PolicyHash, PolicyEq> policies;
  std::vector<const ChainEntry*> entries_before(chains.size(), nullptr);  // by index into `chains`
  for (size_t i = 0; i < chains.size(); ++i) {
    const ChainEntry* old = previous ? previous->FindChain(chains[i]->name) : nullptr;
    entries_before[i] = old;
    if (old != nullptr && old->config == chains[i]) policies.insert(chains[i]->policy.shared());
  }
  std::vector<uint32_t> listed_targets;  // each chain's targets' indices, one chain after another
  for (const std::shared_ptr<const ChainConfig>& c : chains) {
    for (const std::string& name : c->targets) {
      listed_targets.push_back(snap->target_index.at(name));
      ++snap->targets[listed_targets.back()].chains_count;
    }
  }
  uint32_t listed = 0;
  for (TargetEntry& t : snap->targets) {
    t.chains_begin = listed;
    listed += t.chains_count;
    t.chains_count = 0;  // counted again as the chains below fill them in
  }
  snap->target_chains.resize(listed);
  snap->chain_slots.reserve(listed_targets.size());  // reserved: the chains' views stay valid
  size_t next_listed = 0;
  for (std::shared_ptr<const ChainConfig>& config : chains) {
    const std::shared_ptr<const Policy>& policy = *policies.insert(config->policy.shared()).first;
    if (policy != config->policy.shared()) {
      // Only a config new in this change has a policy not yet interned, and
      // only this change holds it (ConfigsByName made it, not const).
      if (config.use_count() == 1) {
        const_cast<ChainConfig&>(*config).policy = Shared<Policy>(policy);
      } else {
        auto copy = std::make_shared<ChainConfig>(*config);
        copy->policy = Shared<Policy>(policy);
        config = std::move(copy);
      }
    }
    ChainEntry e;
    e.config = std::move(config);
    const Policy& p = e.config->policy;
    std::shared_ptr<const FailoverRules>& rules = compiled[FailoverRules::InputsOf(p)];
    if (rules == nullptr) {
      rules = std::make_shared<const FailoverRules>(FailoverRules::Compile(p, "policy").value());  // validated before
    }
    e.rules = rules;
    e.hot = ChainHot{e.config->strategy, e.config->failover_enabled, e.config->policy->max_attempts,
                     e.config->policy->max_replay_bytes, e.config->policy->recovery_min_dwell,
                     e.config->policy->latency_explore, e.config->policy->retry_budget_ratio,
                     e.config->policy->retry_budget_min_per_second, e.config->policy->hedge_after};
    const uint32_t chain_index = static_cast<uint32_t>(snap->chains.size());
    const size_t slots_begin = snap->chain_slots.size();
    for (size_t k = 0; k < e.config->targets.size(); ++k) {
      const uint32_t ti = listed_targets[next_listed++];
      TargetEntry& t = snap->targets[ti];
      snap->chain_slots.push_back(ChainSlot{&t, t.config->limit_rpm, t.config->HasHealthCheck()});
      snap->target_chains[t.chains_begin + t.chains_count++] = chain_index;
      // A target without settings of its own takes its chains', on which an
      // apply made them agree (CheckSharedHealth). State stored by an older
      // version may still disagree: then the first chain by name decides.
      if (!has_settings[ti]) {
        t.health = intern(HealthSettings::From(t.config->health.value_or(HealthPolicy::Of(e.config->policy)),
                                               *t.config, options_.probe_jitter));
        has_settings[ti] = true;
      }
    }
    e.slots = absl::MakeConstSpan(snap->chain_slots).subspan(slots_begin);
    const ChainEntry* old = entries_before[chain_index];
    e.rt = old ? old->rt : std::make_shared<ChainRuntime>();
    snap->chains.push_back(std::move(e));  // reserved: entries stay where they are
    snap->chain_index[snap->chains.back().config->name] = chain_index;
  }
  for (size_t i = 0; i < snap->targets.size(); ++i) {
    if (!has_settings[i]) {
      const TargetConfig& config = *snap->targets[i].config;
      snap->targets[i].health =
          intern(HealthSettings::From(config.health.value_or(HealthPolicy()), config, options_.probe_jitter));
    }
  }
  return snap;
}

void Engine::Install(std::shared_ptr<Snapshot> next, absl::Time now, Events* events) {
  {
    std::lock_guard<std::shared_mutex> lock(snapshot_mu_);
    snapshot_ = next;
  }
  for (const TargetEntry& t : next->targets) {
    std::lock_guard<SmallMutex> lock(t.rt->mu);
    // A check asked for under the old config (enabled, kind, ...) no longer
    // fits: its result will be ignored, and a new one may be handed out now.
    if (t.config_generation == next->generation) t.rt->VoidLease();
    const HealthState before = t.rt->Effective();
    PublishLocked(t, before, Source::kConfig, t.config->enabled ? "enabled" : "disabled", now, events);
  }
  EvalContext ctx;
  ctx.reason = SwitchReason::kConfig;
  for (const ChainEntry& c : next->chains) {
    std::lock_guard<SmallMutex> lock(c.rt->mu);
    EvaluateChainLocked(*next, c, now, ctx, events);
  }
}

void Engine::PublishLocked(const TargetEntry& t, HealthState before, Source source, const std::string& reason,
                           absl::Time now, Events* events) {
  TargetRuntime& rt = *t.rt;
  const HealthState after = !t.config->enabled ? HealthState::kDisabled
                            : rt.manual       ? HealthState::kManual
                                              : rt.health.state();
  rt.effective.store(static_cast<uint8_t>(after), std::memory_order_release);
  if (after == before) return;
  // A target taken out is measured afresh when it is back (least_latency).
  if (!internal::IsUsable(after)) rt.latency_ns.store(-1, std::memory_order_relaxed);
  rt.source = source;
  rt.reason = reason;
  Event e;
  e.kind = EventKind::kTargetState;
  e.time = now;
  e.target = t.config->name;
  e.from_health = before;
  e.to_health = after;
  e.source = source;
  e.reason = reason;
  e.last_error = rt.last_error;
  events->push_back(std::move(e));
}

// ---------------------------------------------------------------------------
// Chain state: the active target with hysteresis (DESIGN 3.3)
// ---------------------------------------------------------------------------

Engine::ChainDecision Engine::DecideChainLocked(const Snapshot& snap, const ChainEntry& chain, absl::Time now,
                                                const EvalContext& ctx) const {
  ChainRuntime& rt = *chain.rt;
  const size_t n = chain.slots.size();
  auto entry = [&](size_t i) -> const TargetEntry& { return *chain.slots[i].target; };
  auto health = [&](size_t i) { return chain.slots[i].rt()->Effective(); };

  int first_usable = -1;
  for (size_t i = 0; i < n && first_usable < 0; ++i) {
    if (IsUsable(health(i))) first_usable = static_cast<int>(i);
  }
  const int current = rt.initialized ? ActivePosition(chain, snap, rt) : -1;

  ChainDecision d;
  d.reason = ctx.reason;
  if (!rt.pinned.empty()) {
    d.active = &rt.pinned.str();
    d.state = ChainState::kPinned;
  } else if (first_usable < 0) {
    // Degraded: keep the active target; plans try everything in order.
    d.active = current >= 0 ? &rt.active : &entry(0).config->name;
    d.state = ChainState::kDegraded;
  } else {
    int next = current;
    if (!rt.initialized || ctx.fresh || current < 0 || !IsUsable(health(current))) {
      next = first_usable;  // down the list (or anywhere) at once
    } else if (first_usable < current) {
      // Back up only to a recovered target, and only after the dwell.
      const bool dwell_passed = now - rt.active_since >= chain.hot.min_dwell;
      for (int i = 0; i < current; ++i) {
        const bool waived = !ctx.waive_dwell_for.empty() && entry(i).config->name == ctx.waive_dwell_for;
        if (!IsUsable(health(i))) continue;
        if (waived || (health(i) == HealthState::kHealthy && dwell_passed)) {
          next = i;
          if (!waived) d.reason = SwitchReason::kRecovery;
          break;
        }
      }
    }
    d.active = &entry(next).config->name;
    d.state = next == 0 ? ChainState::kPrimary : ChainState::kFallback;
  }
  d.changes = !rt.initialized || *d.active != rt.active || d.state != rt.state;
  return d;
}

void Engine::EvaluateChainLocked(const Snapshot& snap, const ChainEntry& chain, absl::Time now,
                                 const EvalContext& ctx, Events* events) {
  const ChainDecision d = DecideChainLocked(snap, chain, now, ctx);
  if (!d.changes) return;
  ChainRuntime& rt = *chain.rt;
  const bool active_changed = !rt.initialized || *d.active != rt.active;
  Event e;
  e.kind = EventKind::kChainSwitched;
  e.time = now;
  e.chain = chain.config->name;
  e.from_target = rt.initialized ? rt.active : "";
  e.to_target = *d.active;
  e.from_chain_state = rt.state;
  e.to_chain_state = d.state;
  e.switch_reason = rt.initialized ? d.reason : SwitchReason::kInitial;
  e.detail = ctx.detail;
  if (active_changed) rt.active_since = now;
  rt.last_switch = now;
  rt.active = e.to_target;
  rt.active_position_generation = 0;  // recompute on next use
  rt.state = d.state;
  rt.initialized = true;
  events->push_back(std::move(e));
}

void Engine::EvaluateChainsOf(const Snapshot& snap, const TargetEntry& target, absl::Time now,
                              const EvalContext& ctx, Events* events) {
  for (uint32_t ci : snap.ChainsOf(target)) {
    const ChainEntry& c = snap.chains[ci];
    std::lock_guard<SmallMutex> lock(c.rt->mu);
    EvaluateChainLocked(snap, c, now, ctx, events);
  }
}

void Engine::ApplyTimePassed(const Snapshot& snap, const TargetEntry& t, absl::Time now, Events* events) {
  HealthTransition tr;
  {
    std::lock_guard<SmallMutex> lock(t.rt->mu);
    const HealthState before = t.rt->Effective();
    if (!t.rt->health.OnTimePassed(*t.health, now, &tr)) return;
    PublishLocked(t, before, Source::kAuto, tr.reason, now, events);
  }
  EvalContext ctx;
  ctx.reason = SwitchReason::kRecovery;
  ctx.detail = absl::StrCat(t.config->name, " ", tr.reason);
  EvaluateChainsOf(snap, t, now, ctx, events);
}

void Engine::Tick(absl::Time now, Events* events) {
  decisions_->Expire(now - options_.decision_ttl);
  if (!accepting_changes()) return;
  // Look first without the writer lock: most ticks change nothing.
  std::shared_ptr<const Snapshot> snap = Load();
  bool due = false;
  for (const TargetEntry& t : snap->targets) due = due || ComesBackNow(t, now) || RecordUnsaved(t);
  for (const ChainEntry& c : snap->chains) {
    if (due) break;
    std::lock_guard<SmallMutex> lock(c.rt->mu);
    due = DecideChainLocked(*snap, c, now, EvalContext{}).changes;
  }
  if (!due) return;
  ChangeWriter w(*this);
  snap = Load();  // a config change may have come first
  for (const TargetEntry& t : snap->targets) {
    if (ComesBackNow(t, now)) ApplyTimePassed(*snap, t, now, w.events());
    // Errors and holds outcomes changed without a Change: saved, and so replicated, now.
    if (RecordUnsaved(t)) w.TouchTarget(t.config->name);
  }
  for (const ChainEntry& c : snap->chains) {
    std::lock_guard<SmallMutex> lock(c.rt->mu);
    EvaluateChainLocked(*snap, c, now, EvalContext{}, w.events());
  }
  w.Finish(events);
}

bool Engine::RecordUnsaved(const TargetEntry& t) const {
  std::lock_guard<SmallMutex> lock(t.rt->mu);
  return t.rt->record_unsaved;
}

bool Engine::AllRecordsSaved() const {
  std::shared_ptr<const Snapshot> snap = Load();
  for (const TargetEntry& t : snap->targets) {
    if (RecordUnsaved(t)) return false;
  }
  return true;
}

bool Engine::ComesBackNow(const TargetEntry& t, absl::Time now) const {
  if (t.health->has_health_check || t.rt->Effective() != HealthState::kDown) return false;
  std::lock_guard<SmallMutex> lock(t.rt->mu);
  return t.rt->health.ComesBackAt(*t.health) <= now;
}


}  // namespace failover
