// Memory for the header fields of one request and its response. Beast's
// basic_fields allocates every field on its own; with the default allocator
// that was several malloc/free pairs per proxied request. A session owns one
// arena over memory it lends (the reserved end of its read block), hands it to
// its parsers through ArenaAllocator, and resets it when a request is done (no
// field of the last request is alive then).
//
// Thread safety: one arena belongs to one session (one worker thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>

namespace heft::proxy {

class FieldArena {
 public:
  static constexpr std::size_t kBytes = 2048;

  // Starts over on `buffer` (kBytes, suitably aligned); only when no
  // allocation from this arena is alive.
  void reset(unsigned char* buffer) {
    buffer_ = buffer;
    used_ = 0;
  }
  void* allocate(std::size_t bytes, std::size_t align) {
    const std::size_t at = (used_ + align - 1) & ~(align - 1);
    if (buffer_ && at + bytes <= kBytes) {
      used_ = at + bytes;
      return buffer_ + at;
    }
    return ::operator new(bytes);  // a large head: the heap, freed by deallocate()
  }
  void deallocate(void* p) {
    auto* bytes = static_cast<unsigned char*>(p);
    if (!buffer_ || bytes < buffer_ || bytes >= buffer_ + kBytes) ::operator delete(p);
    // Inside the buffer: reclaimed all at once by reset().
  }

 private:
  unsigned char* buffer_ = nullptr;
  std::size_t used_ = 0;
};

template <typename T>
struct ArenaAllocator {
  using value_type = T;
  FieldArena* arena;

  explicit ArenaAllocator(FieldArena& a) noexcept : arena(&a) {}
  template <typename U>
  ArenaAllocator(const ArenaAllocator<U>& other) noexcept : arena(other.arena) {}

  T* allocate(std::size_t n) { return static_cast<T*>(arena->allocate(n * sizeof(T), alignof(T))); }
  void deallocate(T* p, std::size_t) noexcept { arena->deallocate(p); }

  template <typename U>
  bool operator==(const ArenaAllocator<U>& other) const noexcept {
    return arena == other.arena;
  }
};

}  // namespace heft::proxy
