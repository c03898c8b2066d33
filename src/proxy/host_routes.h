// Which site of one port answers a Host (RouteTable::route's lookup), indexed
// when the route table is built so that a request costs the same whatever the
// number of sites.
//
// Why: the first version scanned every site of the port and compared every
// host name, per request; with 5,000 sites a request for the last one or for
// an unknown host (any random Host) ran 3-5 times slower than for the first, a
// cheap CPU amplification. nginx hashes exact and wildcard names the same way.
//
// Exact hosts go in one hash table (std::unordered_map with a case-insensitive
// hash and compare looked up by string_view, so a request needs neither a
// lower-cased copy nor an allocation, whatever its length). Caddy's wildcards ("*" = exactly one label, anywhere) only match
// hosts with their own label count, and a pattern matches a host exactly when
// the host, with the labels at the pattern's "*" positions replaced by "*",
// equals it. So wildcards are grouped by label count, then by "shape" (which
// labels are "*"), one hash table per shape: a request probes each shape of its
// label count once (shapes are few: "*.example.com", "*.*.test", ...), not each
// pattern.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace heft::proxy {

class HostRoutes {
 public:
  static constexpr std::size_t none = SIZE_MAX;

  // Adds a site of this port, in file order: `hosts` as SiteConfig holds them
  // (empty = any host). Then finish() once, before any find().
  void add(std::size_t site, const std::vector<std::string>& hosts, bool is_default);
  void finish();

  // Whether a site names a host: if not, every request gets otherwise().
  bool by_host() const { return by_host_; }
  // The site when no host matches: the first with no hosts, else the first
  // `default` one (among sites with hosts), else none.
  std::size_t otherwise() const { return any_host_ != none ? any_host_ : default_; }
  // The site for `host` (already without port, brackets and trailing dot):
  // an exact host (case-insensitive; the first site naming it), else the
  // matching wildcard with the most literal labels (ties: the first in the
  // file), else otherwise(). No allocation.
  std::size_t find(std::string_view host) const;

 private:
  struct Entry {
    std::size_t site;
    std::size_t literals = 0;  // a pattern's labels minus its '*'s (the ranking of the linear version)
    std::size_t order = 0;     // position among the port's patterns in file order (ties)
  };
  // Hash and compare of a host as a table holds it: case-folded and, in a
  // wildcard table, with the labels its shape marks (`wild`, one flag per
  // label; empty for the exact table) taken as "*".
  struct KeyHash {
    using is_transparent = void;
    std::vector<uint8_t> wild;
    std::size_t operator()(std::string_view host) const;
  };
  struct KeyEqual {
    using is_transparent = void;
    std::vector<uint8_t> wild;
    bool operator()(std::string_view a, std::string_view b) const;
  };
  using Table = std::unordered_map<std::string, Entry, KeyHash, KeyEqual>;
  struct Shape {
    std::vector<uint8_t> wild;  // per label: 1 where the pattern has "*"
    std::size_t max_literals = 0;
    Table table;
  };

  bool by_host_ = false;
  std::size_t any_host_ = none, default_ = none;
  std::size_t patterns_ = 0;
  Table exact_;
  std::vector<std::vector<Shape>> wild_;  // [label count]: shapes by max_literals, descending
};

}  // namespace heft::proxy
