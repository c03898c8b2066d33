// The admin API's HTTP/1.1 transport (Beast, C++20 coroutines, one thread).
#include "admin/admin_server.h"

#include <malloc.h>
#include <pthread.h>

#include <chrono>
#include <future>
#include <optional>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <utility>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include "config/values.h"

namespace heft::admin {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

// The largest request head read; a longer one is answered 431.
constexpr size_t kMaxAdminHead = 16 * 1024;

namespace {

// Request bodies held at once by all admin connections together: two of the
// largest, so that 64 clients each sending one cannot hold 64 bodies' worth
// of memory (one more is answered 503 until the others are done).
constexpr size_t kAdminBodyBudget = 2 * kMaxAdminJsonBody;
// The most of a refused body read and thrown away before closing (so that
// the client reads the refusal instead of a reset), and the time for it.
constexpr size_t kMaxDrained = 256u << 20;
constexpr auto kDrainTime = 5s;
// After a request whose body was at least this large, the memory freed is
// handed back to the system (glibc keeps freed small blocks otherwise).
constexpr size_t kTrimAfterBody = 64u << 10;

// Bytes of request bodies held now; admin thread only.
struct BodyBudget {
  size_t held = 0;
};

// A request body in a string that grows with what arrives (Beast's
// string_body reserves the announced Content-Length at once) and counts
// against the connections' BodyBudget while it lives.
struct AdminBody {
  struct value_type {
    std::string text;
    BodyBudget* budget = nullptr;  // set before the body is read
    size_t counted = 0;            // bytes of `text` counted in `budget`

    value_type() = default;
    value_type(value_type&& other) noexcept
        : text(std::move(other.text)), budget(other.budget), counted(std::exchange(other.counted, 0)) {}
    value_type& operator=(value_type&& other) noexcept {
      if (this != &other) {
        release();
        text = std::move(other.text);
        budget = other.budget;
        counted = std::exchange(other.counted, 0);
      }
      return *this;
    }
    ~value_type() { release(); }
    void release() {
      if (budget) budget->held -= counted;
      counted = 0;
    }
  };

  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(http::header<isRequest, Fields>&, value_type& body) : body_(body) {}
    void init(const boost::optional<std::uint64_t>&, boost::system::error_code& ec) { ec = {}; }
    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, boost::system::error_code& ec) {
      const size_t size = asio::buffer_size(buffers);
      if (body_.budget) {
        if (body_.budget->held + size > kAdminBodyBudget) {
          ec = asio::error::no_buffer_space;
          return 0;
        }
        body_.budget->held += size;
        body_.counted += size;
      }
      const size_t at = body_.text.size();
      body_.text.resize(at + size);  // grows geometrically, as what came needs
      asio::buffer_copy(asio::buffer(body_.text.data() + at, size), buffers);
      ec = {};
      return size;
    }
    void finish(boost::system::error_code& ec) { ec = {}; }

   private:
    value_type& body_;
  };
};

using Request = http::request<AdminBody>;

}  // namespace

struct AdminServer::Impl {
  Impl(const config::Config& running, AdminHooks hooks, std::string state_path)
      : api(running, std::move(hooks), std::move(state_path)) {}

  AdminApi api;
  size_t open_connections = 0;  // admin thread only; outlives `io`, whose coroutines count down on it
  BodyBudget bodies;            // admin thread only; outlives `io` too
  asio::io_context io{1};
  std::optional<tcp::acceptor> acceptor;
  asio::steady_timer ticker{io};
  std::thread thread;
  uint16_t port = 0;
};

