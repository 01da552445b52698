// Config changes and the restore at start (DESIGN 3.1, 3.10).
#include <algorithm>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/engine/engine.h"
#include "server/engine/change_writer.h"
#include "server/engine/engine_internal.h"
#include "server/engine/validate.h"

namespace failover {

using namespace internal;  // NOLINT: the engine's own helpers

namespace {

// DESIGN 3.1: a target's health is shared by every chain that lists it, so a
// target without health settings of its own takes its chains', and they must
// agree. The refusal names both chains and the first field they differ in,
// at the path of the object in this request that brought the disagreement.
absl::Status CheckSharedHealth(const ConfigsByName<TargetConfig>& targets, const ConfigsByName<ChainConfig>& chains,
                               const ConfigChange& change) {
  auto path_of = [&](const ChainConfig& a, const ChainConfig& b, const std::string& target,
                     const std::string& field) {
    for (size_t i = change.chains.size(); i-- > 0;) {  // the later one in the request
      if (change.chains[i].name == b.name || change.chains[i].name == a.name) {
        return absl::StrCat("chains[", i, "].policy.", field);
      }
    }
    for (size_t i = 0; i < change.targets.size(); ++i) {
      if (change.targets[i].name == target) return absl::StrCat("targets[", i, "].health");
    }
    return std::string("chains");
  };
  // Each target's first chain by name; most chains hold one shared policy,
  // and chains holding the same one agree without comparing settings.
  absl::flat_hash_map<absl::string_view, const ChainConfig*> first;
  absl::flat_hash_set<absl::string_view> own_health;  // usually none
  for (const auto& [name, t] : targets.all()) {
    if (t->health) own_health.insert(name);
  }
  for (const auto& [_, shared_chain] : chains.all()) {
    const ChainConfig& chain = *shared_chain;
    for (const std::string& name : chain.targets) {
      if (!own_health.empty() && own_health.contains(name)) continue;
      auto [it, inserted] = first.try_emplace(name, &chain);
      const ChainConfig& other = *it->second;
      if (inserted || other.policy.shared() == chain.policy.shared()) continue;
      const std::vector<HealthPolicy::Difference> differ =
          HealthPolicy::Of(other.policy).Differences(HealthPolicy::Of(chain.policy));
      if (differ.empty()) continue;
      const HealthPolicy::Difference& d = differ.front();
      return absl::InvalidArgumentError(absl::StrCat(
          path_of(other, chain, name, d.field), ": chains \"", other.name, "\" and \"", chain.name,
          "\" both list target \"", name, "\" but give it different ", d.field, " (", d.mine, " vs ", d.theirs,
          "); a target's health is shared by its chains, so set the same value in both, or give \"", name,
          "\" its own health settings (health: on the target)"));
    }
  }
  return absl::OkStatus();
}

// "field: old -> new" for each difference, as an apply's diff shows them.
std::vector<std::string> Details(const std::vector<SettingDifference>& differences) {
  std::vector<std::string> out;
  out.reserve(differences.size());
  for (const SettingDifference& d : differences) out.push_back(absl::StrCat(d.field, ": ", d.mine, " -> ", d.theirs));
  return out;
}

}  // namespace

absl::StatusOr<ApplyResult> Engine::Apply(const ConfigChange& change, const ApplyOptions& options, absl::Time now) {
  ChangeWriter w(*this);
  w.set_actor(options.actor);
  std::shared_ptr<const Snapshot> cur = Load();
  ConfigsByName<TargetConfig> targets(cur->targets);
  ConfigsByName<ChainConfig> chains(cur->chains);

  ApplyResult result;
  // Over the API, an object a config file declares can only be restated as the
  // file has it (an apply of the same files is no change); anything else must
  // be changed in the file.
  auto check_owner = [&](const std::string& path, const char* what, auto* requested, const auto& current) {
    if (options.from_files || current.managed_by.empty()) return absl::OkStatus();
    requested->managed_by = current.managed_by;
    const std::vector<std::string> differ = ChangedFields(current, *requested);
    if (differ.empty()) return absl::OkStatus();
    return ManagedElsewhere(absl::StrCat(path, " (", absl::StrJoin(differ, ", "), ")"), what, requested->name,
                            current.managed_by);
  };
  // Views into `change`, which outlives this; one allocation, not a node and
  // a name per object between the configs this makes.
  absl::flat_hash_set<absl::string_view> request_names;
  request_names.reserve(change.targets.size() + change.chains.size());
  for (size_t i = 0; i < change.targets.size(); ++i) {
    const std::string path = absl::StrCat("targets[", i, "]");
    TargetConfig t = change.targets[i];
    if (!options.from_files) t.managed_by.clear();
    RETURN_IF_ERROR(ValidateTarget(t, path));
    if (!request_names.insert(change.targets[i].name).second) {
      return absl::InvalidArgumentError(absl::StrCat(path, ".name: \"", t.name, "\" appears twice in this request"));
    }
    if (chains.Has(t.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".name: \"", t.name, "\" is already the name of a chain"));
    }
    if (t.warm && t.kind == TargetKind::kRemote) {
      result.warnings.push_back(absl::StrCat(path, ".warm: has no effect on a remote target (\"", t.name, "\")"));
    }
    ConfigDiff d{ConfigObject::kTarget, {}, ConfigChangeKind::kCreated, {}, {}};  // named below
    const TargetConfig* current = targets.Find(t.name);
    if (current != nullptr) {
      RETURN_IF_ERROR(check_owner(path, "target", &t, *current));
      d.changed_fields = ChangedFields(*current, t);
      d.details = Details(current->Differences(t));
      d.change = d.changed_fields.empty() ? ConfigChangeKind::kUnchanged : ConfigChangeKind::kUpdated;
    }
    if (current == nullptr || !(*current == t)) targets.Put(std::move(t));
    result.changes.push_back(std::move(d));
  }
  auto kind_of = [&](const std::string& name) -> std::string {
    if (targets.Has(name)) return "target";
    if (chains.Has(name)) return "chain";
    return "";
  };
  for (size_t i = 0; i < change.chains.size(); ++i) {
    const std::string path = absl::StrCat("chains[", i, "]");
    ChainConfig c = change.chains[i];
    if (!options.from_files) c.managed_by.clear();
    RETURN_IF_ERROR(ValidateName(c.name, path + ".name"));
    if (!request_names.insert(change.chains[i].name).second) {
      return absl::InvalidArgumentError(absl::StrCat(path, ".name: \"", c.name, "\" appears twice in this request"));
    }
    if (targets.Has(c.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".name: \"", c.name, "\" is already the name of a target"));
    }
    RETURN_IF_ERROR(ValidateChain(c, path, kind_of));
    ConfigDiff d{ConfigObject::kChain, {}, ConfigChangeKind::kCreated, {}, {}};  // named below
    const ChainConfig* current = chains.Find(c.name);
    if (current != nullptr) {
      RETURN_IF_ERROR(check_owner(path, "chain", &c, *current));
      d.changed_fields = ChangedFields(*current, c);
      d.details = Details(current->Differences(c));
      d.change = d.changed_fields.empty() ? ConfigChangeKind::kUnchanged : ConfigChangeKind::kUpdated;
    }
    if (current == nullptr || !(*current == c)) chains.Put(std::move(c));
    result.changes.push_back(std::move(d));
  }
  // The diffs are named once every config is made: names copied between the
  // configs would leave holes among them when the answer is freed.
  for (size_t i = 0; i < change.targets.size(); ++i) result.changes[i].name = change.targets[i].name;
  for (size_t i = 0; i < change.chains.size(); ++i) {
    result.changes[change.targets.size() + i].name = change.chains[i].name;
  }
  // A file apply is the whole file-declared config: file objects it no longer
  // declares go away.
  std::vector<std::string> deleted_targets;
  std::vector<std::string> deleted_chains;
  if (options.from_files) {
    for (const ChainEntry& c : cur->chains) {
      if (!c.config->managed_by.empty() && !request_names.count(c.config->name)) {
        deleted_chains.push_back(c.config->name);
        chains.Erase(c.config->name);
        result.changes.push_back(ConfigDiff{ConfigObject::kChain, c.config->name, ConfigChangeKind::kDeleted, {}, {}});
      }
    }
    for (const TargetEntry& t : cur->targets) {
      if (t.config->managed_by.empty() || request_names.count(t.config->name)) continue;
      for (const auto& [name, chain] : chains.all()) {
        if (std::find(chain->targets.begin(), chain->targets.end(), t.config->name) != chain->targets.end()) {
          return absl::FailedPreconditionError(absl::StrCat("target \"", t.config->name, "\" was removed from ",
                                                            t.config->managed_by, " but chain \"", name,
                                                            "\" still lists it"));
        }
      }
      deleted_targets.push_back(t.config->name);
      targets.Erase(t.config->name);
      result.changes.push_back(ConfigDiff{ConfigObject::kTarget, t.config->name, ConfigChangeKind::kDeleted, {}, {}});
    }
  }

  if (targets.size() > options_.max_targets) {
    return absl::ResourceExhaustedError(absl::StrCat("targets: at most ", options_.max_targets,
                                                     " targets in all (--max-targets); this change would make ",
                                                     targets.size()));
  }
  if (chains.size() > options_.max_chains) {
    return absl::ResourceExhaustedError(absl::StrCat("chains: at most ", options_.max_chains,
                                                     " chains in all (--max-chains); this change would make ",
                                                     chains.size()));
  }

  RETURN_IF_ERROR(CheckSharedHealth(targets, chains, change));

  // A pinned chain must still list its pinned target.
  for (const ChainConfig& requested : change.chains) {
    const ChainEntry* old = cur->FindChain(requested.name);
    if (old == nullptr) continue;
    std::lock_guard<SmallMutex> lock(old->rt->mu);
    const std::string& pinned = old->rt->pinned;
    if (!pinned.empty() &&
        std::find(requested.targets.begin(), requested.targets.end(), pinned) == requested.targets.end()) {
      return absl::FailedPreconditionError(absl::StrCat("chain \"", requested.name, "\" is pinned to \"", pinned,
                                                        "\", which the new target list drops; unpin it first"));
    }
  }

  const bool any_change = std::any_of(result.changes.begin(), result.changes.end(),
                                      [](const ConfigDiff& d) { return d.change != ConfigChangeKind::kUnchanged; });
  result.generation = cur->generation;
  if (options.dry_run) return result;
  // Refused even without a diff: while writes fail, the config that matches
  // may be only in memory.
  RETURN_IF_ERROR(RefuseUnlessAccepting());
  if (!any_change) return result;
  Change& m = w.change();
  m.config_generation = cur->generation + 1;
  for (const ConfigDiff& d : result.changes) {
    if (d.change != ConfigChangeKind::kCreated && d.change != ConfigChangeKind::kUpdated) continue;
    if (d.what == ConfigObject::kTarget) m.put_targets.push_back(*targets.Find(d.name));
    if (d.what == ConfigObject::kChain) m.put_chains.push_back(*chains.Find(d.name));
  }
  m.deleted_targets = std::move(deleted_targets);
  m.deleted_chains = std::move(deleted_chains);

  auto next = BuildSnapshot(std::move(targets).Take(), std::move(chains).Take(), cur->generation + 1, cur.get());
  result.generation = next->generation;
  for (const ConfigDiff& d : result.changes) {
    if (d.change == ConfigChangeKind::kUnchanged) continue;
    w.events()->push_back(ConfigEvent(d.what, d.name, d.change, next->generation, now));
  }
  Install(std::move(next), now, w.events());
  w.Finish(&result.events);
  return result;
}

