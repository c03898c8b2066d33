// Live changes through the admin API while requests are in flight: what each
// request was promised (its backend, its connection) holds across the change.
// Real heft processes, real demo backends, real sockets on 127.0.0.1.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "process_util.h"

namespace heft::test {
namespace {

using json = nlohmann::json;
constexpr const char* kUpstreams = "/config/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/upstreams";

struct LiveChanges : ::testing::Test {
  std::string dir = make_temp_dir();
  uint16_t port = free_port();
  uint16_t admin_port = free_port();

  // heft on `body` (its sites) with the admin API; `run_args` are added to `heft run`.
  Process start(const std::string& body, const std::string& global = "workers 1",
                const std::vector<std::string>& run_args = {}) {
    write_file(dir + "/Heftfile", fmt::format("{{\n\tadmin 127.0.0.1:{}\n\t{}\n}}\n{}", admin_port, global, body));
    std::vector<std::string> args{HEFT_BINARY, "run", "--config", dir + "/Heftfile"};
    args.insert(args.end(), run_args.begin(), run_args.end());
    if (std::find(args.begin(), args.end(), "--state") == args.end()) {
      args.push_back("--state");  // saved at start: in the test's directory, not $HOME
      args.push_back(dir + "/autosave.json");
    }
    Process p(args, dir + "/heft.log");
    if (!wait_for_port(port) || !wait_for_port(admin_port)) ADD_FAILURE() << "heft did not start:\n" << p.log();
    return p;
  }
  // Whether heft can be given a private /etc/hosts (start_with_hosts()).
  bool can_mount_hosts() const {
    write_file(dir + "/hosts.try", "127.0.0.1 heft-mount-check\n");
    return std::system(fmt::format("/usr/bin/unshare -m --map-root-user /bin/sh -c 'mount --bind {}/hosts.try "
                                   "/etc/hosts && getent hosts heft-mount-check' >/dev/null 2>&1",
                                   dir)
                           .c_str()) == 0;
  }
  // `heft run` on dir/Heftfile in a mount namespace of its own where
  // `hosts` is /etc/hosts: the test moves names by rewriting it in place.
  Process start_with_hosts(const std::string& hosts) {
    Process p({"/usr/bin/unshare", "-m", "--map-root-user", "/bin/sh", "-c",
               fmt::format("mount --bind {} /etc/hosts && exec {} run --config {}/Heftfile --state {}/autosave.json",
                           hosts, HEFT_BINARY, dir, dir)},
              dir + "/heft.log");
    if (!wait_for_port(port) || !wait_for_port(admin_port)) ADD_FAILURE() << "heft did not start:\n" << p.log();
    return p;
  }
  // The /reverse_proxy/upstreams entry whose address is `address`, or null.
  json upstream_entry_named(const std::string& address) {
    json all = json::parse(admin("GET", "/reverse_proxy/upstreams").body, nullptr, false);
    if (all.is_array())
      for (const json& u : all)
        if (u.value("address", "") == address) return u;
    return nullptr;
  }
  // The /reverse_proxy/upstreams entry of `backend`, or null.
  json upstream_entry(const Backend& backend) {
    json all = json::parse(admin("GET", "/reverse_proxy/upstreams").body, nullptr, false);
    if (all.is_array())
      for (const json& u : all)
        if (u.value("address", "") == fmt::format("127.0.0.1:{}", backend.port)) return u;
    return nullptr;
  }
  Response admin(const std::string& method, const std::string& path, const std::string& body = "") {
    return admin_call(admin_port, method, path, body);
  }
};

// Sockets on this host whose peer is 127.0.0.1:`port` (heft's side of its
// connections to a backend there), counted by TCP state: "01" established,
// "08" close-wait (/proc/net/tcp's hexadecimal codes).
std::map<std::string, int> sockets_to(uint16_t port) {
  std::map<std::string, int> states;
  std::istringstream lines(read_file("/proc/net/tcp"));
  std::string line;
  std::getline(lines, line);  // the header
  const std::string peer = fmt::format("0100007F:{:04X}", port);
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    if (remote == peer) states[state]++;
  }
  return states;
}

// Waits up to `timeout` for sockets_to(port) to have no socket in `state`.
bool none_in_state(uint16_t port, const std::string& state, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (sockets_to(port)[state] == 0) return true;
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(50ms);
  }
}

