// Keeps RocksDB in step with the engine: admin changes are committed before
// they take effect (the engine's commit hook), and state transitions are
// written with the events that announce them.
#pragma once

#include "server/engine/engine.h"
#include "storage/store.h"

namespace failover {

// Writes the current health of every target and the state of every chain that
// `events` mention, together with the events, in one batch.
void PersistTransitions(storage::Store& store, const Engine& engine, const Events& events);

}  // namespace failover
