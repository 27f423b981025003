// A fast 64-bit digest of file contents, to tell a whole file from a cut or changed one (not
// for security: anyone can forge it). Four lanes of FNV-1a over 64-bit little-endian words, so
// that it runs at memory speed instead of FNV's one multiply per byte, and the tail bytes
// through FNV-1a; the lanes are folded at the end.
// Threading: an object belongs to one thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace deepool {

class ContentDigest {
 public:
  // Takes the next `size` bytes; any split of the same contents gives the same digest.
  void Update(const char* data, size_t size);
  uint64_t Finish() const;

 private:
  static constexpr size_t kBlock = 32;  // 4 lanes of 8 bytes
  void Block(const char* block);
  std::array<uint64_t, 4> lanes_{0xcbf29ce484222325ULL, 0x84222325cbf29ce4ULL,
                                 0x9e3779b97f4a7c15ULL, 0xc2b2ae3d27d4eb4fULL};
  std::array<char, kBlock> pending_{};
  size_t pending_size_ = 0;
  uint64_t total_ = 0;
};

}  // namespace deepool
