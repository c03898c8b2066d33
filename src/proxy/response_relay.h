// The response relay: the backend's response to the client, through the
// exchange's response sink. The head is held until the first piece of body,
// so a small response goes out in one write; a body is relayed piece by
// piece as it comes (chunk framing removed, the further chunks already read
// joined into one piece), in bounded memory; a body that fails after the
// head was accepted reaches the client cut, with the backend's status.
#pragma once

#include <algorithm>
#include <charconv>
#include <span>
#include <string>
#include <utility>
#include <string_view>
#include <vector>

#include "config/model.h"
#include "proxy/exchange.h"
#include "proxy/header_rules.h"

namespace heft::proxy {

// Relays the response of `conn` (its head read already, or not yet when the
// request body was streamed) to the client of `ex`.
Task<AttemptResult> relay_response(Exchange& ex, UpstreamConnection& conn, ResponseParser& response,
                                   const config::ProxyConfig& pool, bool upgrade);

// Relays an interim (1xx) response as the client's protocol allows, then
// readies the parser for the next head. False when the client is gone.
Task<bool> relay_interim(Exchange& ex, ResponseParser& response, const config::ProxyConfig& pool);

// The fields of the backend's response head that reach the client, as
// `field(name, value)` calls: hop-by-hop fields and those its Connection
// field names stay behind, header_down replaces or adds fields, and a Date
// is added when it has none (RFC 9110 6.6.1, as nginx does) unless
// header_down names Date. A HEAD's or 304's Content-Length is kept, once, as
// the number the parser read. `connection_lines` is scratch space for
// several Connection lines.
// `route_ops`: the response edits of a site's routes (RouteState::response_ops),
// applied after header_down.
template <typename Field>
void for_each_forwarded_field(const ResponseParser& response, const config::ProxyConfig& pool,
                              std::string& connection_lines, std::string_view date, Field&& field,
                              std::span<const std::vector<config::HeaderOp>* const> route_ops = {}) {
  const auto route_overrides = [&](std::string_view name) {
    for (const std::vector<config::HeaderOp>* ops : route_ops)
      if (overridden(*ops, name)) return true;
    return false;
  };
  const unsigned status = response.status();
  const bool no_body = response.is_done();  // HEAD, 204, 304 (length known to be 0 or skipped)
  const std::string_view extras = connection_extras(connection_list(response, connection_lines));
  bool length_sent = false;
  bool date_sent = false;
  char digits[20];
  for (const ResponseParser::Field& f : response.fields()) {
    const std::string_view name = response.name(f);
    if (no_body && f.name == http::field::content_length) {
      // A HEAD's or 304's length says what a GET would get: kept, once. A
      // 204 has none (RFC 9110 8.6). As the number the parser read: a list
      // of one value repeated ('5, 5', which the parser takes) must not be
      // forwarded as such (RFC 9110 8.6).
      if (status != 204 && !std::exchange(length_sent, true)) {
        if (const auto length = response.content_length()) {
          const auto end = std::to_chars(digits, digits + sizeof digits, *length).ptr;
          field(std::string_view("Content-Length"), std::string_view(digits, static_cast<std::size_t>(end - digits)));
        } else {
          field(name, response.value(f));
        }
      }
      continue;
    }
    if (is_hop_by_hop(f.name) || named_by_connection(extras, name)) continue;
    if (!pool.header_down.empty() && overridden(pool.header_down, name)) continue;
    if (!route_ops.empty() && route_overrides(name)) continue;
    date_sent |= f.name == http::field::date;
    field(name, response.value(f));
  }
  // Each list's fields, unless a later list sets or removes them.
  for_each_op_field(pool.header_down, [&](std::string_view name, std::string_view value) {
    if (route_ops.empty() || !route_overrides(name)) field(name, value);
  });
  for (std::size_t l = 0; l < route_ops.size(); ++l)
    for_each_op_field(*route_ops[l], [&](std::string_view name, std::string_view value) {
      for (std::size_t later = l + 1; later < route_ops.size(); ++later)
        if (overridden(*route_ops[later], name)) return;
      field(name, value);
    });
  // A response without a Date gets one, unless header_down names Date: then
  // the configuration decides.
  const bool routes_name_date = std::any_of(route_ops.begin(), route_ops.end(), [](const auto* ops) {
    return names_field(*ops, "Date");
  });
  if (!date_sent && !names_field(pool.header_down, "Date") && !routes_name_date)
    field(std::string_view("Date"), date);
}

}  // namespace heft::proxy
