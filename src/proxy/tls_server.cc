// TLS termination contexts (see tls_server.h).
#include "proxy/tls_server.h"

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include <fmt/format.h>

#include "config/tls_check.h"

namespace heft::proxy {
namespace ssl = boost::asio::ssl;
namespace {

// Mozilla's "intermediate" list for TLS 1.2, less its DHE suites: forward
// secrecy through ECDHE, AEAD ciphers only. TLS 1.3's suites are OpenSSL's
// defaults (AES-GCM and ChaCha20-Poly1305), all of them strong.
constexpr const char* kTls12Ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";
constexpr const char* kGroups = "X25519:P-256:P-384";
// Sessions resume across heft's contexts (a reload's new ones included) when they share this.
constexpr unsigned char kSessionIdContext[] = "heft";
constexpr long kSessionCacheSize = 20480;  // about 20 MB at most at ~1 KiB per session
constexpr long kSessionTimeoutSeconds = 3600;

// Session ticket keys, one set for the whole process (every port, every
// reload): a ticket stays good across a reload. A new key every
// kTicketKeyLifetime; the one before it still opens tickets (and the client
// gets a fresh ticket then), so a ticket lives one to two lifetimes. Keys
// live in memory only: a restart invalidates tickets, as it should.
class TicketKeys {
 public:
  static constexpr auto kTicketKeyLifetime = std::chrono::hours(12);
  struct Key {
    std::array<unsigned char, 16> name;
    std::array<unsigned char, 32> aes;
    std::array<unsigned char, 32> hmac;
  };

  static TicketKeys& instance() {
    static TicketKeys keys;
    return keys;
  }

  // The key to seal a new ticket with.
  Key current() {
    std::lock_guard lock(mu_);
    rotate_if_due();
    return keys_[0];
  }
  // The key named `name`: 1 current, 2 the previous (renew the ticket), 0 none.
  int find(const unsigned char* name, Key& out) {
    std::lock_guard lock(mu_);
    rotate_if_due();
    for (int i = 0; i < count_; ++i) {
      if (std::memcmp(keys_[i].name.data(), name, keys_[i].name.size()) != 0) continue;
      out = keys_[i];
      return i == 0 ? 1 : 2;
    }
    return 0;
  }

 private:
  TicketKeys() { rotate(); }
  void rotate_if_due() {
    if (std::chrono::steady_clock::now() >= next_rotation_) rotate();
  }
  void rotate() {
    keys_[1] = keys_[0];
    count_ = std::min(count_ + 1, 2);
    Key& key = keys_[0];
    if (RAND_bytes(key.name.data(), int(key.name.size())) != 1 || RAND_bytes(key.aes.data(), int(key.aes.size())) != 1 ||
        RAND_bytes(key.hmac.data(), int(key.hmac.size())) != 1)
      throw std::runtime_error("no random bytes for a session ticket key");
    next_rotation_ = std::chrono::steady_clock::now() + kTicketKeyLifetime;
  }

  std::mutex mu_;  // handshakes on every worker
  std::array<Key, 2> keys_{};
  int count_ = 0;
  std::chrono::steady_clock::time_point next_rotation_{};
};

// OpenSSL's ticket key callback (SSL_CTX_set_tlsext_ticket_key_evp_cb):
// seal with the current key (enc 1), open with whichever key named the
// ticket (enc 0).
int on_ticket_key(SSL*, unsigned char key_name[16], unsigned char* iv, EVP_CIPHER_CTX* cipher, EVP_MAC_CTX* mac,
                  int enc) {
  TicketKeys::Key key;
  int found = 1;
  if (enc) {
    key = TicketKeys::instance().current();
    std::memcpy(key_name, key.name.data(), key.name.size());
    if (RAND_bytes(iv, EVP_CIPHER_get_iv_length(EVP_aes_256_cbc())) != 1) return -1;
    if (EVP_EncryptInit_ex(cipher, EVP_aes_256_cbc(), nullptr, key.aes.data(), iv) != 1) return -1;
  } else {
    found = TicketKeys::instance().find(key_name, key);
    if (!found) return 0;  // unknown (or expired) key: a full handshake
    if (EVP_DecryptInit_ex(cipher, EVP_aes_256_cbc(), nullptr, key.aes.data(), iv) != 1) return -1;
  }
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, key.hmac.data(), key.hmac.size()),
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0), OSSL_PARAM_construct_end()};
  if (EVP_MAC_CTX_set_params(mac, params) != 1) return -1;
  return found;
}

std::string openssl_error() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  char text[256];
  ERR_error_string_n(e, text, sizeof text);
  return text;
}

}  // namespace

