// One door for configuration: each broken value is written twice, once in a
// Heftfile and once in the JSON form, and `heft validate` (the real binary,
// on real files) refuses both, each at its place: the Heftfile at the token
// that holds the value (FILE:LINE:COL), the JSON at the value's RFC 6901
// pointer. Between them the cases cover every option of both forms.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

using nlohmann::json;

// The reverse_proxy handler of the first site, in the JSON form.
const std::string kProxy = "/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0";
const std::string kRoute = "/apps/http/servers/srv0/routes/0";

// A broken configuration in both forms.
struct Pair {
  std::string what;
  // The Heftfile, and the text whose first appearance in it is the expected
  // place (FILE:LINE:COL of that token).
  std::string heftfile;
  std::string at;
  // The JSON form: the valid base document with these values set (a null
  // value removes the member), and the pointer the error must name.
  std::vector<std::pair<std::string, json>> json_edits;
  std::string pointer;
  // What each message says (the JSON one defaults to the Heftfile one).
  std::string heft_says;
  std::string json_says = {};
};

// The base Heftfile with a line in the global options, the site and the
// reverse_proxy block ("" leaves one out).
std::string heftfile(const std::string& global, const std::string& site, const std::string& proxy,
                     const std::string& address = ":8080", const std::string& backends = "127.0.0.1:9001") {
  std::string text;
  if (!global.empty()) text += "{\n\t" + global + "\n}\n";
  text += address + " {\n";
  if (!site.empty()) text += "\t" + site + "\n";
  text += "\treverse_proxy " + backends + " {\n";
  if (!proxy.empty()) text += "\t\t" + proxy + "\n";
  text += "\t}\n}\n";
  return text;
}

std::string global(const std::string& line) { return heftfile(line, "", ""); }
std::string site(const std::string& line) { return heftfile("", line, ""); }
std::string proxy(const std::string& line) { return heftfile("", "", line); }

// The JSON form of the base Heftfile (`heft adapt` of it, by hand).
json base_document() {
  return json::parse(R"({"apps": {"http": {"servers": {"srv0": {"listen": [":8080"], "routes": [{
    "handle": [{"handler": "subroute", "routes": [{"handle": [{
      "handler": "reverse_proxy", "upstreams": [{"dial": "127.0.0.1:9001"}]}]}]}],
    "terminal": true}]}}}}})");
}

