#include "proxy/response_parser.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "net/http_chars.h"
#include "proxy/header_rules.h"

namespace heft::proxy {
namespace {

namespace http = boost::beast::http;

// (The helpers here are forced inline: called from the slow path too, they
// were not inlined into parse_simple_head() any more, ~190 instructions more
// per response head.)

// The first octet at or after `p` that is not text (a control other than
// HTAB, or DEL: normally the CR ending the line), or `end`. Eight octets at a
// time: a word with no octet below 0x20 and none equal to 0x7f is all text
// (obs-text, 0x80 and up, included); a word with one is looked at octet by octet.
[[gnu::always_inline]] inline const char* end_of_text(const char* p, const char* end) {
  constexpr std::uint64_t k01 = 0x0101010101010101ULL, k20 = 0x2020202020202020ULL, k7f = 0x7f7f7f7f7f7f7f7fULL,
                          k80 = 0x8080808080808080ULL;
  while (end - p >= 8) {
    std::uint64_t x;
    std::memcpy(&x, p, 8);
    const std::uint64_t del = x ^ k7f;
    const std::uint64_t found = (((x - k20) & ~x) | ((del - k01) & ~del)) & k80;
    if (found) {
      // The lowest flagged octet is a real one (a false flag needs a borrow
      // from a real one below it). Little-endian: the lowest octet is the
      // first; elsewhere the octet-by-octet loop below finds it.
      if constexpr (std::endian::native == std::endian::little) {
        p += std::countr_zero(found) / 8;
        if (*p != '\t') return p;
      }
      break;
    }
    p += 8;
  }
  for (; p < end; ++p)
    if (!kFieldText[static_cast<unsigned char>(*p)]) return p;
  return end;
}

// The end of a line's text at or after `p`: the first CR, LF or NUL, or
// `end`. The other controls (and DEL) a recipient may keep as received (RFC
// 9110 5.5; nginx and HAProxy pass them on) are skipped.
[[gnu::always_inline]] inline const char* end_of_line_text(const char* p, const char* end) {
  for (;;) {
    p = end_of_text(p, end);
    if (p == end || *p == '\r' || *p == '\n' || *p == '\0') return p;
    ++p;
  }
}

// The size of the line end at `q` (where end_of_line_text() stopped): 2 for
// CRLF, 1 for a bare LF (RFC 9112 2.2: a recipient MAY take it as a line
// terminator; nginx and HAProxy do in responses), 0 when the octets to tell
// are still to come, -1 for anything else (a CR alone, a NUL).
[[gnu::always_inline]] inline int line_end(const char* q, const char* end) {
  if (q == end) return 0;
  if (*q == '\n') return 1;
  if (*q != '\r') return -1;
  if (end - q < 2) return 0;
  return q[1] == '\n' ? 2 : -1;
}

// Beast's error for a status line it refuses, as it reads one: version
// (HTTP/1.0 or 1.1), SP, three digits, SP, reason (a CR or NUL in it: the
// line's end is left out of [line, line + size)); none for a line it takes
// (one without the SP after the code, rewritten). `whole`: false for the
// first octets of a line still coming, judged as far as they go.
http::error status_line_error(const char* line, std::size_t size, bool whole) {
  static constexpr std::string_view form = "HTTP/1.x 000 ";
  for (std::size_t i = 0; i < form.size(); ++i) {
    const bool version = i < 9;
    if (i >= size) {
      if (!whole || i == 12) return {};
      return version ? http::error::bad_version : http::error::bad_status;
    }
    const char c = line[i];
    const bool ok = i == 7 ? c == '0' || c == '1' : form[i] == '0' ? net::is_digit(c) : c == form[i];
    if (!ok) return version ? http::error::bad_version : http::error::bad_status;
  }
  for (const char* q = line + 13; q < line + size; ++q) {
    if (*q == '\r') return http::error::bad_line_ending;
    if (*q == '\0') return http::error::bad_reason;
  }
  return {};
}

// Beast's refusals of a head's framing fields.
bool refused_framing(const boost::system::error_code& ec) {
  return ec == http::error::bad_transfer_encoding || ec == http::error::bad_content_length ||
         ec == http::error::multiple_content_length;
}

// Whether `head`, CRLF lines as given to Beast, ends with its empty line: it
// stops short of that when a line of it is one Beast refuses (see
// scan_for_beast()), and then that refusal stands, whatever the framing.
bool whole_head(std::string_view head) { return head.size() >= 4 && head.substr(head.size() - 4) == "\r\n\r\n"; }

// The octet that stands for a kept control in the copy of a head given to
// Beast: one it accepts in a reason or value (obs-text) and in no token, so
// a control in Connection or Content-Length is refused as before.
constexpr char kMasked = '\x80';

// Branch-free, eight octets a round: names are short and almost always valid.
[[gnu::always_inline]] inline bool all_tchar(const char* p, const char* end) {
  const auto t = [](const char* c) { return static_cast<unsigned>(kTchar[static_cast<unsigned char>(*c)]); };
  unsigned ok = 1;
  for (; end - p >= 8; p += 8) ok &= t(p) & t(p + 1) & t(p + 2) & t(p + 3) & t(p + 4) & t(p + 5) & t(p + 6) & t(p + 7);
  for (; p < end; ++p) ok &= t(p);
  return ok != 0;
}

// Field names the proxy acts on, by length first (most names match none).
http::field classify(std::string_view name) {
  using http::field;
  switch (name.size()) {
    case 2: return lower_equals(name, "te") ? field::te : field::unknown;
    case 4: return lower_equals(name, "date") ? field::date : field::unknown;
    case 7:
      if (lower_equals(name, "upgrade")) return field::upgrade;
      return lower_equals(name, "trailer") ? field::trailer : field::unknown;
    case 10:
      if (lower_equals(name, "connection")) return field::connection;
      return lower_equals(name, "keep-alive") ? field::keep_alive : field::unknown;
    case 14: return lower_equals(name, "content-length") ? field::content_length : field::unknown;
    case 16: return lower_equals(name, "proxy-connection") ? field::proxy_connection : field::unknown;
    case 17: return lower_equals(name, "transfer-encoding") ? field::transfer_encoding : field::unknown;
    default: return field::unknown;
  }
}

// The tokens of a Connection value: close and keep-alive noted; false for
// what Beast should see (upgrade, or anything not a plain token list).
bool simple_connection(std::string_view list, bool& close, bool& keep_alive) {
  return each_list_item(list, [&](std::string_view item) {
    for (char c : item)
      if (!is_tchar(c)) return false;
    if (lower_equals(item, "close")) close = true;
    else if (lower_equals(item, "keep-alive")) keep_alive = true;
    else if (lower_equals(item, "upgrade")) return false;
    return true;
  });
}

}  // namespace

http::field ResponseParser::proxy_field(field name) {
  return is_hop_by_hop(name) || name == field::date ? name : field::unknown;
}

std::size_t ResponseParser::put(boost::asio::const_buffer buffer, error_code& ec) {
  if (simple_) return put_simple_body(buffer, ec);
  if (!tried_simple_ && !base::is_header_done()) {
    // A head that comes in many pieces is parsed anew each time: after a
    // few, Beast's path (which resumes its scan where it stopped) takes it.
    std::size_t used = 0;
    const Simple parsed = parse_simple_head(static_cast<const char*>(buffer.data()), buffer.size(), used);
    if (parsed != Simple::taken) forget_head();
    switch (parsed) {
      case Simple::taken:
        simple_ = true;
        ec = {};
        return used;
      case Simple::incomplete:
        if (++attempts_ < 4) {
          ec = http::error::need_more;  // as Beast: nothing consumed until the head is whole
          return 0;
        }
        [[fallthrough]];
      case Simple::not_simple: tried_simple_ = true; break;
    }
  }
  if (!beast_fed_) return put_head_to_beast(static_cast<const char*>(buffer.data()), buffer.size(), ec);
  return base::put(buffer, ec);
}

std::size_t ResponseParser::put_head_to_beast(const char* p, std::size_t n, error_code& ec) {
  // Beast reads a head as it comes, line by line, and cannot be given a
  // line again: whether the head must be rewritten for it is known only
  // once it is whole (a bare LF may end its last line), so it waits till
  // then, unless a line shows already that Beast refuses the head.
  std::size_t size = 0;
  switch (scan_for_beast(p, n, size)) {
    case Handoff::wait: ec = http::error::need_more; return 0;
    case Handoff::too_large: ec = http::error::header_limit; return 0;
    case Handoff::refused: ec = refused_; return 0;
    case Handoff::as_is: {
      beast_fed_ = true;
      const std::size_t used = base::put(boost::asio::const_buffer(p, n), ec);
      if (refused_framing(ec) && whole_head(std::string_view(p, size)))
        return read_without_length(std::string_view(p, size), ec) ? size : 0;
      return used;
    }
    case Handoff::rewritten: break;
  }
  beast_fed_ = true;
  rewrite_for_beast(p, size, std::min<std::size_t>(n, header_limit_));
  put_rewritten(ec);
  if (refused_framing(ec) && whole_head(rewritten_->head)) return read_without_length(rewritten_->head, ec) ? size : 0;
  // Beast had a whole head, or up to a line it refuses: it is past the head
  // or has refused it.
  if (!ec && !base::is_header_done()) ec = http::error::bad_field;  // not reached
  return ec ? 0 : size;
}

// Beast refuses a head with both Transfer-Encoding and Content-Length (as a
// request's must be refused). For a response RFC 9112 6.3 says the coding
// overrides the length, and an intermediary that forwards it removes the
// Content-Length first: nginx 1.22 and HAProxy 2.6 forward such a body
// chunked. So the head is read again without its Content-Length lines (and
// their obs-fold continuations); the connection is not kept (keep_alive()),
// since such a message "ought to be handled as an error" (the origin and heft
// may disagree about where it ends). A rare head: the copy and the parser
// built anew cost nothing on the common path.
bool ResponseParser::read_without_length(std::string_view head, error_code& ec) {
  std::string kept;
  kept.reserve(head.size());
  // Controls masked for Beast (rewrite_for_beast()) move with their lines.
  std::vector<std::pair<uint32_t, char>> retained;
  const bool from_rewritten = rewritten_ && head.data() == rewritten_->head.data();
  bool coding = false, length = false, dropping = false;
  for (std::size_t at = 0; at < head.size();) {
    const std::size_t next = head.find("\r\n", at) + 2;  // the head ends with CRLF CRLF
    const std::string_view line = head.substr(at, next - at);
    if (at == 0 || line.size() <= 2) {
      dropping = false;  // the status line, the empty line
    } else if (!is_ows(line.front())) {  // else an obs-fold line, which goes with its field
      const std::string_view line_name = line.substr(0, line.find(':'));
      dropping = lower_equals(line_name, "content-length");
      length = length || dropping;
      coding = coding || lower_equals(line_name, "transfer-encoding");
    }
    if (!dropping) {
      if (from_rewritten)
        for (const auto& [offset, octet] : rewritten_->retained)
          if (offset >= at && offset < next) retained.emplace_back(static_cast<uint32_t>(offset - at + kept.size()), octet);
      kept.append(line);
    }
    at = next;
  }
  if (!coding || !length) return false;
  // A parser as new (Beast's stops at its first error), with this one's settings.
  FieldArena& arena = *arena_;
  const std::uint32_t head_limit = header_limit_;
  const std::uint64_t body_max = body_limit_;
  const bool head_request = base::skip();
  this->~ResponseParser();
  new (this) ResponseParser(arena);
  header_limit(head_limit);
  body_limit(body_max);
  base::skip(head_request);
  tried_simple_ = beast_fed_ = length_dropped_ = true;
  rewritten_ = std::make_unique<Rewritten>();
  rewritten_->head = std::move(kept);
  rewritten_->retained = std::move(retained);
  put_rewritten(ec);
  if (!ec && !base::is_header_done()) ec = http::error::bad_transfer_encoding;  // not reached: the head is whole
  return !ec;
}

void ResponseParser::put_rewritten(error_code& ec) {
  // The limit is on what the backend sent, not on the CRs added.
  base::header_limit(static_cast<std::uint32_t>(std::max<std::size_t>(header_limit_, rewritten_->head.size())));
  base::put(boost::asio::buffer(rewritten_->head), ec);
  base::header_limit(header_limit_);
}

ResponseParser::Handoff ResponseParser::scan_for_beast(const char* const p, const std::size_t n, std::size_t& size) {
  const char* const end = p + std::min<std::size_t>(n, header_limit_);
  const char* line = p + scan_at_;
  for (;;) {
    const auto* lf = static_cast<const char*>(std::memchr(line, '\n', static_cast<std::size_t>(end - line)));
    if (!lf) break;
    const char* stop = lf > line && lf[-1] == '\r' ? lf - 1 : lf;
    if (stop == lf) lenient_ = true;  // a bare LF
    size = static_cast<std::size_t>(lf + 1 - p);
    if (line == p) {
      // A status line Beast refuses is refused here, with Beast's error:
      // given it, Beast could wait for octets after it to tell.
      refused_ = status_line_error(p, static_cast<std::size_t>(stop - p), true);
      if (refused_ != http::error{}) return Handoff::refused;
      if (stop - p == 12) lenient_ = true;  // no SP, no reason: Beast needs the SP
    } else if (stop == line) {  // the empty line
      return lenient_ ? Handoff::rewritten : Handoff::as_is;
    }
    if (bad_line_for_beast(p, line, stop)) return lenient_ ? Handoff::rewritten : Handoff::as_is;
    if (line == p) fields_at_ = static_cast<uint32_t>(size);
    line = lf + 1;
    scan_at_ = static_cast<uint32_t>(size);
  }
  // A status line not whole yet that is no status line (another protocol)
  // is refused at once. (Other lines are looked at once whole: checking a
  // line that trickles in again and again would cost its length squared.)
  if (line == p) {
    refused_ = status_line_error(p, std::min<std::size_t>(static_cast<std::size_t>(end - p), 12), false);
    if (refused_ != http::error{}) return Handoff::refused;
  }
  if (n < header_limit_) return Handoff::wait;
  return lenient_ ? Handoff::too_large : Handoff::as_is;  // Beast reports the limit
}

bool ResponseParser::bad_line_for_beast(const char* const p, const char* const line, const char* const stop) {
  const auto size = static_cast<std::size_t>(stop - line);
  const char* text;
  if (line == p) {
    if (size == 12) return false;  // (checked by status_line_error())
    text = line + 13;
  } else if (is_ows(*line)) {
    // obs-fold: Beast joins the line to the field before (none after the status line).
    if (line == p + fields_at_) return true;
    text = line;
  } else {
    const auto* colon = static_cast<const char*>(std::memchr(line, ':', size));
    if (!colon || colon == line || !all_tchar(line, colon)) return true;
    text = colon + 1;
  }
  // Text up to the line end: a CR or NUL in it is refused; other controls
  // are kept (rewritten for Beast).
  for (const char* q = end_of_text(text, stop); q != stop; q = end_of_text(q + 1, stop)) {
    if (*q == '\r' || *q == '\0') return true;
    lenient_ = true;
  }
  return false;
}

void ResponseParser::rewrite_for_beast(const char* const p, const std::size_t size, const std::size_t seen) {
  const char* const end = p + size;
  if (!rewritten_) rewritten_ = std::make_unique<Rewritten>();
  std::string& out = rewritten_->head;
  std::vector<std::pair<uint32_t, char>>& retained = rewritten_->retained;
  out.clear();
  retained.clear();
  out.reserve(size + 64);
  for (const char* line = p; line < end;) {
    const auto* lf = static_cast<const char*>(std::memchr(line, '\n', static_cast<std::size_t>(end - line)));
    const char* next = lf ? lf + 1 : end;
    const char* stop = lf ? (lf > line && lf[-1] == '\r' ? lf - 1 : lf) : end;
    // Where the controls that are kept may be: a reason, a field's value
    // (not one folded over lines: Beast gives those joined, and they are
    // refused as before).
    const char* text = stop;
    if (line == p) {
      if (stop - line >= 13) text = line + 13;
    } else if (line < stop && !is_ows(*line) && !(next < p + seen && is_ows(*next))) {
      const auto* colon = static_cast<const char*>(std::memchr(line, ':', static_cast<std::size_t>(stop - line)));
      if (colon) text = colon + 1;
    }
    out.append(line, text);
    for (const char* q = text; q < stop; ++q) {
      const char c = *q;
      if (!is_field_text(c) && c != '\r' && c != '\0') {
        retained.emplace_back(static_cast<uint32_t>(out.size()), c);
        out.push_back(kMasked);
      } else {
        out.push_back(c);
      }
    }
    if (line == p && stop - line == 12) out.push_back(' ');  // a status line without its SP
    if (lf) out.append("\r\n");
    line = next;
  }
}

void ResponseParser::restore_controls(string_view text, uint32_t at) {
  // A value Beast joined from folded lines is in its own buffer: no control
  // was masked in it.
  const char* const copy = rewritten_->head.data();
  if (text.data() < copy || text.data() >= copy + rewritten_->head.size()) return;
  const auto from = static_cast<uint32_t>(text.data() - copy);
  const auto to = static_cast<uint32_t>(from + text.size());
  for (const auto& [offset, octet] : rewritten_->retained)
    if (offset >= from && offset < to) store_[at + (offset - from)] = octet;
}

std::size_t ResponseParser::put_simple_body(boost::asio::const_buffer buffer, error_code& ec) {
  ec = {};
  if (remaining_ == 0) return 0;
  if (!body_.empty()) {
    ec = http::error::need_buffer;
    return 0;
  }
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, buffer.size()));
  if (n == 0) {
    ec = http::error::need_more;
    return 0;
  }
  body_ = {static_cast<const char*>(buffer.data()), n};
  remaining_ -= n;
  return n;
}