Events Engine::ChangeOneObjectLocked(ChangeWriter& w, const Snapshot& cur, ConfigObject what,
                                     absl::string_view name, ConfigChangeKind change, absl::Time now) {
  Change& m = w.change();
  m.config_generation = cur.generation + 1;
  // The next config: the current one with the change's puts and deletes.
  ConfigsByName<TargetConfig> targets(cur.targets);
  ConfigsByName<ChainConfig> chains(cur.chains);
  for (const std::string& n : m.deleted_targets) targets.Erase(n);
  for (const std::string& n : m.deleted_chains) chains.Erase(n);
  for (const TargetConfig& t : m.put_targets) targets.Put(t);
  for (const ChainConfig& c : m.put_chains) chains.Put(c);
  auto next = BuildSnapshot(std::move(targets).Take(), std::move(chains).Take(), m.config_generation, &cur);
  w.events()->push_back(ConfigEvent(what, std::string(name), change, m.config_generation, now));
  Install(std::move(next), now, w.events());
  Events events;
  w.Finish(&events);
  return events;
}

absl::StatusOr<Events> Engine::DeleteTarget(absl::string_view name, absl::Time now, absl::string_view actor) {
  ChangeWriter w(*this);
  w.set_actor(actor);
  std::shared_ptr<const Snapshot> cur = Load();
  const TargetEntry* t = cur->FindTarget(name);
  if (t == nullptr) return NotFound("target", name);
  if (!t->config->managed_by.empty()) return ManagedElsewhere("", "target", name, t->config->managed_by);
  if (t->chains_count != 0) {
    std::vector<std::string> names;
    for (uint32_t ci : cur->ChainsOf(*t)) names.push_back(cur->chains[ci].config->name);
    return absl::FailedPreconditionError(absl::StrCat("target \"", name, "\" is listed by chain(s) ",
                                                      absl::StrJoin(names, ", "), "; remove it from them first"));
  }
  RETURN_IF_ERROR(RefuseUnlessAccepting());
  w.change().deleted_targets.emplace_back(name);
  return ChangeOneObjectLocked(w, *cur, ConfigObject::kTarget, name, ConfigChangeKind::kDeleted, now);
}

