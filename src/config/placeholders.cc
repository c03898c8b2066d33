// Placeholder names (see placeholders.h).
#include "config/placeholders.h"

#include <fmt/format.h>

namespace heft::config {
namespace {

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}

struct Alias {
  std::string_view name;
  Placeholder::Kind kind;
};

// Caddy's short names (the Caddyfile's) and long names (its JSON's).
constexpr Alias kAliases[] = {
    {"remote_host", Placeholder::remote_host}, {"http.request.remote.host", Placeholder::remote_host},
    {"host", Placeholder::host},               {"http.request.host", Placeholder::host},
    {"hostport", Placeholder::hostport},       {"http.request.hostport", Placeholder::hostport},
    {"uri", Placeholder::uri},                 {"http.request.uri", Placeholder::uri},
    {"path", Placeholder::path},               {"http.request.uri.path", Placeholder::path},
    {"query", Placeholder::query},             {"http.request.uri.query", Placeholder::query},
    {"method", Placeholder::method},           {"http.request.method", Placeholder::method},
    {"scheme", Placeholder::scheme},           {"http.request.scheme", Placeholder::scheme},
};

}  // namespace

std::optional<Placeholder> placeholder_named(std::string_view name) {
  for (const Alias& alias : kAliases)
    if (alias.name == name) return Placeholder{alias.kind, {}};
  for (auto [prefix, kind] : {std::pair{std::string_view("http.request.header."), Placeholder::header},
                              std::pair{std::string_view("header."), Placeholder::header},
                              std::pair{std::string_view("http.request.cookie."), Placeholder::cookie},
                              std::pair{std::string_view("cookie."), Placeholder::cookie}}) {
    if (name.size() > prefix.size() && name.starts_with(prefix))
      return Placeholder{kind, std::string(name.substr(prefix.size()))};
  }
  return std::nullopt;
}

std::vector<TextPiece> split_placeholders(std::string_view text, std::string* problem) {
  std::vector<TextPiece> pieces;
  std::string literal;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t close = text[i] == '{' ? text.find('}', i + 1) : std::string_view::npos;
    const std::string_view name = close == std::string_view::npos ? std::string_view() : text.substr(i + 1, close - i - 1);
    bool shaped = !name.empty();
    for (char c : name) shaped = shaped && name_char(c);
    if (!shaped) {
      literal.push_back(text[i++]);
      continue;
    }
    auto placeholder = placeholder_named(name);
    if (!placeholder) {
      if (problem)
        *problem = fmt::format("unknown placeholder {{{}}} (heft knows {{remote_host}}, {{host}}, {{hostport}}, "
                               "{{uri}}, {{path}}, {{query}}, {{method}}, {{scheme}}, {{http.request.header.NAME}}, "
                               "{{http.request.cookie.NAME}} and Caddy's long names of these)",
                               name);
      return {};
    }
    if (!literal.empty()) pieces.push_back({std::move(literal), std::nullopt}), literal.clear();
    pieces.push_back({{}, std::move(placeholder)});
    i = close + 1;
  }
  if (!literal.empty()) pieces.push_back({std::move(literal), std::nullopt});
  return pieces;
}

}  // namespace heft::config
