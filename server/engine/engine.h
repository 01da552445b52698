// The decision engine: targets, chains, health, plans and verdicts
// (DESIGN 3.1-3.5, 3.7, 3.8). Pure logic: every operation takes `now` and
// does no I/O. Every state change is made by a single writer and leaves as
// one numbered Change (common/change.h) through the change sink, which makes
// it durable and publishes it; operations also return the events they caused.
// Calls that change nothing (most picks and reports) never take the writer.
// One file per concern: plans.cc, verdicts.cc, probes.cc, config_changes.cc,
// admin.cc, views.cc; engine.cc holds snapshots, chain state and the ticker's work.
//
// Concurrency: the config is an immutable snapshot swapped whole on change.
// Each target and each chain has its own mutex; a target's effective state is
// also published in atomics so a pick reads it without locking the target.
// Lock order: a chain lock is never held while taking a target lock, and a
// target lock is never held while taking a chain lock. The locks are std::
// mutexes rather than absl::Mutex so ThreadSanitizer can see them (Debian's
// Abseil is not built with TSAN annotations). Fields below a `mu` are guarded
// by it unless they are atomics; functions named *Locked expect it held.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <set>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/change.h"
#include "absl/types/span.h"
#include "common/compact_time.h"
#include "server/engine/classify.h"
#include "common/model.h"
#include "common/rare_string.h"
#include "common/small_mutex.h"
#include "server/engine/retry_budget.h"
#include "server/engine/traffic.h"
#include "server/engine/target_health.h"

namespace failover {

struct EngineOptions {
  // How long a decision id can be matched to its plan.
  absl::Duration decision_ttl = absl::Minutes(10);
  // Decisions with failures remembered at once; the oldest are dropped beyond.
  size_t max_decision_records = 200000;
  // +- fraction applied to probe cooldowns.
  double probe_jitter = 0.1;
  // Added to a probe's timeout before its lease expires and is offered again.
  absl::Duration lease_grace = absl::Seconds(5);
  // Distinguishes this process's decision ids from an earlier one's. 0 = random.
  uint32_t instance_epoch = 0;
  // Where randomness comes from (instance epoch, lease ids); null = the OS.
  std::function<uint64_t()> random;
  // Totals over the whole config; an Apply that would pass them gets RESOURCE_EXHAUSTED.
  size_t max_targets = 100000;
  size_t max_chains = 100000;
};

// ---------------------------------------------------------------------------
// Runtime state (shared by every config snapshot that has the object)
// ---------------------------------------------------------------------------

// TargetRuntime::held_until_ns for a hold until `t` (InfinitePast: none).
inline int64_t HeldUntilNanos(absl::Time t) { return CompactTime::ToNanos(t); }

struct TargetRuntime {
  // Published for lock-free reads on the hot path; first, so a pick reads the
  // start of the block. (Not aligned to a cache line: with 20,000 targets the
  // padding cost more memory than the rare split line cost time.)
  std::atomic<uint8_t> effective{static_cast<uint8_t>(HealthState::kUnknown)};
  std::atomic<uint32_t> rpm_count{0};
  std::atomic<int64_t> held_until_ns{INT64_MIN};
  std::atomic<int64_t> rpm_minute{-1};
  // Leased rpm budgets (cluster mode): what the leader granted this process
  // for a minute, as minute << 32 | requests, in the slot of the minute's
  // parity (the current minute's, and the next one's asked ahead of time).
  std::atomic<uint64_t> rpm_grant[2] = {0, 0};
  std::atomic<int64_t> last_activity_ns{INT64_MIN};
  // Decaying average of the success latency callers report (least_latency);
  // -1 = not measured since the target was last usable.
  std::atomic<int64_t> latency_ns{-1};

