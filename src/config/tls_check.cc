// Certificate and key checks for the validator (see tls_check.h).
#include "config/tls_check.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <memory>

#include <fmt/format.h>

namespace heft::config {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioFree>;

Bio memory_bio(const std::string& text) { return Bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size()))); }

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string time_text(const ASN1_TIME* t) {
  Bio out(BIO_new(BIO_s_mem()));
  ASN1_TIME_print(out.get(), t);
  char* data = nullptr;
  const long n = BIO_get_mem_data(out.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

std::vector<std::string> dns_names(X509* cert) {
  std::vector<std::string> names;
  auto* sans = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (sans) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
      const GENERAL_NAME* name = sk_GENERAL_NAME_value(sans, i);
      if (name->type != GEN_DNS) continue;
      const ASN1_IA5STRING* dns = name->d.dNSName;
      names.push_back(lower(std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(dns)),
                                        static_cast<std::size_t>(ASN1_STRING_length(dns)))));
    }
    GENERAL_NAMES_free(sans);
  }
  if (!names.empty()) return names;
  // No DNS subjectAltName: the subject's common name, as clients used to read it.
  char cn[256];
  const int n = X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
  if (n > 0) names.push_back(lower(std::string(cn, static_cast<std::size_t>(n))));
  return names;
}

}  // namespace

CertificateCheck check_certificate(const std::string& certificate_pem, const std::string& key_pem) {
  CertificateCheck check;
  Bio cert_bio = memory_bio(certificate_pem);
  std::unique_ptr<X509, X509Free> cert(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (!cert) {
    check.certificate_problem = "is not a PEM certificate (no \"-----BEGIN CERTIFICATE-----\" block that parses)";
  } else if (X509_cmp_current_time(X509_get0_notAfter(cert.get())) < 0) {
    check.certificate_problem = fmt::format("has expired (not after {})", time_text(X509_get0_notAfter(cert.get())));
  } else if (X509_cmp_current_time(X509_get0_notBefore(cert.get())) > 0) {
    check.certificate_problem =
        fmt::format("is not valid yet (not before {})", time_text(X509_get0_notBefore(cert.get())));
  } else {
    check.names = dns_names(cert.get());
    if (check.names.empty()) check.certificate_problem = "names no host (no DNS subjectAltName and no common name)";
  }
  Bio key_bio = memory_bio(key_pem);
  std::unique_ptr<EVP_PKEY, KeyFree> key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (!key)
    check.key_problem = "is not a PEM private key (or is encrypted: heft reads unencrypted keys)";
  else if (cert && X509_check_private_key(cert.get(), key.get()) != 1)
    check.key_problem = "does not match the certificate (it is the key of another certificate)";
  ERR_clear_error();
  return check;
}

bool wildcard_matches(const std::string& pattern, const std::string& name) {
  if (pattern == name) return true;
  if (pattern.size() < 3 || pattern[0] != '*' || pattern[1] != '.') return false;
  const std::size_t dot = name.find('.');
  return dot != std::string::npos && dot > 0 && name.compare(dot, std::string::npos, pattern, 1) == 0;
}

}  // namespace heft::config