std::vector<Pair> pairs() {
  const std::string p = kProxy;
  const auto one = [](std::string pointer, json value) { return std::vector<std::pair<std::string, json>>{{pointer, value}}; };
  const json two_upstreams = json::array({{{"dial", "127.0.0.1:9001"}}, {{"dial", "127.0.0.1:9002"}}});
  const auto second_upstream = [&](const std::string& member, json value) {
    json upstreams = two_upstreams;
    upstreams[1][member] = value;
    return std::vector<std::pair<std::string, json>>{{p + "/upstreams", upstreams}};
  };
  const auto adaptive = [&](const std::string& member, json value) {
    return std::vector<std::pair<std::string, json>>{{p + "/adaptive", {{"enabled", true}, {member, value}}}};
  };
  return {
      // ---- global options ----
      {"admin", global("admin example.test:2019"), "example.test:2019", one("/admin/listen", "example.test:2019"),
       "/admin/listen", "the host must be an IP address or localhost"},
      {"admin without admin_token", global("admin 0.0.0.0:2019"), "0.0.0.0:2019", one("/admin/listen", "0.0.0.0:2019"),
       "/admin/token", "is not loopback: it needs an admin_token", "required when the admin API listens"},
      {"admin_token", global("admin_token \" t\""), "\" t\"", one("/admin/token", " t"), "/admin/token",
       "must not start or end with a space"},
      {"workers", global("workers 2000"), "2000", one("/apps/http/workers", 2000), "/apps/http/workers",
       "must be an integer 0..1024"},
      {"grace_period", global("grace_period soon"), "soon", one("/apps/http/grace_period", "soon"),
       "/apps/http/grace_period", "invalid duration \"soon\"", "must be a duration"},
      {"idle_timeout", global("idle_timeout 0"), "idle_timeout |0", one("/apps/http/idle_timeout", "0s"), "/apps/http/idle_timeout",
       "duration must be greater than 0", "greater than 0"},
      {"header_timeout", global("header_timeout 1.5ms"), "1.5ms", one("/apps/http/header_timeout", "1.5ms"),
       "/apps/http/header_timeout", "invalid duration \"1.5ms\"", "whole milliseconds"},
      {"max_connections", global("max_connections 0"), "max_connections |0", one("/apps/http/max_connections", 0),
       "/apps/http/max_connections", "must be an integer 1..10000000"},
      {"log_format", global("log_format yaml"), "yaml", one("/logging/format", "yaml"), "/logging/format",
       "log_format must be text or json, got \"yaml\"", "must be \"text\" or \"json\""},
      {"default_bind", global("default_bind localhost"), "localhost",
       one("/apps/http/servers/srv0/listen", json::array({"localhost:8080"})), "/apps/http/servers/srv0/listen/0",
       "default_bind needs IP addresses", "must be an IP address"},
      {"demo_backends", global("demo_backends a=127.0.0.1:9081 b=localhost:9082"), "b=localhost:9082",
       one("/apps/demo/backends", json::array({{{"name", "a"}, {"listen", "127.0.0.1:9081"}},
                                               {{"name", "b"}, {"listen", "localhost:9082"}}})),
       "/apps/demo/backends/1", "demo backend b must listen on an IP address"},
      {"admin on a site's address", heftfile("admin 127.0.0.1:8080", "bind 127.0.0.1", ""), "127.0.0.1:8080",
       {{"/admin/listen", "127.0.0.1:8080"}, {"/apps/http/servers/srv0/listen", json::array({"127.0.0.1:8080"})}},
       "/admin/listen", "is taken by the sites on port 8080"},
      // ---- sites ----
      {"site address", heftfile("", "", "", "a..b:8080"), "a..b:8080",
       one(kRoute + "/match", json::array({{{"host", json::array({"a..b"})}}})), kRoute + "/match/0/host/0",
       "no empty label"},
      {"bind", site("bind 127.0.0.1 127.0.0.1"), "127.0.0.1 |127.0.0.1",
       one("/apps/http/servers/srv0/listen", json::array({"127.0.0.1:8080", "127.0.0.1:8080"})),
       "/apps/http/servers/srv0/listen/1", "duplicate address"},
      {"bind (IPv4-mapped)", site("bind ::ffff:10.0.0.1"), "::ffff:10.0.0.1",
       one("/apps/http/servers/srv0/listen", json::array({"[::ffff:10.0.0.1]:8080"})),
       "/apps/http/servers/srv0/listen/0", "is an IPv4-mapped IPv6 address"},
      {"log", site("log { output file \"\" }"), "\"\"", one(kRoute + "/log", {{"output", ""}}), kRoute + "/log/output",
       "invalid log file path", "must be \"stderr\" or a file path"},
      {"default (twice on a port)",
       ":8080 {\n\tdefault\n\treverse_proxy 127.0.0.1:9001\n}\na.test:8080 {\n\tdefault\n\treverse_proxy 127.0.0.1:9001\n}\n",
       "a.test:8080 {\n\t|default", {}, "", "", ""},  // (JSON form below, by hand)
      {"the same host twice on a port",
       "a.test:8080 {\n\treverse_proxy 127.0.0.1:9001\n}\nA.test:8080 {\n\treverse_proxy 127.0.0.1:9001\n}\n", "A.test",
       {}, "", "", ""},
      // ---- reverse_proxy ----
      {"reverse_proxy without upstreams", ":8080 {\n\treverse_proxy {\n\t\tlb_policy first\n\t}\n}\n", "reverse_proxy",
       one(p + "/upstreams", json::array()), p + "/upstreams", "reverse_proxy has no upstreams",
       "must hold at least one upstream"},
      {"to (address)", proxy("to 127.0.0.1:99999"), "127.0.0.1:99999",
       one(p + "/upstreams", json::array({{{"dial", "127.0.0.1:9001"}}, {{"dial", "127.0.0.1:99999"}}})),
       p + "/upstreams/1/dial", "invalid port \"99999\""},
      {"to (duplicate backend)", proxy("to 127.0.0.1:9001"), "to |127.0.0.1:9001",
       one(p + "/upstreams", json::array({{{"dial", "127.0.0.1:9001"}}, {{"dial", "127.0.0.1:9001"}}})),
       p + "/upstreams/1/dial", "duplicate backend \"127.0.0.1:9001\""},
      {"to (scheme)", proxy("to https://127.0.0.1:9002"), "https://127.0.0.1:9002",
       second_upstream("dial", "https://127.0.0.1:9002"), p + "/upstreams/1/dial", "TLS to backends is not supported"},
      {"weight", proxy("to 127.0.0.1:9002 weight 1000001"), "1000001", second_upstream("weight", 1000001),
       p + "/upstreams/1/weight", "must be an integer 0..1000000"},
      {"weight (inline)", heftfile("", "", "", ":8080", "127.0.0.1:9001?weight=-1"), "-1",
       one(p + "/upstreams/0/weight", -1), p + "/upstreams/0/weight", "must be an integer 0..1000000"},
      {"max_fails (backend)", proxy("to 127.0.0.1:9002 max_fails many"), "many", second_upstream("max_fails", "many"),
       p + "/upstreams/1/max_fails", "must be an integer 0..1000000"},
      {"fail_timeout (backend)", proxy("to 127.0.0.1:9002 fail_timeout 10"), "fail_timeout |10", second_upstream("fail_timeout", "10"),
       p + "/upstreams/1/fail_timeout", "invalid duration \"10\"", "must be a duration"},
      {"slow_start (backend)", proxy("to 127.0.0.1:9002 slow_start 1us"), "1us", second_upstream("slow_start", "1us"),
       p + "/upstreams/1/slow_start", "invalid duration \"1us\"", "whole milliseconds"},
      {"max_conns", proxy("to 127.0.0.1:9002 max_conns 2000000"), "2000000", second_upstream("max_conns", 2000000),
       p + "/upstreams/1/max_conns", "must be an integer 0..1000000"},
      {"backup", heftfile("", "", "", ":8080", "127.0.0.1:9001?backup=maybe"), "maybe",
       one(p + "/upstreams/0/backup", "maybe"), p + "/upstreams/0/backup", "must be true or false"},
      {"down", heftfile("", "", "", ":8080", "127.0.0.1:9001?down=2"), "down=|2", one(p + "/upstreams/0/down", 2),
       p + "/upstreams/0/down", "must be true or false"},
      {"lb_policy", proxy("lb_policy fastest"), "fastest",
       one(p + "/load_balancing", {{"selection_policy", {{"policy", "fastest"}}}}),
       p + "/load_balancing/selection_policy/policy", "unknown lb_policy \"fastest\"", "unknown policy \"fastest\""},
      {"lb_policy hash without a key", proxy("lb_policy hash"), "hash",
       one(p + "/load_balancing", {{"selection_policy", {{"policy", "hash"}}}}),
       p + "/load_balancing/selection_policy/key", "lb_policy hash needs a key", "required for policy \"hash\""},
      {"lb_policy hash key", proxy("lb_policy hash body"), "body",
       one(p + "/load_balancing", {{"selection_policy", {{"policy", "hash"}, {"key", "body"}}}}),
       p + "/load_balancing/selection_policy/key", "unknown hash key \"body\"", "must be \"client_ip\""},
      {"lb_policy hash header name", proxy("lb_policy hash header \"X A\""), "\"X A\"",
       one(p + "/load_balancing", {{"selection_policy", {{"policy", "hash"}, {"key", "header"}, {"name", "X A"}}}}),
       p + "/load_balancing/selection_policy/name", "invalid header name \"X A\"", "must be a header or cookie name"},
      {"hash_strategy", proxy("hash_strategy rings"), "rings", one(p + "/load_balancing/hash_strategy", "rings"),
       p + "/load_balancing/hash_strategy", "unknown hash_strategy \"rings\"", "must be \"ring\" or \"maglev\""},
      {"keepalive", proxy("keepalive 100001"), "100001", one(p + "/transport", {{"keepalive", 100001}}),
       p + "/transport/keepalive", "must be an integer 0..100000"},
      {"keepalive_timeout", proxy("keepalive_timeout -1s"), "-1s", one(p + "/transport", {{"keepalive_timeout", "-1s"}}),
       p + "/transport/keepalive_timeout", "invalid duration \"-1s\"", "must be a duration"},
      {"next_upstream", proxy("next_upstream error http_501"), "http_501",
       one(p + "/load_balancing", {{"next_upstream", {"error", "http_501"}}}), p + "/load_balancing/next_upstream/1",
       "unknown next_upstream condition \"http_501\"", "unknown condition"},
      {"next_upstream off", proxy("next_upstream off error"), "off",
       one(p + "/load_balancing", {{"next_upstream", {"off", "error"}}}), p + "/load_balancing/next_upstream/0",
       "cannot be combined with other conditions"},
      {"next_upstream_tries", proxy("next_upstream_tries 1001"), "1001", one(p + "/load_balancing", {{"retries", 1001}}),
       p + "/load_balancing/retries", "must be an integer 0..1000"},
      {"next_upstream_timeout", proxy("next_upstream_timeout 366d"), "366d",
       one(p + "/load_balancing", {{"try_duration", "366d"}}), p + "/load_balancing/try_duration",
       "invalid duration \"366d\"", "at most 365d"},
      {"connect_timeout", proxy("connect_timeout 0"), "connect_timeout |0", one(p + "/transport", {{"dial_timeout", "0"}}),
       p + "/transport/dial_timeout", "duration must be greater than 0", "greater than 0"},
      {"read_timeout", proxy("read_timeout 5x"), "5x", one(p + "/transport", {{"read_timeout", "5x"}}),
       p + "/transport/read_timeout", "invalid duration \"5x\"", "must be a duration"},
      {"send_timeout", proxy("send_timeout 0s"), "0s", one(p + "/transport", {{"write_timeout", "0s"}}),
       p + "/transport/write_timeout", "duration must be greater than 0", "greater than 0"},
      {"retry_body_limit", proxy("retry_body_limit 2TiB"), "2TiB",
       one(p + "/load_balancing", {{"retry_body_limit", uint64_t(2) << 40}}), p + "/load_balancing/retry_body_limit",
       "retry_body_limit must be at most 1TiB", "must be an integer 0..1099511627776"},
      {"header_up", proxy("header_up Content-Length 0"), "Content-Length",
       one(p + "/headers", {{"request", {{{"op", "set"}, {"name", "Content-Length"}, {"value", "0"}}}}}),
       p + "/headers/request/0/name", "\"Content-Length\" cannot be changed"},
      {"header_up (+Host)", proxy("header_up +Host b.test"), "+Host",
       one(p + "/headers", {{"request", {{{"op", "add"}, {"name", "Host"}, {"value", "b.test"}}}}}),
       p + "/headers/request/0/name", "would send a second Host"},
      {"header_down", proxy("header_down \"X A\" v"), "\"X A\"",
       one(p + "/headers", {{"response", {{{"op", "set"}, {"name", "X A"}, {"value", "v"}}}}}),
       p + "/headers/response/0/name", "invalid header name \"X A\""},
      {"header_down (value)", proxy("header_down X-A {upstream_hostport}"), "{upstream_hostport}",
       one(p + "/headers", {{"response", {{{"op", "set"}, {"name", "X-A"}, {"value", "{upstream_hostport}"}}}}}),
       p + "/headers/response/0/value", "looks like a Caddy placeholder"},
      {"slow_start", proxy("slow_start forever"), "forever", one(p + "/slow_start", "forever"), p + "/slow_start",
       "invalid duration \"forever\"", "must be a duration"},
      {"max_fails", proxy("max_fails x"), "max_fails |x", one(p + "/health_checks", {{"passive", {{"max_fails", "x"}}}}),
       p + "/health_checks/passive/max_fails", "must be an integer 0..1000000"},
      {"fail_timeout", proxy("fail_timeout 1.5ms"), "1.5ms",
       one(p + "/health_checks", {{"passive", {{"fail_timeout", "1.5ms"}}}}), p + "/health_checks/passive/fail_timeout",
       "invalid duration \"1.5ms\"", "whole milliseconds"},
      {"health_uri", proxy("health_uri healthz"), "healthz", one(p + "/health_checks", {{"active", {{"uri", "healthz"}}}}),
       p + "/health_checks/active/uri", "must start with '/'"},
      {"health_port", proxy("health_port 70000"), "70000", one(p + "/health_checks", {{"active", {{"port", 70000}}}}),
       p + "/health_checks/active/port", "must be an integer 0..65535"},
      {"health_interval", proxy("health_interval 0"), "health_interval |0", one(p + "/health_checks", {{"active", {{"interval", "0"}}}}),
       p + "/health_checks/active/interval", "duration must be greater than 0", "greater than 0"},
      {"health_timeout", proxy("health_timeout never"), "never",
       one(p + "/health_checks", {{"active", {{"timeout", "never"}}}}), p + "/health_checks/active/timeout",
       "invalid duration \"never\"", "must be a duration"},
      {"health_status", proxy("health_status 2x"), "2x", one(p + "/health_checks", {{"active", {{"expect_status", "2x"}}}}),
       p + "/health_checks/active/expect_status", "invalid health_status \"2x\"", "must be a status like"},
      {"health_body", proxy("health_body \"(up\""), "\"(up\"",
       one(p + "/health_checks", {{"active", {{"expect_body", "(up"}}}}), p + "/health_checks/active/expect_body",
       "invalid health_body regular expression", "invalid regular expression"},
      {"health_headers", proxy("health_headers { Content-Length 5 }"), "Content-Length",
       one(p + "/health_checks", {{"active", {{"headers", {{{"name", "Content-Length"}, {"value", "5"}}}}}}}),
       p + "/health_checks/active/headers/0/name", "\"Content-Length\" cannot be changed"},
      {"health_passes", proxy("health_passes 0"), "health_passes |0", one(p + "/health_checks", {{"active", {{"passes", 0}}}}),
       p + "/health_checks/active/passes", "must be an integer 1..1000"},
      {"health_fails", proxy("health_fails 1001"), "1001", one(p + "/health_checks", {{"active", {{"fails", 1001}}}}),
       p + "/health_checks/active/fails", "must be an integer 1..1000"},
      {"ignore_client_abort", proxy("ignore_client_abort yes"), "yes", one(p + "/ignore_client_abort", "yes"),
       p + "/ignore_client_abort", "must be on or off", "must be true or false"},
      {"queue", proxy("queue -1"), "queue |-1", one(p + "/load_balancing", {{"queue", -1}}), p + "/load_balancing/queue",
       "must be an integer 0..1000000"},
      {"queue_timeout", proxy("queue_timeout 0"), "queue_timeout |0", one(p + "/load_balancing", {{"queue_timeout", "0s"}}),
       p + "/load_balancing/queue_timeout", "duration must be greater than 0", "greater than 0"},
      {"adaptive interval", proxy("adaptive { interval 0 }"), "interval |0", adaptive("interval", "0"), p + "/adaptive/interval",
       "duration must be greater than 0", "greater than 0"},
      {"adaptive latency_threshold", proxy("adaptive { latency_threshold fast }"), "fast",
       adaptive("latency_threshold", "fast"), p + "/adaptive/latency_threshold", "invalid duration \"fast\"",
       "must be a duration"},
      {"adaptive median_factor", proxy("adaptive { median_factor 0.5 }"), "median_factor |0.5", adaptive("median_factor", 0.5),
       p + "/adaptive/median_factor", "must be a number 1..100"},
      {"adaptive error_threshold", proxy("adaptive { error_threshold 150% }"), "150%", adaptive("error_threshold", 1.5),
       p + "/adaptive/error_threshold", "must be a fraction 0%..100%", "must be a number 0..1"},
      {"adaptive cut", proxy("adaptive { cut 0% }"), "cut |0%", adaptive("cut", 0), p + "/adaptive/cut",
       "cut must be greater than 0%", "must be greater than 0"},
      {"adaptive min_weight_ratio", proxy("adaptive { min_weight_ratio 2 }"), "min_weight_ratio |2", adaptive("min_weight_ratio", 2),
       p + "/adaptive/min_weight_ratio", "must be a fraction 0%..100%", "must be a number 0..1"},
  };
}

