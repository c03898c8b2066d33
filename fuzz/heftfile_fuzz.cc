// Fuzz target: a Heftfile (config::parse_heftfile, as `heft run`, `validate`,
// SIGHUP and the admin API's text/heftfile /load read one; resolve(), which
// does DNS, is not called), and `heft fmt`'s format_heftfile.
//
// Checks besides the sanitizers: every refusal names a place (FILE:LINE:COL,
// or the file for "no site blocks");
// a configuration parsed from a file survives its JSON form
// (from_json(to_json(c)) == c, json.h); formatting a valid file keeps its
// meaning (the formatted file parses to the same JSON form).
#include <cstdint>
#include <string>
#include <string_view>

#include "config/heftfile.h"
#include "config/json.h"
#include "fuzz_input.h"

namespace config = heft::config;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  config::Result<config::Config> parsed = config::parse_heftfile(text, "Heftfile");
  if (!parsed.ok()) {
    HEFT_FUZZ_CHECK(!parsed.errors.empty(), "refused without an error");
    for (const config::Diagnostic& d : parsed.errors)
      // One error is about the file as a whole: it names the file only.
      HEFT_FUZZ_CHECK(d.file == "Heftfile" && !d.message.empty() &&
                          ((d.line > 0 && d.column > 0) || d.message.rfind("no site blocks", 0) == 0),
                      "an error without its place: %s", d.to_string().c_str());
  } else {
    const nlohmann::json form = config::to_json(*parsed);
    config::Result<config::Config> again = config::from_json(form);
    HEFT_FUZZ_CHECK(again.ok(), "its own JSON form is refused: %s",
                    again.errors.empty() ? "" : again.errors.front().to_string().c_str());
    HEFT_FUZZ_CHECK(*again == *parsed, "the JSON form changes the configuration: %s", form.dump().c_str());
  }
  config::Result<std::string> formatted = config::format_heftfile(text, "Heftfile");
  if (formatted.ok() && parsed.ok()) {
    config::Result<config::Config> reparsed = config::parse_heftfile(*formatted, "Heftfile");
    HEFT_FUZZ_CHECK(reparsed.ok(), "the formatted file is refused: %s\n%s",
                    reparsed.errors.empty() ? "" : reparsed.errors.front().to_string().c_str(), formatted->c_str());
    HEFT_FUZZ_CHECK(config::to_json(*reparsed) == config::to_json(*parsed), "formatting changes the meaning:\n%s",
                    formatted->c_str());
  }
  return 0;
}