  SmallMutex mu;
  // The small fields together, so they share padding (and the lock's).
  bool lease_recovery = false;
  bool probe_now = false;
  bool manual = false;
  // last_error or the hold changed by an outcome that made no Change (the
  // hold: while changes were refused): saved (and so replicated) by the next
  // Change or tick that records the target.
  bool record_unsaved = false;
  Source source = Source::kAuto;
  TargetHealth health;
  std::string reason;
  RareString last_error;
  CompactTime last_error_time;
  std::unique_ptr<TrafficRing> traffic;  // counted outcomes per minute, for views; made at the first

  // What a target has only once it is checked or failed over by hand, kept
  // apart and made at the first need: 160 bytes that most targets of a large
  // config, busy with traffic, never use.
  struct Occasional {
    // The outstanding probe lease, if any (one per target across all probers).
    std::string lease_id;
    absl::Time lease_expires = absl::InfinitePast();
    uint64_t lease_generation = 0;
    uint64_t lease_prober = 0;  // hash of the prober id that took the lease
    absl::Time last_probe = absl::InfinitePast();
    std::string last_check;  // what the last check found, as one line
    std::string manual_reason;
    absl::Time manual_since = absl::InfinitePast();
  };
  const Occasional& occasional() const {
    static const Occasional* const kNone = new Occasional;
    return occasional_ ? *occasional_ : *kNone;
  }
  Occasional& MutableOccasional() {
    if (!occasional_) occasional_ = std::make_unique<Occasional>();
    return *occasional_;
  }
  // The setters below leave no room made for a check or a manual failover
  // that never happened (a restore sets every target's).
  void SetLastCheck(absl::Time probed, std::string check) {
    if (!occasional_ && probed == absl::InfinitePast() && check.empty()) return;
    MutableOccasional().last_probe = probed;
    occasional_->last_check = std::move(check);
  }
  void SetManual(std::string reason_given, absl::Time since) {
    if (!occasional_ && reason_given.empty() && since == absl::InfinitePast()) return;
    MutableOccasional().manual_reason = std::move(reason_given);
    occasional_->manual_since = since;
  }
  bool LeasedAt(absl::Time now) const {
    return occasional_ && !occasional_->lease_id.empty() && occasional_->lease_expires >= now;
  }

  HealthState Effective() const { return static_cast<HealthState>(effective.load(std::memory_order_acquire)); }
  // After an admin change: the outstanding lease's result would be judged
  // against a state it was not asked under (DESIGN 3.6).
  void VoidLease() {
    if (occasional_) occasional_->lease_id.clear();
  }
  void RecordTraffic(absl::Time now, bool failed, absl::Duration latency) {
    if (!traffic) traffic = std::make_unique<TrafficRing>();
    traffic->Record(now, failed, latency);
  }

 private:
  std::unique_ptr<Occasional> occasional_;
};

struct ChainRuntime {
  SmallMutex mu;
  bool initialized = false;
  std::string active;
  // Position of `active` in the chain, valid for one config generation.
  int active_position = -1;
  uint64_t active_position_generation = 0;
  ChainState state = ChainState::kPrimary;
  CompactTime active_since;
  CompactTime last_switch;
  RareString pinned;
  // A round_robin chain's rotation, made at its first pick (80 bytes that
  // chains of the other strategies do without).
  struct RoundRobin {
    // Smooth weighted round robin: current weight per target, by target name
    // so the rotation survives reloads.
    absl::flat_hash_map<std::string, int64_t> current;
    // Session stickiness: session key -> target. Bounded.
    absl::flat_hash_map<std::string, std::string> sessions;
  };
  std::unique_ptr<RoundRobin> round_robin;
  // least_latency: first attempts so far, to spread exploration evenly.
  uint64_t latency_picks = 0;
  // Made on first use, only for chains with a retry budget.
  std::unique_ptr<RetryBudget> retry_budget;
};

// ---------------------------------------------------------------------------
// Config snapshot
// ---------------------------------------------------------------------------

struct TargetEntry {
  // Shared with the snapshots before and after this one while unchanged: an
  // apply of one object copies no other object's config.
  std::shared_ptr<const TargetConfig> config;
  // The config generation in which this target's config last changed; probe
  // results from before it are stale.
  uint64_t config_generation = 0;
  std::shared_ptr<const HealthSettings> health;  // never null; shared by targets with equal settings
  uint64_t seed = 0;  // per-target jitter seed
  std::shared_ptr<TargetRuntime> rt;
  // Where Snapshot::ChainsOf finds the chains that list this target.
  uint32_t chains_begin = 0;
  uint32_t chains_count = 0;
};

// What a pick needs of one target of a chain, packed so plan building does
// not wander through the large TargetEntry (16 bytes: the runtime is one
// load away, through the entry, rather than 8 more bytes in every slot).
struct ChainSlot {
  const TargetEntry* target = nullptr;
  uint32_t limit_rpm = 0;
  bool has_health_check = true;

