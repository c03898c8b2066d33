// The proxy's I/O buffers: fixed 64 KiB blocks, recycled per worker and
// mapped outside the malloc heap. Why: a connection gives its blocks back when
// it goes idle, and blocks taken from the heap would leave the small objects
// that stay (the session, its coroutine frames) scattered over partly used
// heap pages that can never be returned; memory per idle connection would
// then be kilobytes instead of the few hundred bytes those objects need.
//
// Thread safety: a pool and its buffers belong to one worker thread.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include <boost/asio/buffer.hpp>

namespace heft::proxy {

class BlockPool {
 public:
  static constexpr std::size_t kBlockSize = 64 * 1024;
  // Where a buffer's bytes start in its block: the next of 64 cache-line
  // offsets over 4 KiB. Blocks are page-aligned and mostly 64 KiB apart, so
  // at one fixed offset every connection's bytes would fall into the same few
  // sets of the L1 cache (a 4 KiB period) and the L2 (64–128 KiB on current
  // CPUs) and evict each other on every request.
  static constexpr std::size_t kColorSpan = 4096;
  std::size_t next_color() { return (colors_++ % (kColorSpan / 64)) * 64; }

  BlockPool() = default;
  ~BlockPool() {
    for (char* block : free_) ::munmap(block, kBlockSize);
  }
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  char* get() {
    if (!free_.empty()) {
      char* block = free_.back();
      free_.pop_back();
      low_free_ = std::min(low_free_, free_.size());
      return block;
    }
    low_free_ = 0;
    void* block = ::mmap(nullptr, kBlockSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (block == MAP_FAILED) throw std::bad_alloc();
    return static_cast<char*>(block);
  }
  // Blocks given back wait for reuse (up to kMaxFree): connections close and
  // open in bursts, and unmapping at once would map them again a moment later
  // (each unmap also flushes the TLBs of the worker's other CPUs).
  static constexpr std::size_t kMaxFree = 512;
  void put(char* block) {
    if (free_.size() < kMaxFree) free_.push_back(block);
    else ::munmap(block, kBlockSize);
  }
  // Unmaps the free blocks that stayed unused since the last trim, keeping
  // `keep` (their touched pages are resident); the worker calls it four times
  // a second. Blocks the last interval's bursts needed stay mapped.
  void trim(std::size_t keep) {
    std::size_t unused = std::min(low_free_, free_.size());
    while (unused > keep && free_.size() > keep) {
      ::munmap(free_.back(), kBlockSize);
      free_.pop_back();
      --unused;
    }
    low_free_ = free_.size();
  }

 private:
  std::vector<char*> free_;
  std::size_t low_free_ = 0;  // fewest free blocks since the last trim
  std::size_t colors_ = 0;
};

// A contiguous byte buffer of at most one block, [begin, end) readable: the
// subset of a Beast DynamicBuffer the proxy uses. The block is taken on the
// first prepare() and given back by release() or the destructor. The bytes
// start at the buffer's color (BlockPool::next_color()); the `tail` bytes
// after the data area are not used for data: tail() lends them out (a
// session keeps its header-field arena there).
class BlockBuffer {
 public:
  explicit BlockBuffer(BlockPool& pool, std::size_t tail = 0)
      : pool_(&pool),
        color_(pool.next_color()),
        capacity_(color_ + BlockPool::kBlockSize - BlockPool::kColorSpan - tail),
        begin_(color_),
        end_(color_) {}
  ~BlockBuffer() { release(); }
  BlockBuffer(const BlockBuffer&) = delete;
  BlockBuffer& operator=(const BlockBuffer&) = delete;

  std::size_t size() const { return end_ - begin_; }
  std::size_t capacity() const { return block_ ? capacity_ - color_ : 0; }
  // The reserved end of the block (taken now if need be).
  unsigned char* tail() {
    if (!block_) block_ = pool_->get();
    return reinterpret_cast<unsigned char*>(block_ + capacity_);
  }
  boost::asio::const_buffer data() const { return {block_ + begin_, size()}; }
  const char* bytes() const { return block_ + begin_; }
  char* bytes() { return block_ + begin_; }
  // Bytes of this block seen through a read-only view (`p` points into the
  // block), to write them: the proxy moves the body pieces of a chunked
  // response together over the framing between them, once it is parsed.
  char* writable(const char* p) {
    assert(block_ && p >= block_ && p < block_ + BlockPool::kBlockSize);
    return block_ + (p - block_);
  }

  // Room for up to n more bytes (less when the block is nearly full; empty
  // when it is full).
  boost::asio::mutable_buffer prepare(std::size_t n) {
    if (!block_) block_ = pool_->get();
    if (begin_ > color_ && capacity_ - end_ < n) {
      std::memmove(block_ + color_, block_ + begin_, size());
      end_ -= begin_ - color_;
      begin_ = color_;
    }
    prepared_ = std::min(n, capacity_ - end_);
    return {block_ + end_, prepared_};
  }
  void commit(std::size_t n) {
    last_read_filled_ = n > 0 && n >= prepared_;
    end_ += std::min(n, capacity_ - end_);
  }
  // The last commit() filled all the room prepare() gave: the socket it was
  // read from may hold more bytes (a short read proves it drained).
  bool last_read_filled() const { return last_read_filled_; }
  void consume(std::size_t n) {
    begin_ += std::min(n, size());
    if (begin_ == end_) begin_ = end_ = color_;
  }
  // Gives the block back (its bytes are dropped).
  void release() {
    if (block_) pool_->put(std::exchange(block_, nullptr));
    begin_ = end_ = color_;
  }

 private:
  BlockPool* pool_;
  std::size_t color_;     // offset of the data area in the block
  std::size_t capacity_;  // end of the data area (the tail follows)
  char* block_ = nullptr;
  std::size_t prepared_ = 0;       // the room the last prepare() gave
  bool last_read_filled_ = false;  // see last_read_filled()
  std::size_t begin_;
  std::size_t end_;
};

}  // namespace heft::proxy