// The JSON forms that are not one edit of the base document.
json two_routes(const json& first, const json& second) {
  const json handle = base_document()["apps"]["http"]["servers"]["srv0"]["routes"][0]["handle"];
  json document = base_document();
  json a = first, b = second;
  a["handle"] = b["handle"] = handle;
  a["terminal"] = b["terminal"] = true;
  document["apps"]["http"]["servers"]["srv0"]["routes"] = json::array({a, b});
  return document;
}

class ConfigPairs : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/heft-it-pairs-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    if (!std::getenv("HEFT_KEEP_TEST_DIRS")) std::filesystem::remove_all(dir_);
  }

  // `heft validate FILE` on `text`: its exit code and stderr. Bounded by
  // coreutils' timeout: validating reads one small file and resolves nothing.
  std::pair<int, std::string> validate(const std::string& name, const std::string& text) {
    const std::filesystem::path file = dir_ / name, err = dir_ / "err";
    std::ofstream(file) << text;
    const std::string command =
        "timeout 60 '" HEFT_BINARY "' validate '" + file.string() + "' >/dev/null 2>'" + err.string() + "'";
    const int status = std::system(command.c_str());
    std::ifstream in(err);
    std::ostringstream s;
    s << in.rdbuf();
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, s.str()};
  }

  // Where `token` first stands in `text`: "FILE:LINE:COL: ". A `|` in it
  // marks the place within (what comes before it only finds the spot).
  static std::string place(const std::string& file, const std::string& text, std::string token) {
    const size_t marker = token.find('|');
    if (marker != std::string::npos) token.erase(marker, 1);
    size_t at = text.find(token);
    if (at == std::string::npos) return "(not in the file: " + token + ")";
    if (marker != std::string::npos) at += marker;
    const size_t line_start = text.rfind('\n', at);
    const int line = 1 + int(std::count(text.begin(), text.begin() + long(at), '\n'));
    const int column = int(at - (line_start == std::string::npos ? 0 : line_start + 1)) + 1;
    return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": ";
  }

  void expect_refused(const std::string& what, const std::string& heft_text, const std::string& at,
                      const std::string& heft_says, const json& document, const std::string& pointer,
                      const std::string& json_says) {
    const auto [heft_code, heft_err] = validate("Heftfile", heft_text);
    EXPECT_EQ(heft_code, 1) << what << " (Heftfile)\n" << heft_text << heft_err;
    const std::string heft_place = place((dir_ / "Heftfile").string(), heft_text, at);
    EXPECT_NE(heft_err.find(heft_place), std::string::npos)
        << what << ": the Heftfile's error is not at " << heft_place << "\n" << heft_err;
    EXPECT_NE(heft_err.find(heft_says), std::string::npos) << what << ": no \"" << heft_says << "\" in\n" << heft_err;

    const auto [json_code, json_err] = validate("site.json", document.dump(2));
    EXPECT_EQ(json_code, 1) << what << " (JSON)\n" << document.dump(2) << "\n" << json_err;
    const std::string json_place = (dir_ / "site.json").string() + ": " + pointer + ": ";
    EXPECT_NE(json_err.find(json_place), std::string::npos)
        << what << ": the JSON error is not at " << pointer << "\n" << json_err;
    EXPECT_NE(json_err.find(json_says), std::string::npos) << what << ": no \"" << json_says << "\" in\n" << json_err;
  }

  std::filesystem::path dir_;
};

