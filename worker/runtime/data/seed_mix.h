// Seeds for the data sources' generators: distinct inputs give unrelated seeds.
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <random>

namespace deepool::worker {

// SplitMix64's finaliser.
inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A seed for the pair (a, b): Mix of a's mix and b, so (a, b) and (b, a) differ.
inline uint64_t SeedMix(uint64_t a, uint64_t b) { return Mix(Mix(a) ^ b); }

// A uniform draw from [0, bound) (bound >= 1), the same on every platform (std's distributions
// are not fixed by the standard): draws below 2^64 mod bound are rejected, so the rest cover
// every residue equally often.
inline uint64_t UniformBelow(std::mt19937_64& random, uint64_t bound) {
  const uint64_t limit = (0 - bound) % bound;
  uint64_t draw;
  do {
    draw = random();
  } while (draw < limit);
  return draw % bound;
}

}  // namespace deepool::worker
