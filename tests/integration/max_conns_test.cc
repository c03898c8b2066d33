// max_conns through real `heft run` and `heft demo-backend` processes: a
// backend with max_conns requests in flight is passed over, every backend full
// is a 503, backups take the overflow, and the limit holds across workers;
// the pool's queue, and a backend coming back taking its waiters at once.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "health_load_util.h"
#include "process_util.h"

namespace heft::test {
namespace {

// `clients` requests at once, one connection each; the answers by backend
// name ("503" for a 503, "status N" for anything else).
std::map<std::string, int> burst(uint16_t port, int clients) {
  std::mutex mu;
  std::map<std::string, int> got;
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      HttpClient client(port);
      Response r = client.get("/");
      std::string what = r.status == 200 ? r.header("x-backend")
                         : r.status == 503 && r.body == "503 every backend is at its max_conns\n"
                             ? "503"
                             : fmt::format("status {} {}", r.status, r.body);
      std::lock_guard lock(mu);
      ++got[what];
    });
  }
  for (auto& t : threads) t.join();
  return got;
}

TEST(MaxConns, FullBackendsArePassedOverAndAllFullIsA503) {
  const std::string dir = make_temp_dir();
  // Slow enough that every request of the burst arrives while the first are in flight.
  Backend a = start_backend(dir, "a", {"--delay", "1500ms"});
  Backend b = start_backend(dir, "b", {"--delay", "1500ms"});
  const uint16_t port = free_port();
  const uint16_t admin_port = free_port();
  // Two workers: the limit is one count per backend, not one per worker.
  Process heft = start_heft(dir,
                            two_worker_pool(admin_port, port,
                                            fmt::format("\t\tto 127.0.0.1:{} weight 5 max_conns 2\n"
                                                        "\t\tto 127.0.0.1:{}?max_conns=1\n",
                                                        a.port, b.port)),
                            port);
  std::map<std::string, int> got;
  std::thread load([&] { got = burst(port, 7); });
  // While the burst is in flight the admin API shows each backend full.
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  Response view = admin_call(admin_port, "GET", "/reverse_proxy/upstreams");
  load.join();
  ASSERT_EQ(view.status, 200) << view.body;
  auto list = nlohmann::json::parse(view.body);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]["max_conns"], 2);
  EXPECT_EQ(list[0]["active"], 2);
  EXPECT_EQ(list[1]["max_conns"], 1);
  EXPECT_EQ(list[1]["active"], 1);
  EXPECT_EQ(got["a"], 2);
  EXPECT_EQ(got["b"], 1);
  EXPECT_EQ(got["503"], 4);
  EXPECT_EQ(got.size(), 3u) << "unexpected answers";
  const std::string metrics = admin_call(admin_port, "GET", "/metrics").body;
  EXPECT_EQ(sample_value(metrics, fmt::format("heft_upstream_max_conns{{server=\":{}\",site=\":{}\",upstream=\"127.0.0.1:{}\"}}",
                                              port, port, a.port)),
            2);
  // The places are free again once those requests ended.
  HttpClient client(port);
  EXPECT_EQ(client.get("/").status, 200);
  EXPECT_NE(heft.log().find("every backend is at its max_conns"), std::string::npos);
}

TEST(MaxConns, BackupsTakeTheOverflow) {
  const std::string dir = make_temp_dir();
  Backend a = start_backend(dir, "a", {"--delay", "1500ms"});
  Backend spare = start_backend(dir, "spare");
  const uint16_t port = free_port();
  Process heft = start_heft(dir,
                            fmt::format("{{\n\tworkers 1\n}}\n:{} {{\n\treverse_proxy {{\n"
                                        "\t\tto 127.0.0.1:{} max_conns 1\n"
                                        "\t\tto 127.0.0.1:{} backup\n\t}}\n}}\n",
                                        port, a.port, spare.port),
                            port);
  auto got = burst(port, 4);
  EXPECT_EQ(got["a"], 1);
  EXPECT_EQ(got["spare"], 3);
  EXPECT_EQ(got.size(), 2u) << "unexpected answers";
}

