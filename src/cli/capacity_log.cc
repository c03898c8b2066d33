#include "cli/capacity_log.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

namespace heft::cli {

using json = nlohmann::json;

namespace {

// A second counts as queued only with this many answers: fewer say little.
constexpr uint64_t kMinAnswers = 5;
// Capacity from queued seconds needs this many of them; fewer give a lower bound.
constexpr size_t kMinQueuedSeconds = 3;

struct Answer {
  double end;  // seconds since the epoch
  double ms;   // time to the response head (or, without it, the whole request)
  bool failed;  // 5xx
};

struct Second {
  uint64_t answers = 0, errors = 0;
  double ms_sum = 0;
};

std::optional<double> number(const json& entry, const char* key) {
  auto it = entry.find(key);
  if (it == entry.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace

LogEstimate estimate_from_log(std::istream& log, const std::vector<std::string>& only, double max_error,
                              std::string& error) {
  LogEstimate out;
  std::vector<std::string> order;
  std::map<std::string, std::vector<Answer>> answers;
  double first_end = INFINITY, last_end = -INFINITY;
  for (std::string line; std::getline(log, line);) {
    if (line.empty()) continue;
    ++out.lines;
    const json entry = json::parse(line, nullptr, false);
    if (!entry.is_object()) {
      ++out.skipped;  // not JSON
      continue;
    }
    const auto ts = number(entry, "ts"), duration = number(entry, "duration"), status = number(entry, "status");
    auto upstream = entry.find("upstream");
    if (!ts || !duration || !status || upstream == entry.end() || !upstream->is_string() ||
        upstream->get<std::string>().empty()) {
      ++out.skipped;  // no request that reached a backend
      continue;
    }
    const std::string name = upstream->get<std::string>();
    if (!only.empty() && std::find(only.begin(), only.end(), name) == only.end()) {
      ++out.skipped;
      continue;
    }
    const auto header = number(entry, "upstream_header_time");
    const double seconds = duration.value_or(0);
    Answer a{ts.value_or(0) + seconds, (header && *header >= 0 ? *header : seconds) * 1000, status.value_or(0) >= 500};
    if (!answers.count(name)) order.push_back(name);
    answers[name].push_back(a);
    first_end = std::min(first_end, a.end);
    last_end = std::max(last_end, a.end);
  }
  if (answers.empty()) {
    error = out.lines ? "no line of the log names a backend that answered (\"upstream\")" : "the log is empty";
    return out;
  }
  out.first_ts = first_end;
  out.last_ts = last_end;
  // Whole seconds only: the first and last are cut by where the log begins and ends.
  const auto from = int64_t(std::floor(first_end)) + 1, to = int64_t(std::floor(last_end)) - 1;
  if (to < from) {
    error = "the log spans less than two whole seconds: too short to see a rate";
    return out;
  }
  for (const std::string& name : order) {
    const std::vector<Answer>& list = answers[name];
    LogCapacity c;
    c.upstream = name;
    std::vector<double> times;
    std::map<int64_t, Second> seconds;
    for (const Answer& a : list) {
      ++c.requests;
      c.errors += a.failed;
      times.push_back(a.ms);
      const auto s = int64_t(std::floor(a.end));
      if (s < from || s > to) continue;
      Second& second = seconds[s];
      ++second.answers;
      second.errors += a.failed;
      second.ms_sum += a.ms;
    }
    std::sort(times.begin(), times.end());
    c.unloaded_ms = times[times.size() / 50];
    std::vector<double> queued;
    double most = 0;
    for (const auto& [s, second] : seconds) {
      ++c.seconds;
      if (double(second.errors) > max_error * double(second.answers)) continue;
      const double good = double(second.answers - second.errors);
      most = std::max(most, good);
      if (second.answers >= kMinAnswers && second.ms_sum / double(second.answers) >= kQueueingFactor * c.unloaded_ms)
        queued.push_back(good);
    }
    c.queued_seconds = queued.size();
    if (queued.size() >= kMinQueuedSeconds) {
      c.capacity = median(queued);
    } else {
      c.capacity = most;
      c.lower_bound = true;
    }
    out.backends.push_back(c);
  }
  return out;
}

}  // namespace heft::cli