namespace {

// The method, target and fields of `req` from `remote` (its body is the
// caller's to move in).
AdminRequest to_admin_request(const Request& req, const std::string& remote) {
  AdminRequest out;
  out.remote = remote;
  out.method = std::string(req.method_string());
  out.target = std::string(req.target());
  // Repeated lines are one comma-separated list (RFC 9110 5.3): If-Match's
  // tags all count, not the last line's; a repeated singleton (Host,
  // Authorization) becomes a value that no check accepts.
  for (const auto& field : req) {
    auto [line, first] = out.headers.try_emplace(config::lowercase(field.name_string()));
    if (!first) line->second += ", ";  // also after an empty first line: "Host:" then "Host: x" is ", x"
    line->second += std::string(field.value());
  }
  return out;
}

// Reads and discards what the client is still sending (bounded in bytes and
// time), so closing does not reset the connection before it has read our
// error response.
asio::awaitable<void> drain(beast::tcp_stream& stream) {
  boost::system::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  char scratch[65536];
  size_t total = 0;
  stream.expires_after(kDrainTime);
  while (total < kMaxDrained) {
    auto [ec, n] = co_await stream.async_read_some(asio::buffer(scratch), use_tuple);
    if (ec) break;
    total += n;
  }
}

// "127.0.0.1:51544", "[::1]:51544" ("" if the socket cannot say).
std::string remote_address(beast::tcp_stream& stream) {
  boost::system::error_code ec;
  const tcp::endpoint peer = stream.socket().remote_endpoint(ec);
  if (ec) return "";
  return config::join_host_port(peer.address().to_string(), peer.port());
}

struct Served {
  bool keep_open = false;
  size_t body_bytes = 0;  // of the request served
};

// Reads one request, answers it; the connection stays open if keep_open.
asio::awaitable<Served> serve_request(AdminServer::Impl& impl, beast::tcp_stream& stream, beast::flat_buffer& buffer) {
  Served served;
  const std::string remote = remote_address(stream);
  http::request_parser<AdminBody> parser;
  // None until the head says the Content-Type, and so the limit.
  parser.body_limit(boost::none);
  parser.header_limit(kMaxAdminHead);
  stream.expires_after(30s);
  // The head first: a request its Host, Origin or token refuse is answered
  // before its body is read (and never told 100 Continue); a client waiting
  // on `Expect: 100-continue` is told to go on (curl would wait a second).
  auto [ec, n] = co_await http::async_read_header(stream, buffer, parser, use_tuple);
  std::optional<AdminResponse> refused_on_head;
  // An expectation other than 100-continue cannot be met (RFC 9110 10.1.1;
  // the proxy answers the same); HTTP/1.0 has none.
  const std::string expect = ec ? "" : config::lowercase(parser.get()[http::field::expect]);
  const std::string content_type = ec ? "" : std::string(parser.get()[http::field::content_type]);
  const size_t body_limit = admin_body_limit(content_type);
  if (!ec && parser.get().version() >= 11 && !expect.empty() && expect != "100-continue") {
    refused_on_head = error_response(417, "expectation not supported: only 100-continue");
  } else if (!ec && !parser.is_done()) {
    if (AdminResponse denied = impl.api.check_access(to_admin_request(parser.get(), remote)); denied.status != 0) {
      refused_on_head = std::move(denied);
    } else if (parser.content_length() && *parser.content_length() > body_limit) {
      ec = http::error::body_limit;  // answered 413 below, before the body
    } else {
      parser.body_limit(body_limit);  // for a chunked body, checked as it comes
      parser.get().body().budget = &impl.bodies;
      if (parser.get().version() >= 11 && expect == "100-continue") {
        http::response<http::empty_body> go_on{http::status::continue_, 11};
        auto [continue_ec, continue_written] = co_await http::async_write(stream, go_on, use_tuple);
        ec = continue_ec;
      }
    }
  }
  if (!ec && !parser.is_done() && !refused_on_head)
    std::tie(ec, n) = co_await http::async_read(stream, buffer, parser, use_tuple);
  served.body_bytes = parser.get().body().text.size();
  // A response to HEAD is its head alone (RFC 9112 6.3), whatever its status.
  const bool head = parser.is_header_done() && parser.get().method() == http::verb::head;
  AdminResponse response;
  bool close = false;
  bool handled = false;  // by the API, which logs its own refusals
  unsigned version = 11;
  if (ec == http::error::body_limit) {
    response = error_response(
        413, fmt::format("request body larger than {} bytes, the most a body of Content-Type \"{}\" may have",
                         body_limit, content_type));
    close = true;
  } else if (ec == asio::error::no_buffer_space) {
    response = error_response(503, "the admin API is reading other large bodies: try again in a moment");
    response.headers.emplace_back("Retry-After", "1");
    close = true;
  } else if (ec == http::error::header_limit) {
    response = error_response(431, fmt::format("request head larger than {} bytes", kMaxAdminHead));
    close = true;
  } else if (ec && ec.category() == make_error_code(http::error::end_of_stream).category() &&
             ec != http::error::end_of_stream && ec != http::error::partial_message) {
    response = error_response(400, "malformed HTTP request: " + ec.message());
    close = true;
  } else if (ec) {
    co_return served;  // closed, timed out or cut off: nobody to answer
  } else if (refused_on_head) {
    response = std::move(*refused_on_head);
    version = parser.get().version();
    close = true;  // its body is unread
  } else {
    handled = true;
    Request req = parser.release();
    version = req.version();
    close = !req.keep_alive();
    AdminRequest request = to_admin_request(req, remote);
    request.body = std::move(req.body().text);
    try {
      response = impl.api.handle(request);
    } catch (const std::exception& e) {
      response = error_response(500, std::string("internal error: ") + e.what());
    }
  }
  // A request refused here, before the API saw it, is logged as the API's refusals are.
  if (!handled && response.status >= 400) {
    AdminRequest refused;
    if (parser.is_header_done()) refused = to_admin_request(parser.get(), remote);
    refused.remote = remote;
    response = impl.api.log_refusal(refused, std::move(response));
  }
  http::response<http::string_body> res{static_cast<http::status>(response.status), version};
  res.set(http::field::server, "heft");
  res.set(http::field::content_type, response.content_type);
  for (const auto& [name, value] : response.headers) res.set(name, value);
  res.body() = std::move(response.body);
  res.keep_alive(!close);
  res.prepare_payload();  // Content-Length as for GET, also for HEAD
  stream.expires_after(30s);
  http::response_serializer<http::string_body> serializer{res};
  auto [write_ec, written] = head ? co_await http::async_write_header(stream, serializer, use_tuple)
                                  : co_await http::async_write(stream, serializer, use_tuple);
  if (response.stop_after && impl.api.hooks().stop) impl.api.hooks().stop();
  if (write_ec) co_return served;
  if (close) {
    co_await drain(stream);
    co_return served;
  }
  served.keep_open = true;
  co_return served;
}

asio::awaitable<void> serve_connection(AdminServer::Impl& impl, tcp::socket socket) {
  struct Counted {  // accept_loop counted this connection; it ends with this coroutine
    size_t& open;
    ~Counted() { --open; }
  } counted{impl.open_connections};
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    const Served served = co_await serve_request(impl, stream, buffer);
    // The request's memory (its body, the documents made of it) is freed by
    // now; glibc would keep most of it for the next large request.
    if (served.body_bytes >= kTrimAfterBody) ::malloc_trim(0);
    if (!served.keep_open) break;
  }
  boost::system::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
}

