// A tiny blocking client for heft's admin API, for the CLI subcommands that
// talk to a running heft (reload, stop, upstreams, weight).
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

namespace heft::cli {

// How long one admin request may take in all: connecting, sending and the answer.
inline constexpr std::chrono::seconds kAdminRequestTimeout{10};

struct AdminClientOptions {
  std::string address = "127.0.0.1:2019";  // HOST:PORT of the admin API
  std::string token;                       // sent as Authorization: Bearer when set
  // Asked every 50 ms while a request waits; true abandons it ("interrupted"):
  // for a command that must stop waiting when it is signalled. None by default.
  std::function<bool()> give_up;
};

// Adds --address and --token to `command`.
void add_admin_options(CLI::App* command, AdminClientOptions& options);

struct AdminReply {
  int status = 0;           // 0: no answer from a heft admin API (see transport_error)
  std::string body;
  std::string etag;
  std::string transport_error;
  // The API's {"error": ...} message, else the status and body_excerpt(), else the transport error.
  std::string error_message() const;
  // The body's first line, control bytes escaped, at most 200 bytes (for answers that are not the API's).
  std::string body_excerpt() const;
};

// One request, kAdminRequestTimeout at most: past that it fails with status 0
// and "cannot reach the admin API at ADDR: timed out after 10s (...)".
// `content_type` is sent when `body` is not empty.
AdminReply admin_request(const AdminClientOptions& options, const std::string& method, const std::string& target,
                         const std::string& body = "", const std::string& content_type = "application/json",
                         const std::string& if_match = "");

}  // namespace heft::cli
