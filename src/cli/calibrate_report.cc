// `heft calibrate`'s report: a table, JSON, Heftfile lines or a JSON Patch.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "cli/calibrate.h"

namespace heft::cli {

using json = nlohmann::json;

std::vector<size_t> Calibration::weighted() const {
  std::vector<size_t> out;
  for (size_t i = 0; i < backends.size(); ++i)
    if (backends[i].status == CalibratedBackend::Status::measured && backends[i].capacity > 0) out.push_back(i);
  return out;
}

void Calibration::choose_weights(uint32_t max_weight) {
  const std::vector<size_t> indices = weighted();
  std::vector<double> capacities;
  for (size_t i : indices) capacities.push_back(backends[i].capacity);
  candidates = candidate_weights(capacities, max_weight);
  if (candidates.empty()) return;
  chosen = best_weights(candidates);
  for (size_t k = 0; k < indices.size(); ++k) backends[indices[k]].weight = candidates[chosen].weights[k];
}

namespace {

std::string rate_text(double rate) { return rate >= 100 ? fmt::format("{:.0f}", rate) : fmt::format("{:.1f}", rate); }

std::string percent(double fraction) { return fmt::format("{:.1f}%", fraction * 100); }

std::string weights_text(const std::vector<uint32_t>& weights) { return fmt::format("{}", fmt::join(weights, ":")); }

const char* status_name(CalibratedBackend::Status s) {
  switch (s) {
    case CalibratedBackend::Status::measured: return "measured";
    case CalibratedBackend::Status::down: return "down";
    case CalibratedBackend::Status::not_measured: return "not_measured";
  }
  return "?";
}

// `to DIAL weight N` per weighted backend; the others as comments saying why.
std::vector<std::string> heftfile_lines(const Calibration& c) {
  std::vector<std::string> lines;
  for (const CalibratedBackend& b : c.backends) {
    if (b.weight)
      lines.push_back(fmt::format("to {} weight {}{}", b.dial, *b.weight, b.backup ? " backup" : ""));
    else
      lines.push_back(fmt::format("# {}: {} ({}): not weighted, left as it is", b.dial,
                                  b.status == CalibratedBackend::Status::down ? "down" : "not measured", b.note));
  }
  return lines;
}

// RFC 6902 operations on the configuration's JSON form (GET /config/, `heft
// adapt`): a weight path per weighted backend, by its index in the site's
// upstreams (as configured: the backends are listed in that order).
json patch(const Calibration& c, const std::vector<std::string>& configured_order) {
  json ops = json::array();
  if (c.upstreams_path.empty()) return ops;
  const std::string base = c.upstreams_path.substr(std::string("/config").size());
  for (const CalibratedBackend& b : c.backends) {
    if (!b.weight) continue;
    const auto at = std::find(configured_order.begin(), configured_order.end(), b.dial);
    if (at == configured_order.end()) continue;
    ops.push_back({{"op", "replace"},  // heft's JSON form always has every upstream's weight
                   {"path", fmt::format("{}/{}/weight", base, at - configured_order.begin())},
                   {"value", *b.weight}});
  }
  return ops;
}

std::vector<std::string> configured_order(const Calibration& c) {
  std::vector<std::string> order;
  for (const CalibratedBackend& b : c.backends) order.push_back(b.dial);
  return order;
}

json to_json(const Calibration& c) {
  json out = {{"method", c.method}, {"settings", c.settings}};
  if (!c.site.empty()) {
    out["site"] = c.site;
    out["site_address"] = c.site_address;
  }
  const std::vector<size_t> indices = c.weighted();
  double smallest = 0;
  for (size_t i : indices) smallest = smallest == 0 ? c.backends[i].capacity : std::min(smallest, c.backends[i].capacity);
  json backends = json::array();
  for (const CalibratedBackend& b : c.backends) {
    json entry = {{"address", b.dial}, {"status", status_name(b.status)}, {"note", b.note}};
    if (b.status == CalibratedBackend::Status::measured) {
      entry["capacity"] = std::round(b.capacity * 10) / 10;
      entry["lower_bound"] = b.lower_bound;
      if (b.capacity > 0 && smallest > 0) entry["ratio"] = std::round(b.capacity / smallest * 100) / 100;
    }
    if (b.configured_weight) entry["configured_weight"] = *b.configured_weight;
    if (b.weight) entry["weight"] = *b.weight;
    if (b.backup) entry["backup"] = true;
    if (!b.detail.empty()) entry["detail"] = b.detail;
    backends.push_back(std::move(entry));
  }
  out["backends"] = std::move(backends);
  json candidates = json::array();
  for (size_t k = 0; k < c.candidates.size(); ++k)
    candidates.push_back({{"weights", c.candidates[k].weights},
                          {"error", std::round(c.candidates[k].error * 10000) / 10000},
                          {"chosen", k == c.chosen}});
  out["candidates"] = std::move(candidates);
  json weights = json::object();
  for (const CalibratedBackend& b : c.backends)
    if (b.weight) weights[b.dial] = *b.weight;
  out["weights"] = std::move(weights);
  out["heftfile"] = heftfile_lines(c);
  if (!c.upstreams_path.empty()) out["patch"] = patch(c, configured_order(c));
  return out;
}

void print_table(const Calibration& c) {
  const std::vector<size_t> indices = c.weighted();
  double smallest = 0;
  for (size_t i : indices) smallest = smallest == 0 ? c.backends[i].capacity : std::min(smallest, c.backends[i].capacity);
  size_t width = 7;
  for (const CalibratedBackend& b : c.backends) width = std::max(width, b.dial.size());
  fmt::print("{:<{}}  {:>14}  {:>11}  {:>6}  {}\n", "BACKEND", width, "CAPACITY", "EXACT RATIO", "WEIGHT", "HOW IT ENDED");
  for (const CalibratedBackend& b : c.backends) {
    std::string capacity = "-", ratio = "-", weight = "-";
    if (b.status == CalibratedBackend::Status::measured) {
      capacity = fmt::format("{}{} req/s", b.lower_bound ? ">= " : "", rate_text(b.capacity));
      if (b.capacity > 0 && smallest > 0) ratio = fmt::format("{:.2f}", b.capacity / smallest);
    } else {
      capacity = b.status == CalibratedBackend::Status::down ? "down" : "not measured";
    }
    if (b.weight) weight = std::to_string(*b.weight);
    fmt::print("{:<{}}  {:>14}  {:>11}  {:>6}  {}{}\n", b.dial, width, capacity, ratio, weight, b.note,
               b.backup ? " (backup)" : "");
  }
  if (c.candidates.empty()) {
    fmt::print("\nno backend to weight\n");
    return;
  }
  fmt::print("\ncandidate weights (error: the most a backend's share of the traffic is off its share of the capacity):\n");
  for (size_t k = 0; k < c.candidates.size(); ++k)
    fmt::print("  {:<24} {:>7}{}\n", weights_text(c.candidates[k].weights), percent(c.candidates[k].error),
               k == c.chosen ? "  <- chosen" : "");
  const bool bounded = std::any_of(indices.begin(), indices.end(), [&](size_t i) { return c.backends[i].lower_bound; });
  if (bounded)
    fmt::print("(a capacity marked >= is a lower bound: that backend may deserve more)\n");
  fmt::print("\nHeftfile lines:\n");
  for (const std::string& line : heftfile_lines(c)) fmt::print("\t{}\n", line);
  if (!c.upstreams_path.empty()) fmt::print("\nJSON Patch (GET /config/ paths): {}\n", patch(c, configured_order(c)).dump());
}

}  // namespace

void print_calibration(const Calibration& c, OutputFormat format) {
  switch (format) {
    case OutputFormat::table: print_table(c); break;
    case OutputFormat::json: fmt::print("{}\n", to_json(c).dump(2)); break;
    case OutputFormat::heftfile:
      for (const std::string& line : heftfile_lines(c)) fmt::print("\t{}\n", line);
      break;
    case OutputFormat::patch: fmt::print("{}\n", patch(c, configured_order(c)).dump(2)); break;
  }
}

}  // namespace heft::cli
