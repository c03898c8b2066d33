// `heft weight SITE UPSTREAM N`: sets one backend's weight in a running heft.
// SITE is a host name of the site, HOST:PORT, :PORT or its index (find_site());
// UPSTREAM its dial address.
// Finds the JSON path from GET /config/ and PATCHes the weight with If-Match,
// so a concurrent change is not overwritten.
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/admin_client.h"
#include "cli/command.h"
#include "cli/site_lookup.h"
#include "heft/balance/balancer.h"

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
  auto site = find_site(config, o.site, why);
  if (!site) return std::nullopt;
  for (size_t u = 0; u < site->upstreams->size(); ++u)
    if ((*site->upstreams)[u].value("dial", "") == o.upstream) return fmt::format("{}/{}/weight", site->upstreams_path, u);
  why = fmt::format("site {} has no upstream {}", o.site, o.upstream);
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
  command->add_option("site", options->site, "Site: one of its host names (HOST or HOST:PORT), :PORT, or its index")->required();
  command->add_option("upstream", options->upstream, "Backend dial address as configured (host:port)")->required();
  command->add_option("weight", options->weight, "New weight (0 drains)")->required()->check(CLI::Range(0L, long{balance::kMaxWeight}));
  add_admin_options(command, options->admin);
  command->callback([options] {
    settle_admin_options(options->admin);
    if (!check_instance(options->admin, options->admin.config, "not changing it")) return set_exit_code(1);
    set_exit_code(run_weight(*options));
  });
}

const bool registered = add_command(15, &setup);

}  // namespace
}  // namespace heft::cli
