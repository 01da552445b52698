// Plans: PickTarget's attempt order (DESIGN 3.4).
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
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

void Engine::SetRpmShare(uint32_t rank, uint32_t replicas) {
  replicas = std::max<uint32_t>(replicas, 1);
  rpm_share_.store(uint64_t{replicas} << 32 | std::min(rank, replicas - 1), std::memory_order_relaxed);
}

uint32_t Engine::RpmShare(uint32_t cap, uint32_t rank, uint32_t replicas) {
  if (replicas <= 1) return cap;
  return cap / replicas + (rank < cap % replicas ? 1 : 0);
}

namespace {

uint64_t PackGrant(int64_t minute, uint32_t requests) { return static_cast<uint64_t>(minute) << 32 | requests; }

// The grant a slot holds for `minute`, if it holds one for that minute.
std::optional<uint32_t> GrantFor(const TargetRuntime& rt, int64_t minute) {
  const uint64_t grant = rt.rpm_grant[minute & 1].load(std::memory_order_relaxed);
  if (grant == 0 || static_cast<int64_t>(grant >> 32) != minute) return std::nullopt;
  return static_cast<uint32_t>(grant);
}

uint32_t UsedIn(const TargetRuntime& rt, int64_t minute) {
  return rt.rpm_minute.load(std::memory_order_relaxed) == minute ? rt.rpm_count.load(std::memory_order_relaxed) : 0;
}

}  // namespace

bool Engine::Saturated(TargetRuntime& rt, uint32_t limit_rpm, absl::Time now) const {
  if (limit_rpm == 0) return false;  // no cap
  const int64_t minute = absl::ToUnixNanos(now) / kNanosPerMinute;
  const uint8_t lease = rpm_lease_.load(std::memory_order_relaxed);
  const std::optional<uint32_t> granted = (lease & 1) != 0 ? GrantFor(rt, minute) : std::nullopt;
  const uint64_t share = rpm_share_.load(std::memory_order_relaxed);
  uint32_t mine = 0;
  if (granted.has_value()) {
    mine = *granted;
  } else if ((lease & 1) == 0 || (lease & 2) != 0) {
    mine = RpmShare(limit_rpm, static_cast<uint32_t>(share), static_cast<uint32_t>(share >> 32));
  }
  if (mine == 0) return true;  // nothing granted, or a cap smaller than the cluster: others plan it
  return UsedIn(rt, minute) >= mine;
}

void Engine::SetRpmGrant(absl::string_view target, int64_t minute, uint32_t requests) {
  if (minute < 0 || minute > UINT32_MAX) return;  // not a minute of this era; never packed
  const std::shared_ptr<const Snapshot> snap = Load();
  const TargetEntry* t = snap->FindTarget(target);
  if (t == nullptr) return;
  t->rt->rpm_grant[minute & 1].store(PackGrant(minute, requests), std::memory_order_relaxed);
}

std::vector<Engine::RpmUse> Engine::RpmUses(int64_t minute) const {
  std::vector<RpmUse> uses;
  const std::shared_ptr<const Snapshot> snap = Load();
  for (const uint32_t index : snap->rpm_capped) {
    const TargetEntry& t = snap->targets[index];
    RpmUse& use = uses.emplace_back();
    use.target = t.config->name;
    use.cap = t.config->limit_rpm;
    use.used = UsedIn(*t.rt, minute);
    const std::optional<uint32_t> granted = GrantFor(*t.rt, minute);
    use.has_grant = granted.has_value();
    use.granted = granted.value_or(0);
    use.has_next_grant = GrantFor(*t.rt, minute + 1).has_value();
  }
  return uses;
}

uint32_t Engine::RpmCap(absl::string_view target) const {
  const std::shared_ptr<const Snapshot> snap = Load();
  const TargetEntry* t = snap->FindTarget(target);
  return t == nullptr ? 0 : t->config->limit_rpm;
}