TEST_F(ConfigPairs, EachBrokenValueIsRefusedInBothFormsAtItsPlace) {
  size_t pairs_checked = 0;
  for (const Pair& pair : pairs()) {
    if (pair.json_edits.empty()) continue;  // written by hand below
    json document = base_document();
    for (const auto& [pointer, value] : pair.json_edits) {
      if (value.is_null()) document.at(json::json_pointer(pointer).parent_pointer()).erase(
          json::json_pointer(pointer).back());
      else document[json::json_pointer(pointer)] = value;
    }
    expect_refused(pair.what, pair.heftfile, pair.at, pair.heft_says, document, pair.pointer,
                   pair.json_says.empty() ? pair.heft_says : pair.json_says);
    ++pairs_checked;
  }
  EXPECT_GE(pairs_checked, 60u);
}

// Sites of one port are routes of one server: what two of them may not both
// do is refused across them, at the second one.
TEST_F(ConfigPairs, SitesOfAPortAreCheckedTogetherInBothForms) {
  for (const Pair& pair : pairs())
    if (pair.what == "default (twice on a port)")
      expect_refused(pair.what, pair.heftfile, pair.at, "second default site for port 8080",
                     two_routes({{"default", true}}, {{"match", {{{"host", {"a.test"}}}}}, {"default", true}}),
                     "/apps/http/servers/srv0/routes/1/default", "a second default route");
    else if (pair.what == "the same host twice on a port")
      expect_refused(pair.what, pair.heftfile, pair.at, "duplicate site \"a.test:8080\"",
                     two_routes({{"match", {{{"host", {"a.test"}}}}}}, {{"match", {{{"host", {"A.test"}}}}}}),
                     "/apps/http/servers/srv0/routes/1/match/0/host/0", "is also matched at");
  // Sites of a port that would listen on different addresses: one server in
  // JSON cannot say it, two servers on one port can.
  json two_servers = base_document();
  two_servers["apps"]["http"]["servers"]["srv1"] = two_servers["apps"]["http"]["servers"]["srv0"];
  two_servers["apps"]["http"]["servers"]["srv1"]["listen"] = json::array({"127.0.0.1:8080"});
  expect_refused("sites of a port on other addresses",
                 ":8080 {\n\treverse_proxy 127.0.0.1:9001\n}\nb.test:8080 {\n\tbind 127.0.0.1\n"
                 "\treverse_proxy 127.0.0.1:9001\n}\n",
                 "bind", "the sites of a port listen on the same addresses", two_servers,
                 "/apps/http/servers/srv1/listen/0", "port 8080 is also used by /apps/http/servers/srv0");
}

