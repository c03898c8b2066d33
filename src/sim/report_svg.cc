// The SVG report of `heft sim`: for each scenario, one panel per policy with
// every server's utilisation over time, then a panel of latency CDFs (one line
// per policy, log time axis), and with a pool queue a panel of the requests
// waiting in it over time (one line per policy); with slow start or adaptive
// weights a second row, each policy's weight factors per server over time. Self-contained: no scripts, fonts or links.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "sim/pool_settings.h"
#include "sim/report.h"

namespace heft::sim {
namespace {

constexpr double kPanelW = 300, kPanelH = 190;        // plot area
constexpr double kLeft = 62, kRight = 18, kTop = 46, kBottom = 48;  // margins around a plot area
constexpr double kCellW = kLeft + kPanelW + kRight, kCellH = kTop + kPanelH + kBottom;
constexpr double kTitleH = 44, kLegendH = 30, kScenarioTitleH = 26;

constexpr const char* kServerColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                          "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
constexpr const char* kPolicyColours[] = {"#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860",
                                          "#da8bc3"};

const char* server_colour(size_t i) { return kServerColours[i % std::size(kServerColours)]; }
const char* policy_colour(size_t i) { return kPolicyColours[i % std::size(kPolicyColours)]; }

// The length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlong
// forms, surrogates or code points past U+10FFFF), 0 if there is none.
size_t utf8_length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return n;
}

std::string escape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (static_cast<unsigned char>(c) >= 0x80) {
      // A name that is not UTF-8 (Latin-1 from a terminal) would make the file ill-formed XML.
      const size_t n = utf8_length(s, i);
      if (n == 0) {
        out += "\xEF\xBF\xBD";  // U+FFFD, the replacement character
      } else {
        out.append(s.substr(i, n));
        i += n - 1;
      }
      continue;
    }
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\t': case '\n': case '\r': out += ' '; break;
      default:
        // XML 1.0 allows no other control character, not even as a reference.
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "\xEF\xBF\xBD";  // U+FFFD, the replacement character
        } else {
          out += c;
        }
    }
  }
  return out;
}

// A "nice" tick step (1, 2 or 5 x 10^n) giving about `target` ticks over span.
double nice_step(double span, int target) {
  if (!(span > 0)) return 1;
  double raw = span / target;
  double mag = std::pow(10, std::floor(std::log10(raw)));
  double norm = raw / mag;
  double step = norm < 1.5 ? 1 : norm < 3.5 ? 2 : norm < 7.5 ? 5 : 10;
  return step * mag;
}

std::string tick_label(double v) { return fmt::format("{:g}", std::round(v * 1e6) / 1e6); }

std::string latency_tick(double seconds) {
  if (seconds < 1e-3) return fmt::format("{:g} us", seconds * 1e6);
  if (seconds < 1) return fmt::format("{:g} ms", seconds * 1e3);
  return fmt::format("{:g} s", seconds);
}

struct Frame {
  double x0, y0;  // top-left of the plot area
  void axes(std::string& out, const std::string& title, const std::string& xlabel, const std::string& ylabel) const {
    out += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" class="panel-title" text-anchor="middle">{}</text>)" "\n",
                       x0 + kPanelW / 2, y0 - 14, escape(title));
    out += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" class="plot"/>)" "\n", x0, y0,
                       kPanelW, kPanelH);
    out += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" class="axis-label" text-anchor="middle">{}</text>)" "\n",
                       x0 + kPanelW / 2, y0 + kPanelH + 36, escape(xlabel));
    out += fmt::format(
        R"svg(<text x="{:.1f}" y="{:.1f}" class="axis-label" text-anchor="middle" transform="rotate(-90 {:.1f} {:.1f})">{}</text>)svg"
        "\n",
        x0 - 46, y0 + kPanelH / 2, x0 - 46, y0 + kPanelH / 2, escape(ylabel));
  }
  void x_tick(std::string& out, double px, const std::string& label) const {
    out += fmt::format(R"(<line x1="{0:.1f}" y1="{1:.1f}" x2="{0:.1f}" y2="{2:.1f}" class="grid"/>)" "\n", px, y0,
                       y0 + kPanelH);
    out += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" class="tick" text-anchor="middle">{}</text>)" "\n", px,
                       y0 + kPanelH + 16, escape(label));
  }
  // A time axis 0..duration (seconds) along x.
  double time_x(double t, double duration) const { return x0 + t / duration * kPanelW; }
  void time_ticks(std::string& out, double duration) const {
    const double step = nice_step(duration, 5);
    for (int i = 0; i <= 20; ++i) {
      double t = i * step;
      if (t > duration * (1 + 1e-9)) break;
      x_tick(out, time_x(t, duration), tick_label(t));
    }
  }
  // A per-bucket series (Scenario::bucket_s) on the time axis, each value at
  // its bucket's middle, as polyline points; `py` maps a value to y.
  template <typename Y>
  std::string bucket_points(const std::vector<double>& series, const Scenario& sc, Y py) const {
    std::string points;
    for (size_t b = 0; b < series.size(); ++b) {
      double t_mid = std::min((b + 0.5) * sc.bucket_s, sc.duration_s);
      points += fmt::format("{}{:.1f},{:.1f}", b ? " " : "", time_x(t_mid, sc.duration_s), py(series[b]));
    }
    return points;
  }
  void y_tick(std::string& out, double py, const std::string& label) const {
    out += fmt::format(R"(<line x1="{0:.1f}" y1="{2:.1f}" x2="{1:.1f}" y2="{2:.1f}" class="grid"/>)" "\n", x0,
                       x0 + kPanelW, py);
    out += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" class="tick" text-anchor="end">{}</text>)" "\n", x0 - 6,
                       py + 4, escape(label));
  }
};

