// TLS termination for one listening port: the OpenSSL contexts of its
// certificates, and what every handshake on it gets: TLS 1.2 and 1.3 only,
// Mozilla's "intermediate" ciphers for 1.2 (ECDHE with AES-GCM or
// ChaCha20-Poly1305), a server-side session cache and session tickets whose
// keys rotate (TicketKeys), the certificate chosen by SNI (exact name, then
// wildcard, then the first of the policy's; see config::TlsPolicy), and ALPN.
//
// Built from the configuration when it is loaded or reloaded (the route
// table holds it); a handshake holds its own references to the OpenSSL
// context it uses, so a reload never disturbs an open connection.
//
// Thread safety: immutable once built; handshakes on any worker use it at once.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>

#include "config/model.h"
#include "observe/access_log.h"
#include "proxy/io_types.h"

namespace heft::proxy {

// A client connection over TLS: what a protocol session reads and writes.
using TlsStream = boost::asio::ssl::stream<Socket>;

// The protocols heft offers in ALPN, in its order of preference, in the
// wire's length-prefixed form: HTTP/2 first where the server speaks h2
// (Caddy's `protocols`; on by default), else HTTP/1.1 alone.
inline constexpr std::string_view kAlpnH2AndHttp11 = "\x02h2\x08http/1.1";
inline constexpr std::string_view kAlpnHttp11 = "\x08http/1.1";

// What a client connection's handshake settled (the access log's `tls`).
struct ClientTls {
  std::string version;      // "TLSv1.3"
  std::string cipher;       // OpenSSL's name: "TLS_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"
  std::string server_name;  // the client's SNI; empty when it sent none
  std::string alpn;         // the protocol ALPN chose; empty when none
  bool resumed = false;     // a resumed session (ticket or cache)
};

class TlsServer {
 public:
  // Throws std::runtime_error naming the certificate when OpenSSL refuses
  // one (the validator has checked them: this is not expected).
  // `h2`: ALPN offers HTTP/2 before HTTP/1.1.
  TlsServer(const std::vector<config::TlsCertificate>& certificates, const std::vector<config::TlsPolicy>& policies,
            bool h2);
  ~TlsServer();
  TlsServer(const TlsServer&) = delete;
  TlsServer& operator=(const TlsServer&) = delete;

  // The context a handshake starts with; SNI may move it to another of this server's.
  boost::asio::ssl::context& context() { return *entries_.front().context; }
  // Whether this server was built from these (a reload keeps it then, and its session cache).
  bool built_from(const std::vector<config::TlsCertificate>& certificates,
                  const std::vector<config::TlsPolicy>& policies, bool h2) const {
    return certificates == certificates_ && policies == policies_ && h2 == (alpn_ == kAlpnH2AndHttp11);
  }

 private:
  struct Entry {
    std::unique_ptr<boost::asio::ssl::context> context;
    const config::TlsCertificate* certificate;  // in certificates_
  };
  // The context for a client asking for `name` (lower case; empty = no SNI), or null: no policy admits it.
  SSL_CTX* choose(const std::string& name) const;
  static int on_server_name(SSL* ssl, int* alert, void* self);
  static int on_alpn(SSL*, const unsigned char** out, unsigned char* out_length, const unsigned char* offered,
                     unsigned offered_length, void* self);

  std::vector<config::TlsCertificate> certificates_;
  std::vector<config::TlsPolicy> policies_;  // never empty: [] is one policy admitting everything
  std::vector<Entry> entries_;
  std::string_view alpn_;  // kAlpnH2AndHttp11 or kAlpnHttp11
};

// The access log's `tls` of a connection (empty over plain TCP: null).
inline observe::AccessLogEntry::Tls access_log_tls(const ClientTls* tls) {
  if (!tls) return {};
  return {tls->resumed, tls->version, tls->cipher, tls->alpn, tls->server_name};
}

// What `stream`'s finished handshake settled.
ClientTls describe_handshake(TlsStream& stream);

}  // namespace heft::proxy
