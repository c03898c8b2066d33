#include "proxy/host_routes.h"

#include <algorithm>
#include <utility>

namespace heft::proxy {
namespace {

// As Beast's iequals folds (ASCII letters only).
inline char fold(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + ('a' - 'A')) : c; }

bool fold_equal(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return fold(x) == fold(y); });
}

// The label of `text` starting at `from`, and where the next one starts
// (npos after the last).
std::pair<std::string_view, std::size_t> label_at(std::string_view text, std::size_t from) {
  const std::size_t dot = text.find('.', from);
  if (dot == std::string_view::npos) return {text.substr(from), std::string_view::npos};
  return {text.substr(from, dot - from), dot + 1};
}

std::string folded(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = fold(c);
  return out;
}

}  // namespace

// FNV-1a over the octets compared (see KeyEqual). The configuration is
// trusted and requests only look up, so an unseeded hash cannot be flooded.
std::size_t HostRoutes::KeyHash::operator()(std::string_view host) const {
  uint64_t h = 14695981039346656037ULL;
  const auto add = [&h](char c) { h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL; };
  std::size_t label = 0;
  for (std::size_t from = 0; from != std::string_view::npos; ++label) {
    const auto [text, next] = label_at(host, from);
    if (label > 0) add('.');
    if (label < wild.size() && wild[label]) {
      add('*');
    } else {
      for (char c : text) add(fold(c));
    }
    from = next;
  }
  return static_cast<std::size_t>(h ^ (h >> 32));
}

// Equal when every label is, ignoring case, but for the labels the shape
// marks, which stand for any one label on either side.
bool HostRoutes::KeyEqual::operator()(std::string_view a, std::string_view b) const {
  if (wild.empty()) return fold_equal(a, b);
  std::size_t from_a = 0, from_b = 0;
  for (std::size_t label = 0;; ++label) {
    const auto [text_a, next_a] = label_at(a, from_a);
    const auto [text_b, next_b] = label_at(b, from_b);
    if (!(label < wild.size() && wild[label]) && !fold_equal(text_a, text_b)) return false;
    if (next_a == std::string_view::npos || next_b == std::string_view::npos) return next_a == next_b;
    from_a = next_a;
    from_b = next_b;
  }
}

void HostRoutes::add(std::size_t site, const std::vector<std::string>& hosts, bool is_default) {
  if (hosts.empty()) {
    if (any_host_ == none) any_host_ = site;
    return;
  }
  by_host_ = true;
  for (const std::string& h : hosts) {
    if (h.find('*') == std::string::npos) {
      exact_.try_emplace(folded(h), Entry{site});  // the first site naming a host keeps it
      continue;
    }
    // Labels are dots + 1; the wildcard ones are the '*'s (as the linear
    // version ranked them, in the same unsigned arithmetic).
    const auto labels = static_cast<std::size_t>(std::count(h.begin(), h.end(), '.')) + 1;
    const std::size_t literals = labels - static_cast<std::size_t>(std::count(h.begin(), h.end(), '*'));
    std::vector<uint8_t> wild;
    wild.reserve(labels);
    for (std::size_t from = 0; from != std::string_view::npos;) {
      const auto [text, next] = label_at(h, from);
      wild.push_back(text == "*");
      from = next;
    }
    if (wild_.size() <= labels) wild_.resize(labels + 1);
    std::vector<Shape>& shapes = wild_[labels];
    auto shape = std::find_if(shapes.begin(), shapes.end(), [&](const Shape& s) { return s.wild == wild; });
    if (shape == shapes.end()) {
      shapes.push_back(Shape{wild, 0, Table(8, KeyHash{wild}, KeyEqual{wild})});
      shape = shapes.end() - 1;
    }
    shape->max_literals = std::max(shape->max_literals, literals);
    shape->table.try_emplace(folded(h), Entry{site, literals, patterns_++});
  }
  if (is_default && default_ == none) default_ = site;
}

void HostRoutes::finish() {
  for (std::vector<Shape>& shapes : wild_)
    std::stable_sort(shapes.begin(), shapes.end(),
                     [](const Shape& a, const Shape& b) { return a.max_literals > b.max_literals; });
}

std::size_t HostRoutes::find(std::string_view host) const {
  if (auto e = exact_.find(host); e != exact_.end()) return e->second.site;
  if (wild_.empty()) return otherwise();
  // A "*" stands for one non-empty label: a host with an empty one matches no pattern.
  std::size_t labels = 1, length = 0;
  bool empty_label = false;
  for (char c : host) {
    if (c == '.') {
      empty_label |= length == 0;
      ++labels;
      length = 0;
    } else {
      ++length;
    }
  }
  if (length == 0 || empty_label || labels >= wild_.size()) return otherwise();
  const Entry* best = nullptr;
  for (const Shape& shape : wild_[labels]) {
    if (best && best->literals > shape.max_literals) break;  // no later shape can beat it
    const auto e = shape.table.find(host);
    if (e == shape.table.end()) continue;
    const Entry& found = e->second;
    if (!best || found.literals > best->literals || (found.literals == best->literals && found.order < best->order))
      best = &found;
  }
  return best ? best->site : otherwise();
}

}  // namespace heft::proxy
