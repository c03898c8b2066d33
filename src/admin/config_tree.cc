// Caddy's /config/<path> semantics on nlohmann::json (see config_tree.h).
#include "admin/config_tree.h"

#include <charconv>
#include <optional>

namespace heft::admin {
namespace {

using json = nlohmann::json;

// "/a/b/c" from the first `count` segments, for messages.
std::string prefix(const std::vector<std::string>& segments, size_t count) {
  std::string out;
  for (size_t i = 0; i < count; ++i) out += "/" + segments[i];
  return out.empty() ? "/" : out;
}

TreeError fail(int status, const std::vector<std::string>& segments, size_t at, const std::string& why) {
  return {status, "path " + prefix(segments, at + 1) + ": \"" + segments[at] + "\" " + why};
}

// An array index: decimal digits only, no sign, no overflow.
std::optional<size_t> parse_index(const std::string& segment) {
  size_t index = 0;
  auto [end, ec] = std::from_chars(segment.data(), segment.data() + segment.size(), index);
  if (segment.empty() || ec != std::errc() || end != segment.data() + segment.size()) return std::nullopt;
  return index;
}

const char* type_name(const json& value) {
  switch (value.type()) {
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::null: return "null";
    default: return "a number";
  }
}

// Decodes each segment's %XX escapes in place (after splitting, so %2F is a
// '/' inside a key); a bad escape is a 400 naming the segment as sent.
TreeError decode_segments(std::vector<std::string>& segments) {
  for (size_t i = 0; i < segments.size(); ++i) {
    std::optional<std::string> decoded = percent_decode(segments[i]);
    if (!decoded) return fail(400, segments, i, "has a bad percent-escape ('%' must be followed by two hex digits)");
    segments[i] = std::move(*decoded);
  }
  return {};
}

// Walks the first `count` segments; null with `error` set if one does not exist.
template <typename Json>
Json* walk(Json& root, const std::vector<std::string>& segments, size_t count, TreeError& error) {
  Json* at = &root;
  for (size_t i = 0; i < count; ++i) {
    const std::string& s = segments[i];
    if (at->is_object()) {
      auto it = at->find(s);
      if (it == at->end()) {
        error = fail(404, segments, i, "not found");
        return nullptr;
      }
      at = &*it;
    } else if (at->is_array()) {
      auto index = parse_index(s);
      if (!index) {
        error = fail(400, segments, i, "is not an array index");
        return nullptr;
      }
      if (*index >= at->size()) {
        error = fail(404, segments, i, "is out of range (array of " + std::to_string(at->size()) + ")");
        return nullptr;
      }
      at = &(*at)[*index];
    } else {
      error = fail(400, segments, i, std::string("cannot be looked up in ") + type_name(*at));
      return nullptr;
    }
  }
  return at;
}

}  // namespace

std::optional<std::string> percent_decode(std::string_view text) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size()) return std::nullopt;
    const int high = hex(text[i + 1]), low = hex(text[i + 2]);
    if (high < 0 || low < 0) return std::nullopt;
    out += static_cast<char>(high * 16 + low);
    i += 2;
  }
  return out;
}

std::vector<std::string> split_tree_path(std::string_view path) {
  std::vector<std::string> segments;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    if (end > start) segments.emplace_back(path.substr(start, end - start));
    start = end + 1;
  }
  return segments;
}

json tree_get(const json& root, std::string_view path, TreeError& error) {
  std::vector<std::string> segments = split_tree_path(path);
  if ((error = decode_segments(segments))) return json();
  const json* at = walk(root, segments, segments.size(), error);
  return at ? *at : json();
}

TreeError tree_apply(json& root, TreeMethod method, std::string_view path, json value) {
  std::vector<std::string> segments = split_tree_path(path);
  if (method == TreeMethod::get) return {400, "GET is not a write"};
  if (TreeError bad = decode_segments(segments)) return bad;
  if (segments.empty()) {
    if (method == TreeMethod::remove) return {400, "path /: the root cannot be deleted (POST /load replaces it)"};
    root = std::move(value);
    return {};
  }
  TreeError error;
  json* parent = walk(root, segments, segments.size() - 1, error);
  if (!parent) return error;
  const size_t last = segments.size() - 1;
  const std::string& key = segments[last];

  if (parent->is_object()) {
    auto it = parent->find(key);
    const bool exists = it != parent->end();
    switch (method) {
      case TreeMethod::post:
        if (exists && it->is_array()) it->push_back(std::move(value));
        else (*parent)[key] = std::move(value);
        return {};
      case TreeMethod::put:
        (*parent)[key] = std::move(value);
        return {};
      case TreeMethod::patch:
        if (!exists) return fail(404, segments, last, "not found (PATCH replaces; use POST or PUT to create)");
        *it = std::move(value);
        return {};
      case TreeMethod::remove:
        if (!exists) return fail(404, segments, last, "not found");
        parent->erase(it);
        return {};
      default: break;
    }
    return {400, "unsupported method"};
  }

  if (parent->is_array()) {
    auto index = parse_index(key);
    if (!index) return fail(400, segments, last, "is not an array index");
    const size_t size = parent->size();
    if (method == TreeMethod::put) {
      if (*index > size)
        return fail(404, segments, last, "is out of range for an insert (array of " + std::to_string(size) + ")");
      // Into the vector itself: json::insert(pos, json&&) copies the value,
      // which for a large one is its memory twice.
      auto& elements = parent->get_ref<json::array_t&>();
      elements.insert(elements.begin() + static_cast<std::ptrdiff_t>(*index), std::move(value));
      return {};
    }
    if (*index >= size) return fail(404, segments, last, "is out of range (array of " + std::to_string(size) + ")");
    json& element = (*parent)[*index];
    switch (method) {
      case TreeMethod::post:
        if (element.is_array()) element.push_back(std::move(value));
        else element = std::move(value);
        return {};
      case TreeMethod::patch:
        element = std::move(value);
        return {};
      case TreeMethod::remove:
        parent->erase(parent->begin() + static_cast<std::ptrdiff_t>(*index));
        return {};
      default: break;
    }
    return {400, "unsupported method"};
  }
  return fail(400, segments, last - 0, std::string("cannot be set inside ") + type_name(*parent));
}

}  // namespace heft::admin
