// Helpers shared by the engine's source files. Not part of the engine's API.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/engine/engine.h"

namespace failover::internal {

inline constexpr size_t kMaxSessions = 10000;
inline constexpr int64_t kNanosPerMinute = 60'000'000'000;

// One kind of object (targets or chains) of the config a change is building,
// by name. It starts as the current snapshot's objects and shares their
// configs: a change copies only the objects it puts, whatever the config's
// size. Each key views the name inside its own config, which the map holds.
template <class Config>
class ConfigsByName {
 public:
  using Ptr = std::shared_ptr<const Config>;

  template <class Entries>
  explicit ConfigsByName(const Entries& entries) {
    for (const auto& e : entries) by_name_.emplace_hint(by_name_.end(), e.config->name, e.config);
  }

  const Config* Find(absl::string_view name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second.get();
  }
  bool Has(absl::string_view name) const { return by_name_.contains(name); }
  size_t size() const { return by_name_.size(); }
  void Put(Ptr config) {
    by_name_.erase(config->name);  // its key views the config it replaces
    const absl::string_view name = config->name;
    by_name_.emplace(name, std::move(config));
  }
  // Made as a Config, not a const one: BuildSnapshot may set the policy of a
  // config that nothing else holds yet.
  void Put(Config config) { Put(std::make_shared<Config>(std::move(config))); }
  void Erase(absl::string_view name) { by_name_.erase(name); }

  // In name order.
  const absl::btree_map<absl::string_view, Ptr>& all() const { return by_name_; }
  std::vector<Ptr> Take() && {
    std::vector<Ptr> out;
    out.reserve(by_name_.size());
    for (auto& [_, config] : by_name_) out.push_back(std::move(config));
    by_name_.clear();
    return out;
  }

 private:
  absl::btree_map<absl::string_view, Ptr> by_name_;
};

inline bool IsUsable(HealthState h) { return h == HealthState::kHealthy || h == HealthState::kUnknown; }

inline uint64_t Bit(size_t i) { return uint64_t{1} << i; }

// Position of a target in a chain's list, or -1. Compares entries, not
// names, so it touches only the chain's own slots.
inline int PositionOf(const ChainEntry& chain, const TargetEntry& target) {
  for (size_t i = 0; i < chain.slots.size(); ++i) {
    if (chain.slots[i].target == &target) return static_cast<int>(i);
  }
  return -1;
}

inline int PositionIn(const ChainEntry& chain, const Snapshot& snap, absl::string_view target) {
  const TargetEntry* t = snap.FindTarget(target);
  return t == nullptr ? -1 : PositionOf(chain, *t);
}

// The active target's position, cached per config generation (chain lock held).
inline int ActivePosition(const ChainEntry& chain, const Snapshot& snap, ChainRuntime& rt) {
  // Generation 0 is the empty start-up config, so 0 also means "not cached".
  if (rt.active_position_generation != snap.generation) {
    rt.active_position = rt.active.empty() ? -1 : PositionIn(chain, snap, rt.active);
    rt.active_position_generation = snap.generation;
  }
  return rt.active_position;
}


// One reported success latency into the target's decaying average: a new
// value weighs a fifth, so roughly the last ten successes decide.
inline void RecordLatency(TargetRuntime& rt, absl::Duration latency) {
  const int64_t x = absl::ToInt64Nanoseconds(std::min(latency, absl::Hours(1)));
  const int64_t old = rt.latency_ns.load(std::memory_order_relaxed);
  rt.latency_ns.store(old < 0 ? x : old + (x - old) / 5, std::memory_order_relaxed);
}

inline absl::Status NotFound(absl::string_view what, absl::string_view name) {
  return absl::NotFoundError(absl::StrCat(what, " \"", name, "\" not found"));
}

inline std::vector<std::string> ChangedFields(const TargetConfig& a, const TargetConfig& b) {
  std::vector<std::string> f;
  if (a.kind != b.kind) f.push_back("kind");
  if (a.upstream_model != b.upstream_model) f.push_back("upstream_model");
  if (a.warm != b.warm) f.push_back("warm");
  if (a.weight != b.weight) f.push_back("weight");
  if (a.cost != b.cost) f.push_back("cost");
  if (a.timeout != b.timeout) f.push_back("timeout");
  if (a.max_retries != b.max_retries) f.push_back("max_retries");
  if (a.limit_rpm != b.limit_rpm) f.push_back("limits");
  if (a.labels != b.labels) f.push_back("labels");
  if (a.enabled != b.enabled) f.push_back("enabled");
  if (a.health != b.health) f.push_back("health");
  if (a.managed_by != b.managed_by) f.push_back("managed_by");
  return f;
}

inline std::vector<std::string> ChangedFields(const ChainConfig& a, const ChainConfig& b) {
  std::vector<std::string> f;
  if (a.targets != b.targets) f.push_back("targets");
  if (a.strategy != b.strategy) f.push_back("strategy");
  if (a.policy != b.policy) f.push_back("policy");
  if (a.failover_enabled != b.failover_enabled) f.push_back("failover_enabled");
  if (a.shadows != b.shadows) f.push_back("shadow");
  if (a.managed_by != b.managed_by) f.push_back("managed_by");
  return f;
}

inline Event ConfigEvent(ConfigObject what, const std::string& name, ConfigChangeKind change, uint64_t generation,
                  absl::Time now) {
  Event e;
  e.kind = EventKind::kConfigChanged;
  e.time = now;
  e.what = what;
  e.object_name = name;
  e.change = change;
  e.generation = generation;
  return e;
}

inline absl::Status ManagedElsewhere(absl::string_view path, absl::string_view what, absl::string_view name,
                              absl::string_view file) {
  return absl::FailedPreconditionError(absl::StrCat(path, path.empty() ? "" : ": ", what, " \"", name,
                                                    "\" is managed by config file ", file,
                                                    "; change it there"));
}


}  // namespace failover::internal