absl::StatusOr<Events> Engine::DeleteChain(absl::string_view name, absl::Time now, absl::string_view actor) {
  ChangeWriter w(*this);
  w.set_actor(actor);
  std::shared_ptr<const Snapshot> cur = Load();
  const ChainEntry* c = cur->FindChain(name);
  if (c == nullptr) return NotFound("chain", name);
  if (!c->config->managed_by.empty()) return ManagedElsewhere("", "chain", name, c->config->managed_by);
  RETURN_IF_ERROR(RefuseUnlessAccepting());
  w.change().deleted_chains.emplace_back(name);
  return ChangeOneObjectLocked(w, *cur, ConfigObject::kChain, name, ConfigChangeKind::kDeleted, now);
}

absl::StatusOr<Events> Engine::SetTargetEnabled(absl::string_view name, bool enabled, absl::Time now,
                                                absl::string_view actor) {
  ChangeWriter w(*this);
  w.set_actor(actor);
  std::shared_ptr<const Snapshot> cur = Load();
  const TargetEntry* t = cur->FindTarget(name);
  if (t == nullptr) return NotFound("target", name);
  if (!t->config->managed_by.empty()) return ManagedElsewhere("", "target", name, t->config->managed_by);
  RETURN_IF_ERROR(RefuseUnlessAccepting());
  if (t->config->enabled == enabled) return Events{};
  w.change().put_targets.push_back(*t->config);
  w.change().put_targets.back().enabled = enabled;
  return ChangeOneObjectLocked(w, *cur, ConfigObject::kTarget, name, ConfigChangeKind::kUpdated, now);
}

