// Heftfile parser: the seed's examples in both syntaxes, every option, and every
// error kind with its exact line:column.
#include "config/heftfile.h"
#include "config/json.h"
#include "config/values.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include <string>
#include <vector>

namespace heft::config {
namespace {

using namespace std::chrono_literals;

std::vector<std::string> errors_of(std::string_view text) {
  Result<Config> result = parse_heftfile(text, "Heftfile");
  EXPECT_FALSE(result.ok());
  std::vector<std::string> out;
  for (const Diagnostic& d : result.errors) out.push_back(d.to_string());
  return out;
}

std::string only_error(std::string_view text) {
  auto errors = errors_of(text);
  EXPECT_EQ(errors.size(), 1u) << ::testing::PrintToString(errors);
  return errors.empty() ? "" : errors[0];
}

Config parse_ok(std::string_view text) {
  Result<Config> result = parse_heftfile(text, "Heftfile");
  std::string all;
  for (const Diagnostic& d : result.errors) all += d.to_string() + "\n";
  EXPECT_TRUE(result.ok()) << all;
  return result.ok() ? *result : Config{};
}

// From the seed: structured syntax.
constexpr std::string_view kStructured = R"(# Structured writing example with weights
app.example.com {
    reverse_proxy {
        # Enterprise VM
        to backend-1:3000 weight 5
        
        # Standard VM
        to backend-2:3000 weight 3
        
        # Micro VM
        to backend-3:3000 weight 2
        
        lb_policy round_robin
    }
}
)";

// From the seed: inline shortcut syntax.
constexpr std::string_view kInline = R"(# Inline shortcut writing example
app.example.com {
    reverse_proxy backend-1:3000?weight=5 backend-2:3000?weight=3 backend-3:3000?weight=2
}
)";

TEST(Heftfile, SeedStructuredSyntax) {
  Config config = parse_ok(kStructured);
  ASSERT_EQ(config.sites.size(), 1u);
  const SiteConfig& site = config.sites[0];
  EXPECT_EQ(site.hosts, std::vector<std::string>{"app.example.com"});
  EXPECT_EQ(site.port, 80);
  EXPECT_EQ(site.line, 2);
  EXPECT_EQ(site.proxy.policy, balance::PolicyKind::round_robin);
  ASSERT_EQ(site.proxy.upstreams.size(), 3u);
  EXPECT_EQ(site.proxy.upstreams[0].name, "backend-1:3000");
  EXPECT_EQ(site.proxy.upstreams[0].host, "backend-1");
  EXPECT_EQ(site.proxy.upstreams[0].port, 3000);
  EXPECT_EQ(site.proxy.upstreams[0].weight, 5u);
  EXPECT_EQ(site.proxy.upstreams[1].weight, 3u);
  EXPECT_EQ(site.proxy.upstreams[2].weight, 2u);
  EXPECT_TRUE(site.proxy.upstreams[0].resolved.empty());
}

TEST(Heftfile, SeedInlineSyntaxMeansTheSameAsStructured) {
  Config structured = parse_ok(kStructured);
  Config inline_form = parse_ok(kInline);
  ASSERT_EQ(inline_form.sites.size(), 1u);
  EXPECT_EQ(inline_form.sites[0].proxy.policy, balance::PolicyKind::weighted_round_robin);
  inline_form.sites[0].proxy.policy = balance::PolicyKind::round_robin;
  EXPECT_EQ(inline_form, structured);
}

TEST(Heftfile, SeedLeastConnCanaryAndHeterogeneous) {
  Config config = parse_ok(R"(prod.example.com {
    reverse_proxy {
        # On-Premise Physical Server (Very strong)
        to 192.168.10.50:8080 weight 10
        to 10.0.1.15:8080 weight 3
        to 10.0.1.16:8080 weight 3
        lb_policy least_conn
    }
}
app.example.com {
    reverse_proxy {
        to app-v1-node1:3000 weight 95
        to app-v2-canary:3000 weight 5
        lb_policy round_robin
    }
}
blue.example.com {
    reverse_proxy {
        to blue-server:3000 weight 0
        to green-server:3000 weight 100
    }
}
)");
  ASSERT_EQ(config.sites.size(), 3u);
  EXPECT_EQ(config.sites[0].proxy.policy, balance::PolicyKind::least_conn);
  EXPECT_EQ(config.sites[0].proxy.upstreams[0].weight, 10u);
  EXPECT_EQ(config.sites[1].proxy.upstreams[1].weight, 5u);
  EXPECT_EQ(config.sites[2].proxy.upstreams[0].weight, 0u);  // drained, not an error
}

TEST(Heftfile, DefaultsWhenNothingIsSet) {
  Config config = parse_ok(":8080 {\n\treverse_proxy 127.0.0.1:9001\n}\n");
  EXPECT_EQ(config.admin, AdminConfig{});
  EXPECT_EQ(config.workers, 0u);
  ASSERT_EQ(config.sites.size(), 1u);
  EXPECT_TRUE(config.sites[0].hosts.empty());
  EXPECT_EQ(config.sites[0].port, 8080);
  ProxyConfig expected;
  UpstreamConfig upstream;
  upstream.name = "127.0.0.1:9001";
  upstream.host = "127.0.0.1";
  upstream.port = 9001;
  expected.upstreams.push_back(upstream);
  EXPECT_EQ(config.sites[0].proxy, expected);
  EXPECT_EQ(config.sites[0].proxy.keepalive_timeout, 60s);  // nginx's keepalive_timeout
}

// nginx's keepalive_timeout of an upstream block: any duration; 0 keeps an
// idle connection until the backend closes it (heft's behaviour before).
TEST(Heftfile, KeepaliveTimeout) {
  auto timeout_of = [](std::string_view value) {
    Config config = parse_ok(std::string(":80 {\n\treverse_proxy a:1 {\n\t\tkeepalive_timeout ") +
                             std::string(value) + "\n\t}\n}\n");
    return config.sites.empty() ? milliseconds{-1} : config.sites[0].proxy.keepalive_timeout;
  };
  EXPECT_EQ(timeout_of("0"), 0ms);
  EXPECT_EQ(timeout_of("0s"), 0ms);
  EXPECT_EQ(timeout_of("750ms"), 750ms);
  EXPECT_EQ(timeout_of("1m30s"), 90s);
}

TEST(Heftfile, EveryOption) {
  Config config = parse_ok(R"({
	admin 127.0.0.1:2020
	admin_token "s3cret token"
	workers 4
	grace_period 30s
	idle_timeout 2m
	header_timeout 5s
	max_connections 500
}

api.example.com:8080, www.example.com:8080 {
	default
	log {
		output file /var/log/heft/api.log
	}
	reverse_proxy 10.0.0.1:9000?weight=5&max_fails=2 {
		to 10.0.0.2:9000 10.0.0.3:9000 weight 3 max_fails 0 fail_timeout 1m30s slow_start 20s
		to 10.0.0.4:9000 backup max_conns 100
		to [::1]:9000 down
		to backend.internal
		max_fails 7
		fail_timeout 45s
		lb_policy hash header X-User-ID
		hash_strategy maglev
		keepalive 64
		keepalive_timeout 15s
		next_upstream error timeout http_502 http_503 non_idempotent
		next_upstream_tries 3
		next_upstream_timeout 2s
		connect_timeout 250ms
		read_timeout 1.5s
		send_timeout 1h
		retry_body_limit 1MiB
		header_up Host upstream.internal
		header_up +X-Trace on
		header_up -Cookie
		header_down -Server
		slow_start 30s
		health_uri /healthz
		health_port 9100
		health_interval 10s
		health_timeout 1s
		health_status 2xx
		health_body "^ok$"
		health_headers {
			Host health.internal
			X-Probe heft
		}
		health_passes 2
		health_fails 3
		adaptive {
			interval 10s
			latency_threshold 300ms
			median_factor 3
			error_threshold 10%
			cut 50%
			min_weight_ratio 0.2
		}
	}
}
)");
  EXPECT_EQ(config.admin.address, "127.0.0.1:2020");
  EXPECT_EQ(config.admin.token, "s3cret token");
  EXPECT_EQ(config.workers, 4u);
  EXPECT_EQ(config.grace_period, 30s);
  EXPECT_EQ(config.idle_timeout, 2min);
  EXPECT_EQ(config.header_timeout, 5s);
  EXPECT_EQ(config.max_connections, 500u);
  ASSERT_EQ(config.sites.size(), 1u);
  const SiteConfig& site = config.sites[0];
  EXPECT_EQ(site.hosts, (std::vector<std::string>{"api.example.com", "www.example.com"}));
  EXPECT_EQ(site.port, 8080);
  EXPECT_TRUE(site.is_default);
  EXPECT_EQ(site.log, (LogConfig{true, "/var/log/heft/api.log"}));
  const ProxyConfig& pool = site.proxy;
  ASSERT_EQ(pool.upstreams.size(), 6u);
  EXPECT_EQ(pool.upstreams[0].weight, 5u);
  EXPECT_EQ(pool.upstreams[0].max_fails, 2u);      // explicit beats the pool's max_fails
  EXPECT_EQ(pool.upstreams[0].fail_timeout, 45s);  // pool default
  for (int i : {1, 2}) {
    EXPECT_EQ(pool.upstreams[i].weight, 3u);
    EXPECT_EQ(pool.upstreams[i].max_fails, 0u);
    EXPECT_EQ(pool.upstreams[i].fail_timeout, 90s);
    EXPECT_EQ(pool.upstreams[i].slow_start, std::optional<milliseconds>(20s));
  }
  EXPECT_TRUE(pool.upstreams[3].backup);
  EXPECT_EQ(pool.upstreams[3].max_fails, 7u);
  EXPECT_EQ(pool.upstreams[3].max_conns, 100u);
  EXPECT_EQ(pool.upstreams[2].max_conns, 0u);  // no limit unless written
  EXPECT_EQ(pool.upstreams[4].name, "[::1]:9000");
  EXPECT_EQ(pool.upstreams[4].host, "::1");
  EXPECT_TRUE(pool.upstreams[4].down);
  EXPECT_EQ(pool.upstreams[5].name, "backend.internal:80");
  EXPECT_EQ(pool.policy, balance::PolicyKind::hash);
  EXPECT_EQ(pool.hash_key, (HashKey{HashKey::header, "X-User-ID"}));
  EXPECT_EQ(pool.hash_strategy, balance::HashStrategy::maglev);
  EXPECT_EQ(pool.keepalive, 64u);
  EXPECT_EQ(pool.keepalive_timeout, 15s);
  EXPECT_EQ(pool.next_upstream, (NextUpstream{true, true, false, true, true, false, true, false}));
  EXPECT_EQ(pool.next_upstream_tries, 3u);
  EXPECT_EQ(pool.next_upstream_timeout, 2s);
  EXPECT_EQ(pool.connect_timeout, 250ms);
  EXPECT_EQ(pool.read_timeout, 1500ms);
  EXPECT_EQ(pool.send_timeout, 1h);
  EXPECT_EQ(pool.retry_body_limit, 1024u * 1024u);
  EXPECT_EQ(pool.header_up, (std::vector<HeaderOp>{{HeaderOp::set, "Host", "upstream.internal"},
                                                    {HeaderOp::add, "X-Trace", "on"},
                                                    {HeaderOp::remove, "Cookie", ""}}));
  EXPECT_EQ(pool.header_down, (std::vector<HeaderOp>{{HeaderOp::remove, "Server", ""}}));
  EXPECT_EQ(pool.slow_start, std::optional<milliseconds>(30s));
  EXPECT_EQ(pool.health_uri, "/healthz");
  EXPECT_EQ(pool.health_port, 9100);
  EXPECT_EQ(pool.health_interval, 10s);
  EXPECT_EQ(pool.health_timeout, 1s);
  EXPECT_EQ(pool.health_status, "2xx");
  EXPECT_EQ(pool.health_body, "^ok$");
  EXPECT_EQ(pool.health_headers.size(), 2u);
  EXPECT_EQ(pool.health_headers[1], (std::pair<std::string, std::string>{"X-Probe", "heft"}));
  EXPECT_EQ(pool.health_passes, 2u);
  EXPECT_EQ(pool.health_fails, 3u);
  EXPECT_TRUE(pool.adaptive.enabled);
  EXPECT_EQ(pool.adaptive.interval, 10s);
  EXPECT_EQ(pool.adaptive.latency_threshold, 300ms);
  EXPECT_DOUBLE_EQ(pool.adaptive.median_factor, 3.0);
  EXPECT_DOUBLE_EQ(pool.adaptive.error_threshold, 0.10);
  EXPECT_DOUBLE_EQ(pool.adaptive.cut, 0.5);
  EXPECT_DOUBLE_EQ(pool.adaptive.min_weight_ratio, 0.2);
}

