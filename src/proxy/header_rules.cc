// Which header fields heft forwards (see header_rules.h).
#include "proxy/header_rules.h"

namespace heft::proxy {

std::string_view connection_extras(std::string_view connection) {
  const bool none = each_list_item(connection, [](std::string_view item) {
    return item.empty() || iequals(item, "close") || iequals(item, "keep-alive") || iequals(item, "upgrade");
  });
  return none ? std::string_view{} : connection;
}

bool overridden(const std::vector<config::HeaderOp>& ops, std::string_view name) {
  for (const auto& op : ops)
    if (op.op != config::HeaderOp::add && iequals(op.name, name)) return true;
  return false;
}

// Whether any op (add, set or remove) is about `name`.
bool names_field(const std::vector<config::HeaderOp>& ops, std::string_view name) {
  for (const auto& op : ops)
    if (iequals(op.name, name)) return true;
  return false;
}

}  // namespace heft::proxy