void utilisation_panel(std::string& out, const Frame& f, const SimResult& res, const PolicyResult& p) {
  const Scenario& sc = res.scenario;
  f.axes(out, std::string(balance::policy_name(p.policy)), "time (s)", "utilisation (%)");
  auto py = [&](double u) { return f.y0 + kPanelH - std::clamp(u, 0.0, 1.0) * kPanelH; };
  f.time_ticks(out, sc.duration_s);
  for (int u = 0; u <= 100; u += 25) f.y_tick(out, py(u / 100.0), fmt::format("{}", u));
  for (size_t i = 0; i < p.servers.size(); ++i) {
    const ServerResult& s = p.servers[i];
    const std::string points = f.bucket_points(s.utilisation_series, sc, py);
    out += fmt::format(R"(<polyline points="{}" fill="none" stroke="{}" stroke-width="1.6"><title>{} {}: {:.1f}% busy</title></polyline>)" "\n",
                       points, server_colour(i), escape(std::string(balance::policy_name(p.policy))),
                       escape(s.name), s.utilisation * 100);
  }
}

// With slow start or adaptive weights: the weight factor the pool balanced
// each server by (slow start x adaptive, time-weighted per bucket), one
// panel per policy under its utilisation panel.
void factor_panel(std::string& out, const Frame& f, const SimResult& res, const PolicyResult& p) {
  const Scenario& sc = res.scenario;
  f.axes(out, fmt::format("{}: weight factor", balance::policy_name(p.policy)), "time (s)",
         "slow start x adaptive");
  auto py = [&](double v) { return f.y0 + kPanelH - std::clamp(v, 0.0, 1.0) * kPanelH; };
  f.time_ticks(out, sc.duration_s);
  for (int q = 0; q <= 4; ++q) f.y_tick(out, py(q / 4.0), tick_label(q / 4.0));
  for (size_t i = 0; i < p.servers.size(); ++i) {
    const ServerResult& s = p.servers[i];
    if (s.factor_series.empty()) continue;
    const std::string points = f.bucket_points(s.factor_series, sc, py);
    const double lowest = *std::min_element(s.factor_series.begin(), s.factor_series.end());
    out += fmt::format(R"(<polyline points="{}" fill="none" stroke="{}" stroke-width="1.6"><title>{} {}: weight factor down to {:.2f}</title></polyline>)" "\n",
                       points, server_colour(i), escape(std::string(balance::policy_name(p.policy))),
                       escape(s.name), lowest);
  }
}

