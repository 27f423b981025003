// common/heap_reuse.h: after ReuseFreedHeapBlocks, a large block allocated again after one of its
// size was freed reuses the pages the process already touched; without it, it faults in fresh
// ones. Each case runs in a child process, since the setting lasts for the whole process.
#include "common/heap_reuse.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>

namespace deepool {
namespace {

// The sanitizers' allocators ignore glibc's settings.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kOwnAllocator = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
constexpr bool kOwnAllocator = true;
#else
constexpr bool kOwnAllocator = false;
#endif
#else
constexpr bool kOwnAllocator = false;
#endif

constexpr size_t kBlockBytes = 4 << 20;  // 1,024 pages

long MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

void TouchEveryPage(char* block) {
  volatile char* bytes = block;  // kept: the allocation must not be optimised away
  for (size_t i = 0; i < kBlockBytes; i += 4096) bytes[i] = 1;
}

// In a child process: a block allocated, touched and freed, then another of the same size
// touched; returns the page faults of the second.
long FaultsOfSecondBlock(bool reuse) {
  int pipe_ends[2];
  REQUIRE(pipe(pipe_ends) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (reuse) ReuseFreedHeapBlocks();
    char* first = static_cast<char*>(std::malloc(kBlockBytes));
    TouchEveryPage(first);
    std::free(first);
    const long before = MinorFaults();
    char* second = static_cast<char*>(std::malloc(kBlockBytes));
    TouchEveryPage(second);
    const long faults = MinorFaults() - before;
    std::free(second);
    const bool written = write(pipe_ends[1], &faults, sizeof faults) == sizeof faults;
    _exit(written ? 0 : 1);
  }
  close(pipe_ends[1]);
  long faults = -1;
  const bool read_all = read(pipe_ends[0], &faults, sizeof faults) == sizeof faults;
  close(pipe_ends[0]);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  REQUIRE(read_all);
  return faults;
}

TEST_CASE("A freed large block's pages are reused after ReuseFreedHeapBlocks") {
  if (kOwnAllocator) {
    WARN("built with a sanitizer, whose allocator ignores glibc's settings: nothing to check");
    return;
  }
  const long fresh = FaultsOfSecondBlock(/*reuse=*/false);
  const long reused = FaultsOfSecondBlock(/*reuse=*/true);
  CAPTURE(fresh, reused);
  // By default the block is unmapped when freed, and the next one's pages are new.
  CHECK(fresh > 512);
  CHECK(reused < 64);
}

}  // namespace
}  // namespace deepool
