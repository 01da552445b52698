// Read-only views of config and state.
#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/engine/engine.h"
#include "server/engine/engine_internal.h"

namespace failover {

using namespace internal;  // NOLINT: the engine's own helpers

TargetStatus Engine::StatusOf(const Snapshot& snap, const TargetEntry& t) const {
  TargetStatus s;
  s.name = t.config->name;
  s.enabled = t.config->enabled;
  {
    std::lock_guard<SmallMutex> lock(t.rt->mu);
    s.health = t.rt->Effective();
    s.automatic = t.rt->health.state();
    s.source = t.rt->source;
    const TargetRuntime::Occasional& occasional = t.rt->occasional();
    s.reason = t.rt->manual ? occasional.manual_reason : t.rt->reason;
    s.since = t.rt->manual ? occasional.manual_since : t.rt->health.since();
    s.last_probe = occasional.last_probe;
    s.last_check = occasional.last_check;
    s.last_error = t.rt->last_error;
    s.last_error_time = t.rt->last_error_time;
    s.recovery_passes = t.rt->health.recovery_passes();
    s.trips = t.rt->health.trips();
    if (t.rt->traffic) s.traffic = t.rt->traffic->Minutes();
    // A view has no clock: a running check (any lease) shows as none due;
    // one due at once ("probe now", never checked) as due since the epoch.
    if (occasional.lease_id.empty()) s.next_check = std::max(ProbeDueLocked(t, absl::InfinitePast()), absl::UnixEpoch());
  }
  s.managed_by = t.config->managed_by;
  const int64_t held = t.rt->held_until_ns.load(std::memory_order_relaxed);
  if (held != CompactTime::kPast) s.held_until = CompactTime::FromNanos(held);
  const int64_t latency = t.rt->latency_ns.load(std::memory_order_relaxed);
  if (latency >= 0) s.latency = absl::Nanoseconds(latency);
  for (uint32_t ci : snap.ChainsOf(t)) s.chains.push_back(snap.chains[ci].config->name);
  return s;
}

ChainStatus Engine::StatusOf(const Snapshot& snap, const ChainEntry& c) const {
  ChainStatus s;
  s.name = c.config->name;
  {
    std::lock_guard<SmallMutex> lock(c.rt->mu);
    s.state = c.rt->state;
    s.active_target = c.rt->active;
    s.active_since = c.rt->active_since;
    s.last_switch = c.rt->last_switch;
    s.pinned_target = c.rt->pinned;
  }
  for (const ChainSlot& slot : c.slots) s.targets.push_back(StatusOf(snap, *slot.target));
  return s;
}

absl::StatusOr<ChainView> Engine::GetChain(absl::string_view name) const {
  std::shared_ptr<const Snapshot> snap = Load();
  const ChainEntry* c = snap->FindChain(name);
  if (c == nullptr) return NotFound("chain", name);
  return ChainView{*c->config, StatusOf(*snap, *c)};
}

absl::StatusOr<TargetView> Engine::GetTarget(absl::string_view name) const {
  std::shared_ptr<const Snapshot> snap = Load();
  const TargetEntry* t = snap->FindTarget(name);
  if (t == nullptr) return NotFound("target", name);
  return TargetView{*t->config, StatusOf(*snap, *t)};
}

absl::StatusOr<TargetStatus> Engine::GetTargetStatus(absl::string_view name) const {
  std::shared_ptr<const Snapshot> snap = Load();
  const TargetEntry* t = snap->FindTarget(name);
  if (t == nullptr) return NotFound("target", name);
  return StatusOf(*snap, *t);
}

absl::StatusOr<ChainStatus> Engine::GetChainStatus(absl::string_view name) const {
  std::shared_ptr<const Snapshot> snap = Load();
  const ChainEntry* c = snap->FindChain(name);
  if (c == nullptr) return NotFound("chain", name);
  return StatusOf(*snap, *c);
}

std::vector<ChainView> Engine::ListChains() const {
  std::vector<ChainView> out;
  VisitChains("", [&](const ChainView& v) {
    out.push_back(v);
    return true;
  });
  return out;
}

std::vector<TargetView> Engine::ListTargets() const {
  std::vector<TargetView> out;
  VisitTargets("", [&](const TargetView& v) {
    out.push_back(v);
    return true;
  });
  return out;
}

namespace {
// The first entry of a name-sorted vector whose name sorts after `after`.
template <typename Entries>
auto FirstAfter(const Entries& entries, absl::string_view after) {
  if (after.empty()) return entries.begin();
  return std::upper_bound(entries.begin(), entries.end(), after,
                          [](absl::string_view name, const auto& e) { return name < e.config->name; });
}
}  // namespace

void Engine::VisitChains(absl::string_view after, const std::function<bool(const ChainView&)>& visit) const {
  std::shared_ptr<const Snapshot> snap = Load();
  for (auto it = FirstAfter(snap->chains, after); it != snap->chains.end(); ++it) {
    if (!visit(ChainView{*it->config, StatusOf(*snap, *it)})) return;
  }
}

void Engine::VisitTargets(absl::string_view after, const std::function<bool(const TargetView&)>& visit) const {
  std::shared_ptr<const Snapshot> snap = Load();
  for (auto it = FirstAfter(snap->targets, after); it != snap->targets.end(); ++it) {
    if (!visit(TargetView{*it->config, StatusOf(*snap, *it)})) return;
  }
}

}  // namespace failover
