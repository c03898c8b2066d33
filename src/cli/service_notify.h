// Telling the service manager how `heft run` is doing: systemd's notify
// protocol (sd_notify(3), a unit's Type=notify), spoken directly: one datagram
// of "KEY=VALUE" lines to the AF_UNIX socket named by $NOTIFY_SOCKET (a path,
// or "@name" for the abstract namespace). libsystemd would do the same in a
// dependency heft otherwise does not need.
//
// heft run sends READY=1 once every listener is up and serving, RELOADING=1
// (with MONOTONIC_USEC) and READY=1 around a SIGHUP reload, STOPPING=1 when a
// stop begins, each with a STATUS= line for `systemctl status`.
#pragma once

#include <string>
#include <string_view>

namespace heft::cli {

// Sends `state` ("READY=1\nSTATUS=...") to $NOTIFY_SOCKET. False, doing
// nothing, when the variable is unset (heft not started by a service manager
// that listens), names no socket heft can reach, or the send fails: the
// protocol is best effort, and heft serves alike either way.
bool notify_service_manager(std::string_view state);

// "RELOADING=1\nMONOTONIC_USEC=N": what a reload begins with (systemd 253's
// Type=notify-reload wants the clock; older versions ignore it).
std::string reloading_state();

}  // namespace heft::cli
