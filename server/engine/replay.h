// Replaying recorded outcomes against a policy (DESIGN 3.17): a fresh engine
// on a simulated clock is fed a window of the outcome trace and the health
// check results it holds, and what it did is summed up: trips, switches,
// flaps, detection times, requests planned to a failing target, time in
// FALLBACK and DEGRADED. Pure logic like the rest of the engine: the caller
// reads the trace and the config; the same input gives the same summary.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/model.h"
#include "common/outcome.h"

namespace failover {

// The longest window one replay covers: the simulated clock ticks every second.
inline constexpr absl::Duration kMaxReplayWindow = absl::Hours(24 * 7);

struct ReplayInput {
  ChainConfig chain;                  // the chain as configured (its live policy)
  std::vector<TargetConfig> targets;  // the chain's targets
  // Trace entries in number order: outcomes of the chain's targets from any
  // chain (health belongs to the target), and check results.
  std::vector<TraceEntry> entries;
  absl::Time from;
  absl::Time to;
  // A switch back to a target undone within this long is a flap. The same
  // for every column, so two policies are measured alike.
  absl::Duration flap_window = absl::Seconds(60);
};

// One trip and how long it took: from the first failure (an outcome or a
// check) after the target's last success to the trip.
struct ReplayTrip {
  std::string target;
  absl::Time at;
  absl::Duration detection;
};

// What one policy did over the window.
struct ReplaySummary {
  std::vector<ReplayTrip> trips;  // targets taken out of service by outcomes or checks
  uint32_t recoveries = 0;  // a target back in service
  uint32_t switches = 0;    // chain.switched, not counting the first pick
  uint32_t flaps = 0;       // switches away from a target the chain had come back to within flap_window
  // Failed outcomes on the target the chain's plan would have tried first:
  // requests the policy still sent to a failing target.
  uint64_t requests_to_failing = 0;
  absl::Duration in_fallback;
  absl::Duration in_degraded;
  uint64_t outcomes = 0;  // outcomes fed (counting batches in full)
  // Outcomes on a target other than the one this policy would have tried
  // first. The trace holds only what the live policy sent, so these count as
  // they happened; many of them mean the replay guesses more.
  uint64_t elsewhere = 0;
  uint32_t checks_used = 0;    // recorded check results that answered a check this policy asked for
  uint32_t checks_unused = 0;  // recorded results for which this policy had no check out
  Events events;               // target.state and chain.switched, in order
};

// One policy run, fed the trace as it comes. Replay feeds it a whole window
// at once; a shadow policy (DESIGN 3.17) is fed each second's entries as
// failoverd writes them and reads what the run did since it last looked.
// Both go through this one path, so a policy judged live and the same policy
// replayed later make the same decisions.
class PolicyRun {
 public:
  // A fresh engine holding `setup`'s chain and targets at `setup.from` (its
  // entries and `to` are not used). INVALID_ARGUMENT for a config the engine
  // refuses.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<PolicyRun>> Start(const ReplayInput& setup);
  ~PolicyRun();

  // One trace entry, in number order. The run's clock never goes back: an
  // entry stamped before the latest moment the run has seen is taken then.
  void Feed(const TraceEntry& entry);
  // The ticker's work (once a second) up to `now`, and the checks that fell due.
  void AdvanceTo(absl::Time now);
  // What the run did since the last call, moved out: its events and trips.
  // A live run calls these and so keeps no history; the counts stay in
  // summary().
  Events TakeEvents();
  std::vector<ReplayTrip> TakeTrips();
  // Advances to `to` and adds the chain's last stretch to the time in
  // FALLBACK and DEGRADED.
  [[nodiscard]] ReplaySummary Finish(absl::Time to);
  const ReplaySummary& summary() const;

 private:
  class Impl;
  explicit PolicyRun(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// INVALID_ARGUMENT naming `from`/`to` for a window that is empty, reversed
// or longer than kMaxReplayWindow.
[[nodiscard]] absl::Status CheckReplayWindow(absl::Time from, absl::Time to);

// Replays `input` with the chain's policy as it is (the live column) and,
// for candidates, WithPolicy first. INVALID_ARGUMENT for a bad window
// (CheckReplayWindow) or a config the engine refuses.
[[nodiscard]] absl::StatusOr<ReplaySummary> Replay(const ReplayInput& input);

// `input` with `policy` as the chain's policy and its targets' health
// settings (a target's own `health:` would otherwise override the candidate).
ReplayInput WithPolicy(ReplayInput input, const Policy& policy);

}  // namespace failover
