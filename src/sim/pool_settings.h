// The pool settings `heft sim` runs a fleet with, as the Heftfile writes them
// for `heft run`: passive failures (max_fails / fail_timeout), slow start and
// adaptive weights; and the upstream::PoolConfig a run hands to
// upstream::Pool, the pool the proxy runs.
//
// Parsers throw std::invalid_argument with a one-line message naming the
// flag or member. No I/O.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "heft/balance/policy.h"
#include "upstream/pool.h"
#include "upstream/weights.h"

namespace heft::sim {

struct Scenario;

// max_fails' range and the longest fail_timeout / slow_start, as the Heftfile's.
inline constexpr uint32_t kMaxFails = 1'000'000;
inline constexpr double kMaxPoolDurationS = 365.0 * 86400;
inline constexpr uint32_t kDefaultMaxFails = 1;
inline constexpr double kDefaultFailTimeoutS = 10;

// A fail_timeout or slow_start in seconds as the pool takes it: 0..365 days
// in whole milliseconds (`what` names the flag or member in errors).
std::chrono::milliseconds pool_duration(double seconds, std::string_view what);

// --adaptive's value: "on" (the defaults), "off", or the Heftfile's adaptive
// options as key=value pairs, which turn it on:
// "interval=10s,latency_threshold=0s,median_factor=2,error_threshold=0.05,cut=0.25,min_weight_ratio=0.1".
// Options not given keep their value in `base`.
upstream::AdaptiveOptions parse_adaptive(std::string_view text, upstream::AdaptiveOptions base);

// A scenario's "adaptive": true, false, or an object with the members of the
// JSON configuration's `adaptive` ("enabled", "interval", ...), which turns
// it on unless "enabled" is false.
upstream::AdaptiveOptions adaptive_from_json(const nlohmann::json& value, std::string_view path);

// "interval 30.00 s, median_factor 2, error_threshold 5%, cut 25%, min_weight_ratio 0.1" (the table).
std::string adaptive_text(const upstream::AdaptiveOptions& adaptive);
// The same members as the JSON configuration's `adaptive`, durations in seconds.
nlohmann::ordered_json adaptive_json(const upstream::AdaptiveOptions& adaptive);

// Whether a run's weights may change by themselves: slow start on some
// server, or adaptive weights. Only then do the outputs show weight factors.
bool dynamic_weights(const Scenario& scenario);

// The pool as a run of `policy` builds it: one backend per server, named by
// the server, with `weights` (by server), each server's max_fails,
// fail_timeout, slow_start, max_conns, backup and down, and the scenario's
// adaptive options. `scenario` must be validated.
upstream::PoolConfig pool_config(const Scenario& scenario, balance::PolicyKind policy,
                                 const std::vector<uint32_t>& weights);

}  // namespace heft::sim
