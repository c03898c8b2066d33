// JSON text to a document within JsonLimits (json.h): nlohmann's SAX parser
// (iterative) drives a DOM builder that refuses, as it goes, nesting too deep,
// too many values and duplicate keys, each located by line, column and JSON
// pointer (RFC 6901).
#include <algorithm>
#include <cstddef>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "config/json.h"

namespace heft::config {
namespace {

using nlohmann::json;

// Walks the text for nlohmann's parser and publishes how far it has read, so
// that an error the handler finds (the parser reports only its own) can be
// located. The parser reads one character ahead at most.
class TrackedChars {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  TrackedChars(const char* at, const char** read_to) : at_(at), read_to_(read_to) {}
  reference operator*() const { return *at_; }
  TrackedChars& operator++() {
    *read_to_ = ++at_;
    return *this;
  }
  TrackedChars operator++(int) {
    TrackedChars before = *this;
    ++*this;
    return before;
  }
  bool operator==(const TrackedChars& other) const { return at_ == other.at_; }

 private:
  const char* at_;
  const char** read_to_;
};

// A JSON pointer segment: '~' and '/' escaped (RFC 6901 3); a very long key
// cut, so that an error message stays short whatever the body holds.
std::string pointer_segment(std::string_view key) {
  constexpr size_t kShown = 60;
  std::string out;
  for (char c : key.substr(0, kShown)) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  if (key.size() > kShown) out += "...";
  return out;
}

// Builds the document as nlohmann's json_sax_dom_parser does, within limits.
class BoundedDocument {
 public:
  BoundedDocument(std::string_view text, const JsonLimits& limits, const char* const& read_to)
      : text_(text), limits_(limits), read_to_(read_to) {}

  json& root() { return root_; }
  const std::string& error() const { return error_; }

  bool null() { return add(json(nullptr)); }
  bool boolean(bool value) { return add(json(value)); }
  bool number_integer(json::number_integer_t value) { return add(json(value)); }
  bool number_unsigned(json::number_unsigned_t value) { return add(json(value)); }
  bool number_float(json::number_float_t value, const std::string&) { return add(json(value)); }
  bool string(std::string& value) { return add(json(std::move(value))); }
  bool binary(json::binary_t& value) { return add(json(std::move(value))); }

  bool start_object(std::size_t) { return open(json::value_t::object); }
  bool start_array(std::size_t) { return open(json::value_t::array); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(std::string& name) {
    json& object = *open_.back();
    if (++values_ > limits_.max_values) {  // a member's key takes about what its value does
      fail(fmt::format("too large: more than {} JSON values and keys", limits_.max_values),
           pointer_to(open_.size()) + "/" + pointer_segment(name));
      return false;
    }
    if (object.contains(name)) {
      fail(fmt::format("ambiguous: duplicate key \"{}\"", pointer_segment(name)),
           pointer_to(open_.size()) + "/" + pointer_segment(name));
      return false;
    }
    member_ = &object[std::move(name)];
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 5: ..." without its tag.
    std::string what = e.what();
    if (const size_t tag_end = what.find("] "); what.starts_with("[json.exception.") && tag_end != std::string::npos)
      what.erase(0, tag_end + 2);
    if (what.starts_with("parse error ")) what.erase(0, 12);
    error_ = "not valid JSON " + (what.starts_with("at ") ? what : where() + ": " + what);
    return false;
  }

 private:
  // Places a value in the open container (or as the root); false past max_values.
  bool add(json value) { return place(std::move(value)) != nullptr; }

  json* place(json value) {
    if (++values_ > limits_.max_values) {
      fail(fmt::format("too large: more than {} JSON values and keys", limits_.max_values),
           pointer_to(open_.size()) + next_segment());
      return nullptr;
    }
    if (open_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    json& container = *open_.back();
    if (container.is_array()) {
      container.push_back(std::move(value));
      return &container.back();
    }
    *member_ = std::move(value);
    return member_;
  }

  bool open(json::value_t type) {
    if (open_.size() == limits_.max_depth) {
      fail(fmt::format("nested deeper than {} levels", limits_.max_depth), pointer_to(open_.size()) + next_segment());
      return false;
    }
    json* container = place(json(type));
    if (!container) return false;
    open_.push_back(container);
    return true;
  }

  bool close() {
    open_.pop_back();
    return true;
  }

  // The segment a value added now would take in the open container.
  std::string next_segment() const {
    if (open_.empty()) return "";
    const json& container = *open_.back();
    if (container.is_array()) return "/" + std::to_string(container.size());
    return "/" + segment_of(container, member_);
  }

  // The key under which `object` holds `child` (found only on an error: no
  // key is copied while all goes well).
  static std::string segment_of(const json& object, const json* child) {
    for (const auto& [key, value] : object.items())
      if (&value == child) return pointer_segment(key);
    return "";
  }

  // The pointer of the first `levels` open containers ("" for the root).
  std::string pointer_to(size_t levels) const {
    std::string out;
    for (size_t i = 1; i < levels; ++i) {
      const json& parent = *open_[i - 1];
      if (parent.is_array()) out += "/" + std::to_string(open_[i] - &parent.front());
      else out += "/" + segment_of(parent, open_[i]);
    }
    return out;
  }

  // "at line L, column C" of the parser's position: just past the token it
  // read last.
  std::string where() const {
    const size_t offset = static_cast<size_t>(read_to_ - text_.data());
    const std::string_view before = text_.substr(0, offset);
    const size_t line_start = before.rfind('\n');
    const size_t line = 1 + static_cast<size_t>(std::count(before.begin(), before.end(), '\n'));
    const size_t column = line_start == std::string_view::npos ? offset : offset - line_start - 1;
    return fmt::format("at line {}, column {}", line, column);
  }

  void fail(const std::string& what, const std::string& pointer) {
    error_ = fmt::format("{} {} (JSON pointer {})", what, where(), pointer.empty() ? "\"\"" : pointer);
  }

  std::string_view text_;
  const JsonLimits& limits_;
  const char* const& read_to_;
  json root_;
  std::vector<json*> open_;  // the containers being filled, outermost first
  json* member_ = nullptr;   // in the innermost open object: the member its last key made
  size_t values_ = 0;
  std::string error_;
};

}  // namespace

nlohmann::json parse_json_text(std::string_view text, std::string& error, const JsonLimits& limits) {
  const char* read_to = text.data();
  BoundedDocument document(text, limits, read_to);
  TrackedChars first(text.data(), &read_to), last(text.data() + text.size(), &read_to);
  if (json::sax_parse(first, last, &document)) return std::move(document.root());
  error = document.error();
  return json(json::value_t::discarded);
}

}  // namespace heft::config
