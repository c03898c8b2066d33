// The check of a health_body pattern, with the engine and flags the active
// health checks match with (src/health/health_checker.cc): a pattern the
// configuration accepts is one the probes can use. In its own file so that
// Boost.Regex's headers are compiled here only (the layer's headers stay
// free of Boost).
#include <boost/regex.hpp>

#include "config/values.h"

namespace heft::config {

std::string health_body_problem(std::string_view pattern) {
  if (std::string problem = utf8_problem(pattern); !problem.empty()) return problem;
  try {
    boost::regex compiled(pattern.begin(), pattern.end(), health_body_flags());
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

unsigned health_body_flags() {
  // ECMAScript with ^, $ and . as std::regex had them (^ and $ at the ends of
  // the body only, . never a newline).
  return boost::regex::ECMAScript | boost::regex::no_mod_m | boost::regex::no_mod_s;
}

}  // namespace heft::config