void cdf_panel(std::string& out, const Frame& f, const SimResult& res) {
  f.axes(out, "latency CDF (queue wait + service)", "latency (log scale)", "fraction of requests");
  // Decades covering every policy's 0.1 % .. 100 % range.
  double lo = 0, hi = 0;
  for (const PolicyResult& p : res.policies) {
    if (p.latency_sketch.count() == 0) continue;
    double a = std::max(p.latency_sketch.quantile_seconds(0.001), 1e-6);
    double b = std::max(p.latency_sketch.max_seconds(), a * 10);
    lo = lo == 0 ? a : std::min(lo, a);
    hi = std::max(hi, b);
  }
  if (lo == 0) {
    lo = 1e-3;
    hi = 1;
  }
  double dlo = std::floor(std::log10(lo)), dhi = std::ceil(std::log10(hi));
  if (dhi <= dlo) dhi = dlo + 1;
  auto px = [&](double seconds) {
    double l = std::log10(std::max(seconds, 1e-9));
    return f.x0 + std::clamp((l - dlo) / (dhi - dlo), 0.0, 1.0) * kPanelW;
  };
  auto py = [&](double frac) { return f.y0 + kPanelH - frac * kPanelH; };
  for (int d = static_cast<int>(dlo); d <= static_cast<int>(dhi) && d <= static_cast<int>(dlo) + 12; ++d)
    f.x_tick(out, px(std::pow(10.0, d)), latency_tick(std::pow(10.0, d)));
  for (int q = 0; q <= 4; ++q) f.y_tick(out, py(q / 4.0), tick_label(q / 4.0));
  for (size_t pi = 0; pi < res.policies.size(); ++pi) {
    const LatencySketch& s = res.policies[pi].latency_sketch;
    if (s.count() == 0) continue;
    std::string points;
    uint64_t seen = 0;
    double last_x = -1;
    for (size_t b = 0; b < LatencySketch::kBuckets; ++b) {
      uint64_t c = s.bucket_count(b);
      if (c == 0) continue;
      seen += c;
      double x = px(LatencySketch::lower_ns(b + 1) * 1e-9);
      double y = py(static_cast<double>(seen) / static_cast<double>(s.count()));
      // One point per half pixel keeps the file small without changing the picture.
      if (x - last_x < 0.5 && seen != s.count()) continue;
      points += fmt::format("{}{:.1f},{:.1f}", points.empty() ? "" : " ", x, y);
      last_x = x;
    }
    out += fmt::format(R"(<polyline points="{}" fill="none" stroke="{}" stroke-width="1.8"><title>{}: p50 {}, p99 {}</title></polyline>)" "\n",
                       points, policy_colour(pi), balance::policy_name(res.policies[pi].policy),
                       format_latency(res.policies[pi].latency.p50_s), format_latency(res.policies[pi].latency.p99_s));
  }
}

// The scenario's pool queue (`queue`): mean requests waiting in it per
// bucket, one line per policy (the CDF panel's colours).
bool has_pool_queue(const SimResult& res) {
  for (const PolicyResult& p : res.policies)
    if (!p.queue_series.empty()) return true;
  return false;
}

void queue_panel(std::string& out, const Frame& f, const SimResult& res) {
  const Scenario& sc = res.scenario;
  f.axes(out, fmt::format("pool queue (at most {})", sc.queue), "time (s)", "requests waiting (mean)");
  double top = 0;
  for (const PolicyResult& p : res.policies)
    for (double v : p.queue_series) top = std::max(top, v);
  const double ystep = nice_step(std::max(top, 1.0), 4);
  const double ymax = std::ceil(std::max(top, 1.0) / ystep) * ystep;
  auto py = [&](double v) { return f.y0 + kPanelH - std::clamp(v / ymax, 0.0, 1.0) * kPanelH; };
  f.time_ticks(out, sc.duration_s);
  for (int i = 0; i <= 8; ++i) {
    const double v = i * ystep;
    if (v > ymax * (1 + 1e-9)) break;
    f.y_tick(out, py(v), tick_label(v));
  }
  for (size_t pi = 0; pi < res.policies.size(); ++pi) {
    const PolicyResult& p = res.policies[pi];
    if (p.queue_series.empty()) continue;
    const std::string points = f.bucket_points(p.queue_series, sc, py);
    out += fmt::format(R"(<polyline points="{}" fill="none" stroke="{}" stroke-width="1.6"><title>{}: {} waited, {} timed out, at most {} at once</title></polyline>)" "\n",
                       points, policy_colour(pi), balance::policy_name(p.policy), p.queue_waited, p.queue_timed_out,
                       p.queue_peak);
  }
}

// The server legend below a scenario's panels: one entry per server, wrapped
// onto further lines where the next would pass the picture's right edge.
struct LegendEntry {
  std::string label;
  double x;
  int line;
};
constexpr double kLegendX = 10 + kLeft + 62;  // after "servers:"
constexpr double kLegendLineH = 18;

std::vector<LegendEntry> server_legend(const Scenario& sc, double width) {
  std::vector<LegendEntry> entries;
  double lx = kLegendX;
  int line = 0;
  for (const ServerSpec& s : sc.servers) {
    std::string label =
        fmt::format("{} ({} worker{}, {})", s.name, s.size, s.size == 1 ? "" : "s", format_latency(s.service_s));
    const double text_w = 7.0 * static_cast<double>(label.size());  // 12 px text: about 7 px a character
    if (lx > kLegendX && lx + 18 + text_w > width - 10) {
      ++line;
      lx = kLegendX;
    }
    entries.push_back({std::move(label), lx, line});
    lx += 30 + text_w;
  }
  return entries;
}

double legend_height(const std::vector<LegendEntry>& entries) {
  return kLegendH + (entries.empty() ? 0 : entries.back().line * kLegendLineH);
}

}  // namespace