TEST(Heftfile, PolicySpellings) {
  auto policy_of = [](std::string_view line) {
    Config config = parse_ok(std::string(":80 {\n\treverse_proxy a:1 {\n\t\tlb_policy ") + std::string(line) +
                             "\n\t}\n}\n");
    return config.sites.empty() ? ProxyConfig{} : config.sites[0].proxy;
  };
  EXPECT_EQ(policy_of("weighted_round_robin").policy, balance::PolicyKind::weighted_round_robin);
  EXPECT_EQ(policy_of("random").policy, balance::PolicyKind::random);
  EXPECT_EQ(policy_of("p2c").policy, balance::PolicyKind::p2c);
  EXPECT_EQ(policy_of("first").policy, balance::PolicyKind::first);
  ProxyConfig ip_hash = policy_of("ip_hash");
  EXPECT_EQ(ip_hash.policy, balance::PolicyKind::hash);
  EXPECT_EQ(ip_hash.hash_key, (HashKey{HashKey::client_ip, ""}));
  EXPECT_EQ(policy_of("hash client_ip"), ip_hash);
  EXPECT_EQ(policy_of("hash uri").hash_key, (HashKey{HashKey::uri, ""}));
  EXPECT_EQ(policy_of("hash cookie session").hash_key, (HashKey{HashKey::cookie, "session"}));
  EXPECT_EQ(policy_of("cookie session"), policy_of("hash cookie session"));  // Caddy's spelling
}

TEST(Heftfile, AddressForms) {
  Config config = parse_ok(R"(
example.com {
	reverse_proxy a:1
}
http://Other.example.com:8080 {
	reverse_proxy a:1
}
:8080 {
	default
	reverse_proxy a:1
}
a.example.com:9000,b.example.com:9000 c.example.com:9000 {
	reverse_proxy a:1
}
)");
  ASSERT_EQ(config.sites.size(), 4u);
  EXPECT_EQ(config.sites[0].port, 80);
  EXPECT_EQ(config.sites[1].hosts, std::vector<std::string>{"other.example.com"});
  EXPECT_EQ(config.sites[1].port, 8080);
  EXPECT_TRUE(config.sites[2].hosts.empty());
  EXPECT_TRUE(config.sites[2].is_default);
  EXPECT_EQ(config.sites[3].port, 9000);
  EXPECT_EQ(config.sites[3].hosts.size(), 3u);
}

TEST(Heftfile, SitesAreGroupedByPortInOrderOfFirstAppearance) {
  Config config = parse_ok(R"(a.com:80 {
	reverse_proxy a:1
}
b.com:8080 {
	reverse_proxy a:1
}
c.com:80 {
	reverse_proxy a:1
}
)");
  ASSERT_EQ(config.sites.size(), 3u);
  EXPECT_EQ(config.sites[0].hosts[0], "a.com");
  EXPECT_EQ(config.sites[1].hosts[0], "c.com");
  EXPECT_EQ(config.sites[2].hosts[0], "b.com");
}

TEST(Heftfile, SingleSiteWithoutBraces) {
  Config config = parse_ok("localhost:8080\nreverse_proxy 127.0.0.1:9001 127.0.0.1:9002\n");
  ASSERT_EQ(config.sites.size(), 1u);
  EXPECT_EQ(config.sites[0].proxy.upstreams.size(), 2u);
}

// Windows editors may save a UTF-8 file with a byte order mark.
TEST(Heftfile, LeadingByteOrderMarkIsSkipped) {
  Config config = parse_ok("\xEF\xBB\xBF:21005 {\n\treverse_proxy a:1\n}\n");
  ASSERT_EQ(config.sites.size(), 1u);
  EXPECT_EQ(config.sites[0].port, 21005);
  EXPECT_TRUE(config.sites[0].hosts.empty());
  // Columns on line 1 are counted as if the mark were not there.
  EXPECT_EQ(only_error("\xEF\xBB\xBF" "a.com:80, b.com:81 {\n\treverse_proxy a:1\n}\n"),
            "Heftfile:1:11: all addresses of a site must share one port (\"a.com:80\" uses 80)");
  EXPECT_EQ(only_error("\xEF\xBB\xBF" "a.com:0 {\n\treverse_proxy a:1\n}\n"),
            "Heftfile:1:1: invalid site address \"a.com:0\": invalid port \"0\" (1..65535)");
  // Only at the very start: elsewhere it is part of a token.
  EXPECT_FALSE(parse_heftfile(":80 {\n\treverse_proxy \xEF\xBB\xBF" "a:1\n}\n").ok());
  // heft fmt drops it.
  EXPECT_EQ(*format_heftfile("\xEF\xBB\xBF:80 {\n\treverse_proxy a:1\n}\n"), ":80 {\n\treverse_proxy a:1\n}\n");
}

// {$NAME} and {$NAME:default} are replaced by the environment, as Caddy and
// HAProxy read their files, so a secret such as admin_token need not be
// written in the file. They were read literally: `admin_token {$TOKEN}` made
// the token the eight characters "{$TOKEN}" without a word of warning.
TEST(Heftfile, EnvironmentPlaceholdersAreReplacedWithinTokens) {
  ::setenv("HEFT_TEST_BACKEND", "10.0.0.7:3000", 1);
  ::setenv("HEFT_TEST_TOKEN", "s3cret", 1);
  ::setenv("HEFT_TEST_EMPTY", "", 1);
  ::unsetenv("HEFT_TEST_UNSET");
  const std::string text =
      "{\n\tadmin_token {$HEFT_TEST_TOKEN}\n}\n:80 {\n\treverse_proxy {\n"
      "\t\tto {$HEFT_TEST_BACKEND} weight {$HEFT_TEST_UNSET:4}\n"
      "\t\tto \"10.0.0.8:{$HEFT_TEST_UNSET:3001}\" weight 2{$HEFT_TEST_EMPTY}\n\t}\n}\n";
  const Config config = parse_ok(text);
  EXPECT_EQ(config.admin.token, "s3cret");
  ASSERT_EQ(config.sites.size(), 1u);
  const auto& upstreams = config.sites[0].proxy.upstreams;
  ASSERT_EQ(upstreams.size(), 2u);
  EXPECT_EQ(upstreams[0].name, "10.0.0.7:3000");
  EXPECT_EQ(upstreams[0].weight, 4u);  // not set: its default
  EXPECT_EQ(upstreams[1].name, "10.0.0.8:3001");
  EXPECT_EQ(upstreams[1].weight, 2u);  // set but empty: its value, not the default
  // heft fmt keeps them as written (it must not write secrets into the file).
  const std::string placeholders =
      "{\n\tadmin_token {$HEFT_TEST_TOKEN}\n}\n\n:80 {\n\treverse_proxy {$HEFT_TEST_BACKEND}\n}\n";
  EXPECT_EQ(*format_heftfile(placeholders), placeholders);

  EXPECT_EQ(only_error(":80 {\n\treverse_proxy {$HEFT_TEST_UNSET}\n}\n"),
            "Heftfile:2:16: environment variable HEFT_TEST_UNSET is not set (write {$HEFT_TEST_UNSET:default} to "
            "give a default, {$HEFT_TEST_UNSET:} for an empty one)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:{$1X}\n}\n"),
            "Heftfile:2:16: \"1X\" is not an environment variable name (letters, digits and _, not starting with a "
            "digit)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy {$HEFT_TEST_BACKEND\n}\n"),
            "Heftfile:2:16: unclosed environment placeholder \"{$\" (write {$NAME} or {$NAME:default})");
}

TEST(Heftfile, BareLogAndOneLineBlocks) {
  Config config = parse_ok(":80 {\n\tlog\n\treverse_proxy a:1 {\n\t\tnext_upstream off\n\t\tadaptive\n\t}\n}\n"
                           ":81 {\n\tlog { output stderr }\n\treverse_proxy a:1\n}\n");
  EXPECT_EQ(config.sites[0].log, (LogConfig{true, "stderr"}));
  EXPECT_TRUE(config.sites[0].proxy.next_upstream.off);
  EXPECT_FALSE(config.sites[0].proxy.next_upstream.error);
  EXPECT_TRUE(config.sites[0].proxy.adaptive.enabled);
  EXPECT_EQ(config.sites[1].log, (LogConfig{true, "stderr"}));
}

// ---- errors, each at its exact place ---------------------------------------------