// Every mistake of a file is reported, in both forms, each at its place.
TEST_F(ConfigPairs, EveryMistakeIsReportedInBothForms) {
  const std::string text = proxy("to 127.0.0.1:9002 weight 1000001 max_conns -1");
  json document = base_document();
  document[json::json_pointer(kProxy + "/upstreams")] =
      json::array({{{"dial", "127.0.0.1:9001"}}, {{"dial", "127.0.0.1:9002"}, {"weight", 1000001}, {"max_conns", -1}}});
  const auto [heft_code, heft_err] = validate("Heftfile", text);
  EXPECT_EQ(heft_code, 1);
  EXPECT_NE(heft_err.find(place((dir_ / "Heftfile").string(), text, "1000001")), std::string::npos) << heft_err;
  EXPECT_NE(heft_err.find(place((dir_ / "Heftfile").string(), text, "-1")), std::string::npos) << heft_err;
  EXPECT_NE(heft_err.find("2 errors"), std::string::npos) << heft_err;
  const auto [json_code, json_err] = validate("site.json", document.dump());
  EXPECT_EQ(json_code, 1);
  EXPECT_NE(json_err.find(kProxy + "/upstreams/1/weight: "), std::string::npos) << json_err;
  EXPECT_NE(json_err.find(kProxy + "/upstreams/1/max_conns: "), std::string::npos) << json_err;
  EXPECT_NE(json_err.find("2 errors"), std::string::npos) << json_err;
}

// The base of every pair is valid in both forms: each refusal above is the broken value's.
TEST_F(ConfigPairs, TheBaseIsValidInBothForms) {
  const auto [heft_code, heft_err] = validate("Heftfile", heftfile("", "", ""));
  EXPECT_EQ(heft_code, 0) << heft_err;
  const auto [json_code, json_err] = validate("site.json", base_document().dump());
  EXPECT_EQ(json_code, 0) << json_err;
}

}  // namespace
