#include "common/heap_reuse.h"

#include <cstdlib>  // defines __GLIBC__ with glibc

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace deepool {

void ReuseFreedHeapBlocks() {
#if defined(__GLIBC__)
  // glibc's own ceiling for the threshold it raises by itself (DEFAULT_MMAP_THRESHOLD_MAX).
  constexpr int kKeptBytes = 32 << 20;
  mallopt(M_MMAP_THRESHOLD, kKeptBytes);
  mallopt(M_TRIM_THRESHOLD, kKeptBytes);
#endif
}

}  // namespace deepool
