// The Change that makes a state exactly another one: how an engine that
// followed Changes goes back to a state read elsewhere (a cluster replica
// after it stops leading, DESIGN 3.12).
#pragma once

#include <set>
#include <string>

#include "common/change.h"

namespace failover {

// The Change that turns a state holding `targets_now` and `chains_now` into
// exactly `to`: every object of `to` put with its records (a target without a
// health record gets a fresh one, an unpinned chain an unpin, a target without
// a manual failover a cancel), the rest deleted. Carries `to`'s next sequence
// and log index.
Change ReplaceWith(const RestoredState& to, const std::set<std::string>& targets_now,
                   const std::set<std::string>& chains_now);

}  // namespace failover
