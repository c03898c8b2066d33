// JSON pointers and the Heftfile places behind them: see source_map.h.
#include "config/source_map.h"

namespace heft::config {

std::string pointer_append(std::string_view pointer, std::string_view key) {
  std::string out;
  out.reserve(pointer.size() + key.size() + 1);
  out.append(pointer).push_back('/');
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::string pointer_append(std::string_view pointer, std::size_t index) {
  std::string out(pointer);
  out.push_back('/');
  out += std::to_string(index);
  return out;
}

const Source* SourceMap::at(std::string_view pointer) const {
  auto it = sources_.find(pointer);
  return it == sources_.end() ? nullptr : &it->second;
}

const Source& SourceMap::nearest(std::string_view pointer) const {
  for (;;) {
    if (const Source* source = at(pointer)) return *source;
    const std::size_t slash = pointer.rfind('/');
    if (slash == std::string_view::npos) return file_source_;
    pointer = pointer.substr(0, slash);
  }
}

}  // namespace heft::config
