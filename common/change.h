// A Change: one state change as it leaves the engine (DESIGN 2, "One ordered
// change stream"). It carries everything that must be durable (config, pins,
// manual failovers, the health and chain records it touched) and the events
// that announce it, numbered by the engine's single writer. The committer
// stores Changes in order, then publishes their events; storage reads the
// records back into a RestoredState at start.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "common/model.h"

namespace failover {

// A target's automatic health and what explains it.
struct TargetStateRecord {
  std::string name;
  HealthState automatic = HealthState::kUnknown;
  absl::Time since = absl::InfinitePast();
  uint32_t trips = 0;
  uint32_t recovery_passes = 0;
  Source source = Source::kAuto;
  std::string reason;
  std::string last_error;
  absl::Time last_error_time = absl::InfinitePast();
  absl::Time last_probe = absl::InfinitePast();
  std::string last_check;  // what the last check found, as one line
  // A rate-limit hold: plans put the target last until then (DESIGN 3.12:
  // cluster state, so every replica holds it).
  absl::Time held_until = absl::InfinitePast();
};

// A chain's active target and state.
struct ChainStateRecord {
  std::string name;
  std::string active;
  ChainState state = ChainState::kPrimary;
  absl::Time active_since = absl::InfinitePast();
  absl::Time last_switch = absl::InfinitePast();
};

struct PinRecord {
  std::string chain;
  std::string target;  // empty: unpinned
};

struct ManualFailoverRecord {
  std::string target;
  bool active = false;  // false: cancelled
  std::string reason;
  absl::Time since = absl::InfinitePast();
};

// A report (by its id: sender and sequence) whose counting made a Change.
struct CountedReport {
  std::string sender;
  uint64_t sequence = 0;
};

// The shape ReportOutcome takes a report id in: a sender of 1 to
// kMaxReportSender bytes and a sequence from 1. Ids read back from etcd or the
// data dir in another shape are dropped.
constexpr size_t kMaxReportSender = 64;
inline bool IsReportId(std::string_view sender, uint64_t sequence) {
  return !sender.empty() && sender.size() <= kMaxReportSender && sequence > 0;
}

struct Change {
  // Config: set when the change bumps the generation.
  uint64_t config_generation = 0;
  std::vector<TargetConfig> put_targets;
  std::vector<std::string> deleted_targets;
  std::vector<ChainConfig> put_chains;
  std::vector<std::string> deleted_chains;
  std::vector<PinRecord> pins;
  std::vector<ManualFailoverRecord> manual;
  // The state of every target and chain the change touched, as it left them.
  std::vector<TargetStateRecord> targets;
  std::vector<ChainStateRecord> chains;
  // Numbered consecutively; the first follows the previous Change's last.
  Events events;
  // The sequence the next event will get once this Change is applied.
  uint64_t next_sequence = 1;
  // Cluster mode (DESIGN 3.12): the Change's place in the replicated log, from
  // 1 without gaps. 0 on a single node.
  uint64_t log_index = 0;
  // The reports whose counting made this Change (a trip, a recovery): stored
  // with its first event and carried in the cluster's log, so that a restarted
  // failoverd, or the next leader, counts a resend of them as counted already
  // (DESIGN 3.14, invariant 4).
  std::vector<CountedReport> counted_reports;
};

// What storage hands back at start: the sum of every Change stored.
struct RestoredManual {
  std::string reason;
  absl::Time since;
};

struct RestoredState {
  uint64_t generation = 0;
  std::vector<TargetConfig> targets;
  std::vector<ChainConfig> chains;
  std::map<std::string, std::string> pins;  // chain -> target
  std::map<std::string, RestoredManual> manual;
  std::vector<TargetStateRecord> health;
  std::vector<ChainStateRecord> chain_states;
  uint64_t next_sequence = 1;
  // Cluster mode: the last log entry this state includes (0: none).
  uint64_t log_index = 0;
};

}  // namespace failover