void ResponseParser::put_eof(error_code& ec) {
  // An end before the head is whole is a truncated message. Beast alone
  // would call it complete when no byte had reached it yet (a head heft's own
  // path was still waiting to finish): a response with status 0.
  if (!is_header_done()) {
    ec = http::error::partial_message;
    return;
  }
  if (!simple_) return base::put_eof(ec);
  // The length was known: an end before it is a truncated message.
  ec = remaining_ == 0 ? error_code{} : error_code(http::error::partial_message);
}

ResponseParser::Simple ResponseParser::parse_simple_head(const char* const p, const std::size_t n,
                                                          std::size_t& used) {
  // Nothing goes past the header limit: Beast reports a head that does.
  const char* const end = p + std::min<std::size_t>(n, header_limit_);
  const Simple short_of_end = n < header_limit_ ? Simple::incomplete : Simple::not_simple;

  // Status line: HTTP/1.x SP 3DIGIT [SP reason] line end, a final status.
  // (Without the SP after the code the reason is empty: nginx and HAProxy
  // relay such a line.)
  if (end - p < 13) return std::memcmp(p, "HTTP/1.", std::min<std::size_t>(n, 7)) == 0 ? short_of_end : Simple::not_simple;
  if (std::memcmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1') || p[8] != ' ') return Simple::not_simple;
  // proxy:: — basic_parser has a private is_digit of its own.
  if (!net::is_digit(p[9]) || !net::is_digit(p[10]) || !net::is_digit(p[11])) return Simple::not_simple;
  const bool http11 = p[7] == '1';
  const unsigned status = static_cast<unsigned>((p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0'));
  if (status < 200 || status > 599) return Simple::not_simple;  // interim and odd codes: Beast
  // The common case first (text, then CRLF) at the cost it had before heft
  // read the lenient forms; they are looked for only when it fails.
  const uint32_t reason_at = p[12] == ' ' ? 13 : 12;
  const char* q = reason_at == 13 ? end_of_text(p + 13, end) : p + 12;
  int eol = 2;
  if (end - q < 2 || q[0] != '\r' || q[1] != '\n') {
    if (reason_at == 13) q = end_of_line_text(q, end);
    eol = line_end(q, end);
    if (eol <= 0) return eol == 0 ? short_of_end : Simple::not_simple;
  }
  const auto offset = [p](const char* at) { return static_cast<uint32_t>(at - p); };
  reason_at_ = reason_at;
  reason_size_ = offset(q) - reason_at;
  q += eol;

  bool close = false, keep_alive = false;
  has_length_ = false;
  for (;;) {
    // The empty line, or field-name ":" OWS field-value OWS line end.
    if (end - q < 2) {
      if (q == end || *q != '\n') return short_of_end;
      ++q;  // a bare LF, the last octet there is
      break;
    }
    if (q[0] == '\r') {
      if (q[1] != '\n') return Simple::not_simple;
      q += 2;
      break;
    }
    if (q[0] == '\n') {
      ++q;
      break;
    }
    const char* name_begin = q;
    const auto* colon = static_cast<const char*>(std::memchr(q, ':', static_cast<std::size_t>(end - q)));
    q = colon ? colon : end;
    if (!all_tchar(name_begin, q)) return Simple::not_simple;
    if (!colon) return short_of_end;
    if (q == name_begin) return Simple::not_simple;
    const std::string_view name(name_begin, static_cast<std::size_t>(q - name_begin));
    ++q;
    while (q < end && is_ows(*q)) ++q;
    const char* value_begin = q;
    q = end_of_text(q, end);
    if (end - q >= 3 && q[0] == '\r' && q[1] == '\n') {
      eol = 2;
    } else {
      q = end_of_line_text(q, end);
      eol = line_end(q, end);
      if (eol <= 0) return eol == 0 ? short_of_end : Simple::not_simple;
      if (end - q <= eol) return short_of_end;  // and the next line's first octet
    }
    const char* value_end = q;
    while (value_end > value_begin && is_ows(value_end[-1])) --value_end;
    q += eol;
    if (is_ows(*q)) return Simple::not_simple;  // obs-fold: Beast joins the lines

    const field f = classify(name);
    const std::string_view value(value_begin, static_cast<std::size_t>(value_end - value_begin));
    switch (f) {
      case field::content_length:  // plain digits; Beast also takes lists of equal values
        if (has_length_ || !plain_length(value, length_)) return Simple::not_simple;
        has_length_ = true;
        break;
      case field::connection:
        if (!simple_connection(value, close, keep_alive)) return Simple::not_simple;
        break;
      case field::proxy_connection:  // Beast reads it as Connection
      case field::transfer_encoding:
      case field::upgrade: return Simple::not_simple;
      default: break;
    }
    Field kept{f};
    kept.name_at = offset(name_begin);
    kept.name_size = static_cast<uint32_t>(name.size());
    kept.value_at = offset(value_begin);
    kept.value_size = static_cast<uint32_t>(value.size());
    fields_.push_back(kept);
  }

  // Framing, as Beast's finish_header(): no body for HEAD, 204 and 304
  // whatever Content-Length says; otherwise the length (a body delimited by
  // the connection's close goes to Beast).
  if (base::skip() || status == 204 || status == 304) remaining_ = 0;
  else if (has_length_ && length_ <= body_limit_) remaining_ = length_;
  else return Simple::not_simple;
  simple_keep_alive_ = !close && (http11 || keep_alive);  // close wins, on HTTP/1.0 too (RFC 9112 9.3)
  status_ = status;
  used = static_cast<std::size_t>(q - p);
  store_.assign(p, used);  // the offsets above are into this copy
  return Simple::taken;
}

}  // namespace heft::proxy