TEST(HeftfileErrors, UnknownOptionSuggestsTheClosest) {
  EXPECT_EQ(only_error(":80 {\n    reverse_proxy {\n        to a:1\n        wieght 5\n    }\n}\n"),
            "Heftfile:4:9: unknown option \"wieght\"");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy {\n\t\tto a:1 wieght 5\n\t}\n}\n"),
            "Heftfile:3:10: unknown option \"wieght\" (did you mean \"weight\"?)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy {\n\t\tto a:1\n\t\tlb_polcy least_conn\n\t}\n}\n"),
            "Heftfile:4:3: unknown option \"lb_polcy\" (did you mean \"lb_policy\"?)");
  EXPECT_EQ(only_error(":80 {\n\treverse_prox a:1\n}\n"),
            "Heftfile:2:2: unknown directive \"reverse_prox\" (did you mean \"reverse_proxy\"?)");
  EXPECT_EQ(only_error("{\n\twokers 2\n}\n:80 {\n\treverse_proxy a:1\n}\n"),
            "Heftfile:2:2: unknown global option \"wokers\" (did you mean \"workers\"?)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1?wieght=2\n}\n"),
            "Heftfile:2:20: unknown backend option \"wieght\" (did you mean \"weight\"?)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\tlb_policy least_con\n\t}\n}\n"),
            "Heftfile:3:13: unknown lb_policy \"least_con\" (did you mean \"least_conn\"?)");
  // nginx's `weight=5` habit gets the spelling to write (it was "did you mean \"weight\"?").
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy {\n\t\tto a:1 weight=5\n\t}\n}\n"),
            "Heftfile:3:10: unknown option \"weight=5\": write \"weight 5\" (a value follows its name after a space, "
            "not \"=\")");
  EXPECT_EQ(only_error("{\n\tworkers=2\n}\n:80 {\n\treverse_proxy a:1\n}\n"),
            "Heftfile:2:2: unknown global option \"workers=2\": write \"workers 2\" (a value follows its name after a "
            "space, not \"=\")");
}

// The parser recurses per block: 40,000 nested braces overflowed the stack
// (a crash of a running heft through POST /load or SIGHUP). Deeper than 32 is
// one error, and the braces after it still pair up.
TEST(HeftfileErrors, NestingIsBounded) {
  std::string deep = ":80 {\n\treverse_proxy a:1 {\n\t\thealth_uri /h\n\t}\n";
  for (int i = 0; i < 40'000; ++i) deep += "x { ";
  for (int i = 0; i < 40'000; ++i) deep += "} ";
  deep += "\n}\n";
  const auto errors = errors_of(deep);
  const auto nested = std::count_if(errors.begin(), errors.end(), [](const std::string& e) {
    return e.find("blocks nested more than 32 deep") != std::string::npos;
  });
  EXPECT_EQ(nested, 1) << ::testing::PrintToString(errors);
  for (const std::string& e : errors) EXPECT_EQ(e.find("missing '}'"), std::string::npos) << e;
}

// What `heft run` would refuse later, or the admin API could never accept.
TEST(HeftfileErrors, AdminAddressAndTokenAndHashKeyNames) {
  EXPECT_EQ(only_error("{\n\tadmin 0.0.0.0:2019\n}\n:80 {\n\treverse_proxy a:1\n}\n"),
            "Heftfile:2:8: admin address \"0.0.0.0:2019\" is not loopback: it needs an admin_token");
  parse_ok("{\n\tadmin 0.0.0.0:2019\n\tadmin_token s3cret\n}\n:80 {\n\treverse_proxy a:1\n}\n");
  EXPECT_EQ(only_error("{\n\tadmin_token \"\"\n}\n:80 {\n\treverse_proxy a:1\n}\n"),
            "Heftfile:2:14: admin_token must not be empty (leave it out for none)");
  // A bad token beside a non-loopback address is one error, not also "needs an admin_token".
  EXPECT_EQ(only_error("{\n\tadmin 0.0.0.0:2019\n\tadmin_token \" x\"\n}\n:80 {\n\treverse_proxy a:1\n}\n"),
            "Heftfile:3:14: admin_token must not start or end with a space (a header value's edge spaces are not "
            "part of it)");
  EXPECT_EQ(only_error("{\n\tadmin_token \"a\nb\"\n}\n:80 {\n\treverse_proxy a:1\n}\n"),
            "Heftfile:2:14: admin_token must not contain control characters");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\tlb_policy hash header \"\"\n\t}\n}\n"),
            "Heftfile:3:25: invalid header name \"\" (use letters, digits and !#$%&'*+-.^_`|~)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\tlb_policy cookie \"a b;c\"\n\t}\n}\n"),
            "Heftfile:3:20: invalid cookie name \"a b;c\" (use letters, digits and !#$%&'*+-.^_`|~)");
}

// An unknown option on a `to` line no longer hides the errors after it; an
// empty query parameter is nothing, not an unknown option "".
TEST(HeftfileErrors, ToLineReportsEveryError) {
  EXPECT_EQ(errors_of(":80 {\n\treverse_proxy {\n\t\tto a:1 wieght 5 max_fails x\n\t}\n}\n"),
            (std::vector<std::string>{"Heftfile:3:10: unknown option \"wieght\" (did you mean \"weight\"?)",
                                      "Heftfile:3:29: max_fails must be an integer 0..1000000, got \"x\""}));
  const Config config = parse_ok(":80 {\n\treverse_proxy a:1?weight=5&&max_fails=2&\n}\n");
  ASSERT_EQ(config.sites.size(), 1u);
  EXPECT_EQ(config.sites[0].proxy.upstreams[0].weight, 5u);
  EXPECT_EQ(config.sites[0].proxy.upstreams[0].max_fails, 2u);
}

// Host names ignore case, so these are one backend twice; brackets hold only
// IPv6 addresses ("[foo.com]:80" and "[]:8080" were taken as host names).
TEST(HeftfileErrors, DuplicateBackendsIgnoreCaseAndBracketsHoldIPv6) {
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy Localhost:81 localhost:81\n}\n"),
            "Heftfile:2:29: duplicate backend \"localhost:81\" in this pool (first at 2:16)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy [::FFFF:127.0.0.1]:81 [::ffff:127.0.0.1]:81\n}\n"),
            "Heftfile:2:38: duplicate backend \"[::ffff:127.0.0.1]:81\" in this pool (first at 2:16)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy [foo.com]:81\n}\n"),
            "Heftfile:2:16: invalid backend address \"[foo.com]:81\": brackets hold an IPv6 address, e.g. [::1]:8080");
  EXPECT_EQ(only_error("[]:8080 {\n\treverse_proxy a:1\n}\n"),
            "Heftfile:1:1: invalid site address \"[]:8080\": brackets hold an IPv6 address, e.g. [::1]:8080");
}

// What brackets hold must be an IPv6 address: "[zz:zz]" or "[::1::2]" passed
// `heft validate` (a backend failed only at --resolve or run; a site matched
// no Host, which heft answers with 400).
TEST(HeftfileErrors, BracketsHoldAValidIPv6Address) {
  EXPECT_EQ(errors_of(":80 {\n\treverse_proxy [zz:zz]:46621 [::1::2]:46622 [::1]:46623\n}\n"),
            (std::vector<std::string>{
                "Heftfile:2:16: invalid backend address \"[zz:zz]:46621\": not a valid IPv6 address",
                "Heftfile:2:30: invalid backend address \"[::1::2]:46622\": not a valid IPv6 address"}));
  EXPECT_EQ(only_error("[zz:zz]:8080 {\n\treverse_proxy a:1\n}\n"),
            "Heftfile:1:1: invalid site address \"[zz:zz]:8080\": not a valid IPv6 address");
  EXPECT_EQ(only_error("a.test:8080, [1:2:3:4:5:6:7:8:9]:8080 {\n\treverse_proxy a:1\n}\n"),
            "Heftfile:1:14: invalid site address \"[1:2:3:4:5:6:7:8:9]:8080\": not a valid IPv6 address");
  const Config ok = parse_ok("[0::1]:8080, [2001:DB8::1]:8080 {\n\treverse_proxy [::1]:1 [::ffff:10.0.0.1]:2\n}\n");
  ASSERT_EQ(ok.sites.size(), 1u);
  EXPECT_EQ(ok.sites[0].hosts, (std::vector<std::string>{"0::1", "2001:db8::1"}));
  // An IP literal is also listened on, and heft's IPv6 listeners cannot take an IPv4-mapped one.
  EXPECT_EQ(only_error("[::FFFF:127.0.0.1]:8080 {\n\treverse_proxy a:1\n}\n"),
            "Heftfile:1:1: \"[::FFFF:127.0.0.1]:8080\" is an IPv4-mapped IPv6 address, which heft's IPv6 listeners "
            "(IPv6 only) cannot listen on: write it as 127.0.0.1:8080");
}

// A zone ID was dropped: "to [fe80::1%lo]:46623" dialed [fe80::1]:46623 on
// whatever interface the kernel picked, and a site "[fe80::1%lo]:P" matched
// no Host. Refused, with the reason.
TEST(HeftfileErrors, IPv6ZoneIDsAreRefused) {
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy [fe80::1%lo]:46623\n}\n"),
            "Heftfile:2:16: invalid backend address \"[fe80::1%lo]:46623\": IPv6 zone IDs are not supported (\"%lo\")");
  EXPECT_EQ(only_error("[fe80::1%eth0]:8080 {\n\treverse_proxy a:1\n}\n"),
            "Heftfile:1:1: invalid site address \"[fe80::1%eth0]:8080\": IPv6 zone IDs are not supported (\"%eth0\")");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a%b:1\n}\n"),
            "Heftfile:2:16: invalid backend address \"a%b:1\": invalid character '%' in host");
}

// The admin API listens on an IP address or localhost, in any case (host
// names are case-insensitive); other names passed validate and failed at run.
TEST(HeftfileErrors, AdminHostIsAnAddressOrLocalhostInAnyCase) {
  EXPECT_EQ(parse_ok("{\n\tadmin LocalHost:2019\n}\n:80 {\n\treverse_proxy a:1\n}\n").admin.address, "LocalHost:2019");
  EXPECT_EQ(only_error("{\n\tadmin admin.test:2019\n\tadmin_token t\n}\n:80 {\n\treverse_proxy a:1\n}\n"),
            "Heftfile:2:8: invalid admin address \"admin.test:2019\": the host must be an IP address or localhost (the "
            "admin API resolves no other name)");
  EXPECT_EQ(admin_listen_ip("LOCALHOST"), "127.0.0.1");
  EXPECT_EQ(admin_listen_ip(""), "0.0.0.0");
  EXPECT_EQ(admin_listen_ip("0:0::1"), "::1");
  EXPECT_EQ(admin_listen_ip("admin.test"), std::nullopt);
}

TEST(HeftfileErrors, DefaultBindIsNotIPv4Mapped) {
  EXPECT_EQ(only_error("{\n\tdefault_bind ::1 [::ffff:10.0.0.1]\n}\n:80 {\n\treverse_proxy a:1\n}\n"),
            "Heftfile:2:19: \"[::ffff:10.0.0.1]\" is an IPv4-mapped IPv6 address, which heft's IPv6 listeners (IPv6 "
            "only) cannot listen on: write it as 10.0.0.1");
  EXPECT_EQ(ipv4_of_mapped("::FFFF:7f00:1"), "127.0.0.1");
  EXPECT_EQ(ipv4_of_mapped("::1"), std::nullopt);
  EXPECT_EQ(ipv4_of_mapped("127.0.0.1"), std::nullopt);
}

