#include "server/cluster/log_cursor.h"

namespace failover::cluster {

void LogCursor::Start(uint64_t restored) {
  std::lock_guard<std::mutex> lock(mu_);
  applied_ = restored;
  in_etcd_ = restored;
}

void LogCursor::Saw(uint64_t index) { RaiseTo(seen_, index); }

LogCursor::Place LogCursor::PlaceOf(uint64_t index) const {
  const uint64_t applied = applied_.load();
  if (index > applied) return index == applied + 1 ? Place::kNext : Place::kGap;
  const uint64_t own = own_from_.load();
  return own != 0 && index >= own ? Place::kMadeThisTerm : Place::kHeld;
}

void LogCursor::AppliedThrough(uint64_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  RaiseTo(in_etcd_, index);
  applied_ = index;
}

void LogCursor::Reset(uint64_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  applied_ = index;
  in_etcd_ = index;
  own_from_ = 0;
}

void LogCursor::DeliveredThrough(int64_t revision) { RaiseTo(applied_revision_, revision); }

void LogCursor::Lead() {
  std::lock_guard<std::mutex> lock(mu_);
  leading_ = true;
  own_from_ = applied_.load() + 1;
}

void LogCursor::Depose() {
  std::lock_guard<std::mutex> lock(mu_);
  leading_ = false;
}

uint64_t LogCursor::Stamp() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!leading_) return kNotInTheLog;
  return applied_.fetch_add(1) + 1;
}

void LogCursor::Written(uint64_t index) { RaiseTo(in_etcd_, index); }

void LogCursor::Stuck(uint64_t index) { stuck_ = index; }

bool LogCursor::PassedStuck() {
  uint64_t stuck = stuck_.load();
  while (stuck != 0 && applied_.load() >= stuck) {
    if (stuck_.compare_exchange_weak(stuck, 0)) return true;
  }
  return false;
}

bool LogCursor::StuckOnNext() const {
  const uint64_t stuck = stuck_.load();
  return stuck != 0 && stuck == applied_.load() + 1;
}

void LogCursor::KnowSnapshot(uint64_t index) { RaiseTo(snapshot_, index); }

}  // namespace failover::cluster
