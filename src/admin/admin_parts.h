// Small pieces of the admin API's answers shared by its files (admin_api.cc,
// site_write.cc); not for other layers.
#pragma once

#include <string>
#include <vector>

#include "config/model.h"

namespace heft::admin {

// The ETag of a configuration serialized as `serialized`: FNV-1a over it,
// quoted ("\"3f9a01c2d4e5f607\"").
std::string make_etag(const std::string& serialized);

// The diagnostics as one message: the first 200, then how many more; `if_none` when there are none.
std::string joined(const std::vector<config::Diagnostic>& diagnostics, const std::string& if_none);

// A request target without its query.
std::string path_of(const std::string& target);

}  // namespace heft::admin