// An admin address the sites listen on was "valid", and heft then ran
// without its admin API ("Address already in use").
TEST(HeftfileErrors, AdminAddressIsNotASiteListenAddress) {
  const auto file = [](const std::string& global) {
    return "{\n" + global + "}\nb.test {\n\treverse_proxy a:1\n}\n:8080 {\n\treverse_proxy a:1\n}\n";
  };
  EXPECT_EQ(only_error(file("\tadmin 127.0.0.1:8080\n\tdefault_bind 127.0.0.1\n")),
            "Heftfile:2:8: admin address \"127.0.0.1:8080\" is taken by the sites on port 8080, which listen on "
            "127.0.0.1: give the admin API another port (site at 8:1)");
  EXPECT_EQ(only_error(file("\tdefault_bind ::1\n\tadmin [::1]:8080\n")),
            "Heftfile:3:8: admin address \"[::1]:8080\" is taken by the sites on port 8080, which listen on ::1: "
            "give the admin API another port (site at 8:1)");
  // No default_bind: the sites listen on every address.
  EXPECT_EQ(only_error(file("\tadmin localhost:8080\n")),
            "Heftfile:2:8: admin address \"localhost:8080\" is taken by the sites on port 8080, which listen on "
            "every address: give the admin API another port (site at 7:1)");
  // A wildcard on either side takes its family's addresses; the admin's "::" takes both.
  EXPECT_EQ(only_error(file("\tadmin 127.0.0.1:80\n\tdefault_bind 0.0.0.0\n")),
            "Heftfile:2:8: admin address \"127.0.0.1:80\" is taken by the sites on port 80, which listen on "
            "0.0.0.0: give the admin API another port (site at 5:1)");
  EXPECT_EQ(only_error(file("\tadmin [::]:8080\n\tadmin_token t\n\tdefault_bind 127.0.0.1\n")),
            "Heftfile:2:8: admin address \"[::]:8080\" is taken by the sites on port 8080, which listen on "
            "127.0.0.1: give the admin API another port (site at 9:1)");
  // Another address of the port, another family, another port: fine.
  parse_ok(file("\tadmin 127.0.0.2:8080\n\tdefault_bind 127.0.0.1 ::1\n"));
  parse_ok(file("\tadmin 127.0.0.1:8080\n\tdefault_bind ::\n"));
  parse_ok(file("\tadmin 127.0.0.1:8081\n"));
  parse_ok(file("\tadmin off\n\tdefault_bind 127.0.0.1\n"));
}

// With no admin line the admin API takes 127.0.0.1:2019, and a site on :2019
// left heft serving without it ("Address already in use"). Not an error of the
// file: `heft reload` and SIGHUP of it keep the running API's address. `heft
// validate` and `heft run` ask admin_start_conflict(), placed at the site.
TEST(HeftfileErrors, ASiteOnTheDefaultAdminAddressIsAStartConflict) {
  const auto conflict = [](const std::string& global) {
    std::optional<Diagnostic> d = admin_start_conflict(
        parse_ok(global + ":80 {\n\treverse_proxy a:1\n}\n  b.test:2019, c.test:2019 {\n\treverse_proxy a:1\n}\n"));
    return d ? d->to_string() : "";
  };
  EXPECT_EQ(conflict(""), "Heftfile:4:3: the sites on port 2019 listen on every address, the admin API's default "
                          "127.0.0.1:2019 among them: set admin to another address in the global options, or admin off");
  EXPECT_EQ(conflict("{\n\tadmin_token t\n\tdefault_bind 127.0.0.1\n}\n"),
            "Heftfile:8:3: the sites on port 2019 listen on 127.0.0.1, the admin API's default 127.0.0.1:2019 among "
            "them: set admin to another address in the global options, or admin off");
  EXPECT_EQ(conflict("{\n\tdefault_bind 127.0.0.2 ::1\n}\n"), "");
  EXPECT_EQ(conflict("{\n\tadmin off\n}\n"), "");
  EXPECT_EQ(conflict("{\n\tadmin 127.0.0.1:2020\n}\n"), "");
}

// Caddy's "unix//path" (and nginx's "unix:/path") got "invalid character '/' in host".
TEST(HeftfileErrors, UnixSocketBackendsAreNotSupported) {
  EXPECT_EQ(errors_of(":80 {\n\treverse_proxy unix//run/app.sock UNIX:/run/app.sock unix:80\n}\n"),
            (std::vector<std::string>{
                "Heftfile:2:16: invalid backend address \"unix//run/app.sock\": unix sockets are not supported (heft "
                "dials host:port over TCP)",
                "Heftfile:2:35: invalid backend address \"UNIX:/run/app.sock\": unix sockets are not supported (heft "
                "dials host:port over TCP)"}));
}

TEST(HeftfileErrors, BadDurationsAndSizes) {
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\tconnect_timeout 5x\n\t}\n}\n"),
            "Heftfile:3:19: invalid duration \"5x\" (use e.g. 250ms, 30s, 5m, 1h; whole milliseconds, at most 365d)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy {\n\t\tto a:1 fail_timeout 10\n\t}\n}\n"),
            "Heftfile:3:23: invalid duration \"10\" (use e.g. 250ms, 30s, 5m, 1h; whole milliseconds, at most 365d)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\tread_timeout 2562047h\n\t}\n}\n"),
            "Heftfile:3:16: invalid duration \"2562047h\" (use e.g. 250ms, 30s, 5m, 1h; whole milliseconds, at most 365d)");
  // Below a millisecond: the message says why ("1.5ms" looks like a duration).
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\tconnect_timeout 1.5ms\n\t}\n}\n"),
            "Heftfile:3:19: invalid duration \"1.5ms\" (use e.g. 250ms, 30s, 5m, 1h; whole milliseconds, at most 365d)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\tconnect_timeout 1us\n\t}\n}\n"),
            "Heftfile:3:19: invalid duration \"1us\" (use e.g. 250ms, 30s, 5m, 1h; whole milliseconds, at most 365d)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\tread_timeout 0s\n\t}\n}\n"),
            "Heftfile:3:16: duration must be greater than 0, got \"0s\"");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\tkeepalive_timeout 5x\n\t}\n}\n"),
            "Heftfile:3:21: invalid duration \"5x\" (use e.g. 250ms, 30s, 5m, 1h; whole milliseconds, at most 365d)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\tkeepalive_timeout -1s\n\t}\n}\n"),
            "Heftfile:3:21: invalid duration \"-1s\" (use e.g. 250ms, 30s, 5m, 1h; whole milliseconds, at most 365d)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\tkeepalive_timeout 1s\n\t\tkeepalive_timeout 2s\n\t}\n}\n"),
            "Heftfile:4:3: duplicate option \"keepalive_timeout\" (first set at 3:3)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\tretry_body_limit 64XB\n\t}\n}\n"),
            "Heftfile:3:20: invalid size \"64XB\" (use e.g. 65536, 64KiB, 1MiB)");
  // The documented maximum is written as docs/heftfile.md writes it; past it the error says so.
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\tretry_body_limit 2TiB\n\t}\n}\n"),
            "Heftfile:3:20: retry_body_limit must be at most 1TiB, got \"2TiB\"");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\tretry_body_limit 1025GiB\n\t}\n}\n"),
            "Heftfile:3:20: retry_body_limit must be at most 1TiB, got \"1025GiB\"");
}

TEST(Heftfile, RetryBodyLimitTakesItsDocumentedMaximum) {
  Config config = parse_ok(":80 {\n\treverse_proxy a:1 {\n\t\tretry_body_limit 1TiB\n\t}\n}\n");
  ASSERT_EQ(config.sites.size(), 1u);
  EXPECT_EQ(config.sites[0].proxy.retry_body_limit, size_t(1) << 40);
}

TEST(HeftfileErrors, WeightsOutOfRange) {
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy {\n\t\tto a:1 weight 1000001\n\t}\n}\n"),
            "Heftfile:3:17: weight must be an integer 0..1000000, got \"1000001\"");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy {\n\t\tto a:1 weight -1\n\t}\n}\n"),
            "Heftfile:3:17: weight must be an integer 0..1000000, got \"-1\"");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1?weight=2.5\n}\n"),
            "Heftfile:2:27: weight must be an integer 0..1000000, got \"2.5\"");
  parse_ok(":80 {\n\treverse_proxy a:1?weight=1000000 b:1?weight=0\n}\n");
}

TEST(HeftfileErrors, MaxConnsOutOfRange) {
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy {\n\t\tto a:1 max_conns -1\n\t}\n}\n"),
            "Heftfile:3:20: max_conns must be an integer 0..1000000, got \"-1\"");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1?max_conns=1000001\n}\n"),
            "Heftfile:2:30: max_conns must be an integer 0..1000000, got \"1000001\"");
  const Config config = parse_ok(":80 {\n\treverse_proxy a:1?max_conns=1000000 b:1?max_conns=0\n}\n");
  EXPECT_EQ(config.sites[0].proxy.upstreams[0].max_conns, 1'000'000u);
  EXPECT_EQ(config.sites[0].proxy.upstreams[1].max_conns, 0u);
  EXPECT_EQ(config.sites[0].proxy.queue, 0u);  // no queue unless written
  EXPECT_EQ(config.sites[0].proxy.queue_timeout, 60s);
}

TEST(Heftfile, QueueAndItsTimeout) {
  const Config config =
      parse_ok(":80 {\n\treverse_proxy {\n\t\tto a:1 max_conns 4\n\t\tqueue 50\n\t\tqueue_timeout 2.5s\n\t}\n}\n");
  EXPECT_EQ(config.sites[0].proxy.queue, 50u);
  EXPECT_EQ(config.sites[0].proxy.queue_timeout, 2500ms);
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy {\n\t\tto a:1\n\t\tqueue_timeout 0\n\t}\n}\n"),
            "Heftfile:4:17: duration must be greater than 0, got \"0\"");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy {\n\t\tto a:1\n\t\tqueue many\n\t}\n}\n"),
            "Heftfile:4:9: queue must be an integer 0..1000000, got \"many\"");
}

TEST(HeftfileErrors, MissingValues) {
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy {\n\t\tto a:1 weight\n\t}\n}\n"),
            "Heftfile:3:10: missing value for \"weight\"");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\tkeepalive\n\t}\n}\n"),
            "Heftfile:3:3: missing value for \"keepalive\"");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\theader_up +X-Foo\n\t}\n}\n"),
            "Heftfile:3:13: missing value for header \"X-Foo\"");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\tkeepalive 1 2\n\t}\n}\n"),
            "Heftfile:3:15: unexpected argument \"2\" for \"keepalive\"");
}