uint32_t Engine::RpmUsed(absl::string_view target, int64_t minute) const {
  const std::shared_ptr<const Snapshot> snap = Load();
  const TargetEntry* t = snap->FindTarget(target);
  return t == nullptr ? 0 : UsedIn(*t->rt, minute);
}

void Engine::CountRequest(const TargetEntry& t, absl::Time now) {
  if (t.config->limit_rpm == 0) return;
  const int64_t minute = absl::ToUnixNanos(now) / kNanosPerMinute;
  int64_t seen = t.rt->rpm_minute.load(std::memory_order_relaxed);
  if (seen != minute && t.rt->rpm_minute.compare_exchange_strong(seen, minute)) {
    t.rt->rpm_count.store(0, std::memory_order_relaxed);
  }
  t.rt->rpm_count.fetch_add(1, std::memory_order_relaxed);
}

int Engine::LeastLatencyFirst(const ChainEntry& chain, uint64_t eligible) {
  // The fastest eligible target; one not measured yet goes first, so it is.
  int fastest = -1;
  int64_t best = INT64_MAX;
  for (size_t i = 0; i < chain.slots.size(); ++i) {
    if (!(eligible & Bit(i))) continue;
    const int64_t latency = chain.slots[i].rt()->latency_ns.load(std::memory_order_relaxed);
    if (latency < 0) return static_cast<int>(i);
    if (latency < best) {
      best = latency;
      fastest = static_cast<int>(i);
    }
  }
  // Every (100 / explore)-th first attempt goes to one of the others, in turn.
  const uint64_t pick = chain.rt->latency_picks++;
  const uint64_t others = eligible & ~Bit(fastest);
  if (chain.hot.latency_explore <= 0 || others == 0) return fastest;
  const uint64_t every = std::max<uint64_t>(2, static_cast<uint64_t>(std::llround(100.0 / chain.hot.latency_explore)));
  if (pick % every != every - 1) return fastest;
  uint64_t k = (pick / every) % static_cast<uint64_t>(absl::popcount(others));
  uint64_t rest = others;
  while (k-- > 0) rest &= rest - 1;  // drop the lowest set bits
  return absl::countr_zero(rest);
}

