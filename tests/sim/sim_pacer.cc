#include "tests/sim/sim_pacer.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace failover::sim {
namespace {

thread_local void* current_party = nullptr;  // the calling thread's Party, when it is one

}  // namespace

SimPacer::SimPacer(SimulatedClock* clock, uint64_t seed) : clock_(clock), rng_(seed) {
  watchdog_ = std::thread([this] { Watchdog(); });
}

SimPacer::~SimPacer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  watchdog_wake_.notify_all();
  watchdog_.join();
}

void SimPacer::Adopt() {
  std::lock_guard<std::mutex> lock(mu_);
  parties_.push_back(std::make_unique<Party>());
  Party* me = parties_.back().get();
  me->id = static_cast<int>(parties_.size()) - 1;
  me->thread = std::this_thread::get_id();
  current_party = me;
  turn_ = me;
}

void SimPacer::Sleep(absl::Duration d) {
  std::unique_lock<std::mutex> lock(mu_);
  const absl::Time until = clock_->Now() + d;
  while (clock_->Now() < until) WaitLocked(lock, &turn_, until);  // a key nobody notifies
}

void SimPacer::SetGroup(int group) {
  std::lock_guard<std::mutex> lock(mu_);
  group_ = group;
}

void SimPacer::Pause(int group, absl::Duration d) {
  std::lock_guard<std::mutex> lock(mu_);
  paused_until_[group] = clock_->Now() + d;
}

uint64_t SimPacer::turns() const {
  std::lock_guard<std::mutex> lock(mu_);
  return turns_;
}

uint64_t SimPacer::digest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return digest_;
}

std::thread SimPacer::Start(std::function<void()> body) {
  std::unique_lock<std::mutex> lock(mu_);
  parties_.push_back(std::make_unique<Party>());
  Party* p = parties_.back().get();
  p->id = static_cast<int>(parties_.size()) - 1;
  p->group = group_;
  std::thread thread([this, p, body = std::move(body)] {
    {
      std::unique_lock<std::mutex> lock(mu_);
      current_party = p;
      AwaitTurnLocked(lock, p);
    }
    body();
    std::unique_lock<std::mutex> lock(mu_);
    p->state = Party::kDone;
    for (auto& other : parties_) {
      if (other->state == Party::kWaiting && other->key == p) other->state = Party::kRunnable;  // its Join
    }
    PassLocked();
  });
  p->thread = thread.get_id();  // before the thread can look: it waits for mu_
  return thread;
}

void SimPacer::Join(std::thread& thread) {
  std::unique_lock<std::mutex> lock(mu_);
  // (A thread's id is reused once it is joined, so a joined party forgets it.)
  const auto it = std::find_if(parties_.begin(), parties_.end(),
                               [&](const std::unique_ptr<Party>& p) { return p->thread == thread.get_id(); });
  if (it == parties_.end()) {
    std::fprintf(stderr, "SimPacer: Join of a thread it did not start\n");
    std::abort();
  }
  Party* joined = it->get();
  while (joined->state != Party::kDone) WaitLocked(lock, joined, absl::InfiniteFuture());
  joined->thread = std::thread::id();
  lock.unlock();
  thread.join();  // it has only to return: it holds no turn
}

void SimPacer::Wait(std::unique_lock<std::mutex>& held, const void* key, absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  held.unlock();  // no other party runs before this one hands the turn on
  WaitLocked(lock, key, deadline);
  lock.unlock();
  held.lock();
}

void SimPacer::WaitLocked(std::unique_lock<std::mutex>& lock, const void* key, absl::Time deadline) {
  auto* me = static_cast<Party*>(current_party);
  if (me == nullptr || turn_ != me) {
    std::fprintf(stderr, "SimPacer: a wait on a thread that does not hold the turn\n%s\n", DescribeLocked().c_str());
    std::abort();
  }
  me->state = Party::kWaiting;
  me->key = key;
  me->deadline = deadline;
  PassLocked();
  AwaitTurnLocked(lock, me);
}