  TargetRuntime* rt() const { return target->rt.get(); }
};

// The settings a pick reads, copied from the config and kept together.
struct ChainHot {
  Strategy strategy = Strategy::kFailover;
  bool failover_enabled = true;
  uint32_t max_attempts = 0;
  uint64_t max_replay_bytes = 0;
  absl::Duration min_dwell;
  double latency_explore = 0;  // percent
  double retry_budget_ratio = 0;  // 0 = no budget
  double retry_budget_min_per_second = 0;
  absl::Duration hedge_after = absl::ZeroDuration();
};

struct ChainEntry {
  ChainHot hot;
  // The chain's targets in declared order, hot fields only: a view of
  // Snapshot::chain_slots, so a snapshot's chains cost one allocation there.
  absl::Span<const ChainSlot> slots;
  std::shared_ptr<ChainRuntime> rt;
  std::shared_ptr<const ChainConfig> config;  // shared as TargetEntry::config is
  // Compiled from the policy; chains whose policies classify alike share one.
  std::shared_ptr<const FailoverRules> rules;
};

struct Snapshot {
  Snapshot() = default;
  // Not copied: the indexes below point into this snapshot's own entries.
  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;

  uint64_t generation = 0;
  std::vector<TargetEntry> targets;  // sorted by name
  std::vector<ChainEntry> chains;    // sorted by name
  // Keyed by the names in the entries above (set once they are in place),
  // not by copies of them: a name copied costs its allocation again.
  absl::flat_hash_map<absl::string_view, uint32_t> target_index;
  absl::flat_hash_map<absl::string_view, uint32_t> chain_index;
  // The targets with a limits.rpm (indices into targets): what a replica's
  // rpm leases look at ten times a second, without walking every target.
  std::vector<uint32_t> rpm_capped;
  // Every target's chains (indices into chains, in name order), one target's
  // after another: one array, where a vector per target cost 56 bytes.
  std::vector<uint32_t> target_chains;
  // Every chain's slots, one chain's after another (ChainEntry::slots): one
  // array, where a vector per chain cost an allocation per chain and each
  // apply of a large config left thousands of holes in the heap.
  std::vector<ChainSlot> chain_slots;

