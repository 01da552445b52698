// Where one replica stands in the cluster's Change log (DESIGN 3.12). Every
// log index the replica keeps lives here and moves only through the steps
// below, so the threads that share them (the log follower, the leader
// session, the engine's writer stamping Changes, the committer writing them)
// cannot leave them in a state no step makes.
//
// What it guarantees: a Change is stamped with a place in the log only while
// this replica leads, and once Depose returns no later Stamp succeeds. So a
// leader deposed while its engine was making a Change never moves the applied
// cursor past the log after Reset, and never skips the next real entry.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <mutex>

namespace failover::cluster {

// The log index of a Change made when this replica could not place it in the
// log (it was not the leader): such a Change is never written.
constexpr uint64_t kNotInTheLog = std::numeric_limits<uint64_t>::max();

class LogCursor {
 public:
  // Where a log entry seen in etcd falls against what this replica holds.
  enum class Place {
    kHeld,           // applied here already, from the log or a snapshot
    kMadeThisTerm,   // stamped here while leading: written by this replica, unless another leader wrote there
    kNext,           // the next one to apply
    kGap,            // past the next one: entries between were missed
  };

  // At start: the data dir holds the log up to `restored`.
  void Start(uint64_t restored);

  // --- following ---
  void Saw(uint64_t index);  // an entry at `index` is in etcd
  Place PlaceOf(uint64_t index) const;
  // Everything up to `index`, which is in etcd, is applied here: the next
  // entry, or a snapshot at `index` that replaced all before it.
  void AppliedThrough(uint64_t index);
  // Back to the log's state after leading (Depose came first): the data dir
  // holds the log up to `index`; nothing this replica made later was written.
  void Reset(uint64_t index);
  // The watch delivered everything up to etcd revision `revision`.
  void DeliveredThrough(int64_t revision);

  // --- leading ---
  // Starts a term: Changes get the places after `applied()`.
  void Lead();
  // Stops stamping: after this, Stamp gives kNotInTheLog until the next Lead.
  void Depose();
  // The place of a Change the engine just made (under its writer lock).
  uint64_t Stamp();
  // Every entry up to `index` is in etcd (written by this replica).
  void Written(uint64_t index);

  // --- an entry that cannot be applied ---
  void Stuck(uint64_t index);
  // True once, when the cursor has got past the entry it was stuck on.
  bool PassedStuck();
  // Whether the entry right after the applied one is the one stuck on.
  bool StuckOnNext() const;

  // --- snapshots ---
  void KnowSnapshot(uint64_t index);
  // Whether the log has grown `keep` entries past the newest snapshot.
  bool DueForSnapshot(uint64_t at, uint64_t keep) const { return at >= snapshot() + keep; }

  uint64_t applied() const { return applied_.load(); }
  uint64_t in_etcd() const { return in_etcd_.load(); }
  uint64_t seen() const { return seen_.load(); }
  uint64_t snapshot() const { return snapshot_.load(); }
  uint64_t stuck() const { return stuck_.load(); }
  int64_t applied_revision() const { return applied_revision_.load(); }
  // Entries in etcd not applied here yet.
  uint64_t lag() const {
    const uint64_t seen = seen_.load();
    const uint64_t applied = applied_.load();
    return seen > applied ? seen - applied : 0;
  }

 private:
  // Raises `a` to `v` if it is lower (indexes seen out of order by different threads).
  template <class T>
  static void RaiseTo(std::atomic<T>& a, T v) {
    T known = a.load();
    while (known < v && !a.compare_exchange_weak(known, v)) {
    }
  }

  // Serializes the steps that move `applied_` or decide whether Stamp may
  // (Start, Stamp, AppliedThrough, Reset, Lead, Depose); readers load the atomics without it.
  std::mutex mu_;
  bool leading_ = false;  // guarded by mu_
  std::atomic<uint64_t> applied_{0};   // the last index given to the committer
  std::atomic<uint64_t> in_etcd_{0};   // every index up to here is in etcd
  std::atomic<uint64_t> own_from_{0};  // the first index stamped in this term (0: not leading)
  std::atomic<uint64_t> seen_{0};      // the highest index seen in etcd
  std::atomic<uint64_t> snapshot_{0};  // the newest snapshot known
  std::atomic<uint64_t> stuck_{0};     // the entry this replica cannot apply (0: none)
  std::atomic<int64_t> applied_revision_{0};
};

}  // namespace failover::cluster