// A limit set live through the admin API applies to the next request; a
// rejected value leaves the running one as it was.
TEST(MaxConns, SetLiveThroughTheAdminApi) {
  const std::string dir = make_temp_dir();
  Backend a = start_backend(dir, "a", {"--delay", "1500ms"});
  const uint16_t port = free_port();
  const uint16_t admin_port = free_port();
  Process heft = start_heft(dir,
                            fmt::format("{{\n\tworkers 1\n\tadmin 127.0.0.1:{}\n}}\n:{} {{\n\treverse_proxy {{\n"
                                        "\t\tto 127.0.0.1:{}\n\t}}\n}}\n",
                                        admin_port, port, a.port),
                            port);
  const std::string path =
      "/config/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/upstreams/0/max_conns";
  Response refused = admin_call(admin_port, "PUT", path, "-1");
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_NE(refused.body.find("max_conns"), std::string::npos) << refused.body;
  auto got = burst(port, 3);
  EXPECT_EQ(got["a"], 3) << "no limit yet";
  Response set = admin_call(admin_port, "PUT", path, "2");
  ASSERT_EQ(set.status, 200) << set.body;
  got = burst(port, 3);
  EXPECT_EQ(got["a"], 2);
  EXPECT_EQ(got["503"], 1);
}

// The in-flight count of each backend in /reverse_proxy/upstreams, by address.
std::map<std::string, int> num_requests(uint16_t admin_port) {
  std::map<std::string, int> out;
  for (const auto& u : nlohmann::json::parse(admin_call(admin_port, "GET", "/reverse_proxy/upstreams").body))
    out[u["address"].get<std::string>()] = u["num_requests"].get<int>();
  return out;
}

// A backend removed through the admin API while a request is in flight there
// and put back before it ends (a blue-green flip and back): the request still
// counts against its max_conns. It counted for nothing, so heft sent the
// backend a second request beside it with max_conns 1.
TEST(MaxConns, ABackendPutBackCountsTheRequestStillInFlightThere) {
  const std::string dir = make_temp_dir();
  Backend a = start_backend(dir, "a", {"--delay", "3s"});
  Backend b = start_backend(dir, "b");
  const uint16_t port = free_port();
  const uint16_t admin_port = free_port();
  // `first`: A whenever it has room.
  Process heft = start_heft(dir,
                            two_worker_pool(admin_port, port,
                                            fmt::format("\t\tto 127.0.0.1:{} max_conns 1\n\t\tto 127.0.0.1:{} max_conns 1\n"
                                                        "\t\tlb_policy first\n",
                                                        a.port, b.port)),
                            port);
  const std::string a_addr = fmt::format("127.0.0.1:{}", a.port);
  const std::string b_addr = fmt::format("127.0.0.1:{}", b.port);
  Response first;
  std::thread in_flight([&] {
    HttpClient client(port);
    first = client.get("/");
  });
  for (int k = 0; k < 500 && num_requests(admin_port)[a_addr] == 0; ++k)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(num_requests(admin_port)[a_addr], 1);
  const std::string path = "/config/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/upstreams/0";
  const Response a_json = admin_call(admin_port, "GET", path);
  ASSERT_EQ(a_json.status, 200) << a_json.body;
  const Response removed = admin_call(admin_port, "DELETE", path);
  ASSERT_EQ(removed.status, 200) << removed.body;
  const Response put_back = admin_call(admin_port, "PUT", path, a_json.body);
  ASSERT_EQ(put_back.status, 200) << put_back.body;
  // Put back while its request runs (3 s): A is still full.
  auto counts = num_requests(admin_port);
  EXPECT_EQ(counts[a_addr], 1);
  EXPECT_EQ(counts[b_addr], 0);
  HttpClient next(port);
  Response second = next.get("/");
  EXPECT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(second.header("x-backend"), "b");
  in_flight.join();
  EXPECT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(first.header("x-backend"), "a");
  // Both ended: nothing left counted.
  counts = num_requests(admin_port);
  EXPECT_EQ(counts[a_addr], 0);
  EXPECT_EQ(counts[b_addr], 0);
}

