// Which header fields heft forwards, in either direction: hop-by-hop fields
// (RFC 9110 7.6.1) and those a Connection field names stay behind; a
// configuration's header_up / header_down ops replace or add fields.
//
// Pure functions; safe from any thread.
#pragma once

#include <string_view>
#include <vector>

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/field.hpp>

#include "config/model.h"
#include "proxy/head_builder.h"
#include "net/http_chars.h"

namespace heft::proxy {

inline bool iequals(std::string_view a, std::string_view b) { return boost::beast::iequals(a, b); }

// Beast names known fields when it parses them, so the check is a switch.
// Content-Length is here too: heft writes a message's framing itself.
inline bool is_hop_by_hop(boost::beast::http::field name) {
  using boost::beast::http::field;
  switch (name) {
    case field::te:
    case field::trailer:
    case field::upgrade:
    case field::connection:
    case field::keep_alive:
    case field::proxy_connection:
    case field::transfer_encoding:
    case field::content_length:
      return true;
    default: return false;
  }
}

// The Connection header's tokens other than close / keep-alive / upgrade:
// fields it names are hop-by-hop too. Usually there are none, and then no
// field needs the check.
std::string_view connection_extras(std::string_view connection);

inline bool named_by_connection(std::string_view extras, std::string_view name) {
  return !extras.empty() && has_token(extras, name);
}

// Whether an op sets or removes `name`: the message's own field is dropped
// then (the ops apply after it, in order).
bool overridden(const std::vector<config::HeaderOp>& ops, std::string_view name);
// Whether any op (add, set or remove) is about `name`.
bool names_field(const std::vector<config::HeaderOp>& ops, std::string_view name);
// The fields the ops add or set, as `field(name, value)` calls in order (a
// later set or remove of a field undoes an earlier op on it).
template <typename Field>
void for_each_op_field(const std::vector<config::HeaderOp>& ops, Field&& field) {
  for (std::size_t k = 0; k < ops.size(); ++k) {
    if (ops[k].op == config::HeaderOp::remove) continue;
    bool undone = false;
    for (std::size_t later = k + 1; later < ops.size() && !undone; ++later)
      undone = ops[later].op != config::HeaderOp::add && iequals(ops[later].name, ops[k].name);
    if (!undone) field(std::string_view(ops[k].name), std::string_view(ops[k].value));
  }
}
// The same, into an HTTP/1.1 head.
inline void append_ops(HeadBuilder& out, const std::vector<config::HeaderOp>& ops) {
  for_each_op_field(ops, [&out](std::string_view name, std::string_view value) { out.field(name, value); });
}

}  // namespace heft::proxy
