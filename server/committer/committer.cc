#include "server/committer/committer.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace failover {
namespace {
thread_local Committer::Scope* current_scope = nullptr;
constexpr char kDroppedPayload[] = "type.googleapis.com/failoverd.Dropped";
}  // namespace

absl::Status Dropped(absl::Status status, size_t saved) {
  status.SetPayload(kDroppedPayload, absl::Cord(absl::StrCat(saved)));
  return status;
}

bool IsDropped(const absl::Status& status) { return status.GetPayload(kDroppedPayload).has_value(); }

size_t SavedBeforeDropped(const absl::Status& status) {
  const auto payload = status.GetPayload(kDroppedPayload);
  size_t saved = 0;
  if (!payload || !absl::SimpleAtoi(std::string(*payload), &saved)) return 0;
  return saved;
}

Committer::Scope::Scope(Committer* committer) : committer_(committer), outer_(current_scope) {
  current_scope = this;
}

Committer::Scope::~Scope() { current_scope = outer_; }

absl::Status Committer::Scope::AwaitWithEarlier() {
  if (committer_ == nullptr) return absl::OkStatus();
  const uint64_t ticket = last_ != 0 ? last_ : committer_->LastTicket();
  return ticket == 0 ? absl::OkStatus() : committer_->Await(ticket);
}

void Committer::Scope::AwaitThen(Then then) {
  if (last_ == 0) return then(absl::OkStatus());
  committer_->AwaitThen(last_, std::move(then));
}

uint64_t Committer::LastTicket() {
  std::lock_guard<std::mutex> lock(mu_);
  return next_ticket_ - 1;
}

Committer::Committer(WriteFn write, PublishFn publish, HealthFn on_health, absl::Duration retry_interval,
                     Mode mode, Pacer* pacer)
    : write_(std::move(write)),
      publish_(std::move(publish)),
      on_health_(std::move(on_health)),
      retry_interval_(retry_interval),
      work_(pacer),
      done_(pacer),
      mode_(mode),
      pacer_(pacer) {
  if (mode_ == Mode::kThread) thread_ = StartThread(pacer_, [this] { Run(); });
}

Committer::~Committer() { Stop(); }

uint64_t Committer::Submit(Change change) {
  uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ticket = next_ticket_++;
    if (stopped_) {
      failed_up_to_ = ticket;
      failure_ = absl::UnavailableError("failoverd is shutting down; the change was not saved");
    } else {
      queue_.emplace_back(ticket, std::move(change));
    }
  }
  work_.NotifyOne();
  for (Scope* s = current_scope; s != nullptr; s = s->outer_) {
    if (s->committer_ == this) {
      s->last_ = ticket;
      break;
    }
  }
  return ticket;
}

template <typename Done>
void Committer::DriveLocked(std::unique_lock<std::mutex>& lock, Done done) {
  if (mode_ != Mode::kCallerDriven) return;
  // A write that fails marks every queued ticket failed: this ends.
  while (!done() && !queue_.empty() && !stopped_) {
    WriteQueuedLocked(lock);
    if (failing_) break;  // retried by Step, as the thread retries after retry_interval
  }
}

bool Committer::Step() {
  std::unique_lock<std::mutex> lock(mu_);
  if (mode_ != Mode::kCallerDriven || queue_.empty() || stopped_) return true;
  WriteQueuedLocked(lock);
  return !failing_;
}

absl::Status Committer::Await(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  DriveLocked(lock, [&] { return SettledLocked(ticket); });
  done_.Wait(lock, [&] { return SettledLocked(ticket); });
  return StatusOfLocked(ticket);
}

void Committer::AwaitThen(uint64_t ticket, Then then) {
  if (mode_ == Mode::kCallerDriven) return then(Await(ticket));
  std::unique_lock<std::mutex> lock(mu_);
  if (!SettledLocked(ticket)) {
    then_.emplace(ticket, std::move(then));
    return;
  }
  const absl::Status status = StatusOfLocked(ticket);
  lock.unlock();
  then(status);
}

absl::Status Committer::StatusOfLocked(uint64_t ticket) const {
  for (const DroppedTickets& d : dropped_) {
    if (ticket >= d.first && ticket <= d.last) return d.why;
  }
  if (ticket <= forgotten_through_) {
    return absl::UnavailableError(
        "whether this change was saved is no longer known: many changes were dropped since; look at the state again");
  }
  if (durable_ >= ticket) return absl::OkStatus();
  return failure_;
}

void Committer::RunSettledLocked(std::unique_lock<std::mutex>& lock) {
  const uint64_t settled = std::max(durable_, failed_up_to_);
  if (then_.empty() || then_.begin()->first > settled) return;
  std::vector<std::pair<Then, absl::Status>> ready;
  for (auto it = then_.begin(); it != then_.end() && it->first <= settled; it = then_.erase(it)) {
    ready.emplace_back(std::move(it->second), StatusOfLocked(it->first));
  }
  lock.unlock();
  for (auto& [then, status] : ready) then(std::move(status));
  lock.lock();
}

