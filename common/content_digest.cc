#include "common/content_digest.h"

#include <cstring>

namespace deepool {
namespace {

constexpr uint64_t kPrime = 0x100000001b3ULL;

uint64_t Fnv1a(uint64_t hash, unsigned char byte) { return (hash ^ byte) * kPrime; }

}  // namespace

void ContentDigest::Block(const char* block) {
  for (size_t lane = 0; lane < lanes_.size(); ++lane) {
    uint64_t word;
    std::memcpy(&word, block + 8 * lane, 8);
    lanes_[lane] = (lanes_[lane] ^ word) * kPrime;
    lanes_[lane] ^= lanes_[lane] >> 29;  // spreads high bits back down, as FNV alone would not
  }
}

void ContentDigest::Update(const char* data, size_t size) {
  total_ += size;
  if (pending_size_ > 0) {
    const size_t take = std::min(size, kBlock - pending_size_);
    std::memcpy(pending_.data() + pending_size_, data, take);
    pending_size_ += take;
    data += take;
    size -= take;
    if (pending_size_ < kBlock) return;
    Block(pending_.data());
    pending_size_ = 0;
  }
  for (; size >= kBlock; data += kBlock, size -= kBlock) Block(data);
  std::memcpy(pending_.data(), data, size);
  pending_size_ = size;
}

uint64_t ContentDigest::Finish() const {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (uint64_t lane : lanes_) {
    for (int shift = 0; shift < 64; shift += 8) hash = Fnv1a(hash, (lane >> shift) & 0xff);
  }
  for (size_t i = 0; i < pending_size_; ++i) {
    hash = Fnv1a(hash, static_cast<unsigned char>(pending_[i]));
  }
  for (int shift = 0; shift < 64; shift += 8) hash = Fnv1a(hash, (total_ >> shift) & 0xff);
  return hash;
}

}  // namespace deepool
