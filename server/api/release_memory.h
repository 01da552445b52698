// Large config changes and the restore build whole new snapshots and then free
// the old ones and their temporaries. glibc keeps freed heap pages mapped, so
// without this the RSS stays at the high-water mark of the last big change.
#pragma once

#include <malloc.h>

namespace failover::api {

inline void ReleaseFreedMemory() { malloc_trim(0); }

// Called once at start. glibc raises its mmap threshold each time a large
// block is freed, after which big temporaries (a whole config's copy during an
// apply) come from the heap and leave it fragmented. A fixed threshold keeps
// them in their own mappings, returned whole when freed.
inline void KeepLargeAllocationsSeparate() { mallopt(M_MMAP_THRESHOLD, 256 * 1024); }

}  // namespace failover::api
