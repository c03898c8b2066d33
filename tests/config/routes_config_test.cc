// Routes inside a site in the one model: the Heftfile's Caddy spelling
// adapted in Caddy's order, exact JSON round trips, and located errors.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "config/heftfile.h"
#include "config/json.h"

namespace heft::config {
namespace {

using nlohmann::json;

Config parse_ok(std::string_view text) {
  Result<Config> result = parse_heftfile(text);
  EXPECT_TRUE(result.ok()) << (result.errors.empty() ? "" : result.errors[0].to_string());
  return result.ok() ? *result : Config{};
}

std::vector<std::string> errors_of(std::string_view text) {
  std::vector<std::string> out;
  for (const Diagnostic& d : parse_heftfile(text).errors) out.push_back(d.to_string());
  return out;
}

constexpr std::string_view kSite = R"(:8080 {
	@canary {
		header X-Canary 1
		method GET POST
		not path /admin/*
	}
	@beta cookie beta yes
	reverse_proxy 127.0.0.1:9003
	respond /healthz "ok" 200
	handle /static/* {
		respond "static {path}"
	}
	handle_path /api/* {
		reverse_proxy @canary 127.0.0.1:9001 {
			header_up X-Real {remote_host}
		}
		reverse_proxy 127.0.0.1:9002
	}
	handle @beta {
		split {
			cookie side
			side stable 9 {
				reverse_proxy 127.0.0.1:9004
			}
			side canary 1 {
				reverse_proxy 127.0.0.1:9005
			}
		}
	}
	redir /old /new permanent
	header X-Site yes
	route /r/* {
		respond "r"
		header X-R 1
	}
}
)";

// Caddy's Caddyfile adapter's order: header, redir, handle (longest path
// first, matcher before none), route, respond, reverse_proxy; handle blocks
// one group; a route block as written.
TEST(RoutesConfig, HeftfileAdaptsInCaddysOrder) {
  const Config config = parse_ok(kSite);
  ASSERT_EQ(config.sites.size(), 1u);
  const SiteConfig& site = config.sites[0];
  ASSERT_EQ(site.handle.size(), 1u);
  const std::vector<Route>& routes = site.handle[0].routes;
  std::vector<std::string> shape;
  for (const Route& r : routes) {
    const RouteHandler& h = r.handle.at(0);
    std::string first = r.match.empty() ? "*" : !r.match[0].paths.empty() ? r.match[0].paths[0] : "@";
    shape.push_back(fmt::format("{}:{}:{}", int(h.kind), first, r.group));
  }
  EXPECT_EQ(shape, (std::vector<std::string>{"4:*:", "2:/old:", "0:/static/*:group0", "0:/api/*:group0",
                                             "0:@:group0", "0:/r/*:", "2:/healthz:", "1:*:"}));
  // route keeps its order; handle_path strips its prefix first.
  EXPECT_EQ(routes[5].handle[0].routes[0].handle[0].kind, RouteHandler::static_response);
  EXPECT_EQ(routes[3].handle[0].routes[0].handle[0].strip_path_prefix, "/api");
  // Every reverse_proxy is a pool: the site's first in document order is pool 0.
  EXPECT_EQ(site.pool_count(), 5u);
  EXPECT_EQ(site.proxy.upstreams.at(0).name, "127.0.0.1:9001");
  EXPECT_EQ(site.pools.back().upstreams.at(0).name, "127.0.0.1:9003");
  const RouteHandler& split = routes[4].handle[0].routes[0].handle[0];
  EXPECT_EQ(split.kind, RouteHandler::split);
  EXPECT_EQ(split.side_names, (std::vector<std::string>{"stable", "canary"}));
  EXPECT_EQ(split.side_weights, (std::vector<uint32_t>{9, 1}));
  EXPECT_EQ(split.cookie, "side");
  const MatcherSet& canary = routes[3].handle[0].routes[1].match.at(0);
  EXPECT_EQ(canary.methods, (std::vector<std::string>{"GET", "POST"}));
  EXPECT_EQ(canary.nots.at(0).paths, (std::vector<std::string>{"/admin/*"}));
  EXPECT_EQ(routes[1].handle[0].status, 301u);
  EXPECT_EQ(routes[1].handle[0].fields, (std::vector<std::pair<std::string, std::string>>{{"Location", "/new"}}));
}

TEST(RoutesConfig, RoundTripIsExact) {
  const Config config = parse_ok(kSite);
  const json document = to_json(config);
  Result<Config> back = from_json(document);
  ASSERT_TRUE(back.ok()) << back.errors[0].to_string();
  EXPECT_EQ(*back, config);
  EXPECT_EQ(to_json(*back), document);
}

// A site of one reverse_proxy keeps the shape it had: no route step.
TEST(RoutesConfig, OnePoolSiteHasNoRoutes) {
  const Config config = parse_ok(":8080 {\n\treverse_proxy 127.0.0.1:9001\n}\n");
  EXPECT_TRUE(config.sites.at(0).handle.empty());
  EXPECT_EQ(config.sites[0].pool_count(), 1u);
}

TEST(RoutesConfig, HeftfileErrorsAtTheirToken) {
  EXPECT_EQ(errors_of(":80 {\n\t@m {\n\t\tpth /x\n\t}\n\trespond @m 200\n}\n"),
            std::vector<std::string>{"Heftfile:3:3: unknown matcher \"pth\" (did you mean \"path\"?)"});
  EXPECT_EQ(errors_of(":80 {\n\trespond @nope 200\n}\n"),
            std::vector<std::string>{
                "Heftfile:2:10: unknown matcher \"@nope\" (define it in the site: @nope { path /api/* })"});
  EXPECT_EQ(errors_of(":80 {\n\thandle /a[b] {\n\t\trespond 1\n\t}\n}\n").at(0),
            "Heftfile:2:9: path pattern \"/a[b]\" may use only '*' as a wildcard (no '?', '[...]' or "
            "percent-escapes)");
  EXPECT_EQ(errors_of(":80 {\n\trespond \"x\" 700\n}\n"),
            std::vector<std::string>{"Heftfile:2:14: invalid status \"700\" (200..599)"});
  EXPECT_TRUE(errors_of(":80 {\n\trespond /x \"{upstream_hostport}\"\n}\n")
                  .at(0)
                  .starts_with("Heftfile:2:13: unknown placeholder {upstream_hostport} (heft knows {remote_host}"));
  EXPECT_EQ(errors_of(":80 {\n\tredir /a /b 200\n}\n"),
            std::vector<std::string>{"Heftfile:2:14: invalid redirect code \"200\" (300..308, permanent or temporary)"});
  EXPECT_EQ(errors_of(":80 {\n\t@m remote_ip 10.0.0.0/33\n\trespond @m 200\n}\n"),
            std::vector<std::string>{"Heftfile:2:15: must be an IP address or a CIDR range, e.g. \"10.0.0.0/8\""});
}

TEST(RoutesConfig, JsonErrorsAtTheirPointer) {
  const auto errors = [](const json& handle) {
    json document = {{"apps", {{"http", {{"servers", {{"srv0", {{"listen", {":80"}}, {"routes", {{{"handle", handle}}}}}}}}}}}}};
    std::vector<std::string> out;
    for (const Diagnostic& d : from_json(document).errors) out.push_back(d.to_string());
    return out;
  };
  const std::string at = "/apps/http/servers/srv0/routes/0/handle/0";
  EXPECT_EQ(errors(json::array({{{"handler", "static_respons"}}})),
            std::vector<std::string>{at + "/handler: unknown handler \"static_respons\" (did you mean "
                                          "\"static_response\"?)"});
  EXPECT_EQ(errors(json::array({{{"handler", "subroute"},
                                 {"routes", {{{"match", {{{"pathh", {"/x"}}}}}, {"handle", json::array()}}}}}})),
            std::vector<std::string>{at + "/routes/0/match/0/pathh: unknown matcher \"pathh\" (did you mean "
                                          "\"path\"?)"});
  EXPECT_EQ(errors(json::array({{{"handler", "split"}, {"sides", {{{"name", "a"}, {"handle", json::array()}}}}}})),
            std::vector<std::string>{at + "/sides: must hold at least two sides"});
  EXPECT_EQ(errors(json::array({{{"handler", "headers"}, {"response", {{"set", {{"X-A", {"{host}"}}}}}}}})).at(0),
            at + "/response/set/X-A/0: {host} looks like a Caddy placeholder; heft expands placeholders in request "
                 "header edits, static responses and rewrites, not here, and would send it as written");
  // Caddy's handlers and matchers heft does not have are named as such.
  EXPECT_EQ(errors(json::array({{{"handler", "file_server"}}})),
            std::vector<std::string>{at + "/handler: Caddy's \"file_server\" handler is not supported by heft (it has "
                                          "subroute, reverse_proxy, static_response, rewrite, headers and split)"});
}

}  // namespace
}  // namespace heft::config
