// The request plan (see request_plan.h).
#include "proxy/request_plan.h"

#include "heft/balance/hash.h"
#include "proxy/header_rules.h"
#include "proxy/request_head.h"
#include "proxy/runtime.h"

namespace heft::proxy {
using namespace std::string_view_literals;
namespace {

std::string_view cookie_value(std::string_view cookies, std::string_view name) {
  while (!cookies.empty()) {
    std::size_t semi = cookies.find(';');
    std::string_view pair = cookies.substr(0, semi);
    while (!pair.empty() && pair.front() == ' ') pair.remove_prefix(1);
    if (pair.size() > name.size() && pair.substr(0, name.size()) == name && pair[name.size()] == '=')
      return pair.substr(name.size() + 1);
    if (semi == std::string_view::npos) break;
    cookies.remove_prefix(semi + 1);
  }
  return {};
}

}  // namespace

RequestPlan plan_request(Exchange& ex, const RequestHead& req, const WorkerRoutes& routes) {
  RequestPlan plan;
  // The fields decided on, in one walk over the list (the first of each, as
  // basic_fields' operator[] would give, without its four lookups).
  std::string_view host, connection, upgrade_value;
  bool joined_connection = false, proxy_connection = false, continue_expected = false, other_expectation = false;
  for (const auto& field : req) {
    switch (field.name()) {
      case http::field::host: if (host.empty()) host = field.value(); break;
      case http::field::proxy_connection: proxy_connection = true; break;
      case http::field::connection:
        if (connection.empty()) {
          connection = field.value();
        } else if (!field.value().empty()) {  // several lines are one list (RFC 9110 5.3): rare
          if (!joined_connection) ex.connection_lines_.assign(connection);
          joined_connection = true;
          ex.connection_lines_.append(", ").append(field.value());
          connection = ex.connection_lines_;
        }
        break;
      case http::field::upgrade: if (upgrade_value.empty()) upgrade_value = field.value(); break;
      case http::field::expect:  // several lines are one list (RFC 9110 5.3); empty members add nothing
        each_list_item(field.value(), [&](std::string_view item) {
          if (iequals(item, "100-continue")) continue_expected = true;
          else if (!item.empty()) other_expectation = true;
          return true;
        });
        break;
      default: break;
    }
  }
  ex.routed_host_ = host;  // for the access log, also of a request refused below
  // "close" ends the connection whatever else the list says; HTTP/1.0 needs
  // "keep-alive" besides (RFC 9112 9.3).
  if (proxy_connection || req.version() < 11)
    plan.keep_alive = !has_token(connection, "close") && (req.version() >= 11 || has_token(connection, "keep-alive"));
  if (req.method() == http::verb::connect) {
    plan.connect = true;  // a tunnel to an authority: a forward proxy's job, not heft's
    return plan;
  }
  // An absolute-form target names the host itself, and the Host field is then
  // ignored (RFC 9112 3.2.2): routed by it, forwarded in origin-form with it as
  // Host, so heft and the backend agree on where the request goes.
  std::string_view target = req.target();
  const AbsoluteTarget absolute = split_absolute_target(target);
  if (absolute.status == AbsoluteTarget::bad) {
    plan.bad_target = absolute.reason;
    return plan;
  }
  if (target == "*" && req.method() != http::verb::options) {  // RFC 9112 3.2.4 (nginx: 400)
    plan.bad_target = "asterisk-form request target with a method other than OPTIONS";
    return plan;
  }
  if (absolute.status == AbsoluteTarget::absolute) {
    host = absolute.authority;
    if (absolute.path.empty() && req.method() == http::verb::options) {
      ex.origin_form_ = "*";  // RFC 9112 3.2.4
    } else {
      ex.origin_form_.assign(absolute.path.empty() || absolute.path.front() == '?' ? "/" : "");
      ex.origin_form_.append(absolute.path);
    }
    target = ex.origin_form_;
  }
  if (!host.empty()) {
    if (const char* problem = host_problem(host)) {
      plan.bad_target = problem;
      return plan;
    }
  }
  ex.routed_host_ = host;
  plan.route = routes.table->route(ex.local_port, host);
  if (!plan.route) return plan;
  // The site's routes (none for a site of one reverse_proxy): which pool, or
  // an answer of heft's own; rewrites and header edits on the way.
  RouteState& state = ex.route_state_;
  const bool routed = plan.route->program || plan.route->templated_header_up;
  RouteRequest route_request{&req, req.method_string(), target, host, ex.client_ip};
  state.reset();
  if (routed) {
    if (plan.route->program) {
      const RouteResult result = plan.route->program->run(route_request, state);
      // Placeholders after a rewrite see the rewritten URI, as Caddy's do.
      if (state.rewritten) route_request.target = state.target;
      if (result.kind != RouteResult::proxy) {
        ex.own_fields_.clear();
        ex.own_body_.clear();
        plan.respond = result.answer ? RouteProgram::respond(*result.answer, route_request, ex.own_fields_,
                                                             ex.own_body_, plan.respond_close)
                                     : 200;
        // The response edits met on the way (a site's `header`, a split's cookie).
        for (const std::vector<config::HeaderOp>* ops : state.response_ops)
          for_each_op_field(*ops, [&](std::string_view name, std::string_view value) {
            ex.own_fields_.append(name).append(": ").append(value).append("\r\n");
          });
        return plan;
      }
      plan.route = &routes.table->sites[plan.route->pool_routes[result.pool]];
      if (state.rewritten) target = state.target;
    }
    if (!plan.route->header_up.empty()) state.request_ops.push_back(&plan.route->header_up);
  }
  const config::ProxyConfig& pool = plan.route->site.proxy;
  const std::string_view extras = connection_extras(connection);
  // Upgrade in an HTTP/1.0 request is ignored (RFC 9110 7.8). So is an
  // upgrade to h2c (cleartext HTTP/2, deprecated by RFC 9113 3.1): once
  // tunnelled, its streams would reach the backend past heft's routing,
  // balancing and header rules ("h2c smuggling"); nghttpx and mitmproxy drop
  // it too. The request goes on as a plain one.
  plan.upgrade = !upgrade_value.empty() && req.version() >= 11 && has_token(connection, "upgrade") &&
                 !has_token(upgrade_value, "h2c");
  // Any expectation besides 100-continue cannot be met: 417.
  plan.expectation_failed = other_expectation;
  plan.expect_continue = continue_expected && !other_expectation;
  if (balance::policy_traits(pool.policy).needs_key) {
    std::string_view key;
    switch (pool.hash_key.kind) {
      case config::HashKey::client_ip: key = ex.client_ip; break;
      case config::HashKey::header: key = req[pool.hash_key.name]; break;
      case config::HashKey::cookie:
        for (auto [at, end] = req.equal_range(http::field::cookie); at != end && key.empty(); ++at)
          key = cookie_value(at->value(), pool.hash_key.name);
        break;
      case config::HashKey::uri: key = target; break;
      case config::HashKey::none: break;  // never: from_json gives a policy that needs a key one
    }
    // A request without the key (no such header or cookie) is placed at
    // random, in proportion to the weights, instead of all such requests
    // hashing "" to one backend (HAProxy balances them round robin, Caddy at random).
    plan.key_hash = key.empty() ? ex.w.next_random() : balance::hash_key(key);
  }

  // The request head for the backend: same for every attempt.
  ex.up_head_.clear();
  ex.up_head_.append(req.method_string()).append(" "sv).append(target).append(" HTTP/1.1\r\n"sv);
  std::string_view forwarded_for;
  std::string forwarded_for_lines;  // several X-Forwarded-For lines are one list (RFC 9110 5.3)
  for (const auto& field : req) {
    std::string_view name = field.name_string();
    if (field.name() == http::field::host) {
      // The target's authority instead, or the site's name for an empty
      // Host (added below). Never removed by being named in Connection: a
      // request must reach the backend with the host it was routed by.
      if (absolute.status == AbsoluteTarget::absolute || field.value().empty()) continue;
    } else if (is_hop_by_hop(field.name()) || named_by_connection(extras, name)) {
      continue;
    }
    if (field.name() == http::field::expect) continue;
    if (name.size() > 2 && (name[0] == 'x' || name[0] == 'X') && name[1] == '-') {
      if (iequals(name, "x-forwarded-for")) {
        if (forwarded_for.empty()) {
          forwarded_for = field.value();
        } else if (!field.value().empty()) {
          if (forwarded_for_lines.empty()) forwarded_for_lines = forwarded_for;
          forwarded_for_lines.append(", ").append(field.value());
          forwarded_for = forwarded_for_lines;
        }
        continue;
      }
      if (iequals(name, "x-forwarded-proto") || iequals(name, "x-forwarded-host") || iequals(name, "x-real-ip"))
        continue;
    }
    if (routed ? state.overrides(name) : !pool.header_up.empty() && overridden(pool.header_up, name)) continue;
    ex.up_head_.field(name, field.value());
  }
  if ((host.empty() || absolute.status == AbsoluteTarget::absolute) &&
      !(routed ? state.overrides("host") : overridden(pool.header_up, "host"))) {
    ex.up_head_.field("Host", !host.empty() ? host : std::string_view(plan.route->default_host));
  }
  // heft's own forwarding fields, unless header_up sets or removes them
  // (e.g. X-Forwarded-Proto https behind a TLS terminator).
  const auto ours = [&](std::string_view name) {
    return routed ? !state.overrides(name) : pool.header_up.empty() || !overridden(pool.header_up, name);
  };
  if (ours("x-forwarded-for")) {
    ex.up_head_.append("X-Forwarded-For: "sv);
    if (!forwarded_for.empty()) ex.up_head_.append(forwarded_for).append(", "sv);
    ex.up_head_.append(ex.client_ip).append("\r\n"sv);
  }
  if (ours("x-forwarded-proto"))
    ex.up_head_.append(ex.client_tls ? "X-Forwarded-Proto: https\r\n"sv : "X-Forwarded-Proto: http\r\n"sv);
  // None asked for (HTTP/1.0 without Host): none.
  if (!host.empty() && ours("x-forwarded-host")) ex.up_head_.field("X-Forwarded-Host", host);
  if (ours("x-real-ip")) ex.up_head_.field("X-Real-IP", ex.client_ip);
  if (routed) state.append_request_fields(ex.up_head_, route_request);
  else append_ops(ex.up_head_, pool.header_up);
  if (plan.upgrade) {
    ex.up_head_.append("Connection: upgrade\r\n"sv);
    ex.up_head_.field("Upgrade", upgrade_value);
  }
  return plan;
}

}  // namespace heft::proxy