// `clients` requests, one connection each, started `gap` apart (so they
// arrive in order); each answer with the time it took, in start order.
struct Timed {
  std::string what;
  double seconds = 0;
};
std::vector<Timed> staggered(uint16_t port, int clients, std::chrono::milliseconds gap) {
  std::vector<Timed> out(clients);
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      HttpClient client(port);
      const auto start = std::chrono::steady_clock::now();
      Response r = client.get("/");
      out[c].seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      out[c].what = r.status == 200 ? r.header("x-backend") : fmt::format("{} {}", r.status, r.body);
    });
    std::this_thread::sleep_for(gap);
  }
  for (auto& t : threads) t.join();
  return out;
}

// heft in front of one backend with max_conns 1 and a queue of `queue` for `timeout`.
// `pool_lines`: more lines for the pool's block.
Process start_queued(const std::string& dir, uint16_t port, uint16_t backend, int workers, int queue,
                     const char* timeout, uint16_t admin_port = 0, const std::string& pool_lines = "") {
  const std::string admin = admin_port ? fmt::format("\tadmin 127.0.0.1:{}\n", admin_port) : "";
  return start_heft(dir,
                    fmt::format("{{\n\tworkers {}\n{}}}\n:{} {{\n\treverse_proxy {{\n\t\tto 127.0.0.1:{} max_conns 1\n"
                                "\t\tqueue {}\n\t\tqueue_timeout {}\n{}\t}}\n}}\n",
                                workers, admin, port, backend, queue, timeout, pool_lines),
                    port);
}

const std::string kQueueRefused = "503 503 every backend is at its max_conns and the queue is full or timed out\n";

// A series of the pool's queue metrics (heft serving `port`, its admin API at
// `admin_port`): `name` with `extra` labels after server and site.
double queue_metric(uint16_t admin_port, uint16_t port, const std::string& name, const std::string& extra = "") {
  return sample_value(admin_call(admin_port, "GET", "/metrics").body,
                      fmt::format("{}{{server=\":{}\",site=\":{}\"{}}}", name, port, port, extra));
}
double queue_waiting(uint16_t admin_port, uint16_t port) {
  return queue_metric(admin_port, port, "heft_queue_waiting_requests");
}
// heft_queue_waited_total, and heft_queue_refused_total for a full queue and for the timeout.
void expect_queue_counts(uint16_t admin_port, uint16_t port, double waited, double full, double timeout) {
  EXPECT_EQ(queue_metric(admin_port, port, "heft_queue_waited_total"), waited);
  EXPECT_EQ(queue_metric(admin_port, port, "heft_queue_refused_total", ",reason=\"full\""), full);
  EXPECT_EQ(queue_metric(admin_port, port, "heft_queue_refused_total", ",reason=\"timeout\""), timeout);
}

// Polls `done` every 50 ms for at most 5 s.
bool within_5s(const std::function<bool()>& done) {
  for (int k = 0; k < 100; ++k, std::this_thread::sleep_for(std::chrono::milliseconds(50)))
    if (done()) return true;
  return false;
}

// nginx Plus's queue: with every backend full, requests wait for a place in
// arrival order, as many as the queue holds; one more is refused at once.
TEST(MaxConns, QueuedRequestsWaitForAPlaceInOrder) {
  const std::string dir = make_temp_dir();
  Backend a = start_backend(dir, "a", {"--delay", "600ms"});
  const uint16_t port = free_port();
  const uint16_t admin_port = free_port();
  Process heft = start_queued(dir, port, a.port, 2, 2, "20s", admin_port);
  auto got = staggered(port, 4, std::chrono::milliseconds(100));
  EXPECT_EQ(got[0].what, "a");
  EXPECT_EQ(got[1].what, "a");
  EXPECT_EQ(got[2].what, "a");
  EXPECT_EQ(got[3].what, kQueueRefused);
  // One at a time, in order (request c started at c x 100 ms): each waited
  // for the one before it (600 ms each).
  EXPECT_GT(got[1].seconds, 1.0);
  EXPECT_GT(got[2].seconds, 1.5);
  EXPECT_LT(0.1 + got[1].seconds, 0.2 + got[2].seconds);
  EXPECT_LT(got[3].seconds, 1.2);  // refused without waiting (a wait would be ~1.9 s)
  expect_queue_counts(admin_port, port, 2, 1, 0);
}

