// The engine's single writer (DESIGN 2): a state change is made while
// holding Engine::writer_mu_; Finish numbers its events before the lock is
// released and hands the Change to the sink in that same order. Private to
// the engine's source files.
#pragma once

#include <mutex>
#include <set>
#include <string>

#include "server/engine/engine.h"

namespace failover {

class Engine::ChangeWriter {
 public:
  explicit ChangeWriter(Engine& engine) : engine_(engine), lock_(engine.writer_mu_) {}
  ChangeWriter(const ChangeWriter&) = delete;
  ChangeWriter& operator=(const ChangeWriter&) = delete;

  Change& change() { return change_; }
  // Who asked for this change: recorded on each of its events.
  void set_actor(absl::string_view actor) { actor_ = std::string(actor); }
  Events* events() { return &change_.events; }
  // A target whose health changed without an event of its own (a disabled
  // target tripping underneath, say): its record is stored all the same.
  void TouchTarget(const std::string& name) { touched_targets_.insert(name); }

  // Numbers the events, records the state of every target and chain they
  // mention, hands the Change to the sink and copies the numbered events to
  // `out` (if given). Does nothing for a change that changed nothing.
  void Finish(Events* out) {
    for (Event& e : change_.events) {
      e.sequence = engine_.next_sequence_++;
      if (e.actor.empty()) e.actor = actor_;
      if (e.kind == EventKind::kTargetState) touched_targets_.insert(e.target);
      if (e.kind == EventKind::kChainSwitched) touched_chains_.insert(e.chain);
    }
    change_.next_sequence = engine_.next_sequence_;
    std::shared_ptr<const Snapshot> snap = engine_.Load();
    for (const std::string& name : touched_targets_) {
      const TargetEntry* t = snap->FindTarget(name);
      if (t == nullptr) continue;  // deleted by this change
      std::lock_guard<SmallMutex> lock(t->rt->mu);
      change_.targets.push_back(engine_.RecordOf(*t));
      t->rt->record_unsaved = false;
    }
    for (const std::string& name : touched_chains_) {
      const ChainEntry* c = snap->FindChain(name);
      if (c == nullptr) continue;
      std::lock_guard<SmallMutex> lock(c->rt->mu);
      change_.chains.push_back(engine_.RecordOf(*c));
    }
    const bool empty = change_.events.empty() && change_.config_generation == 0 && change_.pins.empty() &&
                       change_.manual.empty() && change_.targets.empty();
    if (out != nullptr) out->insert(out->end(), change_.events.begin(), change_.events.end());
    if (!empty && engine_.sink_) engine_.sink_(std::move(change_));
    change_ = Change();
  }

 private:
  Engine& engine_;
  std::lock_guard<std::mutex> lock_;
  Change change_;
  std::string actor_;
  std::set<std::string> touched_targets_;
  std::set<std::string> touched_chains_;
};

}  // namespace failover
