// Fuzz target: an admin API body. The JSON text (config::parse_json_text),
// applied to the running configuration's JSON tree at one of a few paths by
// each method (admin/config_tree.h tree_apply, as /config/<path> does), then
// read as a configuration (config::from_json, as the API's commit does); or
// the whole body as a configuration (/load). Input: one octet for the method,
// one for the path, then the body.
//
// Checks besides the sanitizers: a refused change leaves the tree exactly as
// it was (tree_apply's promise); an accepted configuration survives its JSON
// form (to_json, then from_json, gives it back); every refusal of
// from_json names its JSON path or says what is wrong.
#include <cstdint>
#include <string>
#include <string_view>

#include "admin/config_tree.h"
#include "config/json.h"
#include "fuzz_input.h"
#include "sample_config.h"

namespace config = heft::config;
using heft::admin::TreeMethod;

namespace {

void check_config(const nlohmann::json& document) {
  config::Result<config::Config> parsed = config::from_json(document);
  if (!parsed.ok()) {
    HEFT_FUZZ_CHECK(!parsed.errors.empty(), "refused without an error");
    for (const config::Diagnostic& d : parsed.errors)
      HEFT_FUZZ_CHECK(!d.message.empty(), "an error without a message at %s", d.path.c_str());
    return;
  }
  config::Result<config::Config> again = config::from_json(config::to_json(*parsed));
  HEFT_FUZZ_CHECK(again.ok() && *again == *parsed, "the configuration does not survive its JSON form");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  heft::fuzz::FuzzInput input(data, size);
  static constexpr TreeMethod kMethods[] = {TreeMethod::get, TreeMethod::post, TreeMethod::put, TreeMethod::patch,
                                            TreeMethod::remove};
  static constexpr std::string_view kPaths[] = {
      "",
      "/",
      "apps/http/servers/srv0/routes/0/handle/0/upstreams",
      "apps/http/servers/srv0/routes/0/handle/0/upstreams/0",
      "apps/http/servers/srv0/routes/0/handle/0/upstreams/0/weight",
      "apps/http/servers/srv0/routes/0/handle/0/upstreams/99",
      "apps/http/servers/srv0/listen/0",
      "apps/http/servers/srv1",
      "apps/http/servers/srv0/routes/0/match/0/host",
      "apps/http/servers/srv0/routes/0/handle/0/load_balancing",
      "apps/http/servers/new%2Fname",
      "apps/http/servers/%zz",
      "admin",
      "apps/http/grace_period",
      "apps/http/servers/srv0/routes/-1",
      "apps/http/servers/srv0/routes/18446744073709551616",
  };
  const std::uint8_t mode = input.byte();
  const std::string_view path = input.pick(kPaths);
  const std::string body(input.rest());

  std::string syntax;
  nlohmann::json value = config::parse_json_text(body, syntax);
  if (mode == 0xff) {  // POST /load
    if (!value.is_discarded()) check_config(value);
    else HEFT_FUZZ_CHECK(!syntax.empty(), "a syntax error without a message");
    return 0;
  }
  const TreeMethod method = kMethods[mode % std::size(kMethods)];
  nlohmann::json tree = heft::fuzz::sample_config_json();
  if (method == TreeMethod::get) {
    heft::admin::TreeError error;
    (void)heft::admin::tree_get(tree, path, error);
    return 0;
  }
  if (value.is_discarded()) {
    HEFT_FUZZ_CHECK(!syntax.empty(), "a syntax error without a message");
    if (method != TreeMethod::remove) return 0;  // 400, the body is not JSON
  }
  if (heft::admin::TreeError error = heft::admin::tree_apply(tree, method, path, std::move(value))) {
    HEFT_FUZZ_CHECK(error.status == 400 || error.status == 404, "status %d", error.status);
    HEFT_FUZZ_CHECK(tree == heft::fuzz::sample_config_json(), "a refused %s changed the tree", std::string(path).c_str());
    return 0;
  }
  check_config(tree);
  return 0;
}