void SimPacer::Notify(const void* key) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& p : parties_) {
    if (p->state == Party::kWaiting && p->key == key) p->state = Party::kRunnable;
  }
}

void SimPacer::Yield() {
  std::unique_lock<std::mutex> lock(mu_);
  auto* me = static_cast<Party*>(current_party);
  if (me == nullptr) return;  // a thread of no party's (a test's own, without turns)
  // Most calls arrive at once (drawn again with the others); some take up to
  // a third of a second, as over a busy network or to a slow etcd.
  const absl::Time arrives =
      rng_.Chance(0.8) ? absl::InfinitePast() : clock_->Now() + absl::Milliseconds(1 + rng_.Below(333));
  WaitLocked(lock, nullptr, arrives);
}

absl::Time SimPacer::ReadyAtLocked(const Party& p) const {
  absl::Time at = p.state == Party::kRunnable ? absl::InfinitePast() : p.deadline;
  if (p.state == Party::kDone) return absl::InfiniteFuture();
  const auto paused = paused_until_.find(p.group);
  if (paused != paused_until_.end()) at = std::max(at, paused->second);
  return at;
}

void SimPacer::PassLocked() {
  for (;;) {
    const absl::Time now = clock_->Now();
    std::vector<Party*> ready;
    absl::Time next = absl::InfiniteFuture();
    for (auto& p : parties_) {
      const absl::Time at = ReadyAtLocked(*p);
      if (at <= now) {
        ready.push_back(p.get());
      } else {
        next = std::min(next, at);
      }
    }
    if (!ready.empty()) {
      Party* chosen = ready[rng_.Below(ready.size())];
      chosen->state = Party::kRunnable;
      turn_ = chosen;
      ++turns_;
      for (uint64_t part : {static_cast<uint64_t>(chosen->id), static_cast<uint64_t>(absl::ToUnixNanos(now))}) {
        digest_ = (digest_ ^ part) * 1099511628211ull;
      }
      chosen->turn.notify_one();
      return;
    }
    bool anyone = false;
    for (auto& p : parties_) anyone = anyone || p->state != Party::kDone;
    if (!anyone) {
      turn_ = nullptr;  // the last party has ended
      return;
    }
    if (next == absl::InfiniteFuture()) {
      std::fprintf(stderr, "SimPacer: every party waits for a notice that no one can give\n%s\n",
                   DescribeLocked().c_str());
      std::abort();
    }
    clock_->Set(next);
  }
}

void SimPacer::AwaitTurnLocked(std::unique_lock<std::mutex>& lock, Party* me) {
  me->turn.wait(lock, [&] { return turn_ == me; });
}

std::string SimPacer::DescribeLocked() const {
  std::string out = absl::StrCat("  at ", absl::FormatTime(clock_->Now()), ", turn ", turns_, ":");
  for (const auto& p : parties_) {
    absl::StrAppend(&out, "\n  party ", p->id, " (group ", p->group, "): ",
                    p.get() == turn_                  ? "holds the turn"
                    : p->state == Party::kRunnable ? "may run"
                    : p->state == Party::kDone     ? "ended"
                                                   : "waits");
    if (p->state == Party::kWaiting && p.get() != turn_) {
      absl::StrAppend(&out, " until ", p->deadline == absl::InfiniteFuture() ? "notified" : absl::FormatTime(p->deadline));
    }
  }
  return out;
}

void SimPacer::Watchdog() {
  std::unique_lock<std::mutex> lock(mu_);
  uint64_t seen = turns_;
  int still = 0;
  while (!watchdog_wake_.wait_for(lock, std::chrono::seconds(1), [&] { return stopping_; })) {
    still = turns_ == seen ? still + 1 : 0;
    seen = turns_;
    if (still < 30) continue;
    // A party blocked outside the pacer (on a lock a waiting party holds)
    // while holding the turn: nothing else will ever run.
    std::fprintf(stderr, "SimPacer: the turn has not moved for 30 s of real time\n%s\n",
                 DescribeLocked().c_str());
    std::abort();
  }
}

}  // namespace failover::sim
