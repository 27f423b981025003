// Freed large blocks kept in the process's heap for reuse. By default glibc maps each block of
// 128 KiB or more on its own and unmaps it when freed, and hands free memory at the heap's top
// back to the system beyond 128 KiB, so a later allocation of the same size faults in fresh
// pages (on the 2-core VM about 1.3 us each). `deepool plan` frees large buffers while it builds
// or parses its graph, right before it plans: kept, the plan's tables reuse those pages (the
// first inception_v3 plan at G = 8 touched 151 fresh pages without this, 36 with it;
// docs/benchmarks.md).
//   ReuseFreedHeapBlocks: blocks up to 32 MiB come from the heap and stay there when freed, and
//     up to 32 MiB free at its top is kept. A short-lived command's main() calls it; a process
//     that holds large buffers for long (a worker's tensors) should not.
// Threading: affects the whole process; call it before threads start. glibc only: a no-op
// elsewhere.
#pragma once

namespace deepool {

void ReuseFreedHeapBlocks();

}  // namespace deepool
