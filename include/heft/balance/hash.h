// Key hashing for heft's hash policies: fixed, seedless and platform-independent,
// so every heft process on every host maps a key to the same backend.
#pragma once

#include <cstdint>
#include <string_view>

namespace heft::balance {

// 64-bit hash of a byte string (FNV-1a with a strong 64-bit finaliser).
uint64_t hash_key(std::string_view key);

// The finaliser on its own: mixes a 64-bit value into a well-spread one.
constexpr uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace heft::balance
