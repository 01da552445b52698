// The engine's model: configuration (targets, chains, policies), states and
// events. Plain structs; no protobuf. server/api and server/config convert to
// and from these.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/heap_optional.h"
#include "common/shared_value.h"

namespace failover {

enum class TargetKind : uint8_t { kRemote, kLocal };
enum class Strategy : uint8_t { kFailover, kRoundRobin, kLowestCost, kLeastLatency };
enum class RateLimitMode : uint8_t { kFailover, kWait };

enum class HealthState : uint8_t { kUnknown, kHealthy, kDown, kRecovering, kDisabled, kManual };
enum class ChainState : uint8_t { kPrimary, kFallback, kDegraded, kPinned };
enum class Source : uint8_t { kAuto, kProbe, kManual, kConfig };
enum class SwitchReason : uint8_t { kInitial, kTrip, kRecovery, kPin, kUnpin, kManual, kCancel, kConfig };

// Classified cause of a failed attempt (DESIGN 3.5). kNone is a success.
enum class Reason : uint8_t {
  kNone,
  kNetwork,
  kTimeout,
  kOverloaded,
  kServerError,
  kRateLimit,
  kAuth,
  kBilling,
  kModelNotFound,
  kCapabilityGap,
  kAdmission,
  kContextOverflow,
  kClientError,
  kCancelled,
  kUnknown,
  // Not a classification: a retry the chain's retry budget refused.
  kRetryBudget,
};
inline constexpr int kReasonCount = static_cast<int>(Reason::kRetryBudget) + 1;

const char* HealthStateName(HealthState s);
const char* ChainStateName(ChainState s);
const char* SourceName(Source s);
const char* SwitchReasonName(SwitchReason r);
const char* ReasonName(Reason r);
// As config files write it: "failover", "round_robin", "lowest_cost", "least_latency".
const char* StrategyName(Strategy s);
// "network" -> kNetwork. False for an unknown name.
bool ParseReason(const std::string& name, Reason* out);

// ---------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------

// One setting that differs between two versions of an object.
struct SettingDifference {
  std::string field;  // as in config files: "trip.errors", "policy.max_attempts"
  std::string mine;
  std::string theirs;
};

struct Policy {
  absl::Duration probe_interval = absl::Seconds(15);
  absl::Duration probe_timeout = absl::Seconds(5);
  uint32_t trip_errors = 1;  // 0 = off (only with a rate below)
  absl::Duration trip_window = absl::Seconds(30);
  // Rate trips, in percent (0 = off): counted failures, or successes slower
  // than trip_slow_call_duration, as a share of the outcomes in the window
  // once there are at least trip_min_calls of them.
  double trip_failure_rate = 0;
  uint32_t trip_min_calls = 10;
  absl::Duration trip_slow_call_duration = absl::ZeroDuration();
  double trip_slow_call_rate = 0;
  uint32_t recovery_probes = 3;
  absl::Duration recovery_min_dwell = absl::Seconds(60);
  double backoff_factor = 1.0;
  uint32_t backoff_steps = 3;
  absl::Duration backoff_max = absl::Hours(1);
  absl::Duration backoff_reset_after = absl::Minutes(10);
  RateLimitMode rate_limit_on = RateLimitMode::kFailover;
  absl::Duration rate_limit_hold = absl::Seconds(10);
  // Longest hold; a limit that resets later takes the target DOWN until then.
  absl::Duration rate_limit_max_hold = absl::Seconds(60);
  uint32_t max_attempts = 0;  // fallbacks after the first; 0 = all
  uint64_t max_replay_bytes = 32ull << 20;
  // least_latency: percent of first attempts sent to another usable target
  // than the fastest, so that targets are measured again.
  double latency_explore = 5;
  // Retries (RETRY_SAME and TRY_NEXT) allowed per first attempt over the last
  // 10 s, with a floor of min_per_second; 0 = no budget.
  double retry_budget_ratio = 0;
  double retry_budget_min_per_second = 1;
  // A caller with an idempotent request may start the plan's next attempt
  // while the first is still running after this long; zero = no hedging.
  absl::Duration hedge_after = absl::ZeroDuration();
  // Empty = the defaults (DESIGN 3.5 table). Non-empty replaces the default.
  std::vector<std::string> retry_on_statuses;
  std::vector<std::string> retry_on_errors;
  // Same-target retries by reason; reasons not listed keep their default.
  std::map<Reason, uint32_t> same_target_retries;

  // Each setting that differs, as config files name it ("trip.errors").
  std::vector<SettingDifference> Differences(const Policy& o) const;
  bool HasRateTrip() const {
    return trip_failure_rate > 0 || trip_slow_call_rate > 0 || trip_slow_call_duration > absl::ZeroDuration();
  }
  bool operator==(const Policy& o) const;
  bool operator!=(const Policy& o) const { return !(*this == o); }
};

// A target's health settings (DESIGN 3.1): probe, trip, recovery, backoff and
// the rate-limit holds. Every chain that lists a target shares its health, so
// these belong to the target: its own `health`, or else the chains' policies,
// which must then agree. (rate_limit.on stays with each chain: it shapes that
// chain's verdicts, not the target's state.)
struct HealthPolicy {
  absl::Duration probe_interval = absl::Seconds(15);
  absl::Duration probe_timeout = absl::Seconds(5);
  uint32_t trip_errors = 1;  // 0 = off (only with a rate below)
  absl::Duration trip_window = absl::Seconds(30);
  // Rate trips, in percent (0 = off): counted failures, or successes slower
  // than trip_slow_call_duration, as a share of the outcomes in the window
  // once there are at least trip_min_calls of them.
  double trip_failure_rate = 0;
  uint32_t trip_min_calls = 10;
  absl::Duration trip_slow_call_duration = absl::ZeroDuration();
  double trip_slow_call_rate = 0;
  uint32_t recovery_probes = 3;
  absl::Duration recovery_min_dwell = absl::Seconds(60);
  double backoff_factor = 1.0;
  uint32_t backoff_steps = 3;
  absl::Duration backoff_max = absl::Hours(1);
  absl::Duration backoff_reset_after = absl::Minutes(10);
  absl::Duration rate_limit_hold = absl::Seconds(10);
  absl::Duration rate_limit_max_hold = absl::Seconds(60);

