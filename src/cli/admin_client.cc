// Blocking admin API client (Beast's asynchronous operations on a private
// io_context, run until the exchange ends or its deadline passes).
#include "cli/admin_client.h"

#include <chrono>
#include <optional>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "admin/state_file.h"
#include "cli/command.h"
#include "config/heftfile.h"
#include "config/values.h"

namespace heft::cli {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {
// How often a waiting request asks AdminClientOptions::give_up.
constexpr std::chrono::milliseconds kGiveUpCheckEvery{50};
// Where the admin API listens when neither --address nor a configuration says.
constexpr const char* kDefaultAdminAddress = "127.0.0.1:2019";
}  // namespace

void add_admin_options(CLI::App* command, AdminClientOptions& options, bool config_option) {
  const std::string source = config_option ? "--config's" : "FILE's";
  command->add_option("--address", options.address,
                      "Admin API address HOST:PORT (default: " + source + " admin address, else 127.0.0.1:2019)")
      ->check(not_empty("HOST:PORT, or leave it out (default: " + source + " admin address, else 127.0.0.1:2019)"));
  command->add_option("--token", options.token,
                      "Bearer token, if the admin API requires one (default: " + source + " admin token)");
  if (config_option)
    command->add_option("-c,--config", options.config,
                        "Heftfile or .json configuration of the running heft: its admin address and token are "
                        "used, and a heft serving another file is refused")
        ->check(not_empty("the running heft's Heftfile or .json configuration"));
}

void settle_admin_options(AdminClientOptions& options, const config::AdminConfig* loaded) {
  std::optional<config::AdminConfig> admin;
  if (loaded) admin = *loaded;
  else if (!options.config.empty() && options.address.empty()) {
    config::Result<config::AdminConfig> result = config::load_admin_config(options.config);
    if (!result.ok()) {
      for (const config::Diagnostic& d : result.errors) fmt::print(stderr, "{}\n", d.to_string());
      throw BadArguments(fmt::format("--config {}: its admin settings are not valid", options.config));
    }
    if (!result->enabled)
      throw BadArguments(fmt::format("--config {} turns the admin API off (admin off): there is none to reach",
                                     options.config));
    admin = *result;
  }
  if (options.address.empty() && admin && admin->enabled) {
    options.address = admin->address;
    if (options.token.empty()) options.token = admin->token;
  }
  if (options.address.empty()) options.address = kDefaultAdminAddress;
}

std::string AdminReply::error_message() const {
  if (status == 0) return transport_error;
  auto parsed = nlohmann::json::parse(body, nullptr, false);
  if (parsed.is_object() && parsed.contains("error") && parsed["error"].is_string())
    return parsed["error"].get<std::string>();
  return "HTTP " + std::to_string(status) + (body.empty() ? "" : ": " + body_excerpt());
}

std::string AdminReply::body_excerpt() const {
  // Whatever answered may not be heft (a web server's HTML page): one line, escaped, short.
  constexpr size_t kMax = 200;
  std::string_view line = std::string_view(body).substr(0, body.find('\n'));
  std::string out = config::printable(line.substr(0, kMax));
  if (line.size() > kMax || line.size() < body.size()) out += " ...";
  return out;
}

AdminReply admin_request(const AdminClientOptions& options, const std::string& method, const std::string& target,
                         const std::string& body, const std::string& content_type, const std::string& if_match) {
  AdminReply reply;
  auto split = config::split_host_port(options.address, 2019);
  if (!split.value) {
    reply.transport_error = "bad --address \"" + options.address + "\": " + split.error;
    return reply;
  }
  std::string host = split.value->host.empty() ? "127.0.0.1" : split.value->host;
  try {
    asio::io_context io;
    asio::ip::tcp::resolver resolver(io);
    const auto endpoints = resolver.resolve(host, std::to_string(split.value->port));
    http::request<http::string_body> req{http::string_to_verb(method), target, 11};
    req.set(http::field::host, config::join_host_port(host, split.value->port));
    req.set(http::field::user_agent, "heft-cli");
    if (!options.token.empty()) req.set(http::field::authorization, "Bearer " + options.token);
    if (!if_match.empty()) req.set(http::field::if_match, if_match);
    if (!body.empty()) req.set(http::field::content_type, content_type);
    req.body() = body;
    req.prepare_payload();
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64u << 20);
    // Asynchronous operations, because only those honour the stream's
    // deadline (the synchronous ones ignore it: a listener that accepts and
    // never answers held every command for good). One deadline for the whole
    // exchange.
    beast::tcp_stream stream(io);
    stream.expires_after(kAdminRequestTimeout);
    bool connected = false;
    beast::error_code failure;
    stream.async_connect(endpoints, [&](beast::error_code ec, const asio::ip::tcp::endpoint&) {
      if (ec) {
        failure = ec;
        return;
      }
      connected = true;
      http::async_write(stream, req, [&](beast::error_code ec, size_t) {
        if (ec) {
          failure = ec;
          return;
        }
        http::async_read(stream, buffer, parser, [&](beast::error_code ec, size_t) { failure = ec; });
      });
    });
    bool gave_up = false;
    while (!io.stopped()) {  // until the exchange ends (answer, error or deadline)
      io.run_for(kGiveUpCheckEvery);
      if (!io.stopped() && !gave_up && options.give_up && options.give_up()) {
        gave_up = true;
        stream.close();  // the pending operation ends with operation_aborted
      }
    }
    if (gave_up || failure) {
      reply.status = 0;
      const std::string why =
          gave_up ? "interrupted"
          : failure == beast::error::timeout
              ? fmt::format("timed out after {} ({})", config::format_duration(kAdminRequestTimeout),
                            connected ? "connected, but no answer" : "no connection")
              : failure.message();  // the code's message, as the system says it ("Connection refused")
      reply.transport_error = "cannot reach the admin API at " + options.address + ": " + why;
      return reply;
    }
    const auto& res = parser.get();
    reply.status = res.result_int();
    reply.body = res.body();
    if (res[http::field::server] != "heft") {
      // Something else answers there (a web server, a backend): its 200 is
      // no reload, stop or weight change, whatever the command would report.
      reply.status = 0;
      reply.transport_error = fmt::format("the answer from {} is not heft's admin API (HTTP {}{}{})", options.address,
                                          res.result_int(), reply.body.empty() ? "" : ": ", reply.body_excerpt());
      return reply;
    }
    if (auto it = res.find(http::field::etag); it != res.end()) reply.etag = std::string(it->value());
    beast::error_code ignored;
    stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  } catch (const boost::system::system_error& e) {
    // The code's message alone: what() adds Boost's source location.
    reply.status = 0;
    reply.transport_error = "cannot reach the admin API at " + options.address + ": " + e.code().message();
  } catch (const std::exception& e) {
    reply.status = 0;
    reply.transport_error = "cannot reach the admin API at " + options.address + ": " + e.what();
  }
  return reply;
}

