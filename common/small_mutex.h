// A mutex in 4 bytes, for the locks an engine keeps one of per target and per
// chain: a std::mutex takes 40, which with 10,000 chains of two targets was
// about 0.1 KiB a chain. It is a Linux futex word with three states (free,
// held, held with sleepers), as in Drepper's "Futexes Are Tricky": an unlock
// makes a system call only when someone sleeps on it.
//
// It is built from std::atomic in this header, so ThreadSanitizer sees its
// acquire and release as it sees std::mutex's (unlike Debian's Abseil, which
// is not built for it). It meets BasicLockable and Lockable: std::lock_guard,
// std::unique_lock and std::scoped_lock take it; a condition variable needs
// std::condition_variable_any.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace failover {

class SmallMutex {
 public:
  SmallMutex() = default;
  SmallMutex(const SmallMutex&) = delete;
  SmallMutex& operator=(const SmallMutex&) = delete;

  void lock() {
    if (!try_lock()) LockContended();
  }
  bool try_lock() {
    uint32_t free = kFree;
    return word_.compare_exchange_strong(free, kHeld, std::memory_order_acquire, std::memory_order_relaxed);
  }
  void unlock() {
    if (word_.exchange(kFree, std::memory_order_release) == kHeldWithSleepers) {
      syscall(SYS_futex, Address(), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
    }
  }

 private:
  static constexpr uint32_t kFree = 0;
  static constexpr uint32_t kHeld = 1;
  static constexpr uint32_t kHeldWithSleepers = 2;

  void LockContended() {
    // A short spin first: these locks are held for a few hundred
    // nanoseconds, so the holder is usually about to let go.
    for (int i = 0; i < 64; ++i) {
      if (word_.load(std::memory_order_relaxed) == kFree && try_lock()) return;
    }
    // Marking the word "with sleepers" before sleeping makes the holder's
    // unlock wake one; taking it that way may cost one needless wake later.
    while (word_.exchange(kHeldWithSleepers, std::memory_order_acquire) != kFree) {
      syscall(SYS_futex, Address(), FUTEX_WAIT_PRIVATE, kHeldWithSleepers, nullptr, nullptr, 0);
    }
  }
  uint32_t* Address() { return reinterpret_cast<uint32_t*>(&word_); }

  std::atomic<uint32_t> word_{kFree};
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "the futex is the atomic's own word");
};

}  // namespace failover