absl::Status Engine::BuildAttemptsLocked(const Snapshot& snap, const ChainEntry& chain, absl::Time now,
                                         uint64_t exclude_mask, const std::string& session_key, bool for_next,
                                         absl::InlinedVector<PlannedAttempt, 8>* out) {
  out->clear();
  ChainRuntime& rt = *chain.rt;
  const size_t n = chain.slots.size();
  auto entry = [&](size_t i) -> const TargetEntry& { return *chain.slots[i].target; };
  auto push = [&](size_t i) {
    const ChainSlot& slot = chain.slots[i];
    out->push_back(PlannedAttempt{slot.target, slot.rt()->Effective(), static_cast<uint32_t>(i)});
  };

  if (!rt.pinned.empty()) {
    const int p = PositionIn(chain, snap, rt.pinned.str());
    if (p < 0) return absl::InternalError(absl::StrCat("pinned target \"", rt.pinned.str(), "\" not in chain"));
    if (!entry(p).config->enabled) {
      return absl::UnavailableError(absl::StrCat("chain \"", chain.config->name, "\" is pinned to \"", rt.pinned.str(),
                                                 "\", which is disabled"));
    }
    if (exclude_mask & Bit(p)) {
      return absl::UnavailableError(absl::StrCat("chain \"", chain.config->name, "\" is pinned to \"", rt.pinned.str(),
                                                 "\", which was already tried"));
    }
    push(p);
    return absl::OkStatus();
  }

  const int64_t now_ns = absl::ToUnixNanos(now);
  uint64_t eligible = 0;    // usable, not held, not saturated
  uint64_t recovering = 0;  // RECOVERING, not held, not saturated
  uint64_t any_enabled = 0;  // the last resort: every enabled, non-manual target
  for (size_t i = 0; i < n; ++i) {
    if (exclude_mask & Bit(i)) continue;
    const ChainSlot& slot = chain.slots[i];
    const HealthState h = slot.rt()->Effective();
    if (h == HealthState::kDisabled || h == HealthState::kManual) continue;
    any_enabled |= Bit(i);
    if (slot.rt()->held_until_ns.load(std::memory_order_relaxed) > now_ns || Saturated(*slot.rt(), slot.limit_rpm, now)) {
      continue;
    }
    if (IsUsable(h)) eligible |= Bit(i);
    if (h == HealthState::kRecovering) recovering |= Bit(i);
  }

  if (eligible != 0) {
    int first = -1;
    const int active = ActivePosition(chain, snap, rt);
    const Strategy strategy = for_next ? Strategy::kFailover : chain.hot.strategy;
    if (strategy == Strategy::kRoundRobin) {
      if (!rt.round_robin) rt.round_robin = std::make_unique<ChainRuntime::RoundRobin>();
      ChainRuntime::RoundRobin& rr = *rt.round_robin;
      if (!session_key.empty()) {
        auto it = rr.sessions.find(session_key);
        if (it != rr.sessions.end()) {
          const int p = PositionIn(chain, snap, it->second);
          if (p >= 0 && (eligible & Bit(p))) first = p;
        }
      }
      if (first < 0) {
        // Smooth weighted round robin over the eligible targets.
        int64_t total = 0;
        int64_t best_weight = INT64_MIN;
        for (size_t i = 0; i < n; ++i) {
          if (!(eligible & Bit(i)) || entry(i).config->weight == 0) continue;
          const int64_t w = entry(i).config->weight;
          total += w;
          int64_t& current = rr.current[entry(i).config->name];
          current += w;
          if (current > best_weight) {
            best_weight = current;
            first = static_cast<int>(i);
          }
        }
        if (first >= 0) rr.current[entry(first).config->name] -= total;
      }
      if (!session_key.empty() && first >= 0) {
        if (rr.sessions.size() >= kMaxSessions) rr.sessions.clear();
        rr.sessions[session_key] = entry(first).config->name;
      }
    } else if (strategy == Strategy::kLeastLatency) {
      first = LeastLatencyFirst(chain, eligible);
    } else if (strategy == Strategy::kLowestCost) {
      for (size_t i = 0; i < n; ++i) {
        if ((eligible & Bit(i)) && (first < 0 || entry(i).config->cost < entry(first).config->cost)) {
          first = static_cast<int>(i);
        }
      }
    } else if (active >= 0 && (eligible & Bit(active))) {
      first = active;
    }
    if (first < 0) first = absl::countr_zero(eligible);
    push(first);
    for (size_t i = 0; i < n; ++i) {
      if ((eligible & Bit(i)) && static_cast<int>(i) != first) push(i);
    }
    for (size_t i = 0; i < n; ++i) {
      if (recovering & Bit(i)) push(i);
    }
    return absl::OkStatus();
  }
  const uint64_t chosen = recovering != 0 ? recovering : any_enabled;
  for (size_t i = 0; i < n; ++i) {
    if (chosen & Bit(i)) push(i);
  }
  if (!out->empty()) return absl::OkStatus();

  std::vector<std::string> why;
  for (size_t i = 0; i < n; ++i) {
    const HealthState h = chain.slots[i].rt()->Effective();
    why.push_back(absl::StrCat(entry(i).config->name, " (",
                               (exclude_mask & Bit(i)) ? "excluded" : HealthStateName(h), ")"));
  }
  return absl::UnavailableError(absl::StrCat("chain \"", chain.config->name,
                                             "\" has no target to try: ", absl::StrJoin(why, ", ")));
}

