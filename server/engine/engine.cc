#include "server/engine/engine.h"

#include <algorithm>
#include <array>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "absl/hash/hash.h"
#include "absl/numeric/bits.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "server/engine/status_macros.h"
#include "server/engine/validate.h"

namespace failover {
namespace {

constexpr size_t kMaxSessions = 10000;
constexpr int64_t kNanosPerMinute = 60'000'000'000;

bool IsUsable(HealthState h) { return h == HealthState::kHealthy || h == HealthState::kUnknown; }

uint64_t Bit(size_t i) { return uint64_t{1} << i; }

// Position of a target in a chain's list, or -1. Compares indices, not
// names, so it touches only the chain's own index vector.
int PositionIn(const ChainEntry& chain, const Snapshot& snap, absl::string_view target) {
  auto it = snap.target_index.find(target);
  if (it == snap.target_index.end()) return -1;
  for (size_t i = 0; i < chain.targets.size(); ++i) {
    if (chain.targets[i] == it->second) return static_cast<int>(i);
  }
  return -1;
}

int PositionOf(const ChainEntry& chain, const Snapshot& snap, const TargetEntry& target) {
  const uint32_t index = static_cast<uint32_t>(&target - snap.targets.data());
  for (size_t i = 0; i < chain.targets.size(); ++i) {
    if (chain.targets[i] == index) return static_cast<int>(i);
  }
  return -1;
}

// The active target's position, cached per config generation (chain lock held).
int ActivePosition(const ChainEntry& chain, const Snapshot& snap, ChainRuntime& rt) {
  // Generation 0 is the empty start-up config, so 0 also means "not cached".
  if (rt.active_position_generation != snap.generation) {
    rt.active_position = rt.active.empty() ? -1 : PositionIn(chain, snap, rt.active);
    rt.active_position_generation = snap.generation;
  }
  return rt.active_position;
}

absl::Status NotFound(absl::string_view what, absl::string_view name) {
  return absl::NotFoundError(absl::StrCat(what, " \"", name, "\" not found"));
}

std::vector<std::string> ChangedFields(const TargetConfig& a, const TargetConfig& b) {
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
  if (a.managed_by != b.managed_by) f.push_back("managed_by");
  return f;
}

std::vector<std::string> ChangedFields(const ChainConfig& a, const ChainConfig& b) {
  std::vector<std::string> f;
  if (a.targets != b.targets) f.push_back("targets");
  if (a.strategy != b.strategy) f.push_back("strategy");
  if (a.policy != b.policy) f.push_back("policy");
  if (a.failover_enabled != b.failover_enabled) f.push_back("failover_enabled");
  if (a.managed_by != b.managed_by) f.push_back("managed_by");
  return f;
}

Event ConfigEvent(ConfigObject what, const std::string& name, ConfigChangeKind change, uint64_t generation,
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

absl::Status ManagedElsewhere(absl::string_view path, absl::string_view what, absl::string_view name,
                              absl::string_view file) {
  return absl::FailedPreconditionError(absl::StrCat(path, path.empty() ? "" : ": ", what, " \"", name,
                                                    "\" is managed by config file ", file,
                                                    "; change it there"));
}

}  // namespace

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
// Decisions: the id carries everything a report needs (chain, exclusions,
// whether replay is allowed, when it was made), so a pick stores nothing.
// Only a decision that saw a failure gets a record, for retries and the
// final error message.
// ---------------------------------------------------------------------------

struct Engine::DecisionId {
  uint32_t epoch = 0;
  uint64_t seq = 0;
  absl::Time time;
  uint64_t exclude_mask = 0;
  bool single_attempt = false;
  std::string chain;

  static bool Parse(absl::string_view text, DecisionId* out) {
    const size_t tilde = text.find('~');
    if (tilde == absl::string_view::npos) return false;
    out->chain = std::string(text.substr(tilde + 1));
    std::vector<absl::string_view> parts = absl::StrSplit(text.substr(0, tilde), '-');
    if (parts.size() != 5) return false;
    uint64_t epoch = 0, ms = 0, flags = 0;
    if (!absl::SimpleHexAtoi(parts[0], &epoch) || !absl::SimpleHexAtoi(parts[1], &out->seq) ||
        !absl::SimpleHexAtoi(parts[2], &ms) || !absl::SimpleHexAtoi(parts[3], &out->exclude_mask) ||
        !absl::SimpleHexAtoi(parts[4], &flags)) {
      return false;
    }
    out->epoch = static_cast<uint32_t>(epoch);
    out->time = absl::FromUnixMillis(static_cast<int64_t>(ms));
    out->single_attempt = (flags & 1) != 0;
    return !out->chain.empty();
  }
};

struct Engine::DecisionRecord {
  uint64_t tried_mask = 0;
  absl::flat_hash_map<std::string, uint32_t> retries_used;
  std::vector<std::pair<std::string, std::string>> failures;  // target, summary (last per target)

  void AddFailure(const std::string& target, const std::string& summary) {
    for (auto& [t, s] : failures) {
      if (t == target) {
        s = summary;
        return;
      }
    }
    failures.emplace_back(target, summary);
  }
  std::string Describe() const {
    return absl::StrJoin(failures, "; ", [](std::string* out, const auto& f) {
      absl::StrAppend(out, f.first, ": ", f.second);
    });
  }
};

class Engine::DecisionStore {
 public:
  explicit DecisionStore(size_t max_records) : max_per_shard_(std::max<size_t>(1, max_records / kShards)) {}

  // Copies the record for `seq` into `out`; false if there is none.
  bool Get(uint64_t seq, DecisionRecord* out) {
    Shard& s = shards_[seq % kShards];
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.records.find(seq);
    if (it == s.records.end()) return false;
    *out = it->second;
    return true;
  }
  void Put(uint64_t seq, absl::Time created, DecisionRecord record) {
    Shard& s = shards_[seq % kShards];
    std::lock_guard<std::mutex> lock(s.mu);
    auto [it, inserted] = s.records.insert_or_assign(seq, std::move(record));
    if (inserted) s.order.emplace_back(seq, created);
    while (s.records.size() > max_per_shard_ && !s.order.empty()) {
      s.records.erase(s.order.front().first);
      s.order.pop_front();
    }
  }
  void Erase(uint64_t seq) {
    Shard& s = shards_[seq % kShards];
    std::lock_guard<std::mutex> lock(s.mu);
    s.records.erase(seq);
  }
  void Expire(absl::Time cutoff) {
    for (Shard& s : shards_) {
      std::lock_guard<std::mutex> lock(s.mu);
      while (!s.order.empty() && s.order.front().second < cutoff) {
        s.records.erase(s.order.front().first);
        s.order.pop_front();
      }
    }
  }