bool check_instance(const AdminClientOptions& options, const std::string& config_path, const std::string& doing,
                    bool required) {
  if (config_path.empty()) return true;
  const std::string wanted = admin::config_identity(config_path);
  AdminReply reply = admin_request(options, "GET", "/heft/instance");
  if (reply.status == 404) {
    if (required) {
      fmt::print(stderr, "heft: the heft at {} does not say which configuration it serves (no /heft/instance: an "
                         "older heft): {}\n", options.address, doing);
      return false;
    }
    fmt::print(stderr, "heft: warning: the heft at {} does not say which configuration it serves (no /heft/instance: "
                       "an older heft); going on as if it served {}\n", options.address, wanted);
    return true;
  }
  if (reply.status != 200) {
    fmt::print(stderr, "heft: {}\n", reply.error_message());
    return false;
  }
  const auto instance = nlohmann::json::parse(reply.body, nullptr, false);
  if (!instance.is_object() || !instance.contains("config")) {
    fmt::print(stderr, "heft: unexpected answer from {}/heft/instance: {}\n", options.address, reply.body_excerpt());
    return false;
  }
  const nlohmann::json& serving = instance["config"];
  if (serving.is_string() && serving.get<std::string>() == wanted) return true;
  const std::string what = serving.is_string() ? serving.get<std::string>() : std::string("the embedded demo");
  const std::string state = instance.value("state", std::string());
  fmt::print(stderr,
             "heft: the heft at {} serves {}{}, not {}: {}. Give the admin address of the heft that serves {} "
             "(--address), or the file this one serves.\n",
             options.address, what, state.empty() ? "" : " (state file " + state + ")", wanted, doing, wanted);
  return false;
}

}  // namespace heft::cli