json upstream(const Backend& b, int weight) {
  return {{"dial", fmt::format("127.0.0.1:{}", b.port)}, {"weight", weight}};
}

// The pool is reordered again and again while requests wait for their bodies
// (slow uploads) and others arrive: each request picks from the pool as it saw
// it and must reach that backend, never the drained one (z, weight 0) that a
// newer order put at the index it picked. The race is between a pool's update
// and the new route table's publication, so it is sampled: many changes under
// load, bounded in time.
TEST_F(LiveChanges, RequestsAcrossReordersReachTheBackendTheyPicked) {
  Backend a = start_backend(dir, "a");
  Backend z = start_backend(dir, "z");
  Process heft = start(fmt::format(":{} {{\n\treverse_proxy {{\n\t\tto 127.0.0.1:{} weight 1\n"
                                   "\t\tto 127.0.0.1:{} weight 0\n\t}}\n}}\n",
                                   port, a.port, z.port),
                       "workers 2");
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0}, to_z{0}, failed{0};
  std::mutex failures_mu;
  std::vector<std::string> failures;  // what each failed request got, for the message
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&, c] {
      HttpClient client(port, 5s);
      while (!stop) {
        const bool slow = c % 2 == 0;  // half upload slowly, half just GET
        Response r;
        if (slow) {
          if (!client.send_raw("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n")) {
            ++failed;
            std::lock_guard lock(failures_mu);
            failures.push_back("POST head not sent");
            client.close();
            continue;
          }
          std::this_thread::sleep_for(5ms);
          r = client.send_raw("hello") ? client.read_response() : Response{};
        } else {
          r = client.get("/");
        }
        if (r.status != 200) {
          ++failed;
          std::lock_guard lock(failures_mu);
          failures.push_back(fmt::format("{} {}", slow ? "POST" : "GET", r.status));
          client.close();
          continue;
        }
        ++answered;
        if (r.header("x-backend") != "a") ++to_z;
      }
    });
  }
  const auto end = std::chrono::steady_clock::now() + 3s;
  int changes = 0;
  for (; std::chrono::steady_clock::now() < end && changes < 400; ++changes) {
    json order = changes % 2 == 0 ? json::array({upstream(z, 0), upstream(a, 1)})
                                  : json::array({upstream(a, 1), upstream(z, 0)});
    ASSERT_EQ(admin("PUT", kUpstreams, order.dump()).status, 200);
  }
  stop = true;
  for (auto& t : clients) t.join();
  EXPECT_GT(answered.load(), 100);
  EXPECT_EQ(to_z.load(), 0) << "of " << answered.load() << " requests across " << changes << " changes";
  EXPECT_EQ(failed.load(), 0) << ::testing::PrintToString(failures) << "\n" << heft.log();
}

// A change that cannot be saved (the state path is a directory) is refused
// before it reaches the proxy: the backend it would have removed keeps serving
// with its counters, as if the change had never been asked for.
TEST_F(LiveChanges, AChangeThatCannotBeSavedLeavesThePoolAsItWas) {
  Backend a = start_backend(dir, "a");
  Backend b = start_backend(dir, "b");
  const std::string state = dir + "/state.json";
  Process heft = start(fmt::format(":{} {{\n\treverse_proxy 127.0.0.1:{} 127.0.0.1:{}\n}}\n", port, a.port, b.port),
                       "workers 1", {"--state", state});
  HttpClient client(port);
  for (int i = 0; i < 10; ++i) ASSERT_EQ(client.get("/").status, 200);
  const json before = upstream_entry(b);
  ASSERT_TRUE(before.is_object()) << admin("GET", "/reverse_proxy/upstreams").body;
  ASSERT_EQ(before["requests_total"], 5);
  ASSERT_TRUE(std::filesystem::is_regular_file(state));  // saved at start
  std::filesystem::remove(state);
  std::filesystem::create_directories(state + "/x");

  Response r = admin("DELETE", std::string(kUpstreams) + "/1");
  EXPECT_EQ(r.status, 500);
  EXPECT_NE(r.body.find("cannot save the configuration: " + state + " is a directory"), std::string::npos) << r.body;
  const json after = upstream_entry(b);
  ASSERT_TRUE(after.is_object());
  EXPECT_EQ(after["requests_total"], 5);  // not a backend removed and added back afresh
  for (int i = 0; i < 10; ++i) ASSERT_EQ(client.get("/").status, 200);
  EXPECT_EQ(upstream_entry(b)["requests_total"], 10);
  EXPECT_FALSE(std::filesystem::exists(state + ".tmp." + std::to_string(heft.pid())));
}

