// Where the values of a configuration's JSON document were written, when the
// document was adapted from a Heftfile (adapt.h): each JSON pointer (RFC 6901)
// the adapter wrote maps to the Heftfile token it came from, so the one
// validator (from_json) can report a problem at `Heftfile:12:5` instead of
// at `/apps/http/servers/srv0/...`.
#pragma once

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>

namespace heft::config {

// RFC 6901: `pointer` with one more reference token, "~" written "~0" and "/" "~1".
std::string pointer_append(std::string_view pointer, std::string_view key);
std::string pointer_append(std::string_view pointer, std::size_t index);

// The place of one value in a Heftfile.
struct Source {
  int line = 0;  // 0: the file as a whole
  int column = 0;
  // The option as the Heftfile names it ("weight", "connect_timeout", "bind",
  // "site address"): the subject of a message about the value.
  std::string name;
  // The token as written ("3000000", "5%", "64XB", "+X-A"): what a message quotes.
  std::string token;
  // How the Heftfile spells the values of a true/false option, when not so
  // ("on or off"): a message says what to write.
  std::string_view spelling;
};

class SourceMap {
 public:
  explicit SourceMap(std::string file = "Heftfile") : file_(std::move(file)) {}

  const std::string& file() const { return file_; }

  // The first place given for a pointer stays: a value set once for several
  // backends (`to a b weight 5`) is at its one token.
  void add(std::string pointer, Source source) { sources_.try_emplace(std::move(pointer), std::move(source)); }

  // Where the value at `pointer` was written; nullptr when the adapter wrote none there.
  const Source* at(std::string_view pointer) const;
  // The place of `pointer` or of its nearest ancestor that has one: where a
  // member the Heftfile left out (a required one) belongs. The document's
  // root is the file itself (line 0).
  const Source& nearest(std::string_view pointer) const;

  // A member the adapter left out because of an error of its own (an
  // unknown directive where reverse_proxy was expected, a `to` line without
  // addresses): the validator does not report it missing as well.
  void mark_incomplete(std::string pointer) { incomplete_.insert(std::move(pointer)); }
  bool incomplete(std::string_view pointer) const { return incomplete_.find(pointer) != incomplete_.end(); }

 private:
  std::string file_;
  std::map<std::string, Source, std::less<>> sources_;
  std::set<std::string, std::less<>> incomplete_;
  Source file_source_;
};

}  // namespace heft::config
