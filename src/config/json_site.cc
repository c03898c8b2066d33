// Reading one site of the JSON form alone, and the order of the servers (see json.h).
#include <algorithm>
#include <cstdint>
#include <utility>

#include <fmt/format.h>

#include "config/json.h"
#include "config/json_reader.h"

namespace heft::config {

using nlohmann::json;

std::vector<std::string> server_order(const json& servers) {
  std::vector<std::pair<std::pair<int64_t, std::string>, std::string>> ranked;
  for (const auto& [name, _] : servers.items()) {
    const std::string_view digits = std::string_view(name).substr(std::min<size_t>(3, name.size()));
    const bool numbered = name.starts_with("srv") && !digits.empty() && digits.size() <= 9 &&
                          std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
    ranked.push_back({numbered ? std::pair<int64_t, std::string>{std::stoll(std::string(digits)), ""}
                               : std::pair<int64_t, std::string>{INT64_MAX, name},
                      name});
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> names;
  names.reserve(ranked.size());
  for (auto& entry : ranked) names.push_back(std::move(entry.second));
  return names;
}

Result<SiteConfig> site_from_json(const json& listen, const json& route, const std::string& server_pointer,
                                  size_t index) {
  Result<SiteConfig> result;
  reading::Reader reader(result.errors, nullptr);
  SiteConfig site;
  if (auto parsed = reader.listen_addresses(listen, pointer_append(server_pointer, "listen"))) {
    site.port = parsed->first;
    site.bind = std::move(parsed->second);
  }
  reading::Reader::HostPlaces hosts;
  reader.route(route, pointer_append(pointer_append(server_pointer, "routes"), index), site, hosts);
  if (const size_t unlisted = reader.error_count() - result.errors.size())
    result.errors.push_back({"", 0, 0, "the document", fmt::format("{} more errors not listed", unlisted)});
  if (result.errors.empty()) result.value = std::move(site);
  return result;
}

}  // namespace heft::config
