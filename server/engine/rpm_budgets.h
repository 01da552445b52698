// The leader's books of the rpm budgets it leases out (DESIGN 3.12, in the
// shape of Google's Doorman). A target's `limits.rpm` is a budget of requests
// per wall-clock minute; each replica asks the leader for a share of it for
// one minute at a time (the current one, and the next ahead of time) and
// asks for more while its callers use what it holds. The books make sure the
// shares of one minute never add up to more than the cap, whoever asks and
// however often.
//
// An ask names the total the requester wants for the minute, not an amount
// to add, so a repeated ask (its answer was lost) gets the same total and
// takes nothing more. It also says what the requester holds and has already
// planned: after a leader change the new leader's books start empty and are
// rebuilt from those, and a replica that planned its even part without a
// grant (it could not reach the leader) has that counted against the cap.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "server/engine/engine.h"

namespace failover {

class RpmLedger {
 public:
  struct Ask {
    std::string target;
    int64_t minute = 0;  // minutes since the Unix epoch
    uint32_t cap = 0;    // the target's limits.rpm (the leader's config)
    uint32_t want = 0;   // the total the requester wants to plan in the minute
    uint32_t held = 0;   // what it holds for the minute now
    uint32_t used = 0;   // what it planned in the minute so far
    bool give_back = false;  // it plans no more: its share becomes `used`
  };

  // Requesters one target's minute keeps books for; an ask from one more
  // gets nothing (replicas are a handful; this only bounds the memory a
  // caller inventing names could take).
  static constexpr size_t kMostRequesters = 1024;

  // The requester's total for the minute after this ask: at least what it
  // held or used, at most `want` unless those were more, and never so much
  // that the minute's shares pass the cap. A give-back ask makes it exactly
  // what it used (a closing requester's unused share goes back to the cap).
  uint32_t Grant(const std::string& requester, const Ask& ask);

  // Forgets the minutes before `minute` (they can no longer be planned).
  void Forget(int64_t before_minute);

  // Everything granted for `target` in `minute` (tests, status).
  uint64_t Granted(const std::string& target, int64_t minute) const;

 private:
  struct Book {
    uint64_t total = 0;
    std::map<std::string, uint32_t> shares;  // requester -> its total
  };
  std::map<std::pair<int64_t, std::string>, Book> books_;  // (minute, target)
};

// The wall-clock minute limits.rpm counts in: minutes since the Unix epoch.
inline int64_t RpmMinuteOf(absl::Time t) { return absl::ToUnixSeconds(t) / 60; }

// What a replica or a client asks for, from what its engine used and holds
// (Engine::RpmUses for the current minute), `into` seconds into the minute.
// `sharers`: how many are expected to share the caps (a replica: the
// replicas; a client deciding locally: 16, one of many). A target asks when
// it holds no grant for the minute, or when what is left of its grant would
// last less than a second at the minute's pace; from 45 s on it also asks for
// the next minute ahead of time, so a busy asker starts it with a grant. An
// idle one asks for a small part (a quarter of cap / sharers, at least one
// request), so the rest goes to those whose callers need it.
std::vector<RpmLedger::Ask> PlanRpmAsks(const std::vector<Engine::RpmUse>& uses, int64_t minute,
                                        absl::Duration into, uint32_t sharers);

}  // namespace failover