// An option set twice for one backend is an error whichever forms set it: the
// inline query, the options of a `to` line, or both.
TEST(HeftfileErrors, DuplicateBackendOptions) {
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy {\n\t\tto a:1 weight 2 weight 3\n\t}\n}\n"),
            "Heftfile:3:19: duplicate option \"weight\" (first set at 3:10)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1?weight=5&weight=6\n}\n"),
            "Heftfile:2:29: duplicate option \"weight\" (first set at 2:20)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1?backup&down&backup=false\n}\n"),
            "Heftfile:2:32: duplicate option \"backup\" (first set at 2:20)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy {\n\t\tto a:1?weight=2 weight 3\n\t}\n}\n"),
            "Heftfile:3:19: duplicate option \"weight\" (first set at 3:10)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy {\n\t\tto a:1?weight=2&max_fails=4 b:1 max_fails 5\n\t}\n}\n"),
            "Heftfile:3:35: duplicate option \"max_fails\" (first set at 3:19)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy {\n\t\tto a:1?down down\n\t}\n}\n"),
            "Heftfile:3:15: duplicate option \"down\" (first set at 3:10)");
  // Different options from the two forms combine; pool-level max_fails is a default, not a duplicate.
  Config config = parse_ok(":80 {\n\treverse_proxy {\n\t\tto a:1?weight=2 b:1 max_fails 3\n\t\tmax_fails 9\n\t}\n}\n");
  const auto& upstreams = config.sites[0].proxy.upstreams;
  ASSERT_EQ(upstreams.size(), 2u);
  EXPECT_EQ(upstreams[0].weight, 2u);
  EXPECT_EQ(upstreams[0].max_fails, 3u);
  EXPECT_EQ(upstreams[1].weight, 1u);
  EXPECT_EQ(upstreams[1].max_fails, 3u);
}

// Every word after reverse_proxy is an address: an option there would become a
// backend "weight:80" and its value another.
TEST(HeftfileErrors, BackendOptionsOnTheInlineLine) {
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy 127.0.0.1:21101 weight 5\n}\n"),
            "Heftfile:2:32: \"weight\" is a backend option, not an address: write \"to 127.0.0.1:21101 weight 5\" in "
            "the reverse_proxy block, or \"127.0.0.1:21101?weight=5\"");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 backup b:1\n}\n"),
            "Heftfile:2:20: \"backup\" is a backend option, not an address: write \"to a:1 backup\" in the "
            "reverse_proxy block, or \"a:1?backup\"");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy slow_start\n}\n"),
            "Heftfile:2:16: \"slow_start\" is a backend option, not an address: write \"to ADDR slow_start N\" in the "
            "reverse_proxy block, or \"ADDR?slow_start=N\"");
  EXPECT_EQ(errors_of(":80 {\n\treverse_proxy a:1 max_fails 3 fail_timeout 5s down {\n\t\tto b:1\n\t}\n}\n"),
            (std::vector<std::string>{
                "Heftfile:2:20: \"max_fails\" is a backend option, not an address: write \"to a:1 max_fails 3\" in the "
                "reverse_proxy block, or \"a:1?max_fails=3\"",
                "Heftfile:2:32: \"fail_timeout\" is a backend option, not an address: write \"to a:1 fail_timeout 5s\" in "
                "the reverse_proxy block, or \"a:1?fail_timeout=5s\"",
                "Heftfile:2:48: \"down\" is a backend option, not an address: write \"to a:1 down\" in the reverse_proxy "
                "block, or \"a:1?down\""}));
  // The single-site form without braces gets the same error.
  EXPECT_EQ(only_error("localhost:8080\nreverse_proxy a:1 weight 5\n"),
            "Heftfile:2:19: \"weight\" is a backend option, not an address: write \"to a:1 weight 5\" in the "
            "reverse_proxy block, or \"a:1?weight=5\"");
}

TEST(HeftfileErrors, HashWithoutKey) {
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\tlb_policy hash\n\t}\n}\n"),
            "Heftfile:3:13: lb_policy hash needs a key: client_ip, uri, header NAME or cookie NAME");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\tlb_policy hash header\n\t}\n}\n"),
            "Heftfile:3:18: \"header\" needs a name, e.g. header X-User-ID");
}

TEST(HeftfileErrors, PoolWithoutUpstreams) {
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy {\n\t\tlb_policy first\n\t}\n}\n"),
            "Heftfile:2:2: reverse_proxy has no upstreams (add addresses or \"to\" lines)");
  EXPECT_EQ(only_error(":80 {\n\tlog\n}\n"), "Heftfile:1:1: site has no reverse_proxy");
}

TEST(HeftfileErrors, DuplicateBackendInAPool) {
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy 10.0.0.1:80 {\n\t\tto 10.0.0.2:80\n\t\tto 10.0.0.1\n\t}\n}\n"),
            "Heftfile:4:6: duplicate backend \"10.0.0.1:80\" in this pool (first at 2:16)");
}

TEST(HeftfileErrors, DuplicateSitesAndDefaults) {
  EXPECT_EQ(only_error("a.com:8080 {\n\treverse_proxy x:1\n}\nb.com:8080, A.com:8080 {\n\treverse_proxy x:1\n}\n"),
            "Heftfile:4:13: duplicate site \"a.com:8080\" (first at 1:1)");
  EXPECT_EQ(only_error(":8080 {\n\treverse_proxy x:1\n}\n:8080 {\n\treverse_proxy x:1\n}\n"),
            "Heftfile:4:1: two sites answer every host on port 8080 (first at 1:1)");
  EXPECT_EQ(only_error("a.com {\n\tdefault\n\treverse_proxy x:1\n}\nb.com {\n\treverse_proxy x:1\n\tdefault\n}\n"),
            "Heftfile:7:2: second default site for port 80 (first at 2:2)");
  // Same host on another port is another site.
  parse_ok("a.com {\n\treverse_proxy x:1\n}\na.com:8080 {\n\treverse_proxy x:1\n}\n");
}

// The proxy sends unmatched hosts to a site without hosts before a default one:
// with both on a port, `default` would silently do nothing.
TEST(HeftfileErrors, DefaultSiteBesideASiteForEveryHost) {
  EXPECT_EQ(only_error(":21015 {\n\treverse_proxy x:1\n}\nb.com:21015 {\n\tdefault\n\treverse_proxy x:1\n}\n"),
            "Heftfile:5:2: \"default\" has no effect: the site at 1:1 answers every host on port 21015 (remove one of "
            "the two)");
  EXPECT_EQ(only_error("b.com:8080 {\n\tdefault\n\treverse_proxy x:1\n}\nhttp://:8080 {\n\treverse_proxy x:1\n}\n"),
            "Heftfile:2:2: \"default\" has no effect: the site at 5:1 answers every host on port 8080 (remove one of "
            "the two)");
  // Other ports, or `default` on the site for every host itself, are fine.
  parse_ok(":8080 {\n\treverse_proxy x:1\n}\nb.com {\n\tdefault\n\treverse_proxy x:1\n}\n");
  parse_ok(":8080 {\n\tdefault\n\treverse_proxy x:1\n}\nb.com:8080 {\n\treverse_proxy x:1\n}\n");
}

TEST(HeftfileErrors, SyntaxErrors) {
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\tto b:1\n}\n"), "Heftfile:1:5: missing '}' to close this block");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1\n}\n}\n"), "Heftfile:4:1: unexpected '}' without an open block");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\theader_up X \"unterminated\n\t}\n}\n"),
            "Heftfile:3:15: unterminated quoted string");
}

TEST(HeftfileErrors, OtherValueErrors) {
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:99999\n}\n"),
            "Heftfile:2:16: invalid backend address \"a:99999\": invalid port \"99999\" (1..65535)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\tnext_upstream error http_501\n\t}\n}\n"),
            "Heftfile:3:23: unknown next_upstream condition \"http_501\" (did you mean \"http_500\"?)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\thealth_status 2x\n\t}\n}\n"),
            "Heftfile:3:17: invalid health_status \"2x\" (e.g. 200 or 2xx)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\tkeepalive 4\n\t\tkeepalive 8\n\t}\n}\n"),
            "Heftfile:4:3: duplicate option \"keepalive\" (first set at 3:3)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\tadaptive {\n\t\t\tcut 150%\n\t\t}\n\t}\n}\n"),
            "Heftfile:4:8: cut must be a fraction 0%..100% (e.g. \"50%\"), got \"150%\"");
  // 1 is 100 %, never cut for errors: almost surely meant as 1 %. 100% and 0.99 are taken.
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\tadaptive {\n\t\t\terror_threshold 1\n\t\t}\n\t}\n}\n"),
            "Heftfile:4:20: error_threshold 1 would be 100% (never cut for errors): write 1% for one percent, or "
            "100% if that is meant");
  parse_ok(":80 {\n\treverse_proxy a:1 {\n\t\tadaptive {\n\t\t\terror_threshold 100%\n\t\t}\n\t}\n}\n");
  parse_ok(":80 {\n\treverse_proxy a:1 {\n\t\tadaptive {\n\t\t\terror_threshold 0.99\n\t\t}\n\t}\n}\n");
  EXPECT_EQ(only_error("https://a.com {\n\treverse_proxy a:1\n}\n"),
            "Heftfile:1:1: this site serves https but no certificate is loaded: add \"tls CERT_FILE KEY_FILE\"");
  // A tls directive in error is the one error (not also "no certificate").
  EXPECT_EQ(only_error("https://a.com {\n\ttls internal\n\treverse_proxy a:1\n}\n"),
            "Heftfile:2:6: \"tls internal\" (heft's own local CA) is not supported yet: give \"tls CERT_FILE KEY_FILE\"");
  EXPECT_EQ(only_error(":443 {\n\ttls a.pem\n\treverse_proxy a:1\n}\n"),
            "Heftfile:2:6: \"tls\" takes a certificate file and its key file: \"tls CERT_FILE KEY_FILE\"");
  EXPECT_EQ(only_error("a.com:80, b.com:81 {\n\treverse_proxy a:1\n}\n"),
            "Heftfile:1:11: all addresses of a site must share one port (\"a.com:80\" uses 80)");
}

