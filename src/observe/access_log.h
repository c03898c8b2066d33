// The JSON access log: one compact line per request, Caddy's field names:
//   {"ts":1732921234.5,"request":{"remote_ip":"..","method":"GET","host":"..",
//    "uri":"/","proto":"HTTP/1.1"},"upstream":"10.0.0.5:3000","status":200,
//    "duration":0.0012,"size":512,"tries":1}
// (over TLS, request.tls: {"resumed","version","cipher_suite","proto","server_name"})
//
// Requests never wait for the disk: write() copies the entry into a bounded
// queue and returns; a background thread per output formats and writes the
// lines. When the queue is full the entry is dropped and counted
// (access_log_dropped_total(), exported as heft_access_log_dropped_total).
//
// Outputs are shared: every site naming the same file gets the same
// AccessLog. reopen_all() makes every file output reopen its path (after
// logrotate renamed it); install_reopen_on_sigusr1() makes SIGUSR1 do that.
//
// Threads: write() from any thread; open_access_log() and reopen_all() too.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "config/model.h"

namespace heft::observe {

struct AccessLogEntry {
  double ts = 0;  // seconds since the epoch (when the request head arrived)
  std::string remote_ip;
  std::string method;
  std::string host;
  std::string uri;
  std::string proto;     // "HTTP/1.1"
  std::string upstream;  // dial address of the backend that answered; empty if none
  int status = 0;
  double duration = 0;  // seconds
  uint64_t size = 0;    // response body bytes sent
  uint32_t tries = 0;   // attempts made
  double queued = -1;   // seconds it waited in its pool's queue (HAProxy's Tw); < 0: it did not wait
  // The last attempt's seconds until the backend's response head arrived
  // (nginx's $upstream_header_time, HAProxy's Tr) and until it ended
  // ($upstream_response_time); < 0: no attempt, or no head (header_time).
  double upstream_header_time = -1;
  double upstream_response_time = -1;
  // The client connection's TLS, as Caddy's request.tls (names, not numbers:
  // "TLSv1.3", OpenSSL's cipher name); version empty over plain TCP.
  struct Tls {
    bool resumed = false;
    std::string version;
    std::string cipher_suite;
    std::string proto;  // ALPN's choice ("http/1.1"); empty when none
    std::string server_name;
  } tls;
};

// The line for `entry`, without the newline.
std::string format_access_log_line(const AccessLogEntry& entry);

class AccessLog {
 public:
  virtual ~AccessLog() = default;
  // Queues the entry; false if it was dropped (queue full).
  virtual bool write(AccessLogEntry entry) = 0;
  // Blocks until every queued line is written (tests and shutdown).
  virtual void flush() = 0;
};

inline constexpr size_t kAccessLogQueue = 16384;

// The log for `output` ("stderr" or a file path), shared by all who ask for
// it while any holds it. Null with `error` set if the file cannot be opened.
std::shared_ptr<AccessLog> open_access_log(const std::string& output, std::string& error,
                                           size_t queue_capacity = kAccessLogQueue);
// The log a site's `log` block asks for; null when logging is off or the file cannot be opened.
std::shared_ptr<AccessLog> open_access_log(const config::LogConfig& log, std::string& error);

// Reopens every file output (returns at once; the writer threads reopen).
void reopen_all();
// Installs a SIGUSR1 handler that calls for reopen_all() (async-signal-safe:
// it sets a flag the writer threads check at least every 100 ms).
void install_reopen_on_sigusr1();

uint64_t access_log_dropped_total();

}  // namespace heft::observe
