// LD_PRELOAD=build/bench/libmalloc_sizes.so PROGRAM ... counts PROGRAM's
// malloc() calls by requested size (operator new and Asio's frame memory come
// through it) and, when it exits, writes "SIZE COUNT" for every size called
// more than 1,000 times to the file $MALLOC_SIZES_OUT names. bench/allocs
// divides them by the requests heft served: heap allocations per request.
#include <cstddef>
#include <cstdio>
#include <cstdlib>

extern "C" void* __libc_malloc(std::size_t size);

namespace {
constexpr std::size_t kSizes = 1 << 16;
unsigned long counts[kSizes];

struct Report {
  ~Report() {
    const char* path = std::getenv("MALLOC_SIZES_OUT");
    if (!path) return;
    if (std::FILE* out = std::fopen(path, "w")) {
      for (std::size_t size = 0; size < kSizes; ++size)
        if (counts[size] > 1000) std::fprintf(out, "%zu %lu\n", size, counts[size]);
      std::fclose(out);
    }
  }
} report;
}  // namespace

extern "C" void* malloc(std::size_t size) {
  if (size < kSizes) __atomic_fetch_add(&counts[size], 1, __ATOMIC_RELAXED);
  return __libc_malloc(size);
}
