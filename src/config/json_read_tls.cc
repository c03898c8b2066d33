// The validator's TLS parts: apps.tls.certificates (load_files, load_pem)
// and a server's tls_connection_policies, in Caddy's shapes. Certificate
// files are read here, once, and checked (tls_check.h): the model carries
// their PEM text, so what was checked is what is served.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "config/json_reader.h"
#include "config/tls_check.h"

namespace heft::config::reading {
namespace {

// Certificate chains and keys are a few KiB; this bounds a mistaken path
// (a log file, /dev/zero).
constexpr std::size_t kMaxPemBytes = 1 << 20;

// The file's text, or why it could not be read.
bool read_pem_file(const std::string& path, std::string& text, std::string& problem) {
  // A FIFO or a device would block or never end the read.
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (!ec && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    problem = "not a regular file";
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    problem = std::strerror(errno);
    return false;
  }
  text.resize(kMaxPemBytes + 1);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) {
    problem = std::strerror(errno);
    return false;
  }
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > kMaxPemBytes) {
    problem = fmt::format("larger than {} bytes: not a certificate or key", kMaxPemBytes);
    return false;
  }
  return true;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

// apps.tls: {"certificates": {"load_files": [{"certificate", "key", "tags"}],
// "load_pem": [{"certificate", "key", "tags"}]}}
void Reader::tls_app(const json& tls, Config& config) {
  const std::size_t errors_before = error_count();
  if (!object(tls, "/apps/tls", {"certificates"})) {
    certificates_refused_ = true;
    return;
  }
  const json* certificates = field(tls, "certificates");
  if (certificates && object(*certificates, "/apps/tls/certificates", {"load_files", "load_pem"})) {
    for (const bool from_files : {true, false}) {
      const std::string at = from_files ? "/apps/tls/certificates/load_files" : "/apps/tls/certificates/load_pem";
      const json* list = array_field(*certificates, from_files ? "load_files" : "load_pem",
                                     "/apps/tls/certificates", false);
      if (!list) continue;
      for (std::size_t i = 0; i < list->size(); ++i) {
        TlsCertificate certificate;
        const std::size_t before = error_count();
        this->certificate((*list)[i], pointer_append(at, i), from_files, certificate);
        if (error_count() == before) config.certificates.push_back(std::move(certificate));
      }
    }
  }
  if (error_count() != errors_before) certificates_refused_ = true;
}

void Reader::certificate(const json& value, const std::string& pointer, bool from_files, TlsCertificate& out) {
  if (!object(value, pointer, {"certificate", "key", "tags", "format"})) return;
  std::string format = "pem";
  if (string_field(value, "format", pointer, format) && format != "pem")
    error(pointer_append(pointer, "format"), "must be \"pem\" (the only format heft reads)");
  std::string certificate, key;
  const bool has_certificate = string_field(value, "certificate", pointer, certificate);
  const bool has_key = string_field(value, "key", pointer, key);
  if (!field(value, "certificate"))
    missing(pointer_append(pointer, "certificate"), "required", "missing certificate file");
  if (!field(value, "key")) missing(pointer_append(pointer, "key"), "required", "missing key file");
  if (const json* tags = array_field(value, "tags", pointer, false)) {
    for (std::size_t i = 0; i < tags->size(); ++i) {
      if ((*tags)[i].is_string() && !(*tags)[i].get<std::string>().empty())
        out.tags.push_back((*tags)[i].get<std::string>());
      else
        error(pointer_append(pointer_append(pointer, "tags"), i), "must be a non-empty string");
    }
  }
  if (!has_certificate || !has_key) return;
  const std::string certificate_at = pointer_append(pointer, "certificate");
  const std::string key_at = pointer_append(pointer, "key");
  if (from_files) {
    out.certificate_file = certificate;
    out.key_file = key;
    std::string problem;
    bool read = true;
    if (!read_pem_file(certificate, out.certificate_pem, problem)) {
      error(certificate_at, fmt::format("cannot read \"{}\": {}", certificate, problem),
            fmt::format("cannot read certificate file \"{}\": {}", certificate, problem));
      read = false;
    }
    if (!read_pem_file(key, out.key_pem, problem)) {
      error(key_at, fmt::format("cannot read \"{}\": {}", key, problem),
            fmt::format("cannot read key file \"{}\": {}", key, problem));
      read = false;
    }
    if (!read) return;
  } else {
    out.certificate_pem = std::move(certificate);
    out.key_pem = std::move(key);
  }
  CertificateCheck check = check_certificate(out.certificate_pem, out.key_pem);
  // Named by file when read from one, else by the member holding the PEM.
  const auto named = [&](const std::string& file, const char* what) {
    return from_files ? fmt::format("{} \"{}\"", what, file) : std::string("the PEM text");
  };
  if (!check.certificate_problem.empty())
    error(certificate_at, fmt::format("{} {}", named(out.certificate_file, "certificate"), check.certificate_problem));
  if (!check.key_problem.empty()) {
    // A key that parses but belongs to another certificate: both files named.
    const std::string of = from_files ? fmt::format(" \"{}\"", out.certificate_file) : std::string();
    std::string problem = check.key_problem;
    if (const std::size_t at = problem.find("the certificate"); at != std::string::npos)
      problem.replace(at, 15, "the certificate" + of);
    error(key_at, fmt::format("{} {}", named(out.key_file, "key"), problem));
  }
  out.names = std::move(check.names);
}

// A server's "tls_connection_policies": [{"match": {"sni": [...]},
// "certificate_selection": {"any_tag": [...]}, "default_sni": "..."}]. An
// empty list (or [{}]) is TLS with every certificate.
void Reader::tls_policies(const json& policies, const std::string& pointer, const Config& config,
                          std::vector<TlsPolicy>& out) {
  if (!policies.is_array()) {
    error(pointer, "must be an array of connection policies (an empty one: TLS with every certificate)",
          "must be an array");
    return;
  }
  // Server names compare in lower case; tags as written.
  const auto strings = [&](const json& object, std::string_view key, const std::string& at,
                           std::vector<std::string>& target, bool names) {
    const json* list = array_field(object, key, at, false);
    if (!list) return;
    for (std::size_t i = 0; i < list->size(); ++i) {
      if ((*list)[i].is_string() && !(*list)[i].get<std::string>().empty())
        target.push_back(names ? lower((*list)[i].get<std::string>()) : (*list)[i].get<std::string>());
      else
        error(pointer_append(pointer_append(at, key), i), "must be a non-empty string");
    }
  };
  for (std::size_t i = 0; i < policies.size(); ++i) {
    const std::string at = pointer_append(pointer, i);
    const json& value = policies[i];
    if (!object(value, at, {"match", "certificate_selection", "default_sni"})) continue;
    TlsPolicy& policy = out.emplace_back();
    if (const json* match = field(value, "match"); match && object(*match, pointer_append(at, "match"), {"sni"}))
      strings(*match, "sni", pointer_append(at, "match"), policy.sni, true);
    const std::string selection_at = pointer_append(at, "certificate_selection");
    if (const json* selection = field(value, "certificate_selection");
        selection && object(*selection, selection_at, {"any_tag"})) {
      const std::size_t before = policy.any_tag.size();
      strings(*selection, "any_tag", selection_at, policy.any_tag, false);
      for (std::size_t t = before; t < policy.any_tag.size(); ++t) {
        const std::string& tag = policy.any_tag[t];
        const bool known = std::any_of(config.certificates.begin(), config.certificates.end(),
                                       [&](const TlsCertificate& c) {
                                         return std::find(c.tags.begin(), c.tags.end(), tag) != c.tags.end();
                                       });
        if (!known && !certificates_refused_)
          error(pointer_append(pointer_append(selection_at, "any_tag"), t),
                fmt::format("no certificate in apps.tls.certificates has the tag \"{}\"", tag));
      }
    }
    if (string_field(value, "default_sni", at, policy.default_sni)) policy.default_sni = lower(policy.default_sni);
  }
  if (config.certificates.empty() && !certificates_refused_)
    missing(pointer, "this server terminates TLS but apps.tls.certificates loads no certificate",
          "this site serves https but no certificate is loaded: add \"tls CERT_FILE KEY_FILE\"");
}

}  // namespace heft::config::reading