// Header ops cannot touch the framing or hop-by-hop fields heft writes
// itself (two differing Content-Lengths reached a backend), nor add or
// remove a request's Host (set it instead).
TEST(HeftfileErrors, HeaderOpsLeaveFramingAndHostAlone) {
  const std::string why = "cannot be changed: heft writes the message framing and hop-by-hop fields itself";
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\theader_up Content-Length 0\n\t}\n}\n"),
            "Heftfile:3:13: \"Content-Length\" " + why);
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\theader_down +transfer-encoding chunked\n\t}\n}\n"),
            "Heftfile:3:15: \"transfer-encoding\" " + why);
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\theader_up -Connection\n\t}\n}\n"),
            "Heftfile:3:13: \"Connection\" " + why);
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\theader_up +Host b.test\n\t}\n}\n"),
            "Heftfile:3:13: \"+Host\" would send a second Host; set it instead (header_up Host VALUE)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\theader_up -host\n\t}\n}\n"),
            "Heftfile:3:13: \"-Host\" would leave the request without the Host HTTP/1.1 requires; set it instead");
  // health_headers follow the header_up rules (a Content-Length made the probe's backend wait for a body).
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\thealth_headers {\n\t\t\tContent-Length 5\n\t\t}\n\t}\n}\n"),
            "Heftfile:4:4: \"Content-Length\" " + why);
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\thealth_headers {\n\t\t\t+X-A 1\n\t\t}\n\t}\n}\n"),
            "Heftfile:4:4: health_headers only sets headers: write \"X-A\" without the +");
  Config config = parse_ok(":80 {\n\treverse_proxy a:1 {\n\t\theader_up Host b.test\n\t\theader_down -Host\n\t}\n}\n");
  EXPECT_EQ(config.sites[0].proxy.header_up.size(), 1u);
}

TEST(Heftfile, IgnoreClientAbortIsOnOrOffAndRoundTrips) {
  Config config = parse_ok(":80 {\n\treverse_proxy a:1 {\n\t\tignore_client_abort on\n\t}\n}\n");
  EXPECT_TRUE(config.sites[0].proxy.ignore_client_abort);
  EXPECT_FALSE(parse_ok(":80 {\n\treverse_proxy a:1\n}\n").sites[0].proxy.ignore_client_abort);
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\tignore_client_abort yes\n\t}\n}\n"),
            "Heftfile:3:23: ignore_client_abort must be on or off, got \"yes\"");
}

// Header names are RFC 9110 tokens wherever a header is named, health_headers included.
TEST(HeftfileErrors, HeaderNamesAreTokens) {
  const std::string rule = " (use letters, digits and !#$%&'*+-.^_`|~)";
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\theader_up \"X A\" v\n\t}\n}\n"),
            "Heftfile:3:13: invalid header name \"X A\"" + rule);
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\theader_up X-\xc3\x89 v\n\t}\n}\n"),
            "Heftfile:3:13: invalid header name \"X-\\xC3\\x89\"" + rule);
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\theader_down -X(1)\n\t}\n}\n"),
            "Heftfile:3:15: invalid header name \"-X(1)\"" + rule);
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\theader_up X-A: v\n\t}\n}\n"),
            "Heftfile:3:13: invalid header name \"X-A:\"" + rule);
  EXPECT_EQ(errors_of(":80 {\n\treverse_proxy a:1 {\n\t\thealth_headers {\n\t\t\t\"\" empty\n"
                      "\t\t\t\"Bad Name\" v\n\t\t\tX-\xc3\x89 v\n\t\t\tX-Good v\n\t\t}\n\t}\n}\n"),
            (std::vector<std::string>{"Heftfile:4:4: invalid header name \"\"" + rule,
                                      "Heftfile:5:4: invalid header name \"Bad Name\"" + rule,
                                      "Heftfile:6:4: invalid header name \"X-\\xC3\\x89\"" + rule}));
  Config config = parse_ok(":80 {\n\treverse_proxy a:1 {\n\t\theader_up +X-A_b.c~1 v\n"
                           "\t\thealth_headers {\n\t\t\tX!#$%&'*+-.^_`|~ v\n\t\t}\n\t}\n}\n");
  EXPECT_EQ(config.sites[0].proxy.header_up[0].name, "X-A_b.c~1");
  EXPECT_EQ(config.sites[0].proxy.health_headers[0].first, "X!#$%&'*+-.^_`|~");
}

// A quoted value may span lines; sent raw, its line break would start a header
// of its own (header injection). RFC 9110 field values hold no control but HTAB.
TEST(HeftfileErrors, HeaderValuesWithControlCharacters) {
  const std::string rule = "header values may hold no control character but tab";
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\theader_up X-A \"a\nX-Injected: 1\"\n\t}\n}\n"),
            "Heftfile:3:17: invalid value for header \"X-A\": contains a line feed (0x0A); " + rule);
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\theader_down +X-A \"a\r\"\n\t}\n}\n"),
            "Heftfile:3:20: invalid value for header \"X-A\": contains a carriage return (0x0D); " + rule);
  EXPECT_EQ(only_error(std::string(":80 {\n\treverse_proxy a:1 {\n\t\theader_up X-A a") + '\0' + "b\n\t}\n}\n"),
            "Heftfile:3:17: invalid value for header \"X-A\": contains a NUL byte (0x00); " + rule);
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\theader_up X-A a\x7f\n\t}\n}\n"),
            "Heftfile:3:17: invalid value for header \"X-A\": contains a control character (0x7F); " + rule);
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\thealth_headers {\n\t\t\tX-Probe \"a\nb\"\n\t\t}\n\t}\n}\n"),
            "Heftfile:4:12: invalid value for header \"X-Probe\": contains a line feed (0x0A); " + rule);
  // Tab, spaces and UTF-8 beyond ASCII (obs-text octets) are kept.
  Config config = parse_ok(":80 {\n\treverse_proxy a:1 {\n\t\theader_up X-A \"a\tb c\"\n"
                           "\t\theader_down X-B caf\xc3\xa9\n\t}\n}\n");
  EXPECT_EQ(config.sites[0].proxy.header_up[0].value, "a\tb c");
  EXPECT_EQ(config.sites[0].proxy.header_down[0].value, "caf\xc3\xa9");
}

// Schemes are case-insensitive (RFC 3986); where none is accepted, the error says so.
TEST(HeftfileErrors, Schemes) {
  Config config = parse_ok("HTTP://A.com:8080 {\n\treverse_proxy Http://b:1 {\n\t\tto hTTp://c:2 weight 2\n\t}\n}\n");
  ASSERT_EQ(config.sites.size(), 1u);
  EXPECT_EQ(config.sites[0].hosts, std::vector<std::string>{"a.com"});
  EXPECT_EQ(config.sites[0].port, 8080);
  ASSERT_EQ(config.sites[0].proxy.upstreams.size(), 2u);
  EXPECT_EQ(config.sites[0].proxy.upstreams[0].name, "b:1");
  EXPECT_EQ(config.sites[0].proxy.upstreams[1].name, "c:2");
  EXPECT_EQ(only_error("HTTPS://a.com {\n\treverse_proxy a:1\n}\n"),
            "Heftfile:1:1: this site serves https but no certificate is loaded: add \"tls CERT_FILE KEY_FILE\"");
  EXPECT_EQ(only_error("ftp://a.com {\n\treverse_proxy a:1\n}\n"),
            "Heftfile:1:1: \"ftp://a.com\": unsupported scheme \"ftp\" (write http:// or https://)");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy HTTPS://a:1\n}\n"),
            "Heftfile:2:16: \"HTTPS://a:1\": TLS to backends is not supported");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy ws://a:1\n}\n"),
            "Heftfile:2:16: \"ws://a:1\": unsupported scheme \"ws\" (backends are plain http://)");
  EXPECT_EQ(only_error("{\n\tadmin http://127.0.0.1:21999\n}\n:80 {\n\treverse_proxy a:1\n}\n"),
            "Heftfile:2:8: invalid admin address \"http://127.0.0.1:21999\": no scheme allowed here (write host:port "
            "without \"http://\")");
  EXPECT_EQ(only_error("b\xc3\xbc" "cher.de {\n\treverse_proxy a:1\n}\n"),
            "Heftfile:1:1: invalid site address \"b\xc3\xbc" "cher.de\": invalid character '\\xC3' in host");
}

// The probe's request line is "GET <health_uri> HTTP/1.1": a space or line
// break in the path would end it and let the rest inject a line of its own.
TEST(HeftfileErrors, HealthUriIsOneRequestTarget) {
  const std::string rule = "health_uri may hold no space, control character or non-ASCII byte (percent-encode them)";
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\thealth_uri \"/a HTTP/1.1\nX: y\"\n\t}\n}\n"),
            "Heftfile:3:14: " + rule + ", got \"/a HTTP/1.1\\nX: y\"");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\thealth_uri /caf\xc3\xa9\n\t}\n}\n"),
            "Heftfile:3:14: " + rule + ", got \"/caf\\xC3\\xA9\"");
  EXPECT_EQ(parse_ok(":80 {\n\treverse_proxy a:1 {\n\t\thealth_uri /caf%C3%A9?x=1&y=%20\n\t}\n}\n").sites[0].proxy.health_uri,
            "/caf%C3%A9?x=1&y=%20");
}

// health_body is checked by the engine the probes match with (Boost.Regex):
// a lookbehind, which they take, was refused by std::regex's check; a pattern
// neither takes is an error at its place.
TEST(HeftfileErrors, HealthBodyIsCheckedAsTheProbesMatchIt) {
  EXPECT_EQ(parse_ok(":80 {\n\treverse_proxy a:1 {\n\t\thealth_body \"(?<=status: )up\"\n\t}\n}\n")
                .sites[0]
                .proxy.health_body,
            "(?<=status: )up");
  const std::string error = only_error(":80 {\n\treverse_proxy a:1 {\n\t\thealth_body \"(up\"\n\t}\n}\n");
  EXPECT_EQ(error.rfind("Heftfile:3:15: invalid health_body regular expression \"(up\": ", 0), 0u) << error;
}

TEST(HeftfileErrors, ThreeMistakesGiveThreeErrorsInFileOrder) {
  auto errors = errors_of(R"(app.example.com {
	reverse_proxy {
		to backend-1:3000 weight 5
		to backend-2:3000 wieght 3
		to backend-3:3000 weight 2
		lb_policy hash
		connect_timeout 5 seconds
	}
}
)");
  EXPECT_EQ(errors, (std::vector<std::string>{
                        "Heftfile:4:21: unknown option \"wieght\" (did you mean \"weight\"?)",
                        "Heftfile:6:13: lb_policy hash needs a key: client_ip, uri, header NAME or cookie NAME",
                        "Heftfile:7:21: unexpected argument \"seconds\" for \"connect_timeout\"",
                    }));
}

TEST(Heftfile, DefaultBindListsAddressesInCanonicalForm) {
  EXPECT_TRUE(parse_ok(":80 {\n\treverse_proxy a:1\n}\n").sites[0].bind.empty());  // every address
  EXPECT_EQ(parse_ok("{\n\tdefault_bind 127.0.0.1 [0::1] 2001:DB8::1\n}\n:80 {\n\treverse_proxy a:1\n}\n").sites[0].bind,
            (std::vector<std::string>{"127.0.0.1", "::1", "2001:db8::1"}));
}

