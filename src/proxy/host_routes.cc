#include "proxy/host_routes.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace heft::proxy {
namespace {

// As Beast's iequals folds (ASCII letters only).
inline char fold(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + ('a' - 'A')) : c; }

// The 8 bytes of `w` with their ASCII capitals lower-cased (SWAR: a byte's
// high bit after the additions says whether it is >= 'A', > 'Z').
inline uint64_t fold8(uint64_t w) {
  constexpr uint64_t ones = 0x0101010101010101ULL, high = 0x80 * ones;
  const uint64_t low7 = w & ~high;
  const uint64_t upper = (low7 + (0x80 - 'A') * ones) & ~(low7 + (0x80 - 'Z' - 1) * ones) & ~w & high;
  return w | (upper >> 2);  // 0x80 >> 2 = 0x20
}

inline uint64_t load8(const char* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}

// The last n % 8 bytes of the n at `p` (or of fewer than 8) in one word, a
// byte per lane, by overlapping loads rather than a copy (a variable-length
// memcpy stalled the load after it).
inline uint64_t tail8(const char* p, std::size_t n) {
  if (n >= 8) return load8(p + n - 8);
  if (n >= 4) {
    uint32_t a, b;
    std::memcpy(&a, p, 4);
    std::memcpy(&b, p + n - 4, 4);
    return uint64_t{a} << 32 | b;
  }
  if (n == 0) return 0;
  const auto byte = [p](std::size_t i) { return uint64_t{static_cast<unsigned char>(p[i])}; };
  return byte(0) << 16 | byte(n / 2) << 8 | byte(n - 1);
}

inline uint64_t mix(uint64_t h, uint64_t w) {
  h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
  return h ^ (h >> 29);
}

// The hash of a host as compared: case-folded and, when `wild` is given (one
// flag per label of the host), with the flagged labels as "*". Exact hosts
// (no `wild`) hash 8 bytes at a time. The configuration is trusted and
// requests only look up, so an unseeded hash cannot be flooded.
uint64_t key_hash(std::string_view host, const uint8_t* wild) {
  uint64_t h = host.size();
  if (!wild) {
    for (std::size_t i = 0; i + 8 <= host.size(); i += 8) h = mix(h, fold8(load8(host.data() + i)));
    if (host.size() % 8) h = mix(h, fold8(tail8(host.data(), host.size())));
    return h ^ (h >> 32);
  }
  // Byte by byte (FNV-1a): a label may turn into "*" anywhere. The length is
  // not the pattern's then: start from 0.
  h = 14695981039346656037ULL;
  const auto add = [&h](char c) { h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL; };
  std::size_t label = 0;
  bool star = wild[0];
  if (star) add('*');
  for (char c : host) {
    if (c == '.') {
      add('.');
      star = wild[++label];
      if (star) add('*');
    } else if (!star) {
      add(fold(c));
    }
  }
  return h ^ (h >> 32);
}

// Whether `key` (lower-cased) is `host` compared that way.
bool key_equals(std::string_view key, std::string_view host, const uint8_t* wild) {
  if (!wild) {
    if (key.size() != host.size()) return false;
    for (std::size_t i = 0; i + 8 <= host.size(); i += 8)
      if (load8(key.data() + i) != fold8(load8(host.data() + i))) return false;
    return host.size() % 8 == 0 || tail8(key.data(), key.size()) == fold8(tail8(host.data(), host.size()));
  }
  std::size_t k = 0, label = 0;
  const auto next_is = [&](char c) { return k < key.size() && key[k++] == c; };
  bool star = wild[0];
  if (star && !next_is('*')) return false;
  for (char c : host) {
    if (c == '.') {
      if (!next_is('.')) return false;
      star = wild[++label];
      if (star && !next_is('*')) return false;
    } else if (!star && !next_is(fold(c))) {
      return false;
    }
  }
  return k == key.size();
}

std::string folded(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = fold(c);
  return out;
}

}  // namespace

void HostRoutes::Table::insert(Entry entry, const uint8_t* wild) {
  if (find(entry.key, wild)) return;
  entry.hash = key_hash(entry.key, wild);
  entries_.push_back(std::move(entry));
  if (entries_.size() * 2 > slots_.size()) {
    slots_.assign(std::max<std::size_t>(8, slots_.size() * 2), 0);
    for (uint32_t i = 0; i < entries_.size(); ++i) place(i);
  } else {
    place(static_cast<uint32_t>(entries_.size() - 1));
  }
}

void HostRoutes::Table::place(uint32_t entry) {
  const std::size_t mask = slots_.size() - 1;
  std::size_t i = entries_[entry].hash & mask;
  while (slots_[i]) i = (i + 1) & mask;
  slots_[i] = entry + 1;
}

const HostRoutes::Entry* HostRoutes::Table::find(std::string_view host, const uint8_t* wild) const {
  if (slots_.empty()) return nullptr;
  const uint64_t hash = key_hash(host, wild);
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t i = hash & mask;; i = (i + 1) & mask) {  // ends: at most half the slots are taken
    const uint32_t slot = slots_[i];
    if (!slot) return nullptr;
    const Entry& e = entries_[slot - 1];
    if (e.hash == hash && key_equals(e.key, host, wild)) return &e;
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
      exact_.insert({folded(h), 0, site, 0, 0}, nullptr);
      continue;
    }
    // Labels are dots + 1; the wildcard ones are the '*'s (as the linear
    // version ranked them, in the same unsigned arithmetic).
    const auto labels = static_cast<std::size_t>(std::count(h.begin(), h.end(), '.')) + 1;
    const std::size_t literals = labels - static_cast<std::size_t>(std::count(h.begin(), h.end(), '*'));
    std::vector<uint8_t> wild;
    wild.reserve(labels);
    for (std::size_t from = 0;;) {
      const std::size_t dot = h.find('.', from);
      wild.push_back(std::string_view(h).substr(from, dot - from) == "*");
      if (dot == std::string::npos) break;
      from = dot + 1;
    }
    if (wild_.size() <= labels) wild_.resize(labels + 1);
    std::vector<Shape>& shapes = wild_[labels];
    auto shape = std::find_if(shapes.begin(), shapes.end(), [&](const Shape& s) { return s.wild == wild; });
    if (shape == shapes.end()) {
      shapes.emplace_back();
      shape = shapes.end() - 1;
      shape->wild = std::move(wild);
    }
    shape->max_literals = std::max(shape->max_literals, literals);
    shape->table.insert({folded(h), 0, site, literals, patterns_++}, shape->wild.data());
  }
  if (is_default && default_ == none) default_ = site;
}

void HostRoutes::finish() {
  for (std::vector<Shape>& shapes : wild_)
    std::stable_sort(shapes.begin(), shapes.end(),
                     [](const Shape& a, const Shape& b) { return a.max_literals > b.max_literals; });
}

std::size_t HostRoutes::find(std::string_view host) const {
  if (const Entry* e = exact_.find(host, nullptr)) return e->site;
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
    const Entry* e = shape.table.find(host, shape.wild.data());
    if (e && (!best || e->literals > best->literals || (e->literals == best->literals && e->order < best->order)))
      best = e;
  }
  return best ? best->site : otherwise();
}

}  // namespace heft::proxy
