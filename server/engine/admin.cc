// Admin actions: pins and manual failover (DESIGN 3.8).
#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/engine/engine.h"
#include "server/engine/change_writer.h"
#include "server/engine/engine_internal.h"

namespace failover {

using namespace internal;  // NOLINT: the engine's own helpers

absl::StatusOr<Events> Engine::Pin(absl::string_view chain_name, absl::string_view target, absl::Time now,
                                   absl::string_view actor) {
  ChangeWriter w(*this);
  w.set_actor(actor);
  std::shared_ptr<const Snapshot> snap = Load();
  const ChainEntry* chain = snap->FindChain(chain_name);
  if (chain == nullptr) return NotFound("chain", chain_name);
  if (PositionIn(*chain, *snap, target) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("target: \"", target, "\" is not a target of chain \"", chain_name, "\""));
  }
  Events events;
  {
    std::lock_guard<SmallMutex> lock(chain->rt->mu);
    // Refused first: while writes fail, "already applied" may be only in memory.
    RETURN_IF_ERROR(RefuseUnlessAccepting());
    if (chain->rt->pinned == target) return events;  // already applied: no second event
    chain->rt->pinned = std::string(target);
    EvalContext ctx;
    ctx.reason = SwitchReason::kPin;
    ctx.detail = absl::StrCat("pinned to ", target);
    EvaluateChainLocked(*snap, *chain, now, ctx, w.events());
  }
  w.change().pins.push_back(PinRecord{std::string(chain_name), std::string(target)});
  w.Finish(&events);
  return events;
}

absl::StatusOr<Events> Engine::Unpin(absl::string_view chain_name, absl::Time now, absl::string_view actor) {
  ChangeWriter w(*this);
  w.set_actor(actor);
  std::shared_ptr<const Snapshot> snap = Load();
  const ChainEntry* chain = snap->FindChain(chain_name);
  if (chain == nullptr) return NotFound("chain", chain_name);
  Events events;
  {
    std::lock_guard<SmallMutex> lock(chain->rt->mu);
    RETURN_IF_ERROR(RefuseUnlessAccepting());
    if (chain->rt->pinned.empty()) return events;
    chain->rt->pinned.clear();
    EvalContext ctx;
    ctx.reason = SwitchReason::kUnpin;
    ctx.fresh = true;
    EvaluateChainLocked(*snap, *chain, now, ctx, w.events());
  }
  w.change().pins.push_back(PinRecord{std::string(chain_name), ""});
  w.Finish(&events);
  return events;
}

absl::StatusOr<Events> Engine::TriggerManualFailover(absl::string_view name, absl::string_view reason,
                                                     absl::Time now, absl::string_view actor) {
  ChangeWriter w(*this);
  w.set_actor(actor);
  std::shared_ptr<const Snapshot> snap = Load();
  const TargetEntry* t = snap->FindTarget(name);
  if (t == nullptr) return NotFound("target", name);
  bool can_fail_over = false;
  for (uint32_t ci : snap->ChainsOf(*t)) {
    const ChainEntry& c = snap->chains[ci];
    if (!c.config->failover_enabled) continue;
    for (const ChainSlot& other : c.slots) {
      if (other.target != t && other.target->config->enabled) can_fail_over = true;
    }
  }
  if (!can_fail_over) {
    return absl::FailedPreconditionError(absl::StrCat(
        "target \"", name, "\" cannot be failed over: no chain with failover enabled lists it with another "
                           "enabled target"));
  }
  Events events;
  const std::string why = reason.empty() ? "manual failover" : std::string(reason);
  {
    std::lock_guard<SmallMutex> lock(t->rt->mu);
    RETURN_IF_ERROR(RefuseUnlessAccepting());
    if (t->rt->manual) return events;  // already applied: no second event
    const HealthState before = t->rt->Effective();
    t->rt->manual = true;
    t->rt->SetManual(why, now);
    t->rt->VoidLease();
    PublishLocked(*t, before, Source::kManual, why, now, w.events());
  }
  w.change().manual.push_back(ManualFailoverRecord{std::string(name), true, why, now});
  EvalContext ctx;
  ctx.reason = SwitchReason::kManual;
  ctx.detail = absl::StrCat(name, " manual: ", why);
  EvaluateChainsOf(*snap, *t, now, ctx, w.events());
  w.Finish(&events);
  return events;
}

absl::StatusOr<Events> Engine::CancelManualFailover(absl::string_view name, absl::Time now,
                                                    absl::string_view actor) {
  ChangeWriter w(*this);
  w.set_actor(actor);
  std::shared_ptr<const Snapshot> snap = Load();
  const TargetEntry* t = snap->FindTarget(name);
  if (t == nullptr) return NotFound("target", name);
  Events events;
  {
    std::lock_guard<SmallMutex> lock(t->rt->mu);
    RETURN_IF_ERROR(RefuseUnlessAccepting());
    if (!t->rt->manual) return events;
    const HealthState before = t->rt->Effective();
    t->rt->manual = false;
    t->rt->SetManual("", absl::InfinitePast());
    t->rt->VoidLease();
    PublishLocked(*t, before, Source::kManual, "manual failover cancelled", now, w.events());
  }
  w.change().manual.push_back(ManualFailoverRecord{std::string(name), false, "", now});
  EvalContext ctx;
  ctx.reason = SwitchReason::kCancel;
  ctx.detail = absl::StrCat(name, " manual failover cancelled");
  ctx.waive_dwell_for = std::string(name);
  EvaluateChainsOf(*snap, *t, now, ctx, w.events());
  w.Finish(&events);
  return events;
}

}  // namespace failover
