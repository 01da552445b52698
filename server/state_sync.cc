#include "server/state_sync.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "server/log/log.h"

namespace failover {

void PersistTransitions(storage::Store& store, const Engine& engine, const Events& events) {
  absl::flat_hash_set<std::string> target_names;
  absl::flat_hash_set<std::string> chain_names;
  for (const Event& e : events) {
    if (e.kind == EventKind::kTargetState) target_names.insert(e.target);
    if (e.kind == EventKind::kChainSwitched) chain_names.insert(e.chain);
  }
  std::vector<TargetStatus> targets;
  std::vector<ChainStatus> chains;
  for (const std::string& name : target_names) {
    if (auto status = engine.GetTargetStatus(name); status.ok()) targets.push_back(*std::move(status));
  }
  for (const std::string& name : chain_names) {
    if (auto status = engine.GetChainStatus(name); status.ok()) chains.push_back(*std::move(status));
  }
  const absl::Status written = store.WriteTransitions(targets, chains, events);
  if (!written.ok()) {
    // The transition already happened in memory; the next one rewrites the records.
    log::Error(absl::StrCat("cannot save state transitions: ", written.message()));
  }
}

}  // namespace failover