TlsServer::TlsServer(const std::vector<config::TlsCertificate>& certificates,
                     const std::vector<config::TlsPolicy>& policies, bool h2)
    : certificates_(certificates), policies_(policies), alpn_(h2 ? kAlpnH2AndHttp11 : kAlpnHttp11) {
  if (policies_.empty()) policies_.emplace_back();
  if (certificates_.empty()) throw std::runtime_error("TLS needs a certificate");
  for (const config::TlsCertificate& certificate : certificates_) {
    auto context = std::make_unique<ssl::context>(ssl::context::tls_server);
    SSL_CTX* ctx = context->native_handle();
    const auto named = [&](std::string_view what) {
      return std::runtime_error(fmt::format("certificate {}: {}: {}",
                                            certificate.certificate_file.empty() ? certificate.names.front()
                                                                                 : certificate.certificate_file,
                                            what, openssl_error()));
    };
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TLSv1 | SSL_OP_NO_TLSv1_1);
    // An idle connection gives its read and write buffers back to OpenSSL's
    // allocator (TLS connections are not parked: this keeps them small).
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    if (SSL_CTX_set_cipher_list(ctx, kTls12Ciphers) != 1) throw named("cipher list");
    if (SSL_CTX_set1_groups_list(ctx, kGroups) != 1) throw named("groups");
    boost::system::error_code ec;
    context->use_certificate_chain(boost::asio::buffer(certificate.certificate_pem), ec);
    if (ec) throw named("certificate chain");
    context->use_private_key(boost::asio::buffer(certificate.key_pem), ssl::context::pem, ec);
    if (ec) throw named("private key");
    SSL_CTX_set_session_id_context(ctx, kSessionIdContext, sizeof kSessionIdContext - 1);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
    SSL_CTX_sess_set_cache_size(ctx, kSessionCacheSize);
    SSL_CTX_set_timeout(ctx, kSessionTimeoutSeconds);
    SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, on_ticket_key);
    SSL_CTX_set_alpn_select_cb(ctx, on_alpn, this);
    SSL_CTX_set_tlsext_servername_callback(ctx, on_server_name);
    SSL_CTX_set_tlsext_servername_arg(ctx, this);
    entries_.push_back({std::move(context), &certificate});
  }
}

TlsServer::~TlsServer() = default;

// ALPN: the first of heft's protocols the client offers; a client offering
// none of them goes on without ALPN (served HTTP/1.1).
int TlsServer::on_alpn(SSL*, const unsigned char** out, unsigned char* out_length, const unsigned char* offered,
                       unsigned offered_length, void* self) {
  const std::string_view ours = static_cast<const TlsServer*>(self)->alpn_;
  unsigned char* chosen = nullptr;
  const int r = SSL_select_next_proto(&chosen, out_length, reinterpret_cast<const unsigned char*>(ours.data()),
                                      static_cast<unsigned>(ours.size()), offered, offered_length);
  if (r != OPENSSL_NPN_NEGOTIATED) return SSL_TLSEXT_ERR_NOACK;
  *out = chosen;
  return SSL_TLSEXT_ERR_OK;
}

SSL_CTX* TlsServer::choose(const std::string& name) const {
  for (const config::TlsPolicy& policy : policies_) {
    const std::string& wanted = name.empty() ? policy.default_sni : name;
    if (!policy.sni.empty() && std::find(policy.sni.begin(), policy.sni.end(), wanted) == policy.sni.end()) continue;
    const auto selected = [&](const Entry& entry) {
      return policy.any_tag.empty() || std::any_of(policy.any_tag.begin(), policy.any_tag.end(), [&](const auto& tag) {
               const auto& tags = entry.certificate->tags;
               return std::find(tags.begin(), tags.end(), tag) != tags.end();
             });
    };
    const Entry* exact = nullptr;
    const Entry* wildcard = nullptr;
    const Entry* first = nullptr;
    for (const Entry& entry : entries_) {
      if (!selected(entry)) continue;
      if (!first) first = &entry;
      for (const std::string& certified : entry.certificate->names) {
        if (certified == wanted && !exact) exact = &entry;
        else if (!wildcard && !wanted.empty() && config::wildcard_matches(certified, wanted)) wildcard = &entry;
      }
    }
    const Entry* chosen = exact ? exact : wildcard ? wildcard : first;
    if (chosen) return chosen->context->native_handle();
  }
  return nullptr;
}

int TlsServer::on_server_name(SSL* ssl, int* alert, void* self) {
  const char* sent = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  std::string name = sent ? sent : "";
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  SSL_CTX* chosen = static_cast<const TlsServer*>(self)->choose(name);
  if (!chosen) {
    *alert = SSL_AD_UNRECOGNIZED_NAME;
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  if (chosen != SSL_get_SSL_CTX(ssl)) SSL_set_SSL_CTX(ssl, chosen);
  return SSL_TLSEXT_ERR_OK;
}

ClientTls describe_handshake(TlsStream& stream) {
  SSL* ssl = stream.native_handle();
  ClientTls out;
  out.version = SSL_get_version(ssl);
  if (const SSL_CIPHER* cipher = SSL_get_current_cipher(ssl)) out.cipher = SSL_CIPHER_get_name(cipher);
  if (const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name)) out.server_name = name;
  const unsigned char* alpn = nullptr;
  unsigned alpn_length = 0;
  SSL_get0_alpn_selected(ssl, &alpn, &alpn_length);
  if (alpn) out.alpn.assign(reinterpret_cast<const char*>(alpn), alpn_length);
  out.resumed = SSL_session_reused(ssl) == 1;
  return out;
}

}  // namespace heft::proxy
