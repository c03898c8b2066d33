// The Date field heft sends (RFC 9110 6.6.1): on its own responses, and on
// forwarded ones that lack it. A worker keeps the whole "Date: ...\r\n" line
// and formats it again when the second has changed, on its sweep tick, so a
// response costs an append, never a clock read or a format.
//
// Thread safety: a DateField belongs to one worker (one thread).
#pragma once

#include <ctime>
#include <string_view>

namespace heft::proxy {

// `t` as an IMF-fixdate (RFC 9110 5.6.7), "Sun, 06 Nov 1994 08:49:37 GMT",
// into out[0..29). Not strftime: its names follow the locale.
inline void format_imf_fixdate(std::time_t t, char* out) {
  static constexpr char kDays[] = "SunMonTueWedThuFriSat";
  static constexpr char kMonths[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  const auto two = [](char* at, int v) {
    at[0] = static_cast<char>('0' + v / 10 % 10);
    at[1] = static_cast<char>('0' + v % 10);
  };
  const int year = tm.tm_year + 1900;
  for (int i = 0; i < 3; ++i) out[i] = kDays[tm.tm_wday * 3 + i];
  out[3] = ',';
  out[4] = ' ';
  two(out + 5, tm.tm_mday);
  out[7] = ' ';
  for (int i = 0; i < 3; ++i) out[8 + i] = kMonths[tm.tm_mon * 3 + i];
  out[11] = ' ';
  two(out + 12, year / 100);
  two(out + 14, year % 100);
  out[16] = ' ';
  two(out + 17, tm.tm_hour);
  out[19] = ':';
  two(out + 20, tm.tm_min);
  out[22] = ':';
  two(out + 23, tm.tm_sec);
  out[25] = ' ';
  out[26] = 'G';
  out[27] = 'M';
  out[28] = 'T';
}

class DateField {
 public:
  DateField() { refresh(std::time(nullptr)); }
  // Formats the line again if `now` is another second than the last.
  void refresh(std::time_t now) {
    if (now == second_) return;
    second_ = now;
    format_imf_fixdate(now, text_ + 6);
  }
  // "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
  std::string_view line() const { return {text_, sizeof text_ - 1}; }
  // "Sun, 06 Nov 1994 08:49:37 GMT"
  std::string_view value() const { return {text_ + 6, sizeof text_ - 9}; }

 private:
  std::time_t second_ = -1;
  char text_[38] = "Date: Thu, 01 Jan 1970 00:00:00 GMT\r\n";
};

}  // namespace heft::proxy