// A site address that is an IP literal is listened on (that address only);
// a host name only matches requests, as in Caddy; `bind` chooses the
// addresses whatever the site's addresses are.
TEST(Heftfile, IpLiteralSiteAddressesAndBindChooseWhereASiteListens) {
  const auto bind_of = [](std::string_view text) { return parse_ok(text).sites.at(0).bind; };
  using Addresses = std::vector<std::string>;
  EXPECT_EQ(bind_of("127.0.0.1:8080 {\n\treverse_proxy a:1\n}\n"), Addresses{"127.0.0.1"});
  EXPECT_EQ(bind_of("[0::1]:8080 {\n\treverse_proxy a:1\n}\n"), Addresses{"::1"});
  EXPECT_EQ(bind_of("127.0.0.1:8080, [::1]:8080, localhost:8080 {\n\treverse_proxy a:1\n}\n"),
            (Addresses{"127.0.0.1", "::1"}));
  EXPECT_EQ(parse_ok("127.0.0.1:8080, localhost:8080 {\n\treverse_proxy a:1\n}\n").sites[0].hosts,
            (Addresses{"127.0.0.1", "localhost"}));  // both still match requests
  EXPECT_EQ(bind_of("example.com:8080 {\n\treverse_proxy a:1\n}\n"), Addresses{});  // every address
  EXPECT_EQ(bind_of(":8080 {\n\treverse_proxy a:1\n}\n"), Addresses{});
  EXPECT_EQ(bind_of("{\n\tdefault_bind 10.0.0.1\n}\nexample.com:8080 {\n\treverse_proxy a:1\n}\n"),
            Addresses{"10.0.0.1"});
  // An IP literal is more specific than default_bind; bind is more specific than both.
  EXPECT_EQ(bind_of("{\n\tdefault_bind 10.0.0.1\n}\n127.0.0.1:8080 {\n\treverse_proxy a:1\n}\n"),
            Addresses{"127.0.0.1"});
  EXPECT_EQ(bind_of("{\n\tdefault_bind 10.0.0.1\n}\n127.0.0.1:8080 {\n\tbind 127.0.0.2 [0::1]\n"
                    "\treverse_proxy a:1\n}\n"),
            (Addresses{"127.0.0.2", "::1"}));
  EXPECT_EQ(bind_of("example.com:8080 {\n\tbind 0.0.0.0\n\treverse_proxy a:1\n}\n"), Addresses{"0.0.0.0"});
  // Sites of one port listen together: the same addresses in any order are
  // one set (in the first site's order); different ones are an error.
  const Config shared = parse_ok("127.0.0.1:8080, [::1]:8080 {\n\treverse_proxy a:1\n}\n"
                                 "example.com:8080 {\n\tbind ::1 127.0.0.1\n\treverse_proxy b:1\n}\n");
  ASSERT_EQ(shared.sites.size(), 2u);
  EXPECT_EQ(shared.sites[1].bind, (Addresses{"127.0.0.1", "::1"}));
  EXPECT_EQ(only_error("127.0.0.1:8080 {\n\treverse_proxy a:1\n}\nexample.com:8080 {\n\treverse_proxy b:1\n}\n"),
            "Heftfile:4:1: this site listens on every address, but the site at 1:1 on port 8080 listens on "
            "127.0.0.1: the sites of a port listen on the same addresses (give them the same bind, or another port)");
  EXPECT_EQ(only_error("127.0.0.1:8080 {\n\treverse_proxy a:1\n}\n127.0.0.2:8080 {\n\tbind 127.0.0.3\n"
                       "\treverse_proxy b:1\n}\n"),
            "Heftfile:5:2: this site listens on 127.0.0.3, but the site at 1:1 on port 8080 listens on 127.0.0.1: the "
            "sites of a port listen on the same addresses (give them the same bind, or another port)");
  // Other ports are other listeners.
  const Config ports = parse_ok("127.0.0.1:8080 {\n\treverse_proxy a:1\n}\n:8081 {\n\treverse_proxy b:1\n}\n");
  EXPECT_EQ(ports.sites[0].bind, Addresses{"127.0.0.1"});
  EXPECT_EQ(ports.sites[1].bind, Addresses{});
}

TEST(HeftfileErrors, BindTakesIpAddresses) {
  const auto site = [](std::string_view bind) {
    return fmt::format("example.com:8080 {{\n\t{}\n\treverse_proxy a:1\n}}\n", bind);
  };
  EXPECT_EQ(only_error(site("bind localhost")),
            "Heftfile:2:7: bind needs IP addresses (e.g. 0.0.0.0, ::, 127.0.0.1, ::1), got \"localhost\"");
  EXPECT_EQ(only_error(site("bind 127.0.0.1:8080")),
            "Heftfile:2:7: bind needs IP addresses (e.g. 0.0.0.0, ::, 127.0.0.1, ::1), got \"127.0.0.1:8080\"");
  EXPECT_EQ(only_error(site("bind ::1 [0::1]")), "Heftfile:2:11: duplicate address \"[0::1]\" in bind");
  EXPECT_EQ(only_error(site("bind")), "Heftfile:2:2: missing value for \"bind\" (e.g. \"bind 127.0.0.1 ::1\")");
  EXPECT_EQ(only_error(site("bind ::ffff:127.0.0.1")),
            "Heftfile:2:7: \"::ffff:127.0.0.1\" is an IPv4-mapped IPv6 address, which heft's IPv6 listeners (IPv6 "
            "only) cannot listen on: write it as 127.0.0.1");
  EXPECT_EQ(only_error(site("bind 127.0.0.1\n\tbind ::1")), "Heftfile:3:2: duplicate option \"bind\" (first set at 2:2)");
  EXPECT_EQ(only_error(site("bind 127.0.0.1 {\n\t}")), "Heftfile:2:17: \"bind\" takes no block");
}

TEST(HeftfileErrors, DefaultBindTakesIpAddresses) {
  const std::string site = ":80 {\n\treverse_proxy a:1\n}\n";
  EXPECT_EQ(only_error("{\n\tdefault_bind localhost\n}\n" + site),
            "Heftfile:2:15: default_bind needs IP addresses (e.g. 0.0.0.0, ::, 127.0.0.1, ::1), got \"localhost\"");
  EXPECT_EQ(only_error("{\n\tdefault_bind 127.0.0.1:80\n}\n" + site),
            "Heftfile:2:15: default_bind needs IP addresses (e.g. 0.0.0.0, ::, 127.0.0.1, ::1), got \"127.0.0.1:80\"");
  EXPECT_EQ(only_error("{\n\tdefault_bind ::1 0::1\n}\n" + site),
            "Heftfile:2:19: duplicate address \"0::1\" in default_bind");
  EXPECT_EQ(only_error("{\n\tdefault_bind\n}\n" + site),
            "Heftfile:2:2: missing value for \"default_bind\" (e.g. \"default_bind 127.0.0.1 ::1\")");
}

TEST(Heftfile, KnownOptionsListsEachBlock) {
  auto proxy = known_options("reverse_proxy");
  EXPECT_NE(std::find(proxy.begin(), proxy.end(), "next_upstream"), proxy.end());
  EXPECT_TRUE(known_options("nonsense").empty());
}

TEST(Resolve, IpLiteralsNeedNoLookupAndFailuresNameTheSite) {
  Config config = parse_ok(":80 {\n\treverse_proxy 127.0.0.1:9001 [::1]:9002 no-such-host.invalid:80\n}\n");
  std::vector<Diagnostic> errors = resolve(config);
  const auto& upstreams = config.sites[0].proxy.upstreams;
  EXPECT_EQ(upstreams[0].resolved, std::vector<std::string>{"127.0.0.1:9001"});
  EXPECT_EQ(upstreams[1].resolved, std::vector<std::string>{"[::1]:9002"});
  EXPECT_TRUE(upstreams[2].resolved.empty());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].to_string().rfind("Heftfile:1: cannot resolve backend \"no-such-host.invalid:80\"", 0), 0u)
      << errors[0].to_string();
}

TEST(Resolve, LocalhostResolves) {
  Config config = parse_ok(":80 {\n\treverse_proxy localhost:9001\n}\n");
  EXPECT_TRUE(resolve(config).empty());
  EXPECT_FALSE(config.sites[0].proxy.upstreams[0].resolved.empty());
}

// slow_start 0 is off (nginx's default value), for the pool or, over the
// pool's, for one backend; it was "duration must be greater than 0".
TEST(Heftfile, SlowStartZeroIsOff) {
  Config config = parse_ok(":80 {\n\treverse_proxy {\n\t\tto a:1 slow_start 0\n\t\tto b:1\n\t\tslow_start 0\n\t}\n}\n");
  const auto& pool = config.sites[0].proxy;
  EXPECT_EQ(pool.slow_start, std::optional<milliseconds>(0ms));
  EXPECT_EQ(pool.upstreams[0].slow_start, std::optional<milliseconds>(0ms));
  EXPECT_EQ(*from_json(to_json(config)), config);
}

TEST(Format, CanonicalLayoutKeepsCommentsAndMeaning) {
  std::string messy = "# top\n{\n  workers   2\n}\napp.example.com   {\n    reverse_proxy  {\n"
                      "        to a:1   weight 5  # big\n\n\n\n        header_up X-Foo \"two words\"\n"
                      "        log_thing \"\"\n    }\n}\nb.com {\n reverse_proxy b:1\n}\n";
  Result<std::string> formatted = format_heftfile(messy);
  ASSERT_TRUE(formatted.ok());
  EXPECT_EQ(*formatted,
            "# top\n{\n\tworkers 2\n}\n\napp.example.com {\n\treverse_proxy {\n\t\tto a:1 weight 5 # big\n\n"
            "\t\theader_up X-Foo \"two words\"\n\t\tlog_thing \"\"\n\t}\n}\n\nb.com {\n\treverse_proxy b:1\n}\n");
  // Formatting is idempotent.
  EXPECT_EQ(*format_heftfile(*formatted), *formatted);
}

TEST(Format, SeedExamplesFormatToTheSameConfig) {
  for (std::string_view text : {kStructured, kInline}) {
    Result<std::string> formatted = format_heftfile(text);
    ASSERT_TRUE(formatted.ok());
    EXPECT_EQ(parse_ok(*formatted), parse_ok(text));
  }
}

TEST(Format, QuotedEmptyNameBeforeBlockKeepsItsQuotes) {
  // `"" {` was printed as a bare `{`: a directive the reader rejects became an options block.
  std::string text = ":80 {\n\treverse_proxy a:1\n\t\"\" {\n\t\tfoo\n\t}\n}\n";
  Result<std::string> formatted = format_heftfile(text);
  ASSERT_TRUE(formatted.ok());
  EXPECT_EQ(*formatted, text);
}

