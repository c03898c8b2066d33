// For the admin tests: a real in-process Proxy and its admin API (with a
// state file) over demo backends, on free loopback ports, stopped in order.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "admin/proxy_admin.h"
#include "config/heftfile.h"
#include "demo/demo_backend.h"
#include "integration/process_util.h"
#include "proxy/proxy.h"
#include "test_deadline.h"

namespace heft::admin::test_stack {

struct ProxyStack {
  boost::asio::io_context backend_io{1};
  std::vector<std::unique_ptr<demo::DemoBackend>> backends;
  std::thread backend_thread;
  uint16_t port = test::free_port();
  uint16_t admin_port = test::free_port();
  std::unique_ptr<proxy::Proxy> proxy;
  std::unique_ptr<ProxyAdmin> admin;
  std::string dir = test::make_temp_dir();

  // Demo backends answering with their name in X-Backend, on one thread.
  void start_backends(const std::vector<std::string>& names, size_t body_bytes = 0) {
    for (const std::string& name : names) {
      demo::DemoBackendOptions o;
      o.name = name;
      if (body_bytes) o.body_bytes = body_bytes;
      backends.push_back(std::make_unique<demo::DemoBackend>(backend_io, o));
      backends.back()->start();
    }
    backend_thread = std::thread([this] { backend_io.run(); });
  }

  // The proxy on the Heftfile `heftfile(port, admin_port)` and its admin API
  // with the state file DIR/autosave.json. free_port() only finds a port free
  // a moment ago: a test running beside this one may take it first, and
  // binding then throws. So a few tries on fresh ports.
  void start(const std::function<std::string(uint16_t port, uint16_t admin_port)>& heftfile,
             const nlohmann::json& instance) {
    for (int attempt = 0; attempt < 5; ++attempt) {
      if (attempt > 0) {
        port = test::free_port();
        admin_port = test::free_port();
      }
      auto parsed = config::parse_heftfile(heftfile(port, admin_port));
      EXPECT_TRUE(parsed.ok()) << (parsed.errors.empty() ? "" : parsed.errors[0].to_string());
      EXPECT_TRUE(config::resolve(*parsed).empty());
      try {
        proxy = std::make_unique<proxy::Proxy>(*parsed);
        proxy->start();
        admin = ProxyAdmin::start(*proxy, dir + "/autosave.json", instance);
        return;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ProxyStack: attempt %d: %s; trying other ports\n", attempt, e.what());
        admin.reset();
        if (proxy) {
          proxy->shutdown(std::chrono::milliseconds(0));
          proxy->wait();
          proxy.reset();
        }
      }
    }
    ADD_FAILURE() << "no free ports for the proxy and its admin API after 5 tries";
  }

  // One request to the admin API (Connection: close); a body is JSON unless `extra` says otherwise.
  test::Response admin_call(const std::string& method, const std::string& path, const std::string& body = "",
                      const std::string& extra = "") {
    test::HttpClient client(admin_port);
    std::string raw = fmt::format("{} {} HTTP/1.1\r\nHost: localhost:{}\r\nConnection: close\r\n{}", method, path,
                                  admin_port, extra);
    if (!body.empty() || method != "GET") {
      if (extra.find("Content-Type:") == std::string::npos) raw += "Content-Type: application/json\r\n";
      raw += fmt::format("Content-Length: {}\r\n", body.size());
    }
    return client.request(raw + "\r\n" + body);
  }

  ~ProxyStack() {
    admin.reset();
    if (proxy) {
      proxy->shutdown(std::chrono::milliseconds(100));
      test::WaitingFor waiting("the proxy to stop after a 100 ms grace period");
      proxy->wait();
    }
    for (auto& b : backends) b->stop();
    if (backend_thread.joinable()) {
      test::WaitingFor waiting("the demo backends' thread to end after stop()");
      backend_thread.join();
    }
  }
};

}  // namespace heft::admin::test_stack
