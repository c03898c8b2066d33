// RouteTable::route: the hashed lookup (host_routes.h) answers as the linear
// scan it replaced did, kept here as the reference, for the tricky cases, for
// 20,000 sites, and for random tables and Hosts.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <boost/beast/core/string.hpp>

#include "proxy/runtime.h"

namespace heft::proxy {
namespace {

struct SiteSpec {
  uint16_t port;
  std::vector<std::string> hosts;
  bool is_default = false;
};

RouteTable make_table(const std::vector<SiteSpec>& specs) {
  RouteTable table;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    SiteRoute route;
    route.index = i;
    route.site.port = specs[i].port;
    route.site.hosts = specs[i].hosts;
    route.site.is_default = specs[i].is_default;
    table.by_port[specs[i].port].push_back(i);
    table.sites.push_back(std::move(route));
  }
  table.index();
  return table;
}

// ---- the linear version, verbatim but for its name -------------------------

bool wildcard_matches(std::string_view pattern, std::string_view host) {
  for (;;) {
    const std::size_t p_dot = pattern.find('.'), h_dot = host.find('.');
    const std::string_view p_label = pattern.substr(0, p_dot), h_label = host.substr(0, h_dot);
    if (h_label.empty()) return false;
    if (p_label != "*" && !boost::beast::iequals(p_label, h_label)) return false;
    if (p_dot == std::string_view::npos || h_dot == std::string_view::npos) return p_dot == h_dot;
    pattern.remove_prefix(p_dot + 1);
    host.remove_prefix(h_dot + 1);
  }
}

const SiteRoute* linear_route(const RouteTable& table, uint16_t port, std::string_view host) {
  auto it = table.by_port.find(port);
  if (it == table.by_port.end()) return nullptr;
  if (!host.empty() && host.front() == '[') {
    if (auto close = host.find(']'); close != std::string_view::npos) host = host.substr(1, close - 1);
  } else if (auto colon = host.rfind(':'); colon != std::string_view::npos) {
    host = host.substr(0, colon);
  }
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  const SiteRoute* wildcard = nullptr;
  std::size_t wildcard_literals = 0;
  const SiteRoute* any_host = nullptr;
  const SiteRoute* fallback = nullptr;
  for (std::size_t i : it->second) {
    const SiteRoute& s = table.sites[i];
    if (s.site.hosts.empty()) {
      if (!any_host) any_host = &s;
      continue;
    }
    for (const std::string& h : s.site.hosts) {
      if (h.find('*') == std::string::npos) {
        if (boost::beast::iequals(h, host)) return &s;
      } else if (wildcard_matches(h, host)) {
        const auto labels = static_cast<std::size_t>(std::count(h.begin(), h.end(), '.')) + 1;
        const std::size_t literals = labels - static_cast<std::size_t>(std::count(h.begin(), h.end(), '*'));
        if (!wildcard || literals > wildcard_literals) {
          wildcard = &s;
          wildcard_literals = literals;
        }
      }
    }
    if (s.site.is_default && !fallback) fallback = &s;
  }
  return wildcard ? wildcard : any_host ? any_host : fallback;
}

// ---------------------------------------------------------------------------

// Site index, -1 for none (404).
long routed(const RouteTable& table, uint16_t port, std::string_view host) {
  const SiteRoute* r = table.route(port, host);
  return r ? static_cast<long>(r->index) : -1;
}
long linear(const RouteTable& table, uint16_t port, std::string_view host) {
  const SiteRoute* r = linear_route(table, port, host);
  return r ? static_cast<long>(r->index) : -1;
}

TEST(RouteTable, TrickyHostsRouteAsTheLinearScanDid) {
  const std::string long_name = std::string(300, 'a') + ".test";  // longer than a DNS name may be
  const RouteTable table = make_table({
      {80, {}},                                // 0: any host
      {80, {"*.*.test"}},                      // 1
      {80, {"*.wild.test"}},                   // 2
      {80, {"a.wild.test", "::1"}},            // 3
      {80, {"*.b.test"}},                      // 4: ties with 5 on "a.b.test", first in the file
      {80, {"a.*.test"}},                      // 5
      {80, {"x.*.test", "*.y.test"}},          // 6: one site, both patterns
      {80, {"dup.test"}},                      // 7
      {80, {"DUP.test", "dup.test"}},          // 8: the same host again (the config refuses it)
      {80, {"*.wild.test"}},                   // 9: the same pattern again
      {81, {"one.test"}},                      // 10
      {81, {"two.test"}, true},                // 11: the default
      {81, {"*.three.test"}, true},            // 12: a second default (the config refuses it)
      {82, {"only.test"}},                     // 13
      {82, {"*.only.test"}},                   // 14
      {83, {}},                                // 15: alone on its port
      {83, {}},                                // 16: a second any-host site
      {85, {long_name}},                       // 17
      {85, {"*." + long_name}},                // 18
      {86, {"a*b.test"}},                      // 19: a '*' inside a label is literal
      {86, {"*.*"}},                           // 20
      {87, {"one.test"}, true},                // 21: a default written before the any-host site
      {87, {}},                                // 22
  });
  struct Case {
    uint16_t port;
    std::string host;
    long site;
  };
  const std::vector<Case> cases = {
      {80, "a.wild.test", 3},
      {80, "A.Wild.Test.:80", 3},
      {80, "[::1]:80", 3},
      {80, "[::1]", 3},
      {80, "[::1]:", 3},
      {80, "a.wild.test:", 3},
      {80, "a.wild.test..", 0},  // one trailing dot goes, not two
      {80, "b.wild.test", 2},
      {80, "B.WILD.test:8080", 2},
      {80, "*.wild.test", 2},  // as a wildcard matches it
      {80, "b.other.test", 1},
      {80, "a.b.test", 4},
      {80, "x.y.test", 6},
      {80, "dup.test", 7},
      {80, "DUP.TEST.", 7},
      {80, "wild.test", 0},  // "*" is one label, not none
      {80, "c.b.wild.test", 0},
      {80, "b..test", 0},
      {80, ".wild.test", 0},
      {80, "elsewhere.test", 0},
      {80, "", 0},
      {80, "[", 0},
      {81, "one.test", 10},
      {81, "two.test", 11},
      {81, "x.three.test", 12},
      {81, "unknown.test", 11},
      {81, "", 11},
      {82, "only.test", 13},
      {82, "A.only.test", 14},
      {82, "a.b.only.test", -1},
      {82, "a..only.test", -1},
      {82, "unknown.test", -1},
      {82, "", -1},
      {83, "anything", 15},
      {83, "", 15},
      {84, "a.wild.test", -1},  // no site on the port
      {85, long_name, 17},
      {85, long_name + ".", 17},
      {85, "x." + long_name, 18},
      {85, "x" + long_name, -1},
      {86, "A*B.test", 19},
      {86, "axb.test", 20},
      {86, "x.y.test", -1},
      {87, "one.test", 21},
      {87, "two.test", 22},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(routed(table, c.port, c.host), c.site) << c.port << " " << c.host;
    EXPECT_EQ(linear(table, c.port, c.host), c.site) << "(the linear version) " << c.port << " " << c.host;
  }
}

// Many sites on one port: each exact host finds its site, whatever its place
// in the file, and wildcards keep their order (a large table, not a timing).
TEST(RouteTable, TwentyThousandSitesEachFoundByItsHost) {
  constexpr std::size_t kSites = 20000;
  std::vector<SiteSpec> specs;
  specs.push_back({80, {"*.example.test"}});    // 0: written before the exact hosts it loses to
  specs.push_back({80, {"*.*.example.test"}});  // 1
  const std::size_t first_exact = specs.size();
  for (std::size_t i = 0; i < kSites; ++i) {
    std::vector<std::string> hosts = {"site" + std::to_string(i) + ".example.test"};
    if (i % 3 == 0) hosts.push_back("www.site" + std::to_string(i) + ".example.test");
    specs.push_back({80, std::move(hosts)});
  }
  // One wildcard per tenth site, all of one shape; then one that ties with them.
  const std::size_t first_tenant = specs.size();
  for (std::size_t i = 0; i < kSites; i += 10) specs.push_back({80, {"*.site" + std::to_string(i) + ".example.test"}});
  const std::size_t api = specs.size();
  specs.push_back({80, {"api.*.example.test"}});
  specs.push_back({80, {"*.other.test"}, true});  // the default
  const std::size_t fallback = specs.size() - 1;
  const RouteTable table = make_table(specs);

  for (std::size_t i = 0; i < kSites; ++i) {
    const std::string name = "site" + std::to_string(i) + ".example.test";
    const long exact = static_cast<long>(first_exact + i);
    ASSERT_EQ(routed(table, 80, name), exact) << name;
    ASSERT_EQ(routed(table, 80, "SITE" + std::to_string(i) + ".Example.Test.:8080"), exact) << name;
    ASSERT_EQ(routed(table, 80, "www." + name), i % 3 == 0 ? exact : i % 10 == 0 ? static_cast<long>(first_tenant + i / 10) : 1)
        << "www." + name;
    // The tenth sites' own wildcard has as many literals as api.*, and comes first.
    ASSERT_EQ(routed(table, 80, "api." + name), i % 10 == 0 ? static_cast<long>(first_tenant + i / 10) : static_cast<long>(api))
        << "api." + name;
    ASSERT_EQ(routed(table, 80, "x.y." + name), static_cast<long>(fallback)) << "x.y." + name;  // no 5-label pattern
  }
  EXPECT_EQ(routed(table, 80, "nosuch.example.test"), 0);
  EXPECT_EQ(routed(table, 80, "a.nosuch.example.test"), 1);
  EXPECT_EQ(routed(table, 80, "nosuch.test"), static_cast<long>(fallback));
  EXPECT_EQ(routed(table, 80, "a.other.test"), static_cast<long>(fallback));
  // And a sample against the linear version.
  std::mt19937 rng(7);
  for (int n = 0; n < 300; ++n) {
    const std::size_t i = rng() % (kSites + 50);
    for (const std::string& host : {"site" + std::to_string(i) + ".example.test", "www.site" + std::to_string(i) + ".example.test",
                                    "api.site" + std::to_string(i) + ".example.test", "b.site" + std::to_string(i) + ".example.test"})
      ASSERT_EQ(routed(table, 80, host), linear(table, 80, host)) << host;
  }
}

// Random small tables (duplicate hosts and patterns, several defaults and
// any-host sites, odd labels) and random Hosts: the same site as the linear version.
TEST(RouteTable, RandomTablesRouteAsTheLinearScan) {
  std::mt19937 rng(12345);
  const auto pick = [&rng](const std::vector<std::string>& from) { return from[rng() % from.size()]; };
  const std::vector<std::string> site_labels = {"a", "b", "c", "*", "*", "a*", "**", "xn--d"};
  const std::vector<std::string> host_labels = {"a", "A", "b", "c", "C", "*", "a*", "**", "xn--d", "e", ""};
  const auto name = [&](const std::vector<std::string>& labels, std::size_t count) {
    std::string out;
    for (std::size_t l = 0; l < count; ++l) {
      if (l) out += '.';
      out += pick(labels);
    }
    return out;
  };
  for (int round = 0; round < 400; ++round) {
    std::vector<SiteSpec> specs;
    const std::size_t sites = 1 + rng() % 12;
    for (std::size_t s = 0; s < sites; ++s) {
      SiteSpec spec{static_cast<uint16_t>(80 + rng() % 2), {}, rng() % 4 == 0};
      if (rng() % 6 != 0) {
        const std::size_t hosts = 1 + rng() % 3;
        for (std::size_t h = 0; h < hosts; ++h) spec.hosts.push_back(name(site_labels, 1 + rng() % 3));
      }
      specs.push_back(std::move(spec));
    }
    const RouteTable table = make_table(specs);
    for (int n = 0; n < 200; ++n) {
      std::string host = name(host_labels, 1 + rng() % 4);
      switch (rng() % 6) {
        case 0: host += "."; break;
        case 1: host += ":80"; break;
        case 2: host = "[" + host + "]:1"; break;
        default: break;
      }
      const uint16_t port = static_cast<uint16_t>(80 + rng() % 3);
      ASSERT_EQ(routed(table, port, host), linear(table, port, host)) << "round " << round << " port " << port << " host " << host;
    }
  }
}

}  // namespace
}  // namespace heft::proxy
