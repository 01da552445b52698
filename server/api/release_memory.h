// Large config changes and the restore build whole new snapshots and then free
// the old ones and their temporaries. glibc keeps freed heap pages mapped, so
// without this the RSS stays at the high-water mark of the last big change.
#pragma once

#include <malloc.h>

#include <atomic>

namespace failover::api {

inline void ReleaseFreedMemory() { malloc_trim(0); }

namespace internal {
inline std::atomic<int> ticks_to_release{0};
}

// For a change that frees much only after its call has ended (gRPC frees the
// request once it is answered, the committer its copies once written): the
// daemon's tick after next, at least a second away, gives the memory back,
// off the caller's path.
inline void ReleaseFreedMemorySoon() { internal::ticks_to_release.store(2, std::memory_order_relaxed); }
// Once a tick. `flush` runs on the first of the two ticks: what it frees in
// the background (the store's memtables, holding the change's records) is
// given back on the second.
template <class Flush>
void ReleaseFreedMemoryIfAsked(Flush flush) {
  int n = internal::ticks_to_release.load(std::memory_order_relaxed);
  while (n > 0 && !internal::ticks_to_release.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) {
  }
  if (n == 2) flush();
  if (n == 1) ReleaseFreedMemory();
}

// Called once at start. glibc raises its mmap threshold each time a large
// block is freed, after which big temporaries (a whole config's copy during an
// apply) come from the heap and leave it fragmented. A fixed threshold keeps
// them in their own mappings, returned whole when freed.
inline void KeepLargeAllocationsSeparate() { mallopt(M_MMAP_THRESHOLD, 256 * 1024); }

}  // namespace failover::api
