// libFuzzer target: any bytes as an entry of the cluster's Change log in etcd
// (DESIGN 3.12), decoded and applied by a replica's engine as its log watch
// would. A bad entry is refused with a reason and changes nothing; an entry
// that applies leaves an engine that plans every chain and holds only UTF-8.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/utf8.h"
#include "server/cluster/log_entry.h"
#include "server/engine/engine.h"

namespace {

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

failover::TargetConfig Target(const std::string& name) {
  failover::TargetConfig t;
  t.name = name;
  return t;
}

failover::ChainConfig Chain(const std::string& name, std::vector<std::string> targets) {
  failover::ChainConfig c;
  c.name = name;
  c.targets = std::move(targets);
  return c;
}

// What a caller could see: every chain's plan and state, every target's health.
std::string Describe(failover::Engine& engine) {
  std::string out;
  for (const failover::ChainView& c : engine.ListChains()) {
    failover::PickRequest pick;
    pick.chain = c.config.name;
    failover::Plan plan;
    failover::Events events;
    const absl::Status picked = engine.Pick(pick, kNow, &plan, &events);
    out += c.config.name + ":" + c.status.active_target + ":" + c.status.pinned_target + ":" +
           std::to_string(static_cast<int>(c.status.state)) + ":" + std::to_string(picked.ok()) + ":";
    for (const failover::PlannedAttempt& a : plan.attempts) out += a.target->config->name + ",";
    out += "\n";
  }
  for (const failover::TargetView& t : engine.ListTargets()) {
    out += t.config.name + ":" + std::to_string(static_cast<int>(t.status.health)) + ":" + t.status.reason + ":" +
           t.status.last_error + "\n";
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  failover::Engine engine;
  failover::RestoredState start;
  start.generation = 1;
  start.targets = {Target("a"), Target("b"), Target("c")};
  start.chains = {Chain("x", {"a", "b"}), Chain("y", {"c", "b"})};
  if (!engine.Restore(start, kNow).ok()) __builtin_trap();
  engine.SetAcceptingChanges(false, "following");
  const std::string before = Describe(engine);

  absl::StatusOr<failover::Change> change = failover::cluster::DecodeEntry(bytes, 7);
  if (!change.ok()) {
    if (change.status().message().empty() || !failover::IsValidUtf8(change.status().message())) __builtin_trap();
    return 0;
  }
  if (change->log_index != 7) __builtin_trap();
  for (const failover::CountedReport& r : change->counted_reports) {  // what the report-id window keeps
    if (r.sender.empty() || r.sender.size() > 64 || !failover::IsValidUtf8(r.sender) || r.sequence == 0) {
      __builtin_trap();
    }
  }
  const absl::Status applied = engine.ApplyChange(*change, kNow);
  const std::string after = Describe(engine);
  if (!applied.ok()) {
    // Refused whole: the replica keeps serving what it had.
    if (applied.message().empty() || after != before) __builtin_trap();
    return 0;
  }
  if (!failover::IsValidUtf8(after)) __builtin_trap();
  return 0;
}