absl::StatusOr<Events> Engine::Restore(RestoredState state, absl::Time now) {
  ChangeWriter w(*this);
  next_sequence_ = state.next_sequence;
  for (size_t i = 0; i < state.targets.size(); ++i) {
    RETURN_IF_ERROR(ValidateTarget(state.targets[i], absl::StrCat("stored targets[", i, "]")));
  }
  std::set<std::string> names;
  for (const auto& t : state.targets) names.insert(t.name);
  for (size_t i = 0; i < state.chains.size(); ++i) {
    RETURN_IF_ERROR(ValidateChain(state.chains[i], absl::StrCat("stored chains[", i, "]"),
                                  [&](const std::string& n) { return names.count(n) ? "target" : ""; }));
  }
  std::vector<std::shared_ptr<const TargetConfig>> targets;
  std::vector<std::shared_ptr<const ChainConfig>> chains;
  for (TargetConfig& t : state.targets) targets.push_back(std::make_shared<TargetConfig>(std::move(t)));
  for (ChainConfig& c : state.chains) chains.push_back(std::make_shared<ChainConfig>(std::move(c)));
  auto next = BuildSnapshot(std::move(targets), std::move(chains), state.generation, nullptr);
  Events ignored;  // restoring is not a change
  for (const TargetStateRecord& r : state.health) {
    const TargetEntry* t = next->FindTarget(r.name);
    if (t == nullptr) continue;
    std::lock_guard<SmallMutex> lock(t->rt->mu);
    t->rt->health.Restore(r.automatic, r.since, r.trips, r.recovery_passes);
    if (r.automatic == HealthState::kDown) t->rt->health.MakeProbeDue(now);
    t->rt->source = r.source;
    t->rt->reason = r.reason;
    t->rt->last_error = r.last_error;
    t->rt->last_error_time = r.last_error_time;
    t->rt->SetLastCheck(r.last_probe, r.last_check);
    t->rt->held_until_ns.store(HeldUntilNanos(r.held_until), std::memory_order_relaxed);
  }
  for (const auto& [name, manual] : state.manual) {
    const TargetEntry* t = next->FindTarget(name);
    if (t == nullptr) continue;
    std::lock_guard<SmallMutex> lock(t->rt->mu);
    t->rt->manual = true;
    t->rt->SetManual(manual.reason, manual.since);
  }
  for (const TargetEntry& t : next->targets) {
    std::lock_guard<SmallMutex> lock(t.rt->mu);
    PublishLocked(t, t.rt->Effective(), t.rt->source, t.rt->reason, now, &ignored);
  }
  for (const ChainStateRecord& r : state.chain_states) {
    const ChainEntry* c = next->FindChain(r.name);
    if (c == nullptr || PositionIn(*c, *next, r.active) < 0) continue;
    std::lock_guard<SmallMutex> lock(c->rt->mu);
    c->rt->initialized = true;
    c->rt->active = r.active;
    c->rt->state = r.state;
    c->rt->active_since = r.active_since;
    c->rt->last_switch = r.last_switch;
  }
  for (const auto& [chain, target] : state.pins) {
    const ChainEntry* c = next->FindChain(chain);
    if (c == nullptr || PositionIn(*c, *next, target) < 0) continue;
    std::lock_guard<SmallMutex> lock(c->rt->mu);
    c->rt->pinned = target;
  }
  {
    std::lock_guard<std::shared_mutex> lock(snapshot_mu_);
    snapshot_ = next;
  }
  // Chains with no stored state (or a stale one) settle now, as a Change.
  // An engine that may not write (a cluster replica, before it follows the
  // log) leaves that to the leader: it keeps the replicated state, and only a
  // chain with none gets one, in memory.
  const bool settle = accepting_changes();
  EvalContext ctx;
  ctx.reason = SwitchReason::kConfig;
  for (const ChainEntry& c : next->chains) {
    std::lock_guard<SmallMutex> lock(c.rt->mu);
    if (!settle && c.rt->initialized) continue;
    EvaluateChainLocked(*next, c, now, ctx, settle ? w.events() : &ignored);
  }
  Events events;
  w.Finish(&events);
  return events;
}


}  // namespace failover