void Committer::AwaitPublished(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = next_ticket_ - 1;
  DriveLocked(lock, [&] { return published_ >= target || failed_up_to_ >= target; });
  done_.WaitFor(lock, timeout,
                 [&] { return published_ >= target || failed_up_to_ >= target; });
}

bool Committer::AwaitIdle(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  DriveLocked(lock, [&] { return queue_.empty(); });
  if (mode_ == Mode::kCallerDriven) return queue_.empty();
  return done_.WaitFor(lock, timeout, [&] { return queue_.empty(); });
}

void Committer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (mode_ == Mode::kThread) {
    work_.NotifyOne();
    JoinThread(pacer_, thread_);
    return;
  }
  // One last try, as the thread would make.
  std::unique_lock<std::mutex> lock(mu_);
  if (!queue_.empty()) WriteQueuedLocked(lock);
  stopped_ = true;
  failed_up_to_ = next_ticket_ - 1;
  if (failure_.ok()) failure_ = absl::UnavailableError("failoverd is shutting down; the change was not saved");
  done_.NotifyAll();
  RunSettledLocked(lock);
}

void Committer::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (failing_ && !stopping_) {
      work_.WaitFor(lock, retry_interval_, [&] { return stopping_; });
    } else {
      work_.Wait(lock, [&] { return stopping_ || !queue_.empty(); });
    }
    if (queue_.empty()) {
      if (stopping_) break;
      continue;
    }
    const bool last_try = stopping_;
    WriteQueuedLocked(lock);
    if (last_try && failing_) break;
  }
  stopped_ = true;
  // What could not be written is lost with the process, as its callers were told.
  failed_up_to_ = next_ticket_ - 1;
  if (failure_.ok()) failure_ = absl::UnavailableError("failoverd is shutting down; the change was not saved");
  done_.NotifyAll();
  RunSettledLocked(lock);
}

void Committer::WriteQueuedLocked(std::unique_lock<std::mutex>& lock) {
  // Everything ready now goes in one write. The queue keeps the Changes
  // until they are durable, so a failed write is retried whole.
  const size_t max_batch = max_batch_.load(std::memory_order_relaxed);
  const size_t take = max_batch == 0 ? queue_.size() : std::min(queue_.size(), max_batch);
  std::vector<const Change*> batch;
  batch.reserve(take);
  for (size_t i = 0; i < take; ++i) batch.push_back(&queue_[i].second);
  const uint64_t last = queue_[take - 1].first;
  const size_t count = batch.size();
  lock.unlock();
  // deque elements stay put while Submit appends, so `batch` stays valid.
  const absl::Status written = write_(batch);
  if (written.ok()) {
    if (failing_) on_health_(absl::OkStatus());
    failing_ = false;
    // The callers may answer now that their Changes are durable; watchers,
    // metrics and the log get them next, in order, off the callers' path.
    lock.lock();
    durable_ = last;
    done_.NotifyAll();
    RunSettledLocked(lock);
    lock.unlock();
    for (size_t i = 0; i < count; ++i) publish_(*batch[i]);
    lock.lock();
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(count));
    published_ = last;
    done_.NotifyAll();
  } else if (IsDropped(written)) {
    // Never to be written: dropped, not retried. A first part the write did
    // save is durable (and published by whoever brings it back).
    const size_t saved = std::min(SavedBeforeDropped(written), count);
    const uint64_t first_dropped = last - count + 1 + saved;
    lock.lock();
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(count));
    const absl::Status why(written.code(), written.message());  // without the mark
    failure_ = why;
    failed_up_to_ = last;
    if (saved > 0) durable_ = first_dropped - 1;
    if (saved == count) {
      // Nothing of this batch is dropped after all.
    } else if (!dropped_.empty() && dropped_.back().last + 1 == first_dropped && dropped_.back().why == why) {
      dropped_.back().last = last;
    } else {
      dropped_.push_back(DroppedTickets{first_dropped, last, why});
    }
    if (dropped_.size() > kDroppedKept) {
      forgotten_through_ = dropped_.front().last;
      dropped_.pop_front();
    }
    published_ = last;
    done_.NotifyAll();
    RunSettledLocked(lock);
  } else {
    if (!failing_) on_health_(written);
    failing_ = true;
    lock.lock();
    failure_ = absl::UnavailableError(absl::StrCat(
        "not saved yet: ", written.message(),
        "; failoverd keeps the change in memory, saves it as soon as the data dir takes writes again (it is "
        "lost if failoverd stops first), and refuses further changes until then"));
    failed_up_to_ = next_ticket_ - 1;
    done_.NotifyAll();
    RunSettledLocked(lock);
  }
}

}  // namespace failover