  const TargetEntry* FindTarget(absl::string_view name) const;
  const ChainEntry* FindChain(absl::string_view name) const;
  absl::Span<const uint32_t> ChainsOf(const TargetEntry& t) const {
    return absl::Span<const uint32_t>(target_chains).subspan(t.chains_begin, t.chains_count);
  }
};

// ---------------------------------------------------------------------------
// Requests and results
// ---------------------------------------------------------------------------

struct PlannedAttempt {
  const TargetEntry* target = nullptr;
  HealthState health = HealthState::kUnknown;
  uint32_t position = 0;
};

struct PickRequest {
  std::string chain;
  uint64_t body_bytes = 0;
  std::vector<std::string> exclude_targets;
  std::string session_key;
};

struct Plan {
  std::string decision_id;
  ChainState state = ChainState::kPrimary;
  std::string active_target;
  uint64_t generation = 0;
  absl::InlinedVector<PlannedAttempt, 8> attempts;
  // When an idempotent request may start attempts[1] beside attempts[0]; zero = not.
  absl::Duration hedge_after = absl::ZeroDuration();
  std::shared_ptr<const Snapshot> snapshot;  // keeps `attempts` valid
};

enum class Verdict : uint8_t { kDone, kRetrySame, kTryNext, kFail };

struct ReportRequest {
  std::string decision_id;
  std::string chain;  // used when the decision is unknown or expired
  std::string target;
  uint32_t attempt = 0;
  OutcomeFacts facts;
  absl::Duration latency = absl::ZeroDuration();  // the attempt's, as the caller measured it; zero = not given
  // False for an outcome counted before (a resent report, DESIGN 3.14
  // invariant 4): only the verdict is decided; health is not touched.
  bool count = true;
  // The report's id (sequence 0: none): a Change this report makes names it.
  CountedReport id;
};

struct ReportResult {
  Verdict verdict = Verdict::kDone;
  // The verdict's reason: the outcome's classification, or kRetryBudget.
  Reason reason = Reason::kNone;
  Reason classified = Reason::kNone;  // the outcome's classification, always
  std::string refused_chain;  // the chain whose retry budget refused a retry
  absl::Duration retry_delay = absl::ZeroDuration();
  bool has_next = false;
  PlannedAttempt next;
  std::string error;
  bool counted = false;
  HealthState target_health = HealthState::kUnknown;
  ChainState chain_state = ChainState::kPrimary;
  std::string active_target;
  bool decision_known = false;
  std::string chain;  // the chain the outcome was judged in ("" for none)
  std::shared_ptr<const Snapshot> snapshot;  // keeps `next` valid
};

enum class ProbeKind : uint8_t { kLiveness, kRecovery };
enum class ProbeOutcome : uint8_t { kPass, kFail, kThrottled, kNotLoaded };

struct ProbeResult {
  std::string lease_id;
  ProbeOutcome outcome = ProbeOutcome::kPass;
  OutcomeFacts facts;  // for kFail
  absl::Duration latency = -absl::InfiniteDuration();  // how long the check took; negative = not said
};

struct ProbeRequest {
  std::string prober_id;
  uint32_t max_tasks = 16;
  std::vector<ProbeResult> results;
};

struct ProbeTask {
  std::string lease_id;
  const TargetEntry* target = nullptr;
  ProbeKind kind = ProbeKind::kLiveness;
  absl::Duration timeout;
  uint64_t generation = 0;
};

// A check result the engine took (for the outcome trace).
struct AcceptedCheck {
  const ProbeResult* result = nullptr;  // one of ProbeRequest::results
  std::string target;
  ProbeOutcome outcome = ProbeOutcome::kPass;  // as judged (a rate-limited failure is kThrottled)
  bool recovery = false;
};

struct ProbeResponse {
  std::vector<ProbeTask> tasks;
  std::vector<AcceptedCheck> checks;
  absl::Duration next_call_after;
  uint32_t accepted = 0;
  uint32_t ignored = 0;
  std::shared_ptr<const Snapshot> snapshot;  // keeps `tasks` valid
};

struct TargetStatus {
  std::string name;
  HealthState health = HealthState::kUnknown;
  HealthState automatic = HealthState::kUnknown;
  Source source = Source::kAuto;
  std::string reason;
  absl::Time since = absl::InfinitePast();
  absl::Time last_probe = absl::InfinitePast();
  std::string last_check;
  std::string last_error;
  absl::Time last_error_time = absl::InfinitePast();
  absl::Time held_until = absl::InfinitePast();
  bool enabled = true;
  uint32_t recovery_passes = 0;
  uint32_t trips = 0;
  absl::Duration latency = -absl::InfiniteDuration();  // recent success latency; negative = not measured
  std::vector<std::string> chains;
  std::string managed_by;  // the config file declaring it, if any
  std::vector<TrafficMinute> traffic;  // the last minutes with counted outcomes, oldest first
  absl::Time next_check = absl::InfiniteFuture();  // InfiniteFuture = none due (no check, or one running)
};

struct ChainStatus {
  std::string name;
  ChainState state = ChainState::kPrimary;
  std::string active_target;
  absl::Time active_since = absl::InfinitePast();
  absl::Time last_switch = absl::InfinitePast();
  std::string pinned_target;
  std::vector<TargetStatus> targets;
};

struct TargetView {
  TargetConfig config;
  TargetStatus status;
};

struct ChainView {
  ChainConfig config;
  ChainStatus status;
};

struct ConfigDiff {
  ConfigObject what = ConfigObject::kTarget;
  std::string name;
  ConfigChangeKind change = ConfigChangeKind::kUnchanged;
  std::vector<std::string> changed_fields;
  // For an update, each setting that changed: "policy.trip.errors: 1 -> 3".
  std::vector<std::string> details;
};

struct ApplyOptions {
  bool dry_run = false;
  // True when the change is the whole set of objects declared in config files:
  // each object keeps the `managed_by` file it carries, and file-managed objects
  // missing from the change are deleted. False (the API): objects declared by a
  // file cannot be changed.
  bool from_files = false;
  // Recorded on the events of the change (Event::actor).
  std::string actor;
};

using ChangeSink = std::function<void(Change&&)>;

struct ApplyResult {
  uint64_t generation = 0;
  std::vector<ConfigDiff> changes;
  std::vector<std::string> warnings;
  Events events;
};

// ---------------------------------------------------------------------------

class Engine {
 public:
  explicit Engine(EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Receives every Change, in sequence order, while the single writer holds
  // its lock: it must only queue. Set before Restore.
  void SetChangeSink(ChangeSink sink) { sink_ = std::move(sink); }
  // While not accepting (the data dir refused a write), admin changes get
  // UNAVAILABLE with `why`, and outcomes, probes and ticks change no state:
  // decisions go on from memory.
  void SetAcceptingChanges(bool accepting, std::string why = "");
  bool accepting_changes() const { return accepting_.load(std::memory_order_acquire); }
  // True when every target's record is as last handed to the sink: no error
  // or hold that an outcome changed waits for the next tick to be saved.
  bool AllRecordsSaved() const;

  // Loads persisted state before serving. A target that was DOWN is due for a
  // probe at once. Events are numbered from `state.next_sequence`. Returns the
  // events of chains that had to settle (no stored state, or state that no
  // longer fits the config); none for a clean restore. An engine not
  // accepting changes (a cluster replica before it follows the log) settles
  // nothing: it keeps the stored state and submits no Change. The configs
  // are moved out of `state`: pass it moved when it is not needed after.
  [[nodiscard]] absl::StatusOr<Events> Restore(RestoredState state, absl::Time now);

  // --- following another engine (DESIGN 3.13) ---
  // Applies a Change another engine made (failoverd's, seen through
  // FollowState), after Restore from that engine's state and the Changes
  // before it: config, pins, manual failovers and the health and chain records
  // become what they are there. Decides nothing, emits nothing. An engine that
  // follows is told SetAcceptingChanges(false), so its own picks and reports
  // make no transitions: those are the followed engine's to make. A change
  // whose config is invalid is refused whole (INVALID_ARGUMENT).
  [[nodiscard]] absl::Status ApplyChange(const Change& change, absl::Time now);
  // Makes the state exactly `state` (what storage would restore), dropping
  // whatever this engine changed since: a cluster replica that stopped being
  // the leader with Changes it could not write (DESIGN 3.12) goes back to the
  // replicated state. Decides nothing, emits nothing.
  [[nodiscard]] absl::Status ResetTo(const RestoredState& state, absl::Time now);
  // Whether a success reported for `target` could change its state: it is not
  // HEALTHY yet, or trips on rates over its recent calls. (A cluster follower
  // relays such a success before answering, as it does a failure.)
  bool SuccessMayChangeState(absl::string_view target) const;
  // The chain a decision id was made for ("" when it names none).
  static std::string ChainOfDecision(absl::string_view decision_id);
  // The sequence the next event will get (here or, following, there).
  uint64_t next_sequence() const;

  // --- config ---
  [[nodiscard]] absl::StatusOr<ApplyResult> Apply(const ConfigChange& change, const ApplyOptions& options,
                                                  absl::Time now);
  // `actor` (here and below): who asked, recorded on the events (Event::actor).
  [[nodiscard]] absl::StatusOr<Events> DeleteTarget(absl::string_view name, absl::Time now,
                                                    absl::string_view actor = "");
  [[nodiscard]] absl::StatusOr<Events> DeleteChain(absl::string_view name, absl::Time now,
                                                   absl::string_view actor = "");
  [[nodiscard]] absl::StatusOr<Events> SetTargetEnabled(absl::string_view name, bool enabled, absl::Time now,
                                                        absl::string_view actor = "");

  // --- admin actions ---
  [[nodiscard]] absl::StatusOr<Events> Pin(absl::string_view chain, absl::string_view target, absl::Time now,
                                           absl::string_view actor = "");
  [[nodiscard]] absl::StatusOr<Events> Unpin(absl::string_view chain, absl::Time now, absl::string_view actor = "");
  [[nodiscard]] absl::StatusOr<Events> TriggerManualFailover(absl::string_view target, absl::string_view reason,
                                                             absl::Time now, absl::string_view actor = "");
  [[nodiscard]] absl::StatusOr<Events> CancelManualFailover(absl::string_view target, absl::Time now,
                                                            absl::string_view actor = "");

  // --- hot path ---
  [[nodiscard]] absl::Status Pick(const PickRequest& request, absl::Time now, Plan* plan, Events* events);
  [[nodiscard]] absl::Status Report(const ReportRequest& request, absl::Time now, ReportResult* result,
                                    Events* events);

  // Time-driven work: targets without health checks coming back, chains moving
  // back up after their dwell, expired decisions. Call about once a second.
  void Tick(absl::Time now, Events* events);

  // --- health checks (DESIGN 3.6) ---
  // Takes the results of earlier tasks and hands out the tasks due now.
  [[nodiscard]] absl::Status Probe(const ProbeRequest& request, absl::Time now, ProbeResponse* response,
                                   Events* events);
  // Makes checks due at once for one target (or every checkable target when
  // empty); returns the targets made due.
  [[nodiscard]] absl::StatusOr<std::vector<std::string>> ProbeNow(absl::string_view target);
  size_t OutstandingLeases(absl::Time now) const;

  // --- rpm caps across replicas (DESIGN 3.12) ---
  // This process plans its part of every `limits.rpm`: of `replicas` sharing
  // the caps, the one ranked `rank` (0-based) gets cap / replicas, plus one
  // while rank < cap % replicas, so the parts add up to the cap. One process
  // alone (the default, and a client deciding locally) has the whole cap.
  void SetRpmShare(uint32_t rank, uint32_t replicas);
  uint32_t rpm_rank() const { return static_cast<uint32_t>(rpm_share_.load(std::memory_order_relaxed)); }
  uint32_t rpm_replicas() const { return static_cast<uint32_t>(rpm_share_.load(std::memory_order_relaxed) >> 32); }
  static uint32_t RpmShare(uint32_t cap, uint32_t rank, uint32_t replicas);
  // Leased budgets (DESIGN 3.12): once on, a target's cap in a minute is what
  // the leader granted this process for that minute. A minute without a grant
  // (the leader could not be reached) falls back to the even part above, or,
  // with `even_part_without_grant` false (a client deciding locally, whose
  // even part would be the whole cap), plans none of the cap.
  void LeaseRpm(bool leased, bool even_part_without_grant = true) {
    rpm_lease_.store(static_cast<uint8_t>((leased ? 1 : 0) | (even_part_without_grant ? 2 : 0)),
                     std::memory_order_relaxed);
  }
  bool rpm_leased() const { return (rpm_lease_.load(std::memory_order_relaxed) & 1) != 0; }
  // A grant for `minute` (minutes since the Unix epoch); a target that is not
  // configured (any more) is passed over.
  void SetRpmGrant(absl::string_view target, int64_t minute, uint32_t requests);
  // What a capped target has used of `minute` here, and what it was granted.
  struct RpmUse {
    std::string target;
    uint32_t cap = 0;
    uint32_t used = 0;          // requests planned in `minute`
    uint32_t granted = 0;       // the grant for `minute` ...
    bool has_grant = false;     // ... if there is one
    bool has_next_grant = false;  // whether the minute after has a grant
  };
  std::vector<RpmUse> RpmUses(int64_t minute) const;
  // A target's limits.rpm (0: none, or no such target), and what this
  // process planned of it in `minute`.
  uint32_t RpmCap(absl::string_view target) const;
  uint32_t RpmUsed(absl::string_view target, int64_t minute) const;

  // --- views ---
  uint64_t generation() const;
  std::shared_ptr<const Snapshot> snapshot() const;
  [[nodiscard]] absl::StatusOr<ChainView> GetChain(absl::string_view name) const;
  [[nodiscard]] absl::StatusOr<TargetView> GetTarget(absl::string_view name) const;
  // The state alone, without copying the config (what a transition persists).
  [[nodiscard]] absl::StatusOr<TargetStatus> GetTargetStatus(absl::string_view name) const;
  [[nodiscard]] absl::StatusOr<ChainStatus> GetChainStatus(absl::string_view name) const;
  std::vector<ChainView> ListChains() const;
  std::vector<TargetView> ListTargets() const;
  // Calls `visit` for each chain (target) whose name sorts after `after`, in
  // name order, until it returns false; one config snapshot throughout. For
  // pages and snapshots built without copying the whole state.
  void VisitChains(absl::string_view after, const std::function<bool(const ChainView&)>& visit) const;
  void VisitTargets(absl::string_view after, const std::function<bool(const TargetView&)>& visit) const;

 private:
  // The single writer (change_writer.h): every state change is made while
  // holding it, so the order of sequence numbers is the order state changed.
  class ChangeWriter;
  struct DecisionId;
  struct DecisionRecord;
  class DecisionStore;

  // Why a chain is being re-evaluated.
  struct EvalContext {
    SwitchReason reason = SwitchReason::kRecovery;
    std::string detail;
    // The target an admin just restored (cancel): it may move the chain up at
    // once, without the dwell.
    std::string waive_dwell_for;
    // Start over from the first usable target (unpin).
    bool fresh = false;
  };

  std::shared_ptr<const Snapshot> Load() const;
  std::shared_ptr<Snapshot> BuildSnapshot(std::vector<std::shared_ptr<const TargetConfig>> targets,
                                          std::vector<std::shared_ptr<const ChainConfig>> chains,
                                          uint64_t generation, const Snapshot* previous) const;
  // Builds and installs the next snapshot from `cur` and the puts and deletes
  // already in `w`'s change (one object), and finishes the change; returns the
  // config.changed event and what it caused.
  Events ChangeOneObjectLocked(ChangeWriter& w, const Snapshot& cur, ConfigObject what, absl::string_view name,
                               ConfigChangeKind change, absl::Time now);
  // Installs `next`, republishes target overlays and re-evaluates every chain.
  void Install(std::shared_ptr<Snapshot> next, absl::Time now, Events* events);

  // What evaluating a chain would do, without doing it (chain lock held).
  struct ChainDecision {
    const std::string* active = nullptr;  // owned by the config or the runtime
    ChainState state = ChainState::kPrimary;
    SwitchReason reason = SwitchReason::kRecovery;
    bool changes = false;
  };
  ChainDecision DecideChainLocked(const Snapshot& snap, const ChainEntry& chain, absl::Time now,
                                  const EvalContext& ctx) const;
  // Applies DecideChainLocked's answer; emits chain.switched (writer and chain lock held).
  void EvaluateChainLocked(const Snapshot& snap, const ChainEntry& chain, absl::Time now, const EvalContext& ctx,
                           Events* events);
  void EvaluateChainsOf(const Snapshot& snap, const TargetEntry& target, absl::Time now, const EvalContext& ctx,
                        Events* events);
  // Publishes the target's effective state; emits target.state when it changed.
  void PublishLocked(const TargetEntry& target, HealthState before, Source source, const std::string& reason,
                     absl::Time now, Events* events);
  // When `t`'s next check falls due (InfiniteFuture = never); lock held.
  absl::Time ProbeDueLocked(const TargetEntry& t, absl::Time now) const;
  // Applies one result. With `events` null it makes no transition: it returns
  // false, having done nothing, for a result that would make one, to be
  // applied again under the writer. A result taken adds its target to `observed`.
  bool ApplyProbeResult(const Snapshot& snap, const ProbeResult& result, uint64_t prober, absl::Time now,
                        ProbeResponse* response, Events* events, std::set<std::string>* observed);
  // A target without health checks whose dwell has passed.
  bool ComesBackNow(const TargetEntry& t, absl::Time now) const;
  bool RecordUnsaved(const TargetEntry& t) const;
  // Brings back targets without health checks whose dwell passed (writer held).
  void ApplyTimePassed(const Snapshot& snap, const TargetEntry& target, absl::Time now, Events* events);

  // Fills `out` with the plan order for `chain` (chain lock held).
  absl::Status BuildAttemptsLocked(const Snapshot& snap, const ChainEntry& chain, absl::Time now,
                                   uint64_t exclude_mask, const std::string& session_key, bool for_next,
                                   absl::InlinedVector<PlannedAttempt, 8>* out);
  static void CountRequest(const TargetEntry& target, absl::Time now);
  bool Saturated(TargetRuntime& rt, uint32_t limit_rpm, absl::Time now) const;
  // least_latency's first attempt among `eligible` (chain lock held).
  static int LeastLatencyFirst(const ChainEntry& chain, uint64_t eligible);

  void MakeDecisionId(const std::string& chain, uint64_t exclude_mask, bool single_attempt, absl::Time now,
                      std::string* out);
  TargetStatus StatusOf(const Snapshot& snap, const TargetEntry& target) const;
  ChainStatus StatusOf(const Snapshot& snap, const ChainEntry& chain) const;

  absl::Status RefuseUnlessAccepting() const;
  TargetStateRecord RecordOf(const TargetEntry& t) const;  // target lock held
  ChainStateRecord RecordOf(const ChainEntry& c) const;    // chain lock held
  uint64_t Random();

  ChangeSink sink_;
  const EngineOptions options_;
  const uint32_t epoch_;
  std::atomic<uint64_t> decision_seq_{0};
  std::atomic<uint64_t> rpm_share_{1};  // replicas << 32 | rank: read in one load
  std::atomic<uint8_t> rpm_lease_{2};  // 1: leased; 2: the even part in a minute without a grant
  std::unique_ptr<DecisionStore> decisions_;

  // Lock order: writer_mu_, then a target or chain lock, then nothing.
  mutable std::mutex writer_mu_;
  uint64_t next_sequence_ = 1;  // guarded by writer_mu_
  std::atomic<bool> accepting_{true};
  std::mutex random_mu_;
  mutable std::mutex refusal_mu_;
  std::string refusal_;  // guarded by refusal_mu_
  mutable std::shared_mutex snapshot_mu_;
  std::shared_ptr<const Snapshot> snapshot_;
};

const char* VerdictName(Verdict v);

}  // namespace failover
