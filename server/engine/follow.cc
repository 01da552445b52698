// Following changes made by another engine (DESIGN 3.13, 3.12): a client that
// decides locally applies failoverd's Changes here, in order. The records in a
// Change are absolute (each is the state as the change left it), so applying
// one sets state; nothing is decided, no event is made, no Change is emitted.
#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/replace_with.h"
#include "common/status_macros.h"
#include "server/engine/decisions.h"
#include "server/engine/engine.h"
#include "server/engine/engine_internal.h"
#include "server/engine/validate.h"

namespace failover {

using namespace internal;  // NOLINT: the engine's own helpers

absl::Status Engine::ApplyChange(const Change& change, absl::Time now) {
  std::lock_guard<std::mutex> writer(writer_mu_);
  std::shared_ptr<const Snapshot> snap = Load();
  const bool config_changed = change.config_generation != 0;
  if (config_changed) {
    ConfigsByName<TargetConfig> targets(snap->targets);
    ConfigsByName<ChainConfig> chains(snap->chains);
    for (const std::string& name : change.deleted_targets) targets.Erase(name);
    for (const std::string& name : change.deleted_chains) chains.Erase(name);
    for (size_t i = 0; i < change.put_targets.size(); ++i) {
      RETURN_IF_ERROR(ValidateTarget(change.put_targets[i], absl::StrCat("put_targets[", i, "]")));
      targets.Put(change.put_targets[i]);
    }
    for (const ChainConfig& c : change.put_chains) chains.Put(c);
    // Checked: the chains the change puts, and the ones it keeps that list a
    // target it deletes. No other chain can have become invalid (a chain
    // names only targets), and a one-chain edit in a large config costs the
    // follower what it costs the leader.
    std::vector<const ChainConfig*> to_check;
    for (const ChainConfig& c : change.put_chains) to_check.push_back(chains.Find(c.name));
    for (const std::string& name : change.deleted_targets) {
      const TargetEntry* gone = snap->FindTarget(name);
      if (gone == nullptr) continue;
      for (uint32_t i : snap->ChainsOf(*gone)) {
        if (const ChainConfig* c = chains.Find(snap->chains[i].config->name)) to_check.push_back(c);
      }
    }
    for (const ChainConfig* c : to_check) {
      RETURN_IF_ERROR(ValidateChain(*c, absl::StrCat("chain \"", c->name, "\""),
                                    [&](const std::string& n) { return targets.Has(n) ? "target" : ""; }));
    }
    std::shared_ptr<Snapshot> next = BuildSnapshot(std::move(targets).Take(), std::move(chains).Take(),
                                                   change.config_generation, snap.get());
    {
      std::lock_guard<std::shared_mutex> lock(snapshot_mu_);
      snapshot_ = next;
    }
    for (const TargetEntry& t : next->targets) {
      std::lock_guard<SmallMutex> lock(t.rt->mu);
      if (t.config_generation == next->generation) t.rt->VoidLease();
    }
    snap = std::move(next);
  }
  for (const ManualFailoverRecord& m : change.manual) {
    const TargetEntry* t = snap->FindTarget(m.target);
    if (t == nullptr) continue;
    std::lock_guard<SmallMutex> lock(t->rt->mu);
    t->rt->manual = m.active;
    t->rt->SetManual(m.active ? m.reason : "", m.active ? m.since : absl::InfinitePast());
    t->rt->VoidLease();
  }
  for (const TargetStateRecord& r : change.targets) {
    const TargetEntry* t = snap->FindTarget(r.name);
    if (t == nullptr) continue;
    std::lock_guard<SmallMutex> lock(t->rt->mu);
    t->rt->health.Restore(r.automatic, r.since, r.trips, r.recovery_passes);
    t->rt->source = r.source;
    t->rt->reason = r.reason;
    t->rt->last_error = r.last_error;
    t->rt->last_error_time = r.last_error_time;
    t->rt->SetLastCheck(r.last_probe, r.last_check);
    t->rt->held_until_ns.store(HeldUntilNanos(r.held_until), std::memory_order_relaxed);
    t->rt->record_unsaved = false;  // failoverd's record replaces this copy's own hold
  }
  // Each target whose effective state may have moved: every one after a
  // config change (enabled may have flipped), else those the records name.
  // Publishing one twice does nothing the second time.
  Events ignored;  // the events were failoverd's; it numbered and published them
  auto publish = [&](const TargetEntry* t) {
    if (t == nullptr) return;
    std::lock_guard<SmallMutex> lock(t->rt->mu);
    PublishLocked(*t, t->rt->Effective(), t->rt->source, t->rt->reason, now, &ignored);
  };
  if (config_changed) {
    for (const TargetEntry& t : snap->targets) publish(&t);
  } else {
    for (const ManualFailoverRecord& m : change.manual) publish(snap->FindTarget(m.target));
    for (const TargetStateRecord& r : change.targets) publish(snap->FindTarget(r.name));
  }
  for (const ChainStateRecord& r : change.chains) {
    const ChainEntry* c = snap->FindChain(r.name);
    if (c == nullptr || PositionIn(*c, *snap, r.active) < 0) continue;
    std::lock_guard<SmallMutex> lock(c->rt->mu);
    c->rt->initialized = true;
    c->rt->active = r.active;
    c->rt->active_position_generation = 0;  // recompute on next use
    c->rt->state = r.state;
    c->rt->active_since = r.active_since;
    c->rt->last_switch = r.last_switch;
  }
  for (const PinRecord& p : change.pins) {
    const ChainEntry* c = snap->FindChain(p.chain);
    if (c == nullptr) continue;
    std::lock_guard<SmallMutex> lock(c->rt->mu);
    c->rt->pinned = p.target;
  }
  next_sequence_ = std::max(next_sequence_, change.next_sequence);
  return absl::OkStatus();
}

absl::Status Engine::ResetTo(const RestoredState& state, absl::Time now) {
  std::set<std::string> targets;
  std::set<std::string> chains;
  {
    std::shared_ptr<const Snapshot> snap = Load();
    for (const TargetEntry& t : snap->targets) targets.insert(t.config->name);
    for (const ChainEntry& c : snap->chains) chains.insert(c.config->name);
  }
  RETURN_IF_ERROR(ApplyChange(ReplaceWith(state, targets, chains), now));
  std::lock_guard<std::mutex> writer(writer_mu_);
  next_sequence_ = state.next_sequence;
  return absl::OkStatus();
}

bool Engine::SuccessMayChangeState(absl::string_view target) const {
  std::shared_ptr<const Snapshot> snap = Load();
  const TargetEntry* t = snap->FindTarget(target);
  if (t == nullptr) return false;
  const HealthSettings& h = *t->health;
  if (h.trip_failure_rate > 0 || h.slow_call_rate > 0 || h.slow_call_duration > absl::ZeroDuration()) return true;
  std::lock_guard<SmallMutex> lock(t->rt->mu);
  return t->rt->health.state() != HealthState::kHealthy;
}

std::string Engine::ChainOfDecision(absl::string_view decision_id) {
  DecisionId id;
  return DecisionId::Parse(decision_id, &id) ? std::string(id.chain) : std::string();
}

uint64_t Engine::next_sequence() const {
  std::lock_guard<std::mutex> writer(writer_mu_);
  return next_sequence_;
}

}  // namespace failover
