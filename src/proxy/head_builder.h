// HeadBuilder: the buffer a session builds an HTTP head in, reused for every
// request. An append is a capacity check and a copy, inline; std::string's
// appends are out-of-line calls, and a field took four of them (callgrind:
// building the two heads that way was about a tenth of the proxy's
// user-space instructions per request).
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>

namespace heft::proxy {

class HeadBuilder {
 public:
  void clear() { size_ = 0; }
  const char* data() const { return data_.get(); }
  std::size_t size() const { return size_; }
  std::string_view view() const { return {data_.get(), size_}; }

  HeadBuilder& append(std::string_view text) {
    std::memcpy(grow(text.size()), text.data(), text.size());
    return *this;
  }
  // "name: value\r\n"
  HeadBuilder& field(std::string_view name, std::string_view value) {
    char* p = grow(name.size() + value.size() + 4);
    std::memcpy(p, name.data(), name.size());
    p += name.size();
    *p++ = ':';
    *p++ = ' ';
    std::memcpy(p, value.data(), value.size());
    p += value.size();
    *p++ = '\r';
    *p = '\n';
    return *this;
  }
  HeadBuilder& number(std::uint64_t value) {
    char digits[20];
    const auto result = std::to_chars(digits, digits + sizeof digits, value);
    return append(std::string_view(digits, static_cast<std::size_t>(result.ptr - digits)));
  }

 private:
  char* grow(std::size_t n) {
    if (capacity_ - size_ < n) reallocate(size_ + n);
    char* at = data_.get() + size_;
    size_ += n;
    return at;
  }
  void reallocate(std::size_t need) {
    std::size_t capacity = capacity_ ? capacity_ * 2 : 512;  // one allocation for usual heads
    while (capacity < need) capacity *= 2;
    auto bigger = std::make_unique_for_overwrite<char[]>(capacity);
    if (size_) std::memcpy(bigger.get(), data_.get(), size_);
    data_ = std::move(bigger);
    capacity_ = capacity;
  }

  std::unique_ptr<char[]> data_;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

}  // namespace heft::proxy