// A second row of panels (weight factors) when the pool's weights can change by themselves.
double factor_row_height(const SimResult& res) { return dynamic_weights(res.scenario) ? kCellH : 0; }

std::string format_svg(const std::vector<SimResult>& results) {
  size_t columns = 1;
  for (const SimResult& r : results) columns = std::max(columns, r.policies.size() + 1 + has_pool_queue(r));
  const double width = columns * kCellW + 20;
  std::vector<std::vector<LegendEntry>> legends;
  double height = kTitleH + 10;
  for (const SimResult& r : results) {
    legends.push_back(server_legend(r.scenario, width));
    height += kScenarioTitleH + kCellH + factor_row_height(r) + legend_height(legends.back());
  }
  std::string out;
  out += fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="{0:.0f}" height="{1:.0f}" viewBox="0 0 {0:.0f} {1:.0f}" font-family="Helvetica, Arial, sans-serif">)"
      "\n",
      width, height);
  out += R"(<style>
.title { font-size: 18px; font-weight: bold; }
.scenario { font-size: 14px; font-weight: bold; }
.panel-title { font-size: 13px; font-weight: bold; }
.axis-label { font-size: 12px; fill: #333; }
.tick { font-size: 10px; fill: #555; }
.legend { font-size: 12px; }
.plot { fill: #fafafa; stroke: #888; }
.grid { stroke: #ddd; stroke-width: 1; }
</style>
)";
  out += fmt::format(R"(<rect x="0" y="0" width="{:.0f}" height="{:.0f}" fill="white"/>)" "\n", width, height);
  out += R"(<text x="10" y="28" class="title">heft sim: utilisation per server over time, and latency CDFs</text>)"
         "\n";
  double top = kTitleH;
  for (size_t r = 0; r < results.size(); ++r) {
    const SimResult& res = results[r];
    const Scenario& sc = res.scenario;
    if (r > 0) top += kScenarioTitleH + kCellH + factor_row_height(results[r - 1]) + legend_height(legends[r - 1]);
    std::string events;
    for (const Event& e : sc.events) events += (events.empty() ? "" : ", ") + event_text(e);
    std::string arrivals = arrivals_text(res);
    out += fmt::format(R"(<text x="10" y="{:.1f}" class="scenario">{} ({}, seed {}{}{}; buckets of {} s)</text>)" "\n",
                       top + 18, escape(sc.name), arrivals, sc.seed, events.empty() ? "" : "; events: ",
                       escape(events), format_seconds(sc.bucket_s));
    for (size_t c = 0; c < res.policies.size(); ++c) {
      Frame f{10 + c * kCellW + kLeft, top + kScenarioTitleH + kTop};
      utilisation_panel(out, f, res, res.policies[c]);
    }
    Frame cdf{10 + res.policies.size() * kCellW + kLeft, top + kScenarioTitleH + kTop};
    cdf_panel(out, cdf, res);
    if (has_pool_queue(res)) queue_panel(out, Frame{cdf.x0 + kCellW, cdf.y0}, res);
    if (factor_row_height(res) > 0) {
      for (size_t c = 0; c < res.policies.size(); ++c)
        factor_panel(out, Frame{10 + c * kCellW + kLeft, top + kScenarioTitleH + kCellH + kTop}, res, res.policies[c]);
    }
    // Legends: servers (colours of the utilisation lines), policies (CDF lines).
    const double ly = top + kScenarioTitleH + kCellH + factor_row_height(res) + 8;
    out += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" class="legend">servers:</text>)" "\n", 10 + kLeft, ly + 4);
    for (size_t i = 0; i < legends[r].size(); ++i) {
      const LegendEntry& e = legends[r][i];
      const double y = ly + e.line * kLegendLineH;
      out += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="14" height="4" fill="{}"/>)" "\n", e.x, y - 2,
                         server_colour(i));
      out += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" class="legend">{}</text>)" "\n", e.x + 18, y + 4,
                         escape(e.label));
    }
    // Policy legend inside the CDF plot's upper left: no CDF reaches 100 % at the shortest latencies.
    const double box_w = 170, box_h = 16.0 * res.policies.size() + 8;
    const double bx = cdf.x0 + 6, by = cdf.y0 + 6;
    out += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="white" stroke="#bbb"/>)" "\n",
                       bx, by, box_w, box_h);
    for (size_t pi = 0; pi < res.policies.size(); ++pi) {
      std::string_view name = balance::policy_name(res.policies[pi].policy);
      double y = by + 14 + 16.0 * pi;
      out += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="14" height="4" fill="{}"/>)" "\n", bx + 8, y - 5,
                         policy_colour(pi));
      out += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" class="legend">{}</text>)" "\n", bx + 28, y, name);
    }
  }
  out += "</svg>\n";
  return out;
}

}  // namespace heft::sim