// A client that sends its next request the moment its last one ends does
// not take the place freed for a request already waiting (HAProxy queues
// newcomers behind its waiters).
TEST(MaxConns, NewcomersQueueBehindWaitingRequests) {
  const std::string dir = make_temp_dir();
  Backend a = start_backend(dir, "a", {"--delay", "300ms"});
  const uint16_t port = free_port();
  Process heft = start_queued(dir, port, a.port, 2, 10, "20s");
  std::thread busy([&] {
    HttpClient client(port);  // one keep-alive connection, request after request
    for (int k = 0; k < 5; ++k) EXPECT_EQ(client.get("/").status, 200) << k;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  HttpClient waiting(port);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(waiting.get("/").status, 200);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  busy.join();
  // Served second (~0.5 s: the rest of the first request, then its own),
  // not after the busy client's five (~1.4 s).
  EXPECT_LT(waited, 0.95);
}

TEST(MaxConns, AQueuedRequestGivesUpAfterQueueTimeout) {
  const std::string dir = make_temp_dir();
  Backend a = start_backend(dir, "a", {"--delay", "3s"});
  const uint16_t port = free_port();
  const uint16_t admin_port = free_port();
  Process heft = start_queued(dir, port, a.port, 1, 10, "1s", admin_port);
  EXPECT_EQ(queue_waiting(admin_port, port), 0);
  std::vector<Timed> got;
  std::thread load([&] { got = staggered(port, 2, std::chrono::milliseconds(200)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  EXPECT_EQ(queue_waiting(admin_port, port), 1);  // the second one waits
  // The upstreams view and `heft upstreams` show it too.
  auto list = nlohmann::json::parse(admin_call(admin_port, "GET", "/reverse_proxy/upstreams").body);
  EXPECT_EQ(list[0]["queue"], 10);
  EXPECT_EQ(list[0]["queued"], 1);
  Process table({HEFT_BINARY, "upstreams", "--address", fmt::format("127.0.0.1:{}", admin_port)}, dir + "/table.log");
  EXPECT_EQ(table.wait(std::chrono::seconds(30)), 0);
  EXPECT_NE(read_file(dir + "/table.log").find(fmt::format("queue of site 0 (:{}): 1 waiting, at most 10\n", port)),
            std::string::npos)
      << read_file(dir + "/table.log");
  load.join();
  EXPECT_EQ(got[0].what, "a");
  EXPECT_EQ(got[1].what, kQueueRefused);
  EXPECT_GT(got[1].seconds, 0.9);
  EXPECT_LT(got[1].seconds, 2.5);
  EXPECT_NE(heft.log().find("no backend had room within queue_timeout"), std::string::npos);
  expect_queue_counts(admin_port, port, 1, 0, 1);
}

// HAProxy hands a server that comes up its share of the queue at once: a
// request waiting while every backend was full or unhealthy is served by the
// backend its health check brings back, not only when a request elsewhere ends.
TEST(MaxConns, ABackendBackFromItsHealthCheckTakesTheWaitingRequestsAtOnce) {
  const std::string dir = make_temp_dir();
  Backend a = start_backend(dir, "a", {"--delay", "4s", "--health-path", "/healthz"});
  Backend b = start_backend(dir, "b", {"--health-path", "/healthz"});
  ASSERT_EQ(control(b.port, "/_control/health?status=500"), 200);
  const uint16_t port = free_port();
  const uint16_t admin_port = free_port();
  Process heft = start_heft(dir,
                            two_worker_pool(admin_port, port,
                                            fmt::format("\t\tto 127.0.0.1:{} max_conns 1\n\t\tto 127.0.0.1:{} max_conns 1\n"
                                                        "\t\thealth_uri /healthz\n\t\thealth_interval 100ms\n"
                                                        "\t\tqueue 5\n\t\tqueue_timeout 20s\n",
                                                        a.port, b.port)),
                            port);
  const auto upstreams = [&] { return nlohmann::json::parse(admin_call(admin_port, "GET", "/reverse_proxy/upstreams").body); };
  ASSERT_TRUE(within_5s([&] { return upstreams()[1]["state"] == "unhealthy"; })) << upstreams().dump();

  std::atomic<int> finished{0};
  std::string first_by, second_by;
  int first_rank = 0, second_rank = 0;
  std::thread first([&] {
    HttpClient client(port);
    Response r = client.get("/");
    first_rank = ++finished;
    first_by = r.status == 200 ? r.header("x-backend") : fmt::format("{} {}", r.status, r.body);
  });
  ASSERT_TRUE(within_5s([&] { return upstreams()[0]["active"] == 1; }));
  std::thread second([&] {
    HttpClient client(port);
    Response r = client.get("/");
    second_rank = ++finished;
    second_by = r.status == 200 ? r.header("x-backend") : fmt::format("{} {}", r.status, r.body);
  });
  const bool queued = within_5s([&] { return queue_waiting(admin_port, port) == 1; });
  EXPECT_TRUE(queued) << "the second request should wait in the queue";
  EXPECT_EQ(control(b.port, "/_control/health?status=200"), 200);
  second.join();
  first.join();
  EXPECT_EQ(first_by, "a");
  EXPECT_EQ(second_by, "b");
  // Served while a still held the first (4 s), not after it.
  EXPECT_EQ(second_rank, 1);
  EXPECT_EQ(first_rank, 2);
}

// One request holds the only place for `hold`; a second waits in the queue
// and its client closes. Whether the queue emptied before the first request
// ended, and how many requests the backend got (its stats request included).
struct LeftQueue {
  bool emptied_early = false;
  int backend_requests = 0;
};
LeftQueue leave_while_queued(const std::string& pool_lines, const char* hold) {
  const std::string dir = make_temp_dir();
  Backend a = start_backend(dir, "a", {"--delay", hold});
  const uint16_t port = free_port();
  const uint16_t admin_port = free_port();
  Process heft = start_queued(dir, port, a.port, 2, 10, "20s", admin_port, pool_lines);
  std::atomic<bool> first_done{false};
  std::thread first([&] {
    HttpClient client(port);
    EXPECT_EQ(client.get("/first").status, 200);
    first_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  {
    HttpClient leaving(port);
    EXPECT_TRUE(leaving.send_raw("GET /leaving HTTP/1.1\r\nHost: localhost\r\n\r\n"));
    EXPECT_TRUE(within_5s([&] { return queue_waiting(admin_port, port) == 1; }));
  }  // closed
  LeftQueue out;
  out.emptied_early = within_5s([&] { return queue_waiting(admin_port, port) == 0; }) && !first_done;
  first.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  HttpClient stats(a.port);
  out.backend_requests = nlohmann::json::parse(stats.get("/_control/stats").body)["requests"].get<int>();
  return out;
}

// A client that closes its connection while its request waits in the queue
// gives up its place (HAProxy's abortonclose): the request never reaches a
// backend, and the queue is free for the next at once.
TEST(MaxConns, AClientThatLeavesWhileQueuedGivesUpItsPlace) {
  LeftQueue got = leave_while_queued("", "4s");
  EXPECT_TRUE(got.emptied_early) << "the request of a client gone still waited";
  EXPECT_EQ(got.backend_requests, 2) << "the abandoned request reached the backend";  // the first + stats
}

// With `ignore_client_abort on` it keeps its place and goes to the backend.
TEST(MaxConns, IgnoreClientAbortKeepsAQueuedRequestWhoseClientLeft) {
  LeftQueue got = leave_while_queued("\t\tignore_client_abort on\n", "2s");
  EXPECT_FALSE(got.emptied_early);
  EXPECT_EQ(got.backend_requests, 3);  // the first, the abandoned one, stats
}

}  // namespace
}  // namespace heft::test
