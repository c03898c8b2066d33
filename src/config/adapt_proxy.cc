// The Heftfile adapter (adapt.h), continued: a site's reverse_proxy becomes
// the JSON form's reverse_proxy handler.
#include <algorithm>

#include <fmt/format.h>

#include "config/adapter.h"
#include "config/values.h"

namespace heft::config::adapting {

namespace {

bool is_flag(std::string_view option) { return option == "backup" || option == "down"; }

bool looks_like_address(std::string_view word) {
  return word.find_first_of(":.?[/") != std::string_view::npos || word == "localhost";
}

}  // namespace

json Adapter::pool(const Directive& d, Site& site, const std::string& base) {
  json handler = {{"handler", "reverse_proxy"}, {"upstreams", json::array()}};
  site.sources.emplace_back(base, place(d.name, "reverse_proxy"));
  site.sources.emplace_back(base + "/upstreams", place(d.name, "reverse_proxy"));
  json& upstreams = handler["upstreams"];
  std::vector<std::map<std::string, Token>> options;  // each upstream's options: where each was set
  bool addresses_missing = false;  // an error told here left an address out
  std::string last_address = "ADDR";
  for (size_t i = 0; i < d.args.size(); ++i) {
    if (contains(kUpstreamOptions, d.args[i].text)) {
      i += option_on_inline_line(d, i, last_address);
      addresses_missing = true;
      continue;
    }
    upstream_address(d.args[i], upstreams, options, site, base);
    last_address = d.args[i].text;
  }
  std::map<std::string, Token> seen;
  for (const Directive& option : d.block) {
    if (option.is_comment) continue;
    const std::string& name = option.name.text;
    if (!contains(kProxyOptions, name)) {
      unknown(option.name, kProxyOptions, "option");
    } else if (name == "to") {
      to_line(option, upstreams, options, site, base, addresses_missing);
    } else if (name == "header_up" || name == "header_down") {
      if (no_block(option)) header_op(option, handler, site, base);
    } else if (!first_time(seen, option.name)) {
      continue;
    } else if (name == "health_headers") {
      health_headers(option, handler, site, base);
    } else if (name == "adaptive") {
      adaptive(option, handler, site, base);
    } else if (name == "lb_policy") {
      if (no_block(option)) lb_policy(option, handler, site, base);
    } else if (name == "next_upstream") {
      if (no_block(option)) next_upstream(option, handler, site, base);
    } else {
      mapped(option, kProxyValues, handler, base, site.sources);
    }
  }
  if (upstreams.empty() && addresses_missing) site.incomplete.push_back(base + "/upstreams");
  return handler;
}

// `reverse_proxy A weight 5`: options are not written after inline addresses
// (each word there is an address). Reports the two places they can go;
// returns how many following words were the option's value (0 or 1).
size_t Adapter::option_on_inline_line(const Directive& d, size_t i, const std::string& last_address) {
  const Token& name = d.args[i];
  const Token* value = !is_flag(name.text) && i + 1 < d.args.size() ? &d.args[i + 1] : nullptr;
  const std::string value_text = value ? value->text : "N";
  const std::string on_to_line = is_flag(name.text) ? name.text : fmt::format("{} {}", name.text, value_text);
  const std::string in_query = is_flag(name.text) ? name.text : fmt::format("{}={}", name.text, value_text);
  error(name, fmt::format("\"{}\" is a backend option, not an address: write \"to {} {}\" in the reverse_proxy "
                          "block, or \"{}?{}\"",
                          name.text, last_address, on_to_line, last_address, in_query));
  return value ? 1 : 0;
}

// "host:port[?weight=N&...]" (Caddy's shortcut form) as an upstream: its dial
// without the query and without "http://" (plain HTTP is the only kind), its
// options from the query.
void Adapter::upstream_address(const Token& t, json& upstreams, std::vector<std::map<std::string, Token>>& options,
                               Site& site, const std::string& base) {
  std::string_view text = t.text;
  std::string_view query;
  if (const size_t q = text.find('?'); q != std::string_view::npos) {
    query = text.substr(q + 1);
    text = text.substr(0, q);
  }
  if (const std::string scheme = scheme_of(text); scheme == "http") text.remove_prefix(scheme.size() + 3);
  const std::string at = fmt::format("{}/upstreams/{}", base, upstreams.size());
  json upstream = {{"dial", std::string(text)}};
  site.sources.emplace_back(at, place(t, "backend address"));
  site.sources.emplace_back(at + "/dial", place(t, "backend address"));
  std::map<std::string, Token> set_options;
  const int query_column = t.column + (t.quoted ? 1 : 0) + int(t.text.size() - query.size());
  size_t start = 0;
  while (!query.empty() && start <= query.size()) {
    size_t amp = query.find('&', start);
    if (amp == std::string_view::npos) amp = query.size();
    const std::string_view pair = query.substr(start, amp - start);
    if (pair.empty()) {  // "a:1?weight=5&&down" or a trailing "&": nothing there (Caddy ignores it too)
      start = amp + 1;
      continue;
    }
    const size_t eq = pair.find('=');
    const Token key{std::string(pair.substr(0, eq)), t.line, query_column + int(start), false};
    Token value{"", t.line, key.column + int(key.text.size()) + 1, false};
    const bool has_value = eq != std::string_view::npos;
    if (has_value) value.text = std::string(pair.substr(eq + 1));
    if (!contains(kUpstreamOptions, key.text)) {
      unknown(key, kUpstreamOptions, "backend option");
    } else if (!first_time(set_options, key)) {
      // ?weight=5&weight=6: reported, the first stays
    } else if (is_flag(key.text) && has_value) {
      // ?backup=true or =false; another word is the validator's to name
      set(upstream, "/" + key.text, value.text == "true" || value.text == "false" ? json(value.text == "true") : json(value.text),
          at, place(value, key.text), site.sources);
    } else if (is_flag(key.text)) {
      upstream_option(key, nullptr, upstream, at, site);
    } else if (!has_value || value.text.empty()) {
      error(key, fmt::format("missing value for \"{}\"", key.text));
    } else {
      upstream_option(key, &value, upstream, at, site);
    }
    start = amp + 1;
  }
  upstreams.push_back(std::move(upstream));
  options.push_back(std::move(set_options));
}

// One of a backend's options: a flag (backup, down; `value` null) or one
// with its value.
void Adapter::upstream_option(const Token& name, const Token* value, json& upstream, const std::string& at,
                              Site& site) {
  if (!value) {
    set(upstream, "/" + name.text, true, at, place(name, name.text), site.sources);
    return;
  }
  const auto mapping = std::find_if(kUpstreamValues.begin(), kUpstreamValues.end(),
                                    [&](const Mapping& m) { return m.name == name.text; });
  if (mapping != kUpstreamValues.end())
    set(upstream, mapping->pointer, converted(*value, mapping->kind), at, place(*value, name.text), site.sources);
}

// to ADDR [ADDR...] [weight N] [max_fails N] [fail_timeout DUR] [backup] [down] [slow_start DUR]
//    [max_conns N]: every option applies to every address of the line.
void Adapter::to_line(const Directive& d, json& upstreams, std::vector<std::map<std::string, Token>>& options,
                      Site& site, const std::string& base, bool& addresses_missing) {
  if (!no_block(d)) return;
  const size_t first_new = upstreams.size();
  size_t i = 0;
  for (; i < d.args.size(); ++i) {
    const Token& arg = d.args[i];
    if (contains(kUpstreamOptions, arg.text)) break;
    if (!looks_like_address(arg.text) && !closest_match(arg.text, kUpstreamOptions).empty())
      break;  // a misspelled option, reported below
    upstream_address(arg, upstreams, options, site, base);
  }
  if (i == 0) {
    error(d.args.empty() ? d.name : d.args[0], "\"to\" needs at least one backend address");
    addresses_missing = true;
    return;
  }
  std::map<std::string, Token> seen;
  for (; i < d.args.size(); ++i) {
    const Token& name = d.args[i];
    if (!contains(kUpstreamOptions, name.text)) {
      unknown(name, kUpstreamOptions, "option");
      // Its value, if the next word is not an option: the rest of the line is still checked.
      if (i + 1 < d.args.size() && !contains(kUpstreamOptions, d.args[i + 1].text)) ++i;
      continue;
    }
    const bool first_on_line = first_time(seen, name);
    const Token* value = nullptr;
    if (!is_flag(name.text)) {
      if (i + 1 >= d.args.size()) {
        error(name, fmt::format("missing value for \"{}\"", name.text));
        return;
      }
      value = &d.args[++i];
    }
    if (!first_on_line) continue;
    // An address may have set it already in its query: to A?weight=2 weight 3.
    for (size_t k = first_new; k < upstreams.size(); ++k)
      if (first_time(options[k], name))
        upstream_option(name, value, upstreams[k], fmt::format("{}/upstreams/{}", base, k), site);
  }
}

// lb_policy NAME, Caddy's `header NAME` / `cookie NAME` / `uri_hash` /
// `client_ip_hash`, nginx's `ip_hash`, or `hash KEY [NAME]`: the handler's
// selection_policy {"policy", "key", "name"}.
void Adapter::lb_policy(const Directive& d, json& handler, Site& site, const std::string& base) {
  if (d.args.empty()) {
    error(d.name, "missing value for \"lb_policy\"");
    return;
  }
  const std::string at = base + "/load_balancing/selection_policy";
  const Token& word = d.args[0];
  json selection = json::object();
  site.sources.emplace_back(at, place(word, "lb_policy"));
  const auto policy = [&](std::string_view name) {
    selection["policy"] = name;
    site.sources.emplace_back(at + "/policy", place(word, "lb_policy"));
  };
  const auto key = [&](std::string_view name, const Token& written) {
    selection["key"] = name;
    site.sources.emplace_back(at + "/key", place(written, "lb_policy"));
  };
  size_t used = 1;
  const auto named_key = [&](const Token& written) {
    policy("hash");
    key(written.text, written);
    if (d.args.size() <= used) {
      error(written, fmt::format("\"{0}\" needs a name, e.g. {0} {1}", written.text,
                                 written.text == "header" ? "X-User-ID" : "session"));
      site.incomplete.push_back(at + "/name");
      return;
    }
    const Token& name = d.args[used++];
    selection["name"] = name.text;
    site.sources.emplace_back(at + "/name", place(name, "lb_policy"));
  };
  if (word.text == "ip_hash" || word.text == "client_ip_hash") {
    policy("hash");
    key("client_ip", word);
  } else if (word.text == "uri_hash") {
    policy("hash");
    key("uri", word);
  } else if (word.text == "header" || word.text == "cookie") {
    named_key(word);
  } else if (word.text == "hash" && d.args.size() >= 2) {
    used = 2;
    if (d.args[1].text == "header" || d.args[1].text == "cookie") {
      named_key(d.args[1]);
    } else {
      policy("hash");
      key(d.args[1].text, d.args[1]);  // client_ip, uri, or a word the validator names
    }
  } else {
    policy(word.text);  // a policy, or a word the validator names
  }
  if (d.args.size() > used)
    error(d.args[used], fmt::format("unexpected argument \"{}\" for lb_policy {}", d.args[used].text, word.text));
  handler["load_balancing"]["selection_policy"] = std::move(selection);
}

void Adapter::next_upstream(const Directive& d, json& handler, Site& site, const std::string& base) {
  if (d.args.empty()) {
    error(d.name, "missing value for \"next_upstream\"");
    return;
  }
  const std::string at = base + "/load_balancing/next_upstream";
  site.sources.emplace_back(at, place(d.name, "next_upstream"));
  json conditions = json::array();
  for (const Token& arg : d.args) {
    site.sources.emplace_back(fmt::format("{}/{}", at, conditions.size()), place(arg, "next_upstream"));
    conditions.push_back(arg.text);
  }
  handler["load_balancing"]["next_upstream"] = std::move(conditions);
}

// header_up Name value | +Name value | -Name (and header_down).
void Adapter::header_op(const Directive& d, json& handler, Site& site, const std::string& base) {
  if (d.args.empty()) {
    error(d.name, fmt::format("missing header name for \"{}\"", d.name.text));
    return;
  }
  const Token& name = d.args[0];
  std::string header = name.text;
  std::string_view op = "set";
  if (header.starts_with('+')) op = "add", header.erase(0, 1);
  else if (header.starts_with('-')) op = "delete", header.erase(0, 1);
  if (op == "delete" && d.args.size() > 1) {
    error(d.args[1], fmt::format("\"{}\" removes a header and takes no value", name.text));
    return;
  }
  if (op != "delete" && d.args.size() < 2) {
    error(name, fmt::format("missing value for header \"{}\"", printable(header)));
    return;
  }
  if (d.args.size() > 2) {
    error(d.args[2], "unexpected argument (quote values that contain spaces)");
    return;
  }
  const std::string_view list = d.name.text == "header_up" ? "request" : "response";
  json& ops = handler["headers"][list];
  if (ops.is_null()) ops = json::array();
  const std::string at = fmt::format("{}/headers/{}/{}", base, list, ops.size());
  json entry = {{"op", op}, {"name", header}};
  site.sources.emplace_back(at, place(name, d.name.text));
  site.sources.emplace_back(at + "/name", place(name, d.name.text));
  if (op != "delete") {
    entry["value"] = d.args[1].text;
    site.sources.emplace_back(at + "/value", place(d.args[1], d.name.text));
  }
  ops.push_back(std::move(entry));
}

// health_headers { Name value ... }: headers the probes set.
void Adapter::health_headers(const Directive& d, json& handler, Site& site, const std::string& base) {
  if (!no_args(d)) return;
  if (!d.has_block) {
    error(d.name, "health_headers needs a block: health_headers { Name value }");
    return;
  }
  const std::string at = base + "/health_checks/active/headers";
  site.sources.emplace_back(at, place(d.name, "health_headers"));
  json headers = json::array();
  for (const Directive& header : d.block) {
    if (header.is_comment || !no_block(header)) continue;
    if (header.args.size() != 1) {
      error(header.args.empty() ? header.name : header.args[1],
            header.args.empty() ? fmt::format("missing value for header \"{}\"", header.name.text)
                                : std::string("unexpected argument (quote values that contain spaces)"));
      continue;
    }
    // header_up's + and - mean add and remove (and are token characters, so
    // "+X" would read as a name); a probe's headers are only set.
    if (header.name.text.starts_with('+') || header.name.text.starts_with('-')) {
      error(header.name, fmt::format("health_headers only sets headers: write \"{}\" without the {}",
                                     header.name.text.substr(1), header.name.text.front()));
      continue;
    }
    const std::string entry = fmt::format("{}/{}", at, headers.size());
    site.sources.emplace_back(entry, place(header.name, "health_headers"));
    site.sources.emplace_back(entry + "/name", place(header.name, "health_headers"));
    site.sources.emplace_back(entry + "/value", place(header.args[0], "health_headers"));
    headers.push_back({{"name", header.name.text}, {"value", header.args[0].text}});
  }
  handler["health_checks"]["active"]["headers"] = std::move(headers);
}

// adaptive [off] [{ ... }]: bare, it is on with the defaults.
void Adapter::adaptive(const Directive& d, json& handler, Site& site, const std::string& base) {
  site.sources.emplace_back(base + "/adaptive", place(d.name, "adaptive"));
  if (!d.args.empty()) {
    if (d.args[0].text == "off" && d.args.size() == 1 && !d.has_block)
      set(handler, "/adaptive/enabled", false, base, place(d.args[0], "adaptive"), site.sources);
    else
      error(d.args[0], "adaptive takes no arguments other than \"off\"");
    return;
  }
  set(handler, "/adaptive/enabled", true, base, place(d.name, "adaptive"), site.sources);
  for (const Directive* option : options(d.block, kAdaptiveOptions, "adaptive option"))
    mapped(*option, kAdaptiveValues, handler, base, site.sources);
}

}  // namespace heft::config::adapting