TEST(Format, ReportsSyntaxErrors) {
  Result<std::string> formatted = format_heftfile(":80 {\n\treverse_proxy a:1\n");
  ASSERT_FALSE(formatted.ok());
  EXPECT_EQ(formatted.errors[0].to_string(), "Heftfile:1:5: missing '}' to close this block");
}

// The JSON form (heft adapt, the admin API, the --resume state file) is UTF-8
// text: nlohmann::json's dump() threw on anything else, so `heft adapt`
// aborted (exit 134) and `heft run` died starting its admin API on a file
// `heft validate` had called valid. Such a value is an error at its place.
TEST(HeftfileErrors, ValuesTheJsonFormCannotHoldMustBeUtf8) {
  const std::string why = "the configuration's JSON form, which heft adapt prints and the admin API serves, holds "
                          "UTF-8 text only)";
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\theader_up X-A caf\xe9\n\t}\n}\n"),
            "Heftfile:3:17: invalid value for header \"X-A\": not UTF-8 (byte 0xE9 at offset 3; " + why);
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\theader_down +X-A \"a \xc3\x28\"\n\t}\n}\n"),
            "Heftfile:3:20: invalid value for header \"X-A\": not UTF-8 (byte 0xC3 at offset 2; " + why);
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\thealth_headers {\n\t\t\tX-Probe \xed\xa0\x80\n\t\t}\n\t}\n}\n"),
            "Heftfile:4:12: invalid value for header \"X-Probe\": not UTF-8 (byte 0xED at offset 0; " + why);
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\thealth_body ab\xe9\n\t}\n}\n"),
            "Heftfile:3:15: invalid health_body regular expression \"ab\xe9\": not UTF-8 (byte 0xE9 at offset 2; " +
                why);
  EXPECT_EQ(only_error(":80 {\n\tlog {\n\t\toutput file /var/log/h\xe9.log\n\t}\n\treverse_proxy a:1\n}\n"),
            "Heftfile:3:15: invalid log file path: not UTF-8 (byte 0xE9 at offset 10; " + why);
  EXPECT_EQ(only_error("{\n\tadmin_token s\xe9\x63ret\n}\n:80 {\n\treverse_proxy a:1\n}\n"),
            "Heftfile:2:14: admin_token is not UTF-8 (byte 0xE9 at offset 1; " + why);
  // UTF-8 (two, three and four bytes) is kept, and its JSON form prints.
  Config config = parse_ok("{\n\tadmin_token s\xc3\xa9\x63ret\n}\n:80 {\n\tlog {\n\t\toutput file /tmp/\xe2\x82\xac\n\t}\n"
                           "\treverse_proxy a:1 {\n\t\theader_up X-A \xf0\x9f\x98\x80\n\t\thealth_body caf\xc3\xa9\n\t}\n}\n");
  EXPECT_EQ(config.sites[0].proxy.header_up[0].value, "\xf0\x9f\x98\x80");
  EXPECT_NO_THROW((void)to_json(config).dump());
}

// A quoted value's line feed (or escape sequence) went into the message as
// written: its second line named no place, and `heft validate` printed it raw.
TEST(HeftfileErrors, MessagesStayOnOneLine) {
  EXPECT_EQ(only_error("{\n\tworkers \"1\n2\"\n}\n:80 {\n\treverse_proxy a:1\n}\n"),
            "Heftfile:2:10: workers must be an integer 0..1024, got \"1\\n2\"");
  EXPECT_EQ(only_error(":80 {\n\treverse_proxy a:1 {\n\t\tconnect_timeout \"1s\x1b[2J\"\n\t}\n}\n"),
            "Heftfile:3:19: invalid duration \"1s\\x1B[2J\" (use e.g. 250ms, 30s, 5m, 1h; whole milliseconds, at "
            "most 365d)");
}

TEST(Format, TokenStartingWithAByteOrderMarkKeepsItsQuotes) {
  // Printed bare at the start of the file, the mark was then skipped as the
  // file's own: fmt(fmt(x)) was not fmt(x), and the site lost the mark.
  std::string quoted = "\"\xEF\xBB\xBF:80\" {\n\treverse_proxy a:1\n}\n";
  Result<std::string> formatted = format_heftfile(quoted);
  ASSERT_TRUE(formatted.ok());
  EXPECT_EQ(*formatted, quoted);
  // A second mark after the file's own is a token's first bytes too.
  formatted = format_heftfile("\xEF\xBB\xBF\xEF\xBB\xBF:80 {\n\treverse_proxy a:1\n}\n");
  ASSERT_TRUE(formatted.ok());
  EXPECT_EQ(*formatted, quoted);
  EXPECT_EQ(*format_heftfile(*formatted), *formatted);
  EXPECT_FALSE(parse_heftfile(*formatted).ok());
}

// "Did you mean" filled an edit-distance table of the word's length for every
// known name: a 8 MB unknown option took seconds (22 s for 1 MB under ASAN).
// Its time per byte is bench/config_bench's (BENCHMARKS.md, "Reading
// configurations"); here, what is said.
TEST(HeftfileErrors, AHugeUnknownWordIsReportedWithoutASuggestion) {
  const std::string word(8 << 20, 'x');
  Result<Config> result = parse_heftfile(":80 {\n\treverse_proxy a:1 {\n\t\t" + word + " 1\n\t}\n}\n");
  ASSERT_EQ(result.errors.size(), 1u);
  EXPECT_EQ(result.errors[0].to_string(), "Heftfile:3:3: unknown option \"" + word + "\"");
  EXPECT_EQ(closest_match("wieght", known_options("to")), "weight");  // typos are still caught
}

// Sites were grouped by port with a search of the port list per comparison
// of the sort: 59,000 sites on as many ports took 8 s, and as long again in
// to_json(). The time per site is bench/config_bench's (BENCHMARKS.md,
// "Reading configurations"); here, that the grouping is right at that size.
TEST(Heftfile, FiftyNineThousandPortsAreGroupedInOrder) {
  std::string text;
  for (int port = 1; port <= 59'000; ++port) text += fmt::format(":{} {{\n\treverse_proxy a:1\n}}\n", 60'000 - port);
  text += "59999.example.com:59999 {\n\treverse_proxy b:1\n}\n";  // joins the first port's site
  Result<Config> result = parse_heftfile(text);
  ASSERT_TRUE(result.ok());
  ASSERT_EQ(result->sites.size(), 59'001u);
  EXPECT_EQ(result->sites[0].port, 59'999);
  EXPECT_EQ(result->sites[1].port, 59'999);
  EXPECT_EQ(result->sites[1].hosts, std::vector<std::string>{"59999.example.com"});
  EXPECT_EQ(result->sites[59'000].port, 1'000);
  nlohmann::json document = to_json(*result);
  EXPECT_EQ(document["apps"]["http"]["servers"]["srv0"]["routes"].size(), 2u);
  EXPECT_EQ(document["apps"]["http"]["servers"].size(), 59'000u);
}

}  // namespace
}  // namespace heft::config

namespace heft::config {
namespace {

TEST(HeftfileProtocols, PlainListenersSpeakHttp11AloneByDefault) {
  const Config config = parse_ok(":8080 {\n\treverse_proxy 127.0.0.1:9000\n}\n");
  EXPECT_TRUE(config.sites[0].protocols.h1);
  EXPECT_FALSE(config.sites[0].protocols.h2c);
}

TEST(HeftfileProtocols, H1AndH2cReachEverySiteOfThePortAndRoundTrip) {
  const Config config = parse_ok(
      "a.test:8080 {\n\tprotocols h1 h2c\n\treverse_proxy 127.0.0.1:9000\n}\n"
      "b.test:8080 {\n\treverse_proxy 127.0.0.1:9001\n}\n");
  ASSERT_EQ(config.sites.size(), 2u);
  for (const SiteConfig& site : config.sites) {
    EXPECT_TRUE(site.protocols.h1);
    EXPECT_TRUE(site.protocols.h2c);
    EXPECT_FALSE(site.protocols.h2);
  }
  const nlohmann::json document = to_json(config);
  EXPECT_EQ(document["apps"]["http"]["servers"]["srv0"]["protocols"], nlohmann::json::array({"h1", "h2c"}));
  Result<Config> back = from_json(document);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, config);
}

// `protocols` is the site's (its server's), not a route's, in a site with routes too.
TEST(HeftfileProtocols, ASiteWithRoutesKeepsItsProtocols) {
  const Config config = parse_ok(
      ":8080 {\n\tprotocols h1 h2c\n\trespond /healthz \"ok\" 200\n\treverse_proxy 127.0.0.1:9000\n}\n");
  ASSERT_EQ(config.sites.size(), 1u);
  EXPECT_TRUE(config.sites[0].protocols.h2c);
  EXPECT_FALSE(config.sites[0].handle.empty());
}

TEST(HeftfileProtocols, UnknownProtocolsAreErrorsAtTheirPlace) {
  EXPECT_EQ(only_error(":8080 {\n\tprotocols h1 h2cc\n\treverse_proxy 127.0.0.1:9000\n}\n"),
            "Heftfile:2:15: unknown protocol \"h2cc\" (did you mean \"h2c\"?) (use h1, h2 or h2c)");
  EXPECT_EQ(only_error(":8080 {\n\tprotocols h3\n\treverse_proxy 127.0.0.1:9000\n}\n"),
            "Heftfile:2:12: h3 (HTTP/3 over QUIC) is not supported: use h1, h2 or h2c");
  EXPECT_EQ(only_error(":8080 {\n\tprotocols\n\treverse_proxy 127.0.0.1:9000\n}\n"),
            "Heftfile:2:2: missing value for \"protocols\" (e.g. \"protocols h1 h2c\")");
}

TEST(HeftfileProtocols, SitesOfOnePortAgree) {
  EXPECT_EQ(only_error("a.test:8080 {\n\tprotocols h1 h2c\n\treverse_proxy 127.0.0.1:9000\n}\n"
                       "b.test:8080 {\n\tprotocols h1\n\treverse_proxy 127.0.0.1:9001\n}\n"),
            "Heftfile:6:2: the sites of port 8080 speak the same protocols: the site at 2:2 names others");
}

TEST(JsonProtocols, ErrorsNameTheJsonPointer) {
  nlohmann::json document = nlohmann::json::parse(R"({"apps": {"http": {"servers": {"srv0": {
      "listen": [":8080"], "protocols": ["h1", "http2"],
      "routes": [{"handle": [{"handler": "reverse_proxy", "upstreams": [{"dial": "127.0.0.1:9000"}]}]}]}}}}})");
  Result<Config> result = from_json(document);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.errors[0].to_string(),
            "/apps/http/servers/srv0/protocols/1: unknown protocol \"http2\" (use h1, h2 or h2c)");
}

}  // namespace
}  // namespace heft::config
