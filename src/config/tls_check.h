// Checks of a certificate and its key as the validator makes them (OpenSSL's
// libcrypto; nothing here keeps a handle): that each parses, that they belong
// together, that the certificate is valid now, and the names it serves.
//
// Thread safety: free functions, safe from any thread.
#pragma once

#include <string>
#include <vector>

namespace heft::config {

// What a certificate and key in PEM were found to be.
struct CertificateCheck {
  std::string certificate_problem;  // "" when the certificate is fine
  std::string key_problem;          // "" when the key is fine and matches it
  std::vector<std::string> names;   // DNS names (subjectAltName, else the subject's CN), lower case
};

CertificateCheck check_certificate(const std::string& certificate_pem, const std::string& key_pem);

// Whether `name` (lower case) is `pattern`, or matches a wildcard pattern
// "*.example.com" by exactly one leftmost label (RFC 6125 6.4.3).
bool wildcard_matches(const std::string& pattern, const std::string& name);

}  // namespace heft::config
