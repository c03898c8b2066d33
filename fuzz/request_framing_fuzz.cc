// Structure-aware fuzz target: requests built from meaningful parts — method,
// target, version, header lines (Host, Content-Length and Transfer-Encoding
// in their valid and tricky forms: duplicates, lists, signs, case, space
// before the colon, obs-fold, bare LF or CR), a body (raw octets, or chunks
// with size tricks: signs, 0x, leading zeros, hex overflow, extensions,
// missing or bare-LF line ends, trailers) and maybe a second request behind
// it — each read by heft as a client's bytes are (request_pipeline.h).
//
// The check: heft's decision never disagrees with the reference model
// (rfc9112_model.h: RFC 9112 6.3 and 7.1 with heft's documented stricter
// rules). Refused by one, refused by the other; otherwise the same framing
// (length N or chunked), and the body either complete for both, with the
// same octets, ending at the same octet (where the next request starts), or
// complete for neither. Input: the choices, one or two octets each.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "proxy/block_buffer.h"
#include "request_pipeline.h"
#include "rfc9112_model.h"

namespace {

using heft::fuzz::FuzzInput;
using heft::fuzz::RequestOutcome;
namespace model = heft::fuzz::rfc9112;

struct Labelled {
  const char* text;
  bool valid;
};

// Request targets: whether each is one heft serves (RFC 9112 3.2: origin,
// absolute or asterisk form; heft: http/https only, no userinfo, no
// fragment), and for absolute ones the authority (then the Host that counts).
struct Target {
  const char* text;
  bool valid;
  const char* authority;  // absolute-form; null otherwise
  bool authority_valid;
};
constexpr Target kTargets[] = {
    {"/", true, nullptr, true},
    {"/a/b?c=d&e", true, nullptr, true},
    {"/%7e/x;p", true, nullptr, true},
    {"*", true, nullptr, true},  // OPTIONS only
    {"http://a.test/x", true, "a.test", true},
    {"HTTPS://a.test:8443", true, "a.test:8443", true},
    {"http://a.test?q", true, "a.test", true},
    {"http://[::1]:81/", true, "[::1]:81", true},
    {"http://a..test/", true, "a..test", false},
    {"http://a.test:0/", true, "a.test:0", false},
    {"/a#frag", false, nullptr, true},
    {"ftp://a.test/", false, nullptr, true},
    {"http://u@a.test/", false, nullptr, true},
    {"http:///x", false, nullptr, true},
    {"a.test:80", false, nullptr, true},
};

struct Version {
  const char* text;
  enum { v11, v10, refused } kind;
};
constexpr Version kVersions[] = {
    {"HTTP/1.1", Version::v11}, {"HTTP/1.0", Version::v10}, {"HTTP/1.7", Version::v11},
    {"HTTP/2.0", Version::refused}, {"HTTP/1.10", Version::refused}, {"http/1.1", Version::refused},
    {"HTTP/0.9", Version::refused},
};

constexpr const char* kMethods[] = {"GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "CONNECT", "X-CUSTOM"};

// Host values: whether heft takes each (RFC 3986 host and port; heft's rules
// in docs/proxy.md: no "..", no leading dot, port 1-65535, a name before a port).
constexpr Labelled kHosts[] = {
    {"a.test", true},  {"a.test:8080", true}, {"[::1]:80", true},   {"a.test:", true},    {"", true},
    {"A.Test", true},  {"a..test", false},    {":80", false},       {"a test", false},    {"a/b", false},
    {"[::1", false},   {"a.test:99999", false}, {"a@b", false},     {".a.test", false},   {"a.test:0", false},
};

const char* const kLengthNames[] = {"Content-Length", "content-length", "CONTENT-LENGTH", "Content-length"};
const char* const kEncodingNames[] = {"Transfer-Encoding", "transfer-encoding", "TRANSFER-ENCODING"};
constexpr const char* kEncodings[] = {"chunked",        "Chunked",  "CHUNKED",     " chunked ",   "gzip, chunked",
                                      "chunked, chunked", "identity", "",          "chunked;q=1", "xchunked",
                                      "chunked,",       "chunked\t"};
constexpr const char* kOtherFields[] = {"X-A: b", "Connection: keep-alive", "Accept: */*", "X-Empty:",
                                        "Content_Length: 5", "Transfer_Encoding: chunked", "X-Obs: caf\xc3\xa9",
                                        "X-Tab: a\tb"};

std::string length_value(FuzzInput& in, std::size_t body_size) {
  const std::size_t n = in.below(4) == 0 ? in.below(40) : body_size;
  const std::string d = std::to_string(n);
  const std::string other = std::to_string(n + 1 + in.below(3));
  switch (in.below(18)) {
    case 0: return " " + d + " ";
    case 1: return d + ", " + d;
    case 2: return d + "," + d;
    case 3: return d + ", " + other;
    case 4: return "+" + d;
    case 5: return "-" + d;
    case 6: return "0x" + d;
    case 7: return "";
    case 8: return d + ",";
    case 9: return "," + d;
    case 10: return "0" + d;
    case 11: return std::string(19 - std::min<std::size_t>(d.size(), 19), '0') + d;
    case 12: return d + " " + d;
    case 13: return "99999999999999999999";
    case 14: return d + "\t";
    default: return d;
  }
}

// A chunk-size line's size, written plainly or not.
std::string chunk_size_text(FuzzInput& in, std::size_t size) {
  char hex[32];
  std::snprintf(hex, sizeof hex, "%zx", size);
  char upper[32];
  std::snprintf(upper, sizeof upper, "%zX", size);
  const auto join = [](const char* a, const char* b) { return std::string(a).append(b); };
  switch (in.below(24)) {
    case 0: return upper;
    case 1: return join("000", hex);
    case 2: return join("+", hex);
    case 3: return join("-", hex);
    case 4: return join("0x", hex);
    case 5: return join(" ", hex);
    case 6: return join("1000000000000000", hex);  // beyond 64 bits
    case 7: return "ffffffffffffffff";
    case 8: return join(hex, " ");
    case 9: return "";
    default: return hex;
  }
}

constexpr const char* kExtensions[] = {";a=b", ";a=\"q q\"", " ; a = b", ";", ";a=", ";a", ";a=\"\\\"\"",
                                       ";a=\"x", ";a=b;c", "\t;a", ";a =b", ";=b", "; a", ";a=\"\\\x01\""};
constexpr const char* kLineEnds[] = {"\r\n", "\r\n", "\r\n", "\r\n", "\r\n", "\r\n", "\n", "", "\r", "x\r\n"};

std::string chunked_body(FuzzInput& in) {
  std::string body;
  const std::size_t chunks = in.below(4);
  const auto line_end = [&] { return in.below(6) ? "\r\n" : in.pick(kLineEnds); };
  for (std::size_t i = 0; i < chunks; ++i) {
    const std::size_t size = 1 + in.below(40);
    body += chunk_size_text(in, size);
    if (in.below(4) == 0) body += in.pick(kExtensions);
    body += line_end();
    const std::size_t written = in.below(8) ? size : size + in.below(3) - 1;  // a size that lies, at times
    for (std::size_t k = 0; k < written; ++k) body += static_cast<char>('a' + (i + k) % 26);
    body += line_end();
  }
  static constexpr const char* kLastSizes[] = {"000", "00", "0x0", "+0", "", "0 "};
  body += in.below(6) ? "0" : in.pick(kLastSizes);
  if (in.below(5) == 0) body += in.pick(kExtensions);
  body += line_end();
  switch (in.below(8)) {
    case 0: body += "T: v\r\n"; break;
    case 1: body += "T: v\r\nU:\r\n"; break;
    case 2: body += "T v\r\n"; break;
    case 3: body += "T: v\n"; break;
    case 4: body += " T: v\r\n"; break;
    default: break;
  }
  body += line_end();
  return body;
}

struct Expected {
  bool reject = false;
  std::string why;
  model::Framing framing;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const std::size_t step = in.below(8) == 0 ? 1 + in.below(64) : 1u << 20;
  static constexpr std::size_t kCapacities[] = {64 * 1024, 1, 3, 16};
  const std::size_t capacity = in.pick(kCapacities);

  Expected expected;
  const auto reject = [&](const std::string& why) {
    if (!expected.reject) expected.why = why;
    expected.reject = true;
  };

  std::string request;
  for (std::size_t i = in.below(3); i > 0; --i) request += "\r\n";
  const std::string method = in.pick(kMethods);
  const Target& target = in.pick(kTargets);
  const Version& version = in.pick(kVersions);
  request += method + " " + target.text + " " + version.text + "\r\n";
  if (version.kind == Version::refused) reject("version");
  if (!target.valid) reject("target");
  if (std::string_view(target.text) == "*" && method != "OPTIONS") reject("* with another method than OPTIONS");
  if (method == "CONNECT") reject("CONNECT");

  // Body first (the fields may state its length), written after the head.
  std::string body;
  const std::size_t body_kind = in.below(3);
  if (body_kind == 1) body = chunked_body(in);
  else if (body_kind == 2) body = std::string(in.below(60), 'b');

  std::vector<std::pair<std::string, std::string>> fields;
  int hosts = 0;
  bool first_host_valid = true;
  const std::size_t lines = in.below(9);
  bool chose_host = false;
  for (std::size_t i = 0; i < lines || (!chose_host && in.below(8)); ++i) {
    std::string name, value;
    switch (in.below(8)) {
      case 0: case 1: {
        const Labelled& host = in.pick(kHosts);
        name = "Host";
        value = host.text;
        if (hosts++ == 0) first_host_valid = host.valid;
        chose_host = true;
        break;
      }
      case 2: case 3: name = in.pick(kLengthNames); value = length_value(in, body.size()); break;
      case 4: case 5: name = in.pick(kEncodingNames); value = in.pick(kEncodings); break;
      default: {
        const std::string field = in.pick(kOtherFields);
        const std::size_t colon = field.find(':');
        name = field.substr(0, colon);
        value = field.substr(colon + 1);
        break;
      }
    }
    // How the line is written.
    std::string separator = ": ";
    switch (in.below(16)) {
      case 0: separator = ":"; break;
      case 1: separator = ":\t"; break;
      case 2: separator = " : "; reject("space before a colon"); break;
      case 3: name = " " + name; reject("obs-fold (a line starting with a space)"); break;
      default: break;
    }
    const char* end = "\r\n";
    switch (in.below(24)) {
      case 0: end = "\n"; reject("bare LF"); break;
      case 1: end = "\r"; reject("bare CR"); break;
      default: break;
    }
    request += name + separator + value + end;
    if (in.below(24) == 0) {
      request += " folded\r\n";
      reject("obs-fold");
    }
    // A recipient reads the name as written up to the colon, the value with its OWS.
    if (separator == " : ") name += " ";
    fields.emplace_back(name, value);
  }
  if (in.below(24) == 0) {
    request += "\n";
    reject("bare LF ending the head");
  } else {
    request += "\r\n";
  }
  for (const auto& [name, value] : fields) {
    if (!model::is_token(name)) reject("field name not a token");
    for (char c : value) {
      const auto u = static_cast<unsigned char>(c);
      if ((u < 0x20 && c != '\t') || u == 0x7f) reject("a control in a field value");
    }
  }
  const bool http10 = version.kind == Version::v10;
  expected.framing = model::request_framing(fields, http10);
  if (expected.framing.kind == model::Framing::reject) reject(expected.framing.why);
  if (version.kind != Version::refused) {
    if (!http10 && hosts != 1) reject("HTTP/1.1 without exactly one Host");
    if (http10 && hosts > 1) reject("several Host fields");
  }
  if (target.authority ? !target.authority_valid : !first_host_valid) reject("bad host");

  const std::size_t head_size = request.size();
  request += body;
  if (in.flag()) request += "GET /next HTTP/1.1\r\nHost: a.test\r\n\r\n";

  heft::proxy::BlockPool pool;
  heft::proxy::FieldArena arena;
  heft::proxy::BlockBuffer buffer(pool, heft::proxy::FieldArena::kBytes);
  heft::fuzz::ClientBytes client(request, step);
  const RequestOutcome got = heft::fuzz::read_request(buffer, client, arena, capacity);

  if (expected.reject) {
    HEFT_FUZZ_CHECK(got.kind == RequestOutcome::refused || got.kind == RequestOutcome::closed,
                    "heft accepted a request the model refuses (%s):\n%s", expected.why.c_str(), request.c_str());
    return 0;
  }
  HEFT_FUZZ_CHECK(got.kind != RequestOutcome::refused && got.kind != RequestOutcome::closed,
                  "heft refused (%u, %s) a request the model accepts:\n%s", got.status, got.reason.c_str(),
                  request.c_str());
  const bool chunked = expected.framing.kind == model::Framing::chunked;
  HEFT_FUZZ_CHECK(got.chunked == chunked && (chunked || got.length == expected.framing.length),
                  "framing: heft %s %llu, the model %s %llu:\n%s", got.chunked ? "chunked" : "length",
                  static_cast<unsigned long long>(got.length), chunked ? "chunked" : "length",
                  static_cast<unsigned long long>(expected.framing.length), request.c_str());
  const std::string_view after_head = std::string_view(request).substr(head_size);
  bool complete = false;
  std::string model_body;
  std::size_t model_end = 0;
  if (chunked) {
    const model::ChunkedBody decoded = model::decode_chunked(after_head);
    complete = decoded.status == model::ChunkedBody::complete;
    model_body = decoded.body;
    model_end = head_size + decoded.consumed;
  } else if (after_head.size() >= expected.framing.length) {
    complete = true;
    model_body = after_head.substr(0, expected.framing.length);
    model_end = head_size + expected.framing.length;
  }
  HEFT_FUZZ_CHECK((got.kind == RequestOutcome::complete) == complete,
                  "body: heft %s (%s), the model %s:\n%s", got.kind == RequestOutcome::complete ? "complete" : "not complete",
                  got.reason.c_str(), complete ? "complete" : "not complete", request.c_str());
  if (complete) {
    HEFT_FUZZ_CHECK(got.body == model_body && got.consumed == model_end,
                    "body: heft %zu octets ending at %zu, the model %zu ending at %zu:\n%s", got.body.size(),
                    got.consumed, model_body.size(), model_end, request.c_str());
  }
  return 0;
}