asio::awaitable<void> accept_loop(AdminServer::Impl& impl) {
  for (;;) {
    auto [ec, socket] = co_await impl.acceptor->async_accept(use_tuple);
    if (ec == asio::error::operation_aborted || !impl.acceptor->is_open()) co_return;
    if (ec) {
      // Out of descriptors or similar: back off briefly instead of spinning
      // (as the proxy's accept loop does), so the data plane keeps its CPU.
      asio::steady_timer pause(impl.io, 10ms);
      co_await pause.async_wait(use_tuple);
      continue;
    }
    if (impl.open_connections >= kMaxAdminConnections) {
      boost::system::error_code ignored;
      socket.close(ignored);  // at the cap: refuse rather than let idle clients take heft's descriptors
      continue;
    }
    ++impl.open_connections;
    asio::co_spawn(impl.io, serve_connection(impl, std::move(socket)), asio::detached);
  }
}

void schedule_tick(AdminServer::Impl& impl) {
  impl.ticker.expires_after(1s);
  impl.ticker.async_wait([&impl](const boost::system::error_code& ec) {
    if (ec) return;
    impl.api.tick();
    schedule_tick(impl);
  });
}

}  // namespace

AdminServer::AdminServer(const config::Config& running, AdminHooks hooks, std::string state_path)
    : impl_(std::make_unique<Impl>(running, std::move(hooks), std::move(state_path))) {}

AdminServer::~AdminServer() { stop(); }

void AdminServer::start() {
  listen();
  serve();
}

void AdminServer::listen() {
  if (impl_->acceptor) return;
  const config::AdminConfig& admin = impl_->api.admin();
  if (std::string problem = admin_config_error(admin); !problem.empty()) throw std::runtime_error(problem);
  auto split = config::split_host_port(admin.address, 0);
  boost::system::error_code ec;
  const std::optional<std::string> ip = config::admin_listen_ip(split.value->host);
  if (!ip) throw std::runtime_error(fmt::format("admin address {}: not an IP address", admin.address));
  auto address = asio::ip::make_address(*ip, ec);
  if (ec) throw std::runtime_error(fmt::format("admin address {}: not an IP address", admin.address));
  tcp::endpoint endpoint(address, split.value->port);
  tcp::acceptor acceptor(impl_->io);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw std::runtime_error(fmt::format("admin API cannot listen on {}: {}", admin.address, ec.message()));
  impl_->port = acceptor.local_endpoint().port();
  impl_->acceptor.emplace(std::move(acceptor));
}

void AdminServer::serve() {
  if (!impl_->acceptor || impl_->thread.joinable()) return;
  asio::co_spawn(impl_->io, accept_loop(*impl_), asio::detached);
  schedule_tick(*impl_);
  impl_->thread = std::thread([impl = impl_.get()] {
    pthread_setname_np(pthread_self(), "heft-admin");  // for top -H, perf and /proc
    impl->io.run();
  });
}

void AdminServer::stop() {
  if (!impl_->thread.joinable()) return;
  asio::post(impl_->io, [impl = impl_.get()] {
    boost::system::error_code ignored;
    if (impl->acceptor) impl->acceptor->close(ignored);
    impl->ticker.cancel();
    impl->io.stop();
  });
  if (std::this_thread::get_id() == impl_->thread.get_id()) {
    impl_->thread.detach();  // called from a hook on our own thread: it ends when the loop returns
    return;
  }
  impl_->thread.join();
}

bool AdminServer::load(const config::Config& next, std::string& error, const std::string& source) {
  AdminResponse response;
  if (!impl_->thread.joinable() || std::this_thread::get_id() == impl_->thread.get_id()) {
    response = impl_->api.load(next, source);
  } else {
    std::promise<AdminResponse> done;
    asio::post(impl_->io, [&] { done.set_value(impl_->api.load(next, source)); });
    response = done.get_future().get();
  }
  if (response.status == 200) return true;
  auto body = nlohmann::json::parse(response.body, nullptr, false);
  error = body.is_object() ? body.value("error", response.body) : response.body;
  return false;
}

uint16_t AdminServer::port() const { return impl_->port; }
nlohmann::json AdminServer::config_json() const { return impl_->api.config_json(); }
std::string AdminServer::etag() const { return impl_->api.etag(); }

}  // namespace heft::admin
