// Key hashing for the hash policies: FNV-1a (64-bit) over the key's bytes,
// then the mix64 finaliser from hash.h.
//
// FNV-1a alone spreads short, similar keys ("key-1", "key-2") poorly in its
// high bits; mix64 fixes that, so the ring (which uses the top 32 bits) and
// Maglev (which uses the value modulo a prime) both see well-spread values.
// No seed, no platform dependence: bytes are read as unsigned char, so every
// heft process on every host maps a key to the same 64-bit value.
//
// Complexity O(len), no allocation, thread-safe (pure function).
#include "heft/balance/hash.h"

namespace heft::balance {

uint64_t hash_key(std::string_view key) {
  constexpr uint64_t kOffsetBasis = 0xcbf29ce484222325ULL;
  constexpr uint64_t kPrime = 0x100000001b3ULL;
  uint64_t h = kOffsetBasis;
  for (char c : key) {
    h ^= static_cast<unsigned char>(c);
    h *= kPrime;
  }
  return mix64(h);
}

}  // namespace heft::balance