 private:
  static constexpr size_t kShards = 16;
  struct Shard {
    std::mutex mu;
    absl::flat_hash_map<uint64_t, DecisionRecord> records;
    std::deque<std::pair<uint64_t, absl::Time>> order;
  };
  const size_t max_per_shard_;
  std::array<Shard, kShards> shards_;
};

// ---------------------------------------------------------------------------

namespace {
uint32_t RandomEpoch() {
  std::random_device rd;
  uint32_t e = rd();
  return e == 0 ? 1 : e;
}
}  // namespace

Engine::Engine(EngineOptions options)
    : options_(options),
      epoch_(options.instance_epoch != 0 ? options.instance_epoch : RandomEpoch()),
      decisions_(std::make_unique<DecisionStore>(options.max_decision_records)),
      snapshot_(std::make_shared<Snapshot>()) {}

Engine::~Engine() = default;

std::shared_ptr<const Snapshot> Engine::Load() const {
  std::shared_lock<std::shared_mutex> lock(snapshot_mu_);
  return snapshot_;
}

std::shared_ptr<const Snapshot> Engine::snapshot() const { return Load(); }
uint64_t Engine::generation() const { return Load()->generation; }

std::shared_ptr<Snapshot> Engine::BuildSnapshot(std::vector<TargetConfig> targets, std::vector<ChainConfig> chains,
                                                uint64_t generation, const Snapshot* previous) const {
  auto snap = std::make_shared<Snapshot>();
  snap->generation = generation;
  std::sort(targets.begin(), targets.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  std::sort(chains.begin(), chains.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  snap->targets.reserve(targets.size());
  for (TargetConfig& t : targets) {
    TargetEntry e;
    e.config = std::move(t);
    e.seed = absl::HashOf(e.config.name);
    const TargetEntry* old = previous ? previous->FindTarget(e.config.name) : nullptr;
    e.rt = old ? old->rt : std::make_shared<TargetRuntime>();
    e.config_generation = old && old->config == e.config ? old->config_generation : generation;
    snap->target_index[e.config.name] = static_cast<uint32_t>(snap->targets.size());
    snap->targets.push_back(std::move(e));
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
  for (ChainConfig& c : chains) {
    ChainEntry e;
    e.config = std::move(c);
    const Policy& p = e.config.policy;
    std::shared_ptr<const FailoverRules>& rules = compiled[FailoverRules::InputsOf(p)];
    if (rules == nullptr) {
      rules = std::make_shared<const FailoverRules>(FailoverRules::Compile(p, "policy").value());  // validated before
    }
    e.rules = rules;
    e.hot = ChainHot{e.config.strategy, e.config.failover_enabled, e.config.policy.max_attempts,
                     e.config.policy.max_replay_bytes, e.config.policy.recovery_min_dwell};
    const uint32_t chain_index = static_cast<uint32_t>(snap->chains.size());
    for (const std::string& name : e.config.targets) {
      const uint32_t ti = snap->target_index.at(name);
      e.targets.push_back(ti);
      TargetEntry& t = snap->targets[ti];
      e.slots.push_back(ChainSlot{&t, t.rt.get(), t.config.limit_rpm, t.config.HasHealthCheck()});
      t.chains.push_back(chain_index);
      // Health settings come from the first chain, in name order, listing it.
      if (!has_settings[ti]) {
        t.health = intern(HealthSettings::From(e.config.policy, t.config, options_.probe_jitter));
        has_settings[ti] = true;
      }
    }
    const ChainEntry* old = previous ? previous->FindChain(e.config.name) : nullptr;
    e.rt = old ? old->rt : std::make_shared<ChainRuntime>();
    snap->chain_index[e.config.name] = chain_index;
    snap->chains.push_back(std::move(e));
  }
  for (size_t i = 0; i < snap->targets.size(); ++i) {
    if (!has_settings[i]) {
      snap->targets[i].health = intern(HealthSettings::From(Policy(), snap->targets[i].config, options_.probe_jitter));
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
    std::lock_guard<std::mutex> lock(t.rt->mu);
    const HealthState before = t.rt->Effective();
    PublishLocked(t, before, Source::kConfig, t.config.enabled ? "enabled" : "disabled", now, events);
  }
  EvalContext ctx;
  ctx.reason = SwitchReason::kConfig;
  for (const ChainEntry& c : next->chains) {
    std::lock_guard<std::mutex> lock(c.rt->mu);
    EvaluateChainLocked(*next, c, now, ctx, events);
  }
}

void Engine::PublishLocked(const TargetEntry& t, HealthState before, Source source, const std::string& reason,
                           absl::Time now, Events* events) {
  TargetRuntime& rt = *t.rt;
  const HealthState after = !t.config.enabled ? HealthState::kDisabled
                            : rt.manual       ? HealthState::kManual
                                              : rt.health.state();
  rt.effective.store(static_cast<uint8_t>(after), std::memory_order_release);
  if (after == before) return;
  rt.source = source;
  rt.reason = reason;
  Event e;
  e.kind = EventKind::kTargetState;
  e.time = now;
  e.target = t.config.name;
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

void Engine::EvaluateChainLocked(const Snapshot& snap, const ChainEntry& chain, absl::Time now,
                                 const EvalContext& ctx, Events* events) {
  ChainRuntime& rt = *chain.rt;
  const size_t n = chain.slots.size();
  auto entry = [&](size_t i) -> const TargetEntry& { return *chain.slots[i].target; };
  auto health = [&](size_t i) { return chain.slots[i].rt->Effective(); };

  int first_usable = -1;
  for (size_t i = 0; i < n && first_usable < 0; ++i) {
    if (IsUsable(health(i))) first_usable = static_cast<int>(i);
  }
  const int current = rt.initialized ? ActivePosition(chain, snap, rt) : -1;

  SwitchReason reason = ctx.reason;
  // Points at a name owned by the config or the runtime: no copy unless it changes.
  const std::string* next_active;
  ChainState next_state;
  if (!rt.pinned.empty()) {
    next_active = &rt.pinned;
    next_state = ChainState::kPinned;
  } else if (first_usable < 0) {
    // Degraded: keep the active target; plans try everything in order.
    next_active = current >= 0 ? &rt.active : &entry(0).config.name;
    next_state = ChainState::kDegraded;
  } else {
    int next = current;
    if (!rt.initialized || ctx.fresh || current < 0 || !IsUsable(health(current))) {
      next = first_usable;  // down the list (or anywhere) at once
    } else if (first_usable < current) {
      // Back up only to a recovered target, and only after the dwell.
      const bool dwell_passed = now - rt.active_since >= chain.hot.min_dwell;
      for (int i = 0; i < current; ++i) {
        const bool waived = !ctx.waive_dwell_for.empty() && entry(i).config.name == ctx.waive_dwell_for;
        if (!IsUsable(health(i))) continue;
        if (waived || (health(i) == HealthState::kHealthy && dwell_passed)) {
          next = i;
          if (!waived) reason = SwitchReason::kRecovery;
          break;
        }
      }
    }
    next_active = &entry(next).config.name;
    next_state = next == 0 ? ChainState::kPrimary : ChainState::kFallback;
  }

  const bool active_changed = !rt.initialized || *next_active != rt.active;
  if (!active_changed && next_state == rt.state) return;
  Event e;
  e.kind = EventKind::kChainSwitched;
  e.time = now;
  e.chain = chain.config.name;
  e.from_target = rt.initialized ? rt.active : "";
  e.to_target = *next_active;
  e.from_chain_state = rt.state;
  e.to_chain_state = next_state;
  e.switch_reason = rt.initialized ? reason : SwitchReason::kInitial;
  e.detail = ctx.detail;
  if (active_changed) rt.active_since = now;
  rt.last_switch = now;
  rt.active = e.to_target;
  rt.active_position_generation = 0;  // recompute on next use
  rt.state = next_state;
  rt.initialized = true;
  events->push_back(std::move(e));
}

void Engine::EvaluateChainsOf(const Snapshot& snap, const TargetEntry& target, absl::Time now,
                              const EvalContext& ctx, Events* events) {
  for (uint32_t ci : target.chains) {
    const ChainEntry& c = snap.chains[ci];
    std::lock_guard<std::mutex> lock(c.rt->mu);
    EvaluateChainLocked(snap, c, now, ctx, events);
  }
}

void Engine::ApplyTimePassed(const Snapshot& snap, const TargetEntry& t, absl::Time now, Events* events) {
  HealthTransition tr;
  {
    std::lock_guard<std::mutex> lock(t.rt->mu);
    const HealthState before = t.rt->Effective();
    if (!t.rt->health.OnTimePassed(*t.health, now, &tr)) return;
    PublishLocked(t, before, Source::kAuto, tr.reason, now, events);
  }
  EvalContext ctx;
  ctx.reason = SwitchReason::kRecovery;
  ctx.detail = absl::StrCat(t.config.name, " ", tr.reason);
  EvaluateChainsOf(snap, t, now, ctx, events);
}

// ---------------------------------------------------------------------------
// Plans (DESIGN 3.4)
// ---------------------------------------------------------------------------

bool Engine::Saturated(TargetRuntime& rt, uint32_t limit_rpm, absl::Time now) {
  if (limit_rpm == 0) return false;
  const int64_t minute = absl::ToUnixNanos(now) / kNanosPerMinute;
  return rt.rpm_minute.load(std::memory_order_relaxed) == minute &&
         rt.rpm_count.load(std::memory_order_relaxed) >= limit_rpm;
}

void Engine::CountRequest(const TargetEntry& t, absl::Time now) {
  if (t.config.limit_rpm == 0) return;
  const int64_t minute = absl::ToUnixNanos(now) / kNanosPerMinute;
  int64_t seen = t.rt->rpm_minute.load(std::memory_order_relaxed);
  if (seen != minute && t.rt->rpm_minute.compare_exchange_strong(seen, minute)) {
    t.rt->rpm_count.store(0, std::memory_order_relaxed);
  }
  t.rt->rpm_count.fetch_add(1, std::memory_order_relaxed);
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
    out->push_back(PlannedAttempt{slot.target, slot.rt->Effective(), static_cast<uint32_t>(i)});
  };

  if (!rt.pinned.empty()) {
    const int p = PositionIn(chain, snap, rt.pinned);
    if (p < 0) return absl::InternalError(absl::StrCat("pinned target \"", rt.pinned, "\" not in chain"));
    if (!entry(p).config.enabled) {
      return absl::UnavailableError(absl::StrCat("chain \"", chain.config.name, "\" is pinned to \"", rt.pinned,
                                                 "\", which is disabled"));
    }
    if (exclude_mask & Bit(p)) {
      return absl::UnavailableError(absl::StrCat("chain \"", chain.config.name, "\" is pinned to \"", rt.pinned,
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
    const HealthState h = slot.rt->Effective();
    if (h == HealthState::kDisabled || h == HealthState::kManual) continue;
    any_enabled |= Bit(i);
    if (slot.rt->held_until_ns.load(std::memory_order_relaxed) > now_ns || Saturated(*slot.rt, slot.limit_rpm, now)) {
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
      if (!session_key.empty()) {
        auto it = rt.sessions.find(session_key);
        if (it != rt.sessions.end()) {
          const int p = PositionIn(chain, snap, it->second);
          if (p >= 0 && (eligible & Bit(p))) first = p;
        }
      }
      if (first < 0) {
        // Smooth weighted round robin over the eligible targets.
        int64_t total = 0;
        int64_t best_weight = INT64_MIN;
        for (size_t i = 0; i < n; ++i) {
          if (!(eligible & Bit(i)) || entry(i).config.weight == 0) continue;
          const int64_t w = entry(i).config.weight;
          total += w;
          int64_t& current = rt.rr_current[entry(i).config.name];
          current += w;
          if (current > best_weight) {
            best_weight = current;
            first = static_cast<int>(i);
          }
        }
        if (first >= 0) rt.rr_current[entry(first).config.name] -= total;
      }
      if (!session_key.empty() && first >= 0) {
        if (rt.sessions.size() >= kMaxSessions) rt.sessions.clear();
        rt.sessions[session_key] = entry(first).config.name;
      }
    } else if (strategy == Strategy::kLowestCost) {
      for (size_t i = 0; i < n; ++i) {
        if ((eligible & Bit(i)) && (first < 0 || entry(i).config.cost < entry(first).config.cost)) {
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
    const HealthState h = chain.slots[i].rt->Effective();
    why.push_back(absl::StrCat(entry(i).config.name, " (",
                               (exclude_mask & Bit(i)) ? "excluded" : HealthStateName(h), ")"));
  }
  return absl::UnavailableError(absl::StrCat("chain \"", chain.config.name,
                                             "\" has no target to try: ", absl::StrJoin(why, ", ")));
}

void Engine::MakeDecisionId(const std::string& chain, uint64_t exclude_mask, bool single_attempt, absl::Time now,
                            std::string* out) {
  const uint64_t seq = decision_seq_.fetch_add(1, std::memory_order_relaxed) + 1;
  out->clear();  // reuses the caller's buffer
  absl::StrAppend(out, absl::Hex(epoch_), "-", absl::Hex(seq), "-", absl::Hex(absl::ToUnixMillis(now)), "-",
                  absl::Hex(exclude_mask), "-", single_attempt ? 1 : 0, "~", chain);
}

absl::Status Engine::Pick(const PickRequest& req, absl::Time now, Plan* plan, Events* events) {
  std::shared_ptr<const Snapshot> snap = Load();
  const ChainEntry* chain = snap->FindChain(req.chain);
  if (chain == nullptr) return NotFound("chain", req.chain);
  uint64_t exclude_mask = 0;
  for (size_t i = 0; i < req.exclude_targets.size(); ++i) {
    const int p = PositionIn(*chain, *snap, req.exclude_targets[i]);
    if (p < 0) {
      return absl::InvalidArgumentError(absl::StrCat("exclude_targets[", i, "]: \"", req.exclude_targets[i],
                                                     "\" is not a target of chain \"", req.chain, "\""));
    }
    exclude_mask |= Bit(p);
  }
  for (const ChainSlot& slot : chain->slots) {
    if (!slot.has_health_check && slot.rt->Effective() == HealthState::kDown) {
      ApplyTimePassed(*snap, *slot.target, now, events);
    }
  }
  const bool single = req.body_bytes > chain->hot.max_replay_bytes || !chain->hot.failover_enabled;
  {
    std::lock_guard<std::mutex> lock(chain->rt->mu);
    EvaluateChainLocked(*snap, *chain, now, EvalContext{}, events);
    RETURN_IF_ERROR(
        BuildAttemptsLocked(*snap, *chain, now, exclude_mask, req.session_key, /*for_next=*/false, &plan->attempts));
    plan->state = chain->rt->state;
    plan->active_target = chain->rt->active;
  }
  size_t cap = plan->attempts.size();
  if (single) {
    cap = 1;
  } else if (chain->hot.max_attempts > 0) {
    cap = std::min<size_t>(cap, 1 + chain->hot.max_attempts);
  }
  plan->attempts.resize(cap);
  CountRequest(*plan->attempts.front().target, now);
  plan->generation = snap->generation;
  MakeDecisionId(chain->config.name, exclude_mask, single, now, &plan->decision_id);
  plan->snapshot = std::move(snap);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Outcomes and verdicts (DESIGN 3.5)
// ---------------------------------------------------------------------------

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
  bool known = parsed && id.epoch == epoch_ && now - id.time < options_.decision_ttl;
  const ChainEntry* chain = known ? snap->FindChain(id.chain) : nullptr;
  if (chain == nullptr) known = false;
  if (chain == nullptr && !req.chain.empty()) {
    chain = snap->FindChain(req.chain);
    if (chain == nullptr) return NotFound("chain", req.chain);
  }
  const int position = chain ? PositionOf(*chain, *snap, *target) : -1;
  if (chain != nullptr && position < 0) {
    return absl::InvalidArgumentError(absl::StrCat("target: \"", req.target, "\" is not a target of chain \"",
                                                   chain->config.name, "\""));
  }
  static const FailoverRules* const kDefaultRules = new FailoverRules();
  static const Policy* const kDefaultPolicy = new Policy();
  const FailoverRules& rules = chain ? *chain->rules : *kDefaultRules;
  const Policy& policy = chain ? chain->config.policy : *kDefaultPolicy;

  const Classification c = rules.Classify(req.facts);
  out->reason = c.reason;
  out->counted = c.counts;
  out->decision_known = known;
  const std::string summary = req.facts.success ? "" : FailoverRules::Summarize(req.facts);

  // Health first: the verdict's next target must see this outcome.
  HealthTransition tr;
  bool changed = false;
  {
    TargetRuntime& rt = *target->rt;
    std::lock_guard<std::mutex> lock(rt.mu);
    const HealthState before = rt.Effective();
    rt.last_activity_ns.store(absl::ToUnixNanos(now), std::memory_order_relaxed);
    if (req.facts.success) {
      changed = rt.health.OnPass(*target->health, now, /*strong=*/true, &tr);
    } else {
      if (c.counts || c.reason == Reason::kRateLimit || c.reason == Reason::kCapabilityGap) {
        rt.last_error = absl::StrCat(ReasonName(c.reason), ": ", summary);
        rt.last_error_time = now;
      }
      if (c.counts) changed = rt.health.OnFailure(*target->health, now, summary, target->seed, &tr);
      if (c.reason == Reason::kRateLimit) {
        const absl::Duration hold = std::min(
            req.facts.retry_after > absl::ZeroDuration() ? req.facts.retry_after : policy.rate_limit_hold,
            options_.max_rate_limit_hold);
        rt.held_until_ns.store(absl::ToUnixNanos(now + hold), std::memory_order_relaxed);
      }
    }
    if (changed) PublishLocked(*target, before, Source::kAuto, tr.reason, now, events);
    out->target_health = rt.Effective();
  }
  if (changed) {
    EvalContext ctx;
    ctx.reason = IsUsable(tr.to) ? SwitchReason::kRecovery : SwitchReason::kTrip;
    ctx.detail = absl::StrCat(target->config.name, " ", tr.reason);
    EvaluateChainsOf(*snap, *target, now, ctx, events);
  }

  auto finish_chain_state = [&]() {
    if (chain == nullptr) return;
    std::lock_guard<std::mutex> lock(chain->rt->mu);
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
  record.AddFailure(target->config.name, summary);

  const uint32_t retries_used = record.retries_used[target->config.name];
  if (!c.moves_on) {
    out->verdict = Verdict::kFail;
    out->error = absl::StrCat(target->config.name, ": ", summary);
  } else if (c.reason == Reason::kRateLimit && policy.rate_limit_on == RateLimitMode::kWait) {
    out->verdict = Verdict::kRetrySame;
    out->retry_delay = std::min(
        req.facts.retry_after > absl::ZeroDuration() ? req.facts.retry_after : policy.rate_limit_hold,
        options_.max_rate_limit_hold);
  } else if (retries_used < c.same_target_retries) {
    record.retries_used[target->config.name] = retries_used + 1;
    out->verdict = Verdict::kRetrySame;
    out->retry_delay = req.facts.retry_after > absl::ZeroDuration()
                           ? std::min(req.facts.retry_after, options_.max_rate_limit_hold)
                           : absl::Milliseconds(250) * (1 << std::min<uint32_t>(retries_used, 5));
  } else if (chain == nullptr) {
    out->verdict = Verdict::kFail;
    out->error = absl::StrCat(target->config.name, ": ", summary, " (no chain known for this report)");
  } else if ((known && id.single_attempt) || !chain->config.failover_enabled) {
    out->verdict = Verdict::kFail;
    out->error = absl::StrCat(target->config.name, ": ", summary,
                              !chain->config.failover_enabled ? " (failover disabled for this chain)"
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
        std::lock_guard<std::mutex> lock(chain->rt->mu);
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
        CountRequest(*out->next.target, now);
      }
    }
  }
  if (known && out->verdict != Verdict::kFail) {
    decisions_->Put(id.seq, id.time, std::move(record));
  } else if (known) {
    decisions_->Erase(id.seq);
  }
  finish_chain_state();
  out->snapshot = std::move(snap);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Health checks (DESIGN 3.6)
// ---------------------------------------------------------------------------

absl::Time Engine::ProbeDueLocked(const TargetEntry& t, absl::Time now) const {
  const TargetRuntime& rt = *t.rt;
  if (!t.config.enabled || !t.health->has_health_check) return absl::InfiniteFuture();
  // One lease at a time; a lease holds until strictly after its expiry.
  if (!rt.lease_id.empty() && rt.lease_expires >= now) return absl::InfiniteFuture();
  if (rt.probe_now) return now;
  switch (rt.health.state()) {
    case HealthState::kDown:
      return rt.health.probe_due();
    case HealthState::kRecovering:
      return rt.last_probe + t.health->probe_interval;
    default: {
      // Only a quiet target is probed: traffic counts as a check.
      const int64_t activity_ns = rt.last_activity_ns.load(std::memory_order_relaxed);
      const absl::Time activity = activity_ns == INT64_MIN ? absl::InfinitePast() : absl::FromUnixNanos(activity_ns);
      return std::max(activity, rt.last_probe) + t.health->probe_interval;
    }
  }
}

void Engine::ApplyProbeResult(const Snapshot& snap, const ProbeResult& result, absl::Time now,
                              ProbeResponse* response, Events* events) {
  // Lease ids are "<seq>:<target>", so a result finds its target without a global map.
  const size_t colon = result.lease_id.find(':');
  const TargetEntry* t = colon == std::string::npos ? nullptr : snap.FindTarget(result.lease_id.substr(colon + 1));
  if (t == nullptr) {
    ++response->ignored;
    return;
  }
  HealthTransition tr;
  bool changed = false;
  {
    TargetRuntime& rt = *t->rt;
    std::lock_guard<std::mutex> lock(rt.mu);
    // Unknown, expired or superseded lease, or the target's config changed since: stale.
    if (rt.lease_id != result.lease_id || rt.lease_expires < now || rt.lease_generation != t->config_generation) {
      ++response->ignored;
      return;
    }
    rt.lease_id.clear();
    ++response->accepted;
    rt.last_probe = now;
    const HealthState before = rt.Effective();
    const bool warm_local = t->config.kind == TargetKind::kLocal && t->config.warm;
    switch (result.outcome) {
      case ProbeOutcome::kPass:
        changed = rt.health.OnPass(*t->health, now, /*strong=*/rt.lease_recovery, &tr);
        break;
      case ProbeOutcome::kNotLoaded:
        // A warm local backend answered but the model is not loaded: alive.
        if (warm_local) changed = rt.health.OnPass(*t->health, now, /*strong=*/false, &tr);
        break;
      case ProbeOutcome::kThrottled:
        break;  // neither a pass nor a failure
      case ProbeOutcome::kFail: {
        const std::string summary = FailoverRules::Summarize(result.facts);
        rt.last_error = absl::StrCat("probe: ", summary);
        rt.last_error_time = now;
        changed = rt.health.OnFailure(*t->health, now, summary, t->seed, &tr);
        break;
      }
    }
    if (changed) PublishLocked(*t, before, Source::kProbe, tr.reason, now, events);
  }
  if (changed) {
    EvalContext ctx;
    ctx.reason = IsUsable(tr.to) ? SwitchReason::kRecovery : SwitchReason::kTrip;
    ctx.detail = absl::StrCat(t->config.name, " probe: ", tr.reason);
    EvaluateChainsOf(snap, *t, now, ctx, events);
  }
}

absl::Status Engine::Probe(const ProbeRequest& req, absl::Time now, ProbeResponse* response, Events* events) {
  std::shared_ptr<const Snapshot> snap = Load();
  for (const ProbeResult& r : req.results) ApplyProbeResult(*snap, r, now, response, events);
  const uint32_t max_tasks = req.max_tasks == 0 ? 16 : req.max_tasks;
  absl::Time next_due = absl::InfiniteFuture();
  for (const TargetEntry& t : snap->targets) {
    TargetRuntime& rt = *t.rt;
    std::lock_guard<std::mutex> lock(rt.mu);
    const absl::Time due = ProbeDueLocked(t, now);
    if (due > now || response->tasks.size() >= max_tasks) {
      next_due = std::min(next_due, due);
      continue;
    }
    ProbeTask task;
    task.lease_id = absl::StrCat(lease_seq_.fetch_add(1, std::memory_order_relaxed) + 1, ":", t.config.name);
    task.target = &t;
    task.kind = rt.health.state() == HealthState::kRecovering ? ProbeKind::kRecovery : ProbeKind::kLiveness;
    task.timeout = t.health->probe_timeout;
    task.generation = t.config_generation;
    rt.lease_id = task.lease_id;
    rt.lease_expires = now + task.timeout + options_.lease_grace;
    rt.lease_recovery = task.kind == ProbeKind::kRecovery;
    rt.lease_generation = t.config_generation;
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
    if (!target.empty() && t.config.name != target) continue;
    if (!t.config.enabled || !t.health->has_health_check) continue;
    std::lock_guard<std::mutex> lock(t.rt->mu);
    t.rt->probe_now = true;
    made_due.push_back(t.config.name);
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
    std::lock_guard<std::mutex> lock(t.rt->mu);
    n += !t.rt->lease_id.empty() && t.rt->lease_expires >= now;
  }
  return n;
}

void Engine::Tick(absl::Time now, Events* events) {
  std::shared_ptr<const Snapshot> snap = Load();
  for (const TargetEntry& t : snap->targets) {
    if (!t.health->has_health_check && t.rt->Effective() == HealthState::kDown) ApplyTimePassed(*snap, t, now, events);
  }
  for (const ChainEntry& c : snap->chains) {
    std::lock_guard<std::mutex> lock(c.rt->mu);
    EvaluateChainLocked(*snap, c, now, EvalContext{}, events);
  }
  decisions_->Expire(now - options_.decision_ttl);
}

// ---------------------------------------------------------------------------
// Config changes
// ---------------------------------------------------------------------------

absl::StatusOr<ApplyResult> Engine::Apply(const ConfigChange& change, const ApplyOptions& options, absl::Time now) {
  std::lock_guard<std::mutex> admin(admin_mu_);
  std::shared_ptr<const Snapshot> cur = Load();
  std::map<std::string, TargetConfig> targets;
  std::map<std::string, ChainConfig> chains;
  for (const TargetEntry& t : cur->targets) targets[t.config.name] = t.config;
  for (const ChainEntry& c : cur->chains) chains[c.config.name] = c.config;

  ApplyResult result;
  auto check_owner = [&](const std::string& path, const char* what, const std::string& name,
                         const std::string& owner) -> absl::Status {
    if (!options.from_files && !owner.empty()) return ManagedElsewhere(path, what, name, owner);
    return absl::OkStatus();
  };
  std::set<std::string> request_names;
  for (size_t i = 0; i < change.targets.size(); ++i) {
    const std::string path = absl::StrCat("targets[", i, "]");
    TargetConfig t = change.targets[i];
    if (!options.from_files) t.managed_by.clear();
    RETURN_IF_ERROR(ValidateTarget(t, path));
    if (!request_names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(path, ".name: \"", t.name, "\" appears twice in this request"));
    }
    if (chains.count(t.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".name: \"", t.name, "\" is already the name of a chain"));
    }
    if (t.warm && t.kind == TargetKind::kRemote) {
      result.warnings.push_back(absl::StrCat(path, ".warm: has no effect on a remote target (\"", t.name, "\")"));
    }
    ConfigDiff d{ConfigObject::kTarget, t.name, ConfigChangeKind::kCreated, {}};
    auto it = targets.find(t.name);
    if (it != targets.end()) {
      RETURN_IF_ERROR(check_owner(path, "target", t.name, it->second.managed_by));
      d.changed_fields = ChangedFields(it->second, t);
      d.change = d.changed_fields.empty() ? ConfigChangeKind::kUnchanged : ConfigChangeKind::kUpdated;
    }
    targets[t.name] = std::move(t);
    result.changes.push_back(std::move(d));
  }
  auto kind_of = [&](const std::string& name) -> std::string {
    if (targets.count(name)) return "target";
    if (chains.count(name)) return "chain";
    return "";
  };
  for (size_t i = 0; i < change.chains.size(); ++i) {
    const std::string path = absl::StrCat("chains[", i, "]");
    ChainConfig c = change.chains[i];
    if (!options.from_files) c.managed_by.clear();
    RETURN_IF_ERROR(ValidateName(c.name, path + ".name"));
    if (!request_names.insert(c.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(path, ".name: \"", c.name, "\" appears twice in this request"));
    }
    if (targets.count(c.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".name: \"", c.name, "\" is already the name of a target"));
    }
    RETURN_IF_ERROR(ValidateChain(c, path, kind_of));
    ConfigDiff d{ConfigObject::kChain, c.name, ConfigChangeKind::kCreated, {}};
    auto it = chains.find(c.name);
    if (it != chains.end()) {
      RETURN_IF_ERROR(check_owner(path, "chain", c.name, it->second.managed_by));
      d.changed_fields = ChangedFields(it->second, c);
      d.change = d.changed_fields.empty() ? ConfigChangeKind::kUnchanged : ConfigChangeKind::kUpdated;
    }
    chains[c.name] = std::move(c);
    result.changes.push_back(std::move(d));
  }
  // A file apply is the whole file-declared config: file objects it no longer
  // declares go away.
  std::vector<std::string> deleted_targets;
  std::vector<std::string> deleted_chains;
  if (options.from_files) {
    for (const ChainEntry& c : cur->chains) {
      if (!c.config.managed_by.empty() && !request_names.count(c.config.name)) {
        deleted_chains.push_back(c.config.name);
        chains.erase(c.config.name);
        result.changes.push_back(ConfigDiff{ConfigObject::kChain, c.config.name, ConfigChangeKind::kDeleted, {}});
      }
    }
    for (const TargetEntry& t : cur->targets) {
      if (t.config.managed_by.empty() || request_names.count(t.config.name)) continue;
      for (const auto& [name, chain] : chains) {
        if (std::find(chain.targets.begin(), chain.targets.end(), t.config.name) != chain.targets.end()) {
          return absl::FailedPreconditionError(absl::StrCat("target \"", t.config.name, "\" was removed from ",
                                                            t.config.managed_by, " but chain \"", name,
                                                            "\" still lists it"));
        }
      }
      deleted_targets.push_back(t.config.name);
      targets.erase(t.config.name);
      result.changes.push_back(ConfigDiff{ConfigObject::kTarget, t.config.name, ConfigChangeKind::kDeleted, {}});
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

  // A pinned chain must still list its pinned target.
  for (const ChainConfig& requested : change.chains) {
    const ChainEntry* old = cur->FindChain(requested.name);
    if (old == nullptr) continue;
    std::lock_guard<std::mutex> lock(old->rt->mu);
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
  if (options.dry_run || !any_change) return result;

  Mutation m;
  m.kind = Mutation::Kind::kConfig;
  m.generation = cur->generation + 1;
  for (const ConfigDiff& d : result.changes) {
    if (d.change != ConfigChangeKind::kCreated && d.change != ConfigChangeKind::kUpdated) continue;
    if (d.what == ConfigObject::kTarget) m.put_targets.push_back(targets.at(d.name));
    if (d.what == ConfigObject::kChain) m.put_chains.push_back(chains.at(d.name));
  }
  m.deleted_targets = std::move(deleted_targets);
  m.deleted_chains = std::move(deleted_chains);
  RETURN_IF_ERROR(Commit(m));

  std::vector<TargetConfig> tv;
  std::vector<ChainConfig> cv;
  for (auto& [_, t] : targets) tv.push_back(std::move(t));
  for (auto& [_, c] : chains) cv.push_back(std::move(c));
  auto next = BuildSnapshot(std::move(tv), std::move(cv), cur->generation + 1, cur.get());
  result.generation = next->generation;
  for (const ConfigDiff& d : result.changes) {
    if (d.change == ConfigChangeKind::kUnchanged) continue;
    result.events.push_back(ConfigEvent(d.what, d.name, d.change, next->generation, now));
  }
  Install(std::move(next), now, &result.events);
  return result;
}

absl::StatusOr<Events> Engine::CommitOneChangeLocked(const Snapshot& cur, Mutation m, ConfigObject what,
                                                    absl::string_view name, ConfigChangeKind change, absl::Time now) {
  m.kind = Mutation::Kind::kConfig;
  m.generation = cur.generation + 1;
  RETURN_IF_ERROR(Commit(m));
  // The next config: the current one with the mutation's puts and deletes.
  std::map<std::string, TargetConfig> targets;
  std::map<std::string, ChainConfig> chains;
  for (const TargetEntry& e : cur.targets) targets[e.config.name] = e.config;
  for (const ChainEntry& e : cur.chains) chains[e.config.name] = e.config;
  for (const std::string& n : m.deleted_targets) targets.erase(n);
  for (const std::string& n : m.deleted_chains) chains.erase(n);
  for (TargetConfig& t : m.put_targets) targets[t.name] = std::move(t);
  for (ChainConfig& c : m.put_chains) chains[c.name] = std::move(c);
  std::vector<TargetConfig> tv;
  std::vector<ChainConfig> cv;
  for (auto& [_, t] : targets) tv.push_back(std::move(t));
  for (auto& [_, c] : chains) cv.push_back(std::move(c));
  auto next = BuildSnapshot(std::move(tv), std::move(cv), m.generation, &cur);
  Events events;
  events.push_back(ConfigEvent(what, std::string(name), change, m.generation, now));
  Install(std::move(next), now, &events);
  return events;
}

absl::StatusOr<Events> Engine::DeleteTarget(absl::string_view name, absl::Time now) {
  std::lock_guard<std::mutex> admin(admin_mu_);
  std::shared_ptr<const Snapshot> cur = Load();
  const TargetEntry* t = cur->FindTarget(name);
  if (t == nullptr) return NotFound("target", name);
  if (!t->config.managed_by.empty()) return ManagedElsewhere("", "target", name, t->config.managed_by);
  if (!t->chains.empty()) {
    std::vector<std::string> names;
    for (uint32_t ci : t->chains) names.push_back(cur->chains[ci].config.name);
    return absl::FailedPreconditionError(absl::StrCat("target \"", name, "\" is listed by chain(s) ",
                                                      absl::StrJoin(names, ", "), "; remove it from them first"));
  }
  Mutation m;
  m.deleted_targets.emplace_back(name);
  return CommitOneChangeLocked(*cur, std::move(m), ConfigObject::kTarget, name, ConfigChangeKind::kDeleted, now);
}

absl::StatusOr<Events> Engine::DeleteChain(absl::string_view name, absl::Time now) {
  std::lock_guard<std::mutex> admin(admin_mu_);
  std::shared_ptr<const Snapshot> cur = Load();
  const ChainEntry* c = cur->FindChain(name);
  if (c == nullptr) return NotFound("chain", name);
  if (!c->config.managed_by.empty()) return ManagedElsewhere("", "chain", name, c->config.managed_by);
  Mutation m;
  m.deleted_chains.emplace_back(name);
  return CommitOneChangeLocked(*cur, std::move(m), ConfigObject::kChain, name, ConfigChangeKind::kDeleted, now);
}

absl::StatusOr<Events> Engine::SetTargetEnabled(absl::string_view name, bool enabled, absl::Time now) {
  std::lock_guard<std::mutex> admin(admin_mu_);
  std::shared_ptr<const Snapshot> cur = Load();
  const TargetEntry* t = cur->FindTarget(name);
  if (t == nullptr) return NotFound("target", name);
  if (t->config.enabled == enabled) return Events{};
  if (!t->config.managed_by.empty()) return ManagedElsewhere("", "target", name, t->config.managed_by);
  Mutation m;
  m.put_targets.push_back(t->config);
  m.put_targets.back().enabled = enabled;
  return CommitOneChangeLocked(*cur, std::move(m), ConfigObject::kTarget, name, ConfigChangeKind::kUpdated, now);
}

absl::StatusOr<Events> Engine::Restore(const RestoredState& state, absl::Time now) {
  std::lock_guard<std::mutex> admin(admin_mu_);
  for (size_t i = 0; i < state.targets.size(); ++i) {
    RETURN_IF_ERROR(ValidateTarget(state.targets[i], absl::StrCat("stored targets[", i, "]")));
  }
  std::set<std::string> names;
  for (const auto& t : state.targets) names.insert(t.name);
  for (size_t i = 0; i < state.chains.size(); ++i) {
    RETURN_IF_ERROR(ValidateChain(state.chains[i], absl::StrCat("stored chains[", i, "]"),
                                  [&](const std::string& n) { return names.count(n) ? "target" : ""; }));
  }
  auto next = BuildSnapshot(state.targets, state.chains, state.generation, nullptr);
  Events ignored;  // restoring is not a change
  for (const RestoredTarget& r : state.health) {
    const TargetEntry* t = next->FindTarget(r.name);
    if (t == nullptr) continue;
    std::lock_guard<std::mutex> lock(t->rt->mu);
    t->rt->health.Restore(r.automatic, r.since, r.trips, r.recovery_passes);
    if (r.automatic == HealthState::kDown) t->rt->health.MakeProbeDue(now);
    t->rt->source = r.source;
    t->rt->reason = r.reason;
    t->rt->last_error = r.last_error;
    t->rt->last_error_time = r.last_error_time;
    t->rt->last_probe = r.last_probe;
  }
  for (const auto& [name, manual] : state.manual) {
    const TargetEntry* t = next->FindTarget(name);
    if (t == nullptr) continue;
    std::lock_guard<std::mutex> lock(t->rt->mu);
    t->rt->manual = true;
    t->rt->manual_reason = manual.reason;
    t->rt->manual_since = manual.since;
  }
  for (const TargetEntry& t : next->targets) {
    std::lock_guard<std::mutex> lock(t.rt->mu);
    PublishLocked(t, t.rt->Effective(), t.rt->source, t.rt->reason, now, &ignored);
  }
  for (const RestoredChain& r : state.chain_states) {
    const ChainEntry* c = next->FindChain(r.name);
    if (c == nullptr || PositionIn(*c, *next, r.active) < 0) continue;
    std::lock_guard<std::mutex> lock(c->rt->mu);
    c->rt->initialized = true;
    c->rt->active = r.active;
    c->rt->state = r.state;
    c->rt->active_since = r.active_since;
    c->rt->last_switch = r.last_switch;
  }
  for (const auto& [chain, target] : state.pins) {
    const ChainEntry* c = next->FindChain(chain);
    if (c == nullptr || PositionIn(*c, *next, target) < 0) continue;
    std::lock_guard<std::mutex> lock(c->rt->mu);
    c->rt->pinned = target;
  }
  {
    std::lock_guard<std::shared_mutex> lock(snapshot_mu_);
    snapshot_ = next;
  }
  // Chains with no stored state (or a stale one) settle now, with events.
  Events events;
  EvalContext ctx;
  ctx.reason = SwitchReason::kConfig;
  for (const ChainEntry& c : next->chains) {
    std::lock_guard<std::mutex> lock(c.rt->mu);
    EvaluateChainLocked(*next, c, now, ctx, &events);
  }
  return events;
}

// ---------------------------------------------------------------------------
// Admin actions (DESIGN 3.8)
// ---------------------------------------------------------------------------

absl::StatusOr<Events> Engine::Pin(absl::string_view chain_name, absl::string_view target, absl::Time now) {
  std::lock_guard<std::mutex> admin(admin_mu_);
  std::shared_ptr<const Snapshot> snap = Load();
  const ChainEntry* chain = snap->FindChain(chain_name);
  if (chain == nullptr) return NotFound("chain", chain_name);
  if (PositionIn(*chain, *snap, target) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("target: \"", target, "\" is not a target of chain \"", chain_name, "\""));
  }
  Events events;
  std::lock_guard<std::mutex> lock(chain->rt->mu);
  if (chain->rt->pinned == target) return events;
  Mutation m;
  m.kind = Mutation::Kind::kPin;
  m.chain = std::string(chain_name);
  m.target = std::string(target);
  RETURN_IF_ERROR(Commit(m));
  chain->rt->pinned = std::string(target);
  EvalContext ctx;
  ctx.reason = SwitchReason::kPin;
  ctx.detail = absl::StrCat("pinned to ", target);
  EvaluateChainLocked(*snap, *chain, now, ctx, &events);
  return events;
}

absl::StatusOr<Events> Engine::Unpin(absl::string_view chain_name, absl::Time now) {
  std::lock_guard<std::mutex> admin(admin_mu_);
  std::shared_ptr<const Snapshot> snap = Load();
  const ChainEntry* chain = snap->FindChain(chain_name);
  if (chain == nullptr) return NotFound("chain", chain_name);
  Events events;
  std::lock_guard<std::mutex> lock(chain->rt->mu);
  if (chain->rt->pinned.empty()) return events;
  Mutation m;
  m.kind = Mutation::Kind::kPin;
  m.chain = std::string(chain_name);
  RETURN_IF_ERROR(Commit(m));
  chain->rt->pinned.clear();
  EvalContext ctx;
  ctx.reason = SwitchReason::kUnpin;
  ctx.fresh = true;
  EvaluateChainLocked(*snap, *chain, now, ctx, &events);
  return events;
}

absl::StatusOr<Events> Engine::TriggerManualFailover(absl::string_view name, absl::string_view reason,
                                                     absl::Time now) {
  std::lock_guard<std::mutex> admin(admin_mu_);
  std::shared_ptr<const Snapshot> snap = Load();
  const TargetEntry* t = snap->FindTarget(name);
  if (t == nullptr) return NotFound("target", name);
  bool can_fail_over = false;
  for (uint32_t ci : t->chains) {
    const ChainEntry& c = snap->chains[ci];
    if (!c.config.failover_enabled) continue;
    for (uint32_t other : c.targets) {
      if (&snap->targets[other] != t && snap->targets[other].config.enabled) can_fail_over = true;
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
    std::lock_guard<std::mutex> lock(t->rt->mu);
    if (t->rt->manual) return events;  // already applied: no second event
    Mutation m;
    m.kind = Mutation::Kind::kManual;
    m.target = std::string(name);
    m.manual = true;
    m.reason = why;
    m.since = now;
    RETURN_IF_ERROR(Commit(m));
    const HealthState before = t->rt->Effective();
    t->rt->manual = true;
    t->rt->manual_reason = why;
    t->rt->manual_since = now;
    PublishLocked(*t, before, Source::kManual, why, now, &events);
  }
  EvalContext ctx;
  ctx.reason = SwitchReason::kManual;
  ctx.detail = absl::StrCat(name, " manual: ", why);
  EvaluateChainsOf(*snap, *t, now, ctx, &events);
  return events;
}

absl::StatusOr<Events> Engine::CancelManualFailover(absl::string_view name, absl::Time now) {
  std::lock_guard<std::mutex> admin(admin_mu_);
  std::shared_ptr<const Snapshot> snap = Load();
  const TargetEntry* t = snap->FindTarget(name);
  if (t == nullptr) return NotFound("target", name);
  Events events;
  {
    std::lock_guard<std::mutex> lock(t->rt->mu);
    if (!t->rt->manual) return events;
    Mutation m;
    m.kind = Mutation::Kind::kManual;
    m.target = std::string(name);
    RETURN_IF_ERROR(Commit(m));
    const HealthState before = t->rt->Effective();
    t->rt->manual = false;
    t->rt->manual_reason.clear();
    PublishLocked(*t, before, Source::kManual, "manual failover cancelled", now, &events);
  }
  EvalContext ctx;
  ctx.reason = SwitchReason::kCancel;
  ctx.detail = absl::StrCat(name, " manual failover cancelled");
  ctx.waive_dwell_for = std::string(name);
  EvaluateChainsOf(*snap, *t, now, ctx, &events);
  return events;
}

// ---------------------------------------------------------------------------
// Views
// ---------------------------------------------------------------------------

TargetStatus Engine::StatusOf(const Snapshot& snap, const TargetEntry& t) const {
  TargetStatus s;
  s.name = t.config.name;
  s.enabled = t.config.enabled;
  {
    std::lock_guard<std::mutex> lock(t.rt->mu);
    s.health = t.rt->Effective();
    s.automatic = t.rt->health.state();
    s.source = t.rt->source;
    s.reason = t.rt->manual ? t.rt->manual_reason : t.rt->reason;
    s.since = t.rt->manual ? t.rt->manual_since : t.rt->health.since();
    s.last_probe = t.rt->last_probe;
    s.last_error = t.rt->last_error;
    s.last_error_time = t.rt->last_error_time;
    s.recovery_passes = t.rt->health.recovery_passes();
    s.trips = t.rt->health.trips();
  }
  const int64_t held = t.rt->held_until_ns.load(std::memory_order_relaxed);
  if (held != INT64_MIN) s.held_until = absl::FromUnixNanos(held);
  for (uint32_t ci : t.chains) s.chains.push_back(snap.chains[ci].config.name);
  return s;
}

ChainStatus Engine::StatusOf(const Snapshot& snap, const ChainEntry& c) const {
  ChainStatus s;
  s.name = c.config.name;
  {
    std::lock_guard<std::mutex> lock(c.rt->mu);
    s.state = c.rt->state;
    s.active_target = c.rt->active;
    s.active_since = c.rt->active_since;
    s.last_switch = c.rt->last_switch;
    s.pinned_target = c.rt->pinned;
  }
  for (uint32_t ti : c.targets) s.targets.push_back(StatusOf(snap, snap.targets[ti]));
  return s;
}

absl::StatusOr<ChainView> Engine::GetChain(absl::string_view name) const {
  std::shared_ptr<const Snapshot> snap = Load();
  const ChainEntry* c = snap->FindChain(name);
  if (c == nullptr) return NotFound("chain", name);
  return ChainView{c->config, StatusOf(*snap, *c)};
}

absl::StatusOr<TargetView> Engine::GetTarget(absl::string_view name) const {
  std::shared_ptr<const Snapshot> snap = Load();
  const TargetEntry* t = snap->FindTarget(name);
  if (t == nullptr) return NotFound("target", name);
  return TargetView{t->config, StatusOf(*snap, *t)};
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
  std::shared_ptr<const Snapshot> snap = Load();
  std::vector<ChainView> out;
  for (const ChainEntry& c : snap->chains) out.push_back(ChainView{c.config, StatusOf(*snap, c)});
  return out;
}

std::vector<TargetView> Engine::ListTargets() const {
  std::shared_ptr<const Snapshot> snap = Load();
  std::vector<TargetView> out;
  for (const TargetEntry& t : snap->targets) out.push_back(TargetView{t.config, StatusOf(*snap, t)});
  return out;
}

}  // namespace failover
