// Placeholders in header values, static responses and rewrites: `{host}`,
// `{uri}`, `{http.request.header.X-Id}`, ... with Caddy's short and long
// names (docs/routes.md lists them). The validator checks them here; the
// proxy compiles them once into templates (proxy/route_program.h) so a
// request only copies bytes.
//
// A `{...}` counts as a placeholder when what is between the braces is a
// name (letters, digits, '.', '_', '-'); anything else (a JSON body such as
// {"ok": true}) is literal text. Pure functions, safe from any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace heft::config {

struct Placeholder {
  enum Kind {
    remote_host,  // the client's IP address
    host,         // Host without its port
    hostport,     // Host as sent
    uri,          // the target: path and query
    path,         // the path
    query,        // the query, without '?'
    method,
    scheme,           // "http"
    header,           // a request field, `name` (several lines joined with ", ")
    cookie,           // a request cookie, `name`
  };
  Kind kind = host;
  std::string name;  // header / cookie

  bool operator==(const Placeholder&) const = default;
};

// The placeholder a name stands for ("host", "http.request.header.X"), or nullopt.
std::optional<Placeholder> placeholder_named(std::string_view name);

// A text cut into literal runs and placeholders, in order.
struct TextPiece {
  std::string literal;                     // when !placeholder
  std::optional<Placeholder> placeholder;  // else
};

// `text` in pieces, or "" and the problem (an unknown placeholder named).
std::vector<TextPiece> split_placeholders(std::string_view text, std::string* problem);

}  // namespace heft::config