void Engine::MakeDecisionId(const std::string& chain, uint64_t exclude_mask, bool single_attempt, absl::Time now,
                            std::string* out) {
  DecisionId id;
  id.epoch = epoch_;
  id.seq = decision_seq_.fetch_add(1, std::memory_order_relaxed) + 1;
  id.time = now;
  id.exclude_mask = exclude_mask;
  id.single_attempt = single_attempt;
  id.chain = chain;
  id.Format(out);  // reuses the caller's buffer
}

absl::Status Engine::Pick(const PickRequest& req, absl::Time now, Plan* plan, Events* events) {
  std::shared_ptr<const Snapshot> snap = Load();
  const ChainEntry* chain = snap->FindChain(req.chain);
  if (chain == nullptr) return NotFound("chain", req.chain);
  uint64_t exclude_mask = 0;
  auto find_excluded = [&]() -> absl::Status {
    exclude_mask = 0;
    for (size_t i = 0; i < req.exclude_targets.size(); ++i) {
      const int p = PositionIn(*chain, *snap, req.exclude_targets[i]);
      if (p < 0) {
        return absl::InvalidArgumentError(absl::StrCat("exclude_targets[", i, "]: \"", req.exclude_targets[i],
                                                       "\" is not a target of chain \"", req.chain, "\""));
      }
      exclude_mask |= Bit(p);
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(find_excluded());
  // Time may have brought a target back or ended a dwell since the last tick:
  // settle that first, as a change of its own, so the plan reflects it.
  // The usual case, nothing to settle, takes the chain's lock once: the check
  // and the plan under one hold.
  bool settle = false;
  for (const ChainSlot& slot : chain->slots) settle = settle || ComesBackNow(*slot.target, now);
  std::unique_lock<SmallMutex> chain_lock(chain->rt->mu, std::defer_lock);
  if (!settle) {
    chain_lock.lock();
    settle = DecideChainLocked(*snap, *chain, now, EvalContext{}).changes;
  }
  if (settle && accepting_changes()) {
    if (chain_lock.owns_lock()) chain_lock.unlock();  // the writer's lock comes first
    ChangeWriter w(*this);
    snap = Load();  // a config change may have come first
    chain = snap->FindChain(req.chain);
    if (chain == nullptr) return NotFound("chain", req.chain);
    for (const ChainSlot& slot : chain->slots) {
      if (ComesBackNow(*slot.target, now)) ApplyTimePassed(*snap, *slot.target, now, w.events());
    }
    {
      std::lock_guard<SmallMutex> lock(chain->rt->mu);
      EvaluateChainLocked(*snap, *chain, now, EvalContext{}, w.events());
    }
    w.Finish(events);
    RETURN_IF_ERROR(find_excluded());
  }
  const bool single = req.body_bytes > chain->hot.max_replay_bytes || !chain->hot.failover_enabled;
  if (!chain_lock.owns_lock()) chain_lock = std::unique_lock<SmallMutex>(chain->rt->mu);
  RETURN_IF_ERROR(
      BuildAttemptsLocked(*snap, *chain, now, exclude_mask, req.session_key, /*for_next=*/false, &plan->attempts));
  if (chain->hot.retry_budget_ratio > 0) {
    if (!chain->rt->retry_budget) chain->rt->retry_budget = std::make_unique<RetryBudget>();
    chain->rt->retry_budget->CountFirstAttempt(now);
  }
  plan->state = chain->rt->state;
  plan->active_target = chain->rt->active;
  chain_lock.unlock();
  size_t cap = plan->attempts.size();
  if (single) {
    cap = 1;
  } else if (chain->hot.max_attempts > 0) {
    cap = std::min<size_t>(cap, 1 + chain->hot.max_attempts);
  }
  plan->attempts.resize(cap);
  plan->hedge_after = cap >= 2 ? chain->hot.hedge_after : absl::ZeroDuration();
  CountRequest(*plan->attempts.front().target, now);
  plan->generation = snap->generation;
  MakeDecisionId(chain->config->name, exclude_mask, single, now, &plan->decision_id);
  plan->snapshot = std::move(snap);
  return absl::OkStatus();
}


}  // namespace failover
