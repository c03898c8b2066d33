// `heft weight SITE UPSTREAM N`: sets one backend's weight in a running heft.
// SITE is a host name of the site or its index; UPSTREAM its dial address.
// Finds the JSON path from GET /config/ and PATCHes the weight with If-Match,
// so a concurrent change is not overwritten.
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/admin_client.h"
#include "cli/command.h"

namespace heft::cli {
namespace {

using json = nlohmann::json;

struct WeightOptions {
  std::string site;
  std::string upstream;
  long weight = -1;
  AdminClientOptions admin;
};

// The JSON path of the upstream's weight, or nullopt with `why` set.
std::optional<std::string> find_weight_path(const json& config, const WeightOptions& o, std::string& why) {
  const json* servers = nullptr;
  try {
    servers = &config.at("apps").at("http").at("servers");
  } catch (const json::exception&) {
    why = "the configuration has no servers";
    return std::nullopt;
  }
  bool numeric = !o.site.empty() && o.site.find_first_not_of("0123456789") == std::string::npos;
  size_t site_index = 0;
  // Sites are numbered across servers in order (srv0's routes first), as in config.sites.
  std::vector<std::pair<std::string, size_t>> order;
  for (size_t s = 0; servers->contains(fmt::format("srv{}", s)); ++s) {
    const json& routes = (*servers)[fmt::format("srv{}", s)].value("routes", json::array());
    for (size_t r = 0; r < routes.size(); ++r, ++site_index) {
      const json& route = routes[r];
      bool match = numeric && std::stoul(o.site) == site_index;
      if (!numeric)
        for (const json& m : route.value("match", json::array()))
          for (const json& h : m.value("host", json::array()))
            if (h.is_string() && h.get<std::string>() == o.site) match = true;
      if (!match) continue;
      std::string base = fmt::format("/config/apps/http/servers/srv{}/routes/{}/handle/0/routes/0/handle/0", s, r);
      const json* upstreams = nullptr;
      try {
        upstreams = &route.at("handle").at(0).at("routes").at(0).at("handle").at(0).at("upstreams");
      } catch (const json::exception&) {
        why = "site " + o.site + " has no reverse_proxy upstreams";
        return std::nullopt;
      }
      for (size_t u = 0; u < upstreams->size(); ++u)
        if ((*upstreams)[u].value("dial", "") == o.upstream) return fmt::format("{}/upstreams/{}/weight", base, u);
      why = fmt::format("site {} has no upstream {}", o.site, o.upstream);
      return std::nullopt;
    }
  }
  why = "no site " + o.site + " (give a host name or an index)";
  return std::nullopt;
}

int run_weight(const WeightOptions& o) {
  AdminReply current = admin_request(o.admin, "GET", "/config/");
  if (current.status != 200) {
    fmt::print(stderr, "heft: {}\n", current.error_message());
    return 1;
  }
  std::string why;
  auto path = find_weight_path(json::parse(current.body, nullptr, false), o, why);
  if (!path) {
    fmt::print(stderr, "heft: {}\n", why);
    return 1;
  }
  // PATCH needs the key to exist; POST sets it either way (weight may be omitted when 1).
  AdminReply reply = admin_request(o.admin, "POST", *path, std::to_string(o.weight), "application/json", current.etag);
  if (reply.status != 200) {
    fmt::print(stderr, "heft: weight refused: {}\n", reply.error_message());
    return 1;
  }
  fmt::print(stderr, "heft: {} {} weight {}\n", o.site, o.upstream, o.weight);
  return 0;
}

void setup(CLI::App& root) {
  auto options = std::make_shared<WeightOptions>();
  CLI::App* command = root.add_subcommand("weight", "Set one backend's weight in a running heft");
  command->add_option("site", options->site, "Site: one of its host names, or its index")->required();
  command->add_option("upstream", options->upstream, "Backend dial address as configured (host:port)")->required();
  command->add_option("weight", options->weight, "New weight (0 drains)")->required()->check(CLI::NonNegativeNumber);
  add_admin_options(command, options->admin);
  command->callback([options] { set_exit_code(run_weight(*options)); });
}

const bool registered = add_command(15, &setup);

}  // namespace
}  // namespace heft::cli