// A reload that stops serving a port: the request in flight there is answered
// (and told the connection closes), an idle keep-alive connection is closed,
// and neither is served again (it got "404 no site" for every later request).
TEST_F(LiveChanges, ConnectionsOnARemovedPortCloseAfterTheirRequest) {
  Backend slow = start_backend(dir, "slow", {"--delay", "300ms"});
  const uint16_t kept_port = free_port();
  auto sites = [&](bool with_port) {
    std::string text = fmt::format(":{} {{\n\treverse_proxy 127.0.0.1:{}\n}}\n", kept_port, slow.port);
    if (with_port) text += fmt::format(":{} {{\n\treverse_proxy 127.0.0.1:{}\n}}\n", port, slow.port);
    return text;
  };
  Process heft = start(sites(true), "workers 2");
  HttpClient in_flight(port);
  int idle = connect_to(port);
  ASSERT_GE(idle, 0);
  const std::string get = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::send(idle, get.data(), get.size(), 0), static_cast<ssize_t>(get.size()));
  char buffer[4096];
  ASSERT_GT(::recv(idle, buffer, sizeof buffer, 0), 0);  // its response (1 KiB body: one read on loopback)
  ASSERT_TRUE(in_flight.send_raw(get));
  std::this_thread::sleep_for(50ms);  // at the backend now

  write_file(dir + "/Heftfile", fmt::format("{{\n\tadmin 127.0.0.1:{}\n\tworkers 2\n}}\n{}", admin_port, sites(false)));
  heft.signal(SIGHUP);
  ASSERT_TRUE(wait_for_log(heft, "Z info reloaded")) << heft.log();
  Response r = in_flight.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.header("connection"), "close");
  EXPECT_EQ(::recv(idle, buffer, sizeof buffer, 0), 0);  // closed by heft (the socket's timeout is 10 s)
  ::close(idle);
  EXPECT_EQ(HttpClient(kept_port).get("/").status, 200);  // the other port serves on
}

// A request whose head was still coming in when a reload stopped serving its
// port is served by the configuration its connection came under (then the
// connection closes), as an old nginx worker would: it was answered 404 "no
// site for this host", the new configuration having no site on the port.
TEST_F(LiveChanges, ARequestArrivingAcrossThePortsRemovalIsServed) {
  Backend a = start_backend(dir, "a");
  Backend b = start_backend(dir, "b");
  const uint16_t kept_port = free_port();
  auto sites = [&](bool with_port) {
    std::string text = fmt::format(":{} {{\n\treverse_proxy 127.0.0.1:{}\n}}\n", kept_port, a.port);
    if (with_port) text += fmt::format(":{} {{\n\treverse_proxy 127.0.0.1:{}\n}}\n", port, b.port);
    return text;
  };
  Process heft = start(sites(true), "workers 1");
  HttpClient client(port);
  ASSERT_TRUE(client.send_raw("GET / HTTP/1.1\r\nHost: x\r\n"));  // the head's end comes after the reload
  std::this_thread::sleep_for(100ms);
  write_file(dir + "/Heftfile", fmt::format("{{\n\tadmin 127.0.0.1:{}\n\tworkers 1\n}}\n{}", admin_port, sites(false)));
  heft.signal(SIGHUP);
  ASSERT_TRUE(wait_for_log(heft, "Z info reloaded")) << heft.log();
  ASSERT_TRUE(client.send_raw("\r\n"));
  Response r = client.read_response();
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("x-backend"), "b");
  EXPECT_EQ(r.header("connection"), "close");
  EXPECT_TRUE(client.read_all().empty());  // and closed
  EXPECT_EQ(HttpClient(kept_port).get("/").header("x-backend"), "a");
}

