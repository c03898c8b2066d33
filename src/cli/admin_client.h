// A tiny blocking client for heft's admin API, for the CLI subcommands that
// talk to a running heft (reload, stop, upstreams, weight).
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "config/model.h"

namespace heft::cli {

// How long one admin request may take in all: connecting, sending and the answer.
inline constexpr std::chrono::seconds kAdminRequestTimeout{10};

struct AdminClientOptions {
  std::string address;  // HOST:PORT of the admin API (--address); settle_admin_options() fills it if empty
  std::string token;    // sent as Authorization: Bearer when set
  std::string config;   // --config FILE: the configuration whose admin address and token to use
  // Asked every 50 ms while a request waits; true abandons it ("interrupted"):
  // for a command that must stop waiting when it is signalled. None by default.
  std::function<bool()> give_up;
};

// Adds --address and --token to `command`, and --config unless the command
// has a configuration file of its own (heft reload's FILE).
void add_admin_options(CLI::App* command, AdminClientOptions& options, bool config_option = true);

// Where the requests go, as `caddy reload` / `caddy stop` decide it: --address
// if given; else the admin address of the configuration (`loaded`, else the
// --config file, read here), its token too unless --token was given; else
// 127.0.0.1:2019. Throws BadArguments if --config names a file whose admin
// settings are not valid (its errors printed first) or one with `admin off`.
// Every command calls it before its first admin_request().
void settle_admin_options(AdminClientOptions& options, const config::AdminConfig* loaded = nullptr);

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

// Whether the heft at options.address is the one serving `config_path` (the
// command's --config, or reload's FILE; nothing is checked when it is empty):
// GET /heft/instance names the configuration file it serves, compared as
// absolute paths with links resolved (admin::config_identity). False after
// printing why, `doing` naming what is refused ("not reloading"), when it
// serves another file or the embedded demo, or cannot be asked. A heft too old
// to answer is a warning, unless `required` (a dry run that an older heft would
// apply for real).
bool check_instance(const AdminClientOptions& options, const std::string& config_path, const std::string& doing,
                    bool required = false);

}  // namespace heft::cli