  // The health part of a chain's policy.
  static HealthPolicy Of(const Policy& p);
  // A policy with these health settings and defaults elsewhere, so a target's
  // settings are read, checked, stored and sent as a chain's are.
  Policy AsPolicy() const;

  using Difference = SettingDifference;
  std::vector<Difference> Differences(const HealthPolicy& o) const;
  bool operator==(const HealthPolicy& o) const { return Differences(o).empty(); }
  bool operator!=(const HealthPolicy& o) const { return !(*this == o); }
};

struct TargetConfig {
  std::string name;
  TargetKind kind = TargetKind::kRemote;
  std::string upstream_model;  // empty = name
  bool warm = false;
  uint32_t weight = 1;
  double cost = 0;
  absl::Duration timeout = absl::ZeroDuration();  // zero = none given
  uint32_t max_retries = 0;
  uint32_t limit_rpm = 0;  // 0 = no cap
  std::map<std::string, std::string> labels;
  bool enabled = true;
  std::string managed_by;  // config file path, empty = API
  // The target's own health settings; unset = its chains' (which must agree).
  HeapOptional<HealthPolicy> health;  // on the heap: most targets leave it unset

  const std::string& UpstreamModel() const { return upstream_model.empty() ? name : upstream_model; }
  // Each field that differs from `o` (this is the old version).
  std::vector<SettingDifference> Differences(const TargetConfig& o) const;
  // Local targets that are not warm have no health check (DESIGN 3.2).
  bool HasHealthCheck() const { return kind == TargetKind::kRemote || warm; }
  bool operator==(const TargetConfig& o) const;
  bool operator!=(const TargetConfig& o) const { return !(*this == o); }
};

// A policy judged beside a chain's own on the same outcomes (DESIGN 3.17):
// what it would have done is reported, and nothing it decides is applied.
struct ShadowPolicy {
  std::string name;  // unique within the chain; the rules of target names
  Shared<Policy> policy;
  bool operator==(const ShadowPolicy& o) const { return name == o.name && policy == o.policy; }
};

// Each shadow policy runs a private engine holding the chain and its targets.
inline constexpr size_t kMaxShadowPolicies = 4;

struct ChainConfig {
  std::string name;
  std::vector<std::string> targets;
  Strategy strategy = Strategy::kFailover;
  Shared<Policy> policy;  // shared by equal copies: most chains hold the same one
  bool failover_enabled = true;
  std::vector<ShadowPolicy> shadows;  // at most kMaxShadowPolicies
  std::string managed_by;

  // Each field that differs from `o` (this is the old version).
  std::vector<SettingDifference> Differences(const ChainConfig& o) const;
  bool operator==(const ChainConfig& o) const;
  bool operator!=(const ChainConfig& o) const { return !(*this == o); }
};

// A set of objects to create or replace in one step.
struct ConfigChange {
  std::vector<TargetConfig> targets;
  std::vector<ChainConfig> chains;
};

// ---------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------

enum class EventKind : uint8_t { kChainSwitched, kTargetState, kConfigChanged };
enum class ConfigObject : uint8_t { kTarget, kChain, kPin };
enum class ConfigChangeKind : uint8_t { kCreated, kUpdated, kDeleted, kUnchanged };

// One observable state change, part of a Change (change.h). Numbered by the
// engine; made durable, logged and streamed by the committer. Only the fields
// of its kind are set.
struct Event {
  EventKind kind = EventKind::kTargetState;
  absl::Time time;
  uint64_t sequence = 0;  // stamped by the engine's single writer (DESIGN 2)
  // Who caused it, for events of admin calls: the token's name, the client
  // certificate's subject or the caller's address. Empty for failoverd's own
  // decisions and for config files.
  std::string actor;

  // kChainSwitched
  std::string chain;
  std::string from_target;
  std::string to_target;
  ChainState from_chain_state = ChainState::kPrimary;
  ChainState to_chain_state = ChainState::kPrimary;
  SwitchReason switch_reason = SwitchReason::kInitial;
  std::string detail;

  // kTargetState
  std::string target;
  HealthState from_health = HealthState::kUnknown;
  HealthState to_health = HealthState::kUnknown;
  Source source = Source::kAuto;
  std::string reason;
  std::string last_error;

  // kConfigChanged (name in `target` or `chain` by kind)
  ConfigObject what = ConfigObject::kTarget;
  ConfigChangeKind change = ConfigChangeKind::kCreated;
  uint64_t generation = 0;
  std::string object_name;
};

using Events = std::vector<Event>;

}  // namespace failover