// Pooled connections to a backend the configuration no longer uses are closed
// at the change (they stayed open for good: descriptors piled up with every
// blue-green switch, and the old backend never saw its connections end).
TEST_F(LiveChanges, PooledConnectionsToARemovedBackendClose) {
  Backend blue = start_backend(dir, "blue");
  Backend green = start_backend(dir, "green");
  Process heft = start(fmt::format(":{} {{\n\treverse_proxy 127.0.0.1:{}\n}}\n", port, blue.port));
  std::vector<std::unique_ptr<HttpClient>> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(std::make_unique<HttpClient>(port));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(clients[i]->send_raw("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  for (auto& c : clients) ASSERT_EQ(c->read_response().header("x-backend"), "blue");
  ASSERT_GE(sockets_to(blue.port)["01"], 1);  // pooled

  ASSERT_EQ(admin("PUT", kUpstreams, json::array({upstream(green, 1)}).dump()).status, 200);
  EXPECT_TRUE(none_in_state(blue.port, "01", 2s)) << sockets_to(blue.port)["01"] << " still open";
  EXPECT_EQ(clients[0]->get("/").header("x-backend"), "green");
}

// The same for connections that were busy when the change came: their
// requests finish, and the connections close then instead of going back to
// the pool of a backend no site uses (they stayed open until the backend
// closed them: a leak that grew with every address a reload retired).
TEST_F(LiveChanges, ConnectionsBusyWhenTheirBackendWasRemovedCloseAfterTheirRequest) {
  Backend slow = start_backend(dir, "slow", {"--delay", "1s"});
  Backend green = start_backend(dir, "green");
  Process heft = start(fmt::format(":{} {{\n\treverse_proxy 127.0.0.1:{}\n}}\n", port, slow.port), "workers 2");
  std::vector<std::unique_ptr<HttpClient>> clients;
  for (int i = 0; i < 6; ++i) clients.push_back(std::make_unique<HttpClient>(port));
  for (auto& c : clients) ASSERT_TRUE(c->send_raw("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::this_thread::sleep_for(300ms);  // all six wait for the slow backend
  ASSERT_EQ(admin("PUT", kUpstreams, json::array({upstream(green, 1)}).dump()).status, 200);
  for (auto& c : clients) EXPECT_EQ(c->read_response().header("x-backend"), "slow");  // none dropped
  EXPECT_TRUE(none_in_state(slow.port, "01", 2s)) << sockets_to(slow.port)["01"] << " still open";
  EXPECT_EQ(clients[0]->get("/").header("x-backend"), "green");
  // Put back, the backend is pooled again as usual.
  ASSERT_EQ(admin("PUT", kUpstreams, json::array({upstream(slow, 1)}).dump()).status, 200);
  EXPECT_EQ(clients[1]->get("/").header("x-backend"), "slow");
  EXPECT_EQ(clients[1]->get("/").header("x-backend"), "slow");
  EXPECT_GE(sockets_to(slow.port)["01"], 1);
}

// A pooled connection the backend closed is closed by heft within about a
// second, not left in CLOSE_WAIT until its next use.
TEST_F(LiveChanges, PooledConnectionsTheBackendClosedDoNotLinger) {
  Backend a = start_backend(dir, "a");
  Process heft = start(fmt::format(":{} {{\n\treverse_proxy 127.0.0.1:{}\n}}\n", port, a.port));
  std::vector<std::unique_ptr<HttpClient>> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(std::make_unique<HttpClient>(port));
  for (auto& c : clients) ASSERT_TRUE(c->send_raw("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  for (auto& c : clients) ASSERT_EQ(c->read_response().status, 200);
  ASSERT_GE(sockets_to(a.port)["01"], 1);
  a.process.kill_now();  // the kernel closes its end of every connection
  EXPECT_TRUE(none_in_state(a.port, "08", 3s)) << sockets_to(a.port)["08"] << " in CLOSE_WAIT";
}


// A backend added through the admin API without max_fails / fail_timeout
// gets the pool's (the Heftfile's pool-level values, kept in the JSON as
// health_checks.passive), not nginx's defaults 1 / 10s as it did.
TEST_F(LiveChanges, AnAddedBackendTakesThePoolsPassiveSettings) {
  Backend a = start_backend(dir, "a"), b = start_backend(dir, "b");
  Process heft = start(fmt::format(":{} {{\n\treverse_proxy 127.0.0.1:{} {{\n\t\tmax_fails 0\n\t\tfail_timeout 20s\n"
                                   "\t\tto 127.0.0.1:{} max_fails 3\n\t}}\n}}\n",
                                   port, a.port, b.port));
  const json passive = json::parse(admin("GET", "/config/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/"
                                                "health_checks/passive").body, nullptr, false);
  EXPECT_EQ(passive, json({{"max_fails", 0}, {"fail_timeout", "20s"}}));
  Backend c = start_backend(dir, "c");
  ASSERT_EQ(admin("POST", kUpstreams, json({{"dial", fmt::format("127.0.0.1:{}", c.port)}}).dump()).status, 200);
  const json upstreams = json::parse(admin("GET", kUpstreams).body, nullptr, false);
  ASSERT_TRUE(upstreams.is_array() && upstreams.size() == 3) << upstreams;
  EXPECT_EQ(upstreams[0]["max_fails"], 0);
  EXPECT_EQ(upstreams[1]["max_fails"], 3);  // its own
  EXPECT_EQ(upstreams[2]["max_fails"], 0) << upstreams[2];
  EXPECT_EQ(upstreams[2]["fail_timeout"], "20s") << upstreams[2];
  // And the new backend serves.
  std::set<std::string> seen;
  HttpClient client(port);
  for (int i = 0; i < 12; ++i) seen.insert(client.get("/").header("x-backend"));
  EXPECT_TRUE(seen.count("c")) << heft.log();
}


// A reload matches each site to the old one of the same port and hosts,
// wherever it moved: two sites that swap places keep their pools (their
// backends' counters go on) and each Host still reaches its own backend.
TEST_F(LiveChanges, SitesThatSwapPlacesKeepTheirPools) {
  Backend a = start_backend(dir, "a");
  Backend b = start_backend(dir, "b");
  const auto site = [&](const char* host, const Backend& backend) {
    return fmt::format("{}:{} {{\n\treverse_proxy 127.0.0.1:{}\n}}\n", host, port, backend.port);
  };
  Process heft = start(site("a.test", a) + site("b.test", b));
  const auto served_by = [&](const char* host) {
    return HttpClient(port)
        .request(fmt::format("GET / HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", host))
        .header("x-backend");
  };
  for (int i = 0; i < 3; ++i) ASSERT_EQ(served_by("a.test"), "a") << heft.log();
  ASSERT_EQ(served_by("b.test"), "b") << heft.log();
  const std::string swapped = site("b.test", b) + site("a.test", a);
  HttpClient client(admin_port);
  Response loaded = client.request(fmt::format("POST /load HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n"
                                               "Content-Type: text/heftfile\r\nContent-Length: {}\r\n\r\n{}",
                                               admin_port, swapped.size(), swapped));
  ASSERT_EQ(loaded.status, 200) << loaded.body;
  EXPECT_EQ(served_by("a.test"), "a") << heft.log();
  EXPECT_EQ(served_by("b.test"), "b") << heft.log();
  EXPECT_EQ(upstream_entry(a).value("requests_total", 0), 4) << upstream_entry(a);
  EXPECT_EQ(upstream_entry(b).value("requests_total", 0), 2) << upstream_entry(b);
  EXPECT_EQ(upstream_entry(b).value("site", -1), 0);  // its new place
}

// A reload re-resolves backend names even when the file did not change (how
// nginx -s reload picks up a moved name). With the admin API on, an unchanged
// file was a no-op and kept the old address; only `admin off` re-resolved.
// The name is moved in a private /etc/hosts (a mount namespace of heft's own).
TEST_F(LiveChanges, AReloadOfAnUnchangedFileResolvesNamesAgain) {
  if (!can_mount_hosts()) GTEST_SKIP() << "no unprivileged mount namespaces here (unshare -m --map-root-user)";
  const uint16_t backend_port = free_port();  // free on both families
  Process six({HEFT_BINARY, "demo-backend", "--listen", fmt::format("[::1]:{}", backend_port), "--name", "six"},
              dir + "/six.log");
  Process four({HEFT_BINARY, "demo-backend", "--listen", fmt::format("127.0.0.1:{}", backend_port), "--name", "four"},
               dir + "/four.log");
  ASSERT_TRUE(wait_for_port(backend_port)) << four.log();
  const std::string hosts = dir + "/hosts";
  write_file(hosts, "::1 heft-moving-name\n");
  write_file(dir + "/Heftfile", fmt::format("{{\n\tadmin 127.0.0.1:{}\n\tworkers 1\n}}\n:{} {{\n"
                                            "\treverse_proxy heft-moving-name:{}\n}}\n",
                                            admin_port, port, backend_port));
  Process heft = start_with_hosts(hosts);
  const auto served_by = [&] { return HttpClient(port).get("/").header("x-backend"); };
  ASSERT_EQ(served_by(), "six") << heft.log();
  write_file(hosts, "127.0.0.1 heft-moving-name\n");  // in place: the bind mount holds this file
  Process reload({HEFT_BINARY, "reload", "--config", dir + "/Heftfile", "--address",
                  fmt::format("127.0.0.1:{}", admin_port)},
                 dir + "/reload.log");
  ASSERT_EQ(reload.wait(30s), 0) << read_file(dir + "/reload.log");
  EXPECT_EQ(served_by(), "four") << heft.log();
  // SIGHUP the same way.
  write_file(hosts, "::1 heft-moving-name\n");
  heft.signal(SIGHUP);
  ASSERT_TRUE(wait_for_log(heft, "reloaded")) << heft.log();
  EXPECT_EQ(served_by(), "six") << heft.log();
}


// A name with several addresses (localhost as ::1 and 127.0.0.1 on a stock
// Debian host) and a backend listening on only one of them: a connection
// refused at the first address goes on to the next, for requests and health
// probes alike (every request was a 502, and the probe marked it unhealthy;
// nginx makes each address a server of its own, Caddy's dialer falls back).
TEST_F(LiveChanges, ANameWithSeveralAddressesFallsBackToTheOneThatAnswers) {
  if (!can_mount_hosts()) GTEST_SKIP() << "no unprivileged mount namespaces here (unshare -m --map-root-user)";
  Backend four = start_backend(dir, "four");  // 127.0.0.1 only
  ASSERT_TRUE(free_on_ipv6(four.port));       // and nothing on [::1] at its port
  const std::string hosts = dir + "/hosts";
  write_file(hosts, "::1 heft-dual-name\n127.0.0.1 heft-dual-name\n");
  write_file(dir + "/Heftfile", fmt::format("{{\n\tadmin 127.0.0.1:{}\n\tworkers 1\n}}\n:{} {{\n"
                                            "\treverse_proxy heft-dual-name:{} {{\n\t\thealth_uri /\n"
                                            "\t\thealth_interval 200ms\n\t}}\n}}\n",
                                            admin_port, port, four.port));
  Process heft = start_with_hosts(hosts);
  ASSERT_TRUE(wait_for_log(heft, "([::1]:")) << "the name's first address is not ::1 here:\n" << heft.log();
  HttpClient client(port);
  for (int i = 0; i < 3; ++i) {
    Response r = client.get("/");
    EXPECT_EQ(r.status, 200) << heft.log();
    EXPECT_EQ(r.header("x-backend"), "four");
  }
  std::this_thread::sleep_for(700ms);  // a few probes
  const json entry = upstream_entry_named(fmt::format("heft-dual-name:{}", four.port));
  EXPECT_EQ(entry.value("healthy", false), true) << entry << heft.log();
  EXPECT_EQ(heft.log().find("unhealthy"), std::string::npos) << heft.log();
}

}  // namespace
}  // namespace heft::test
