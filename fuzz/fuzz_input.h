// Choices drawn from a fuzz input, front to back: a structure-aware target
// turns the bytes libFuzzer mutates into a message built of meaningful parts.
// An exhausted input gives zeros (the first choice of every list).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace heft::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, std::size_t size) : data_(reinterpret_cast<const char*>(data)), size_(size) {}

  bool empty() const { return at_ >= size_; }
  std::uint8_t byte() { return at_ < size_ ? static_cast<std::uint8_t>(data_[at_++]) : 0; }
  // A number in [0, n) (n <= 65536).
  std::size_t below(std::size_t n) {
    if (n <= 1) return 0;
    std::size_t v = byte();
    if (n > 256) v = v << 8 | byte();
    return v % n;
  }
  bool flag() { return byte() & 1; }
  template <typename T, std::size_t N>
  const T& pick(const T (&list)[N]) {
    return list[below(N)];
  }
  // Up to `max` of the next bytes, as they are.
  std::string_view bytes(std::size_t max) {
    const std::size_t n = below(max + 1);
    return take(n);
  }
  std::string_view rest() { return take(size_ - std::min(at_, size_)); }

 private:
  std::string_view take(std::size_t n) {
    n = std::min(n, size_ - std::min(at_, size_));
    std::string_view v(data_ + at_, n);
    at_ += n;
    return v;
  }
  const char* data_;
  std::size_t size_;
  std::size_t at_ = 0;
};

// A check of a fuzz target: on failure, says what and aborts (libFuzzer then
// saves the input as a crash; the replay test fails).
#define HEFT_FUZZ_CHECK(condition, ...)                              \
  do {                                                               \
    if (!(condition)) {                                              \
      std::fprintf(stderr, "fuzz check failed: %s: ", #condition);   \
      std::fprintf(stderr, __VA_ARGS__);                             \
      std::fprintf(stderr, "\n");                                    \
      std::abort();                                                  \
    }                                                                \
  } while (0)

}  // namespace heft::fuzz
