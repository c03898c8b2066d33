// A site's routes at request time: its handlers (config/route_model.h)
// compiled once when the route table is built — path patterns lower-cased
// and classified (exact, prefix, suffix, substring, glob), groups numbered,
// placeholders cut into templates, address ranges parsed — so a request
// runs them with compares and copies only: no allocation once its Exchange's
// buffers have grown, no regular expression.
//
// run() walks the handlers as Caddy does: a subroute's routes in order, a
// route whose matcher sets match runs its handlers, one route per group, a
// terminal route ends its list, and the first handler that answers (a
// reverse_proxy or a static_response) ends everything. Rewrites and header
// edits met on the way are noted in the RouteState for the plan to apply.
//
// Thread safety: a RouteProgram is immutable once built and shared by every
// worker; a RouteState belongs to one Exchange.
#pragma once

#include <bitset>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/model.h"
#include "config/placeholders.h"
#include "config/values.h"
#include "proxy/head_builder.h"
#include "proxy/http_io.h"

namespace heft::proxy {

// What the routes read of a request (views into its head).
struct RouteRequest {
  const RequestHead* head = nullptr;
  std::string_view method;
  std::string_view target;  // origin-form: path and query
  std::string_view host;    // as sent (port included)
  std::string_view client_ip;
};

// A text with placeholders, compiled.
class Template {
 public:
  Template() = default;
  explicit Template(std::string_view text);
  bool literal() const { return pieces_.size() <= 1 && (pieces_.empty() || pieces_[0].literal); }
  // The text for `request`, appended to `out`.
  void append_to(std::string& out, const RouteRequest& request) const;

 private:
  struct Piece {
    bool literal = true;
    config::Placeholder::Kind kind = config::Placeholder::host;
    std::string text;  // the literal, or the header / cookie name
  };
  std::vector<Piece> pieces_;
};

// A header edit with its value compiled.
struct CompiledOp {
  config::HeaderOp::Op op = config::HeaderOp::set;
  std::string name;
  Template value;
};
using CompiledOps = std::vector<CompiledOp>;
CompiledOps compile_ops(const std::vector<config::HeaderOp>& ops);

struct CompiledHandler;

// What run() leaves for the plan: the rewritten target, the request edits
// (route edits, then the pool's header_up, applied in that order) and the
// response edits of headers handlers on the way. Reused request after
// request: its buffers keep their capacity.
struct RouteState {
  std::string target;      // the target after rewrites (when `rewritten`)
  bool rewritten = false;
  std::string clean_path;  // the path as path matchers see it (see route_program.cc)
  bool clean_ready = false;
  std::vector<const CompiledOps*> request_ops;
  std::vector<const std::vector<config::HeaderOp>*> response_ops;
  std::string scratch;  // a template's text

  void reset() {
    rewritten = clean_ready = false;
    request_ops.clear();
    response_ops.clear();
  }
  // Whether an edit sets or removes `name`: the request's own field stays behind.
  bool overrides(std::string_view name) const;
  // The request edits, in order, into `out` (a later set or remove of a
  // field undoes an earlier edit of it).
  void append_request_fields(HeadBuilder& out, const RouteRequest& request);
};

// How a site's routes ended for a request.
struct RouteResult {
  enum Kind { proxy, respond, nothing };  // nothing: no handler answered (Caddy's empty 200)
  Kind kind = nothing;
  std::size_t pool = 0;                     // proxy: the site's pool (RouteHandler::pool)
  const CompiledHandler* answer = nullptr;  // respond: the static_response
};

// Whether "Name: value\r\n" lines hold a field `name` (ignoring case).
bool has_field_line(std::string_view lines, std::string_view name);

class RouteProgram {
 public:
  explicit RouteProgram(const std::vector<config::RouteHandler>& handle);
  ~RouteProgram();
  RouteResult run(const RouteRequest& request, RouteState& state) const;

  // A static_response's status, fields and body for `request`: the fields as
  // "Name: value\r\n" lines into `fields`, the body into `body`.
  static unsigned respond(const CompiledHandler& answer, const RouteRequest& request, std::string& fields,
                          std::string& body, bool& close);

 private:
  std::unique_ptr<std::vector<CompiledHandler>> handlers_;
};

}  // namespace heft::proxy
