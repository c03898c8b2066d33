// A configuration to start the config fuzz targets from: docs/heftfile.md's
// larger example, as a Heftfile and in its JSON form.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

namespace heft::fuzz {

std::string_view sample_heftfile();
const nlohmann::json& sample_config_json();

}  // namespace heft::fuzz
