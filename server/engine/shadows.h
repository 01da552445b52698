// Shadow policies judged live (DESIGN 3.17). Every shadow policy of every
// chain has its own PolicyRun (replay.h): a private engine holding the chain
// and its targets under that policy, fed each entry of the outcome trace as
// failoverd writes it, once a second. What a run does is reported as shadow
// events and counted; nothing it decides reaches the real engine. A replay
// of the same trace under the same policy makes the same decisions.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/model.h"
#include "common/outcome.h"
#include "server/engine/engine.h"
#include "server/engine/replay.h"

namespace failover {

// What a shadow policy would have done: a target.state or chain.switched
// event as its run made it (its sequence is 0: shadow events are not part
// of the numbered event log).
struct ShadowEvent {
  std::string shadow;
  Event event;
};

// One shadow policy's run so far, for the status page and metrics.
struct ShadowStatus {
  std::string chain;
  std::string shadow;
  absl::Time since;    // the run started (the config that holds it was applied)
  std::string active;  // the target the chain would be on
  ChainState state = ChainState::kPrimary;
  uint64_t trips = 0;
  uint64_t recoveries = 0;
  uint64_t switches = 0;
  uint64_t flaps = 0;
};

class ShadowPolicies {
 public:
  // Brings the runs in line with `snapshot`: a shadow policy that is new, or
  // whose chain, targets or policy changed, starts a fresh run at `now`
  // (every target unknown); runs of removed ones end. Returns at once when
  // the snapshot's generation was seen before.
  void Configure(const Snapshot& snapshot, absl::Time now);

  // Feeds `entries` (in trace order) to the runs whose chain holds each
  // entry's target, advances every run to `now`, and returns what they did.
  std::vector<ShadowEvent> Feed(absl::Span<const TraceEntry> entries, absl::Time now);

  // Every run, by chain then shadow name.
  std::vector<ShadowStatus> Status() const;
  bool empty() const;

 private:
  struct Run {
    ReplayInput setup;  // what the run was started from (its entries unused)
    std::unique_ptr<PolicyRun> run;
    ShadowStatus status;
  };
  using Key = std::pair<std::string, std::string>;  // chain, shadow

  void Take(Run& r, std::vector<ShadowEvent>* out);  // mu_ held

  // std::mutex, not absl::Mutex: ThreadSanitizer sees it. Guards what follows.
  mutable std::mutex mu_;
  uint64_t generation_ = 0;
  bool configured_ = false;
  std::map<Key, Run> runs_;
};

}  // namespace failover
