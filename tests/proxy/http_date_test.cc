// The Date line heft sends (proxy/http_date.h): IMF-fixdate, whatever the locale.
#include <gtest/gtest.h>

#include <string>

#include "proxy/http_date.h"

namespace heft::proxy {
namespace {

std::string imf(std::time_t t) {
  char out[29];
  format_imf_fixdate(t, out);
  return {out, sizeof out};
}

TEST(HttpDate, FormatsImfFixdate) {
  EXPECT_EQ(imf(784111777), "Sun, 06 Nov 1994 08:49:37 GMT");  // RFC 9110 5.6.7's example
  EXPECT_EQ(imf(0), "Thu, 01 Jan 1970 00:00:00 GMT");
  EXPECT_EQ(imf(951825599), "Tue, 29 Feb 2000 11:59:59 GMT");
  EXPECT_EQ(imf(4102444799), "Thu, 31 Dec 2099 23:59:59 GMT");
}

TEST(HttpDate, TheLineChangesWithTheSecond) {
  DateField date;
  date.refresh(784111777);
  EXPECT_EQ(date.line(), "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n");
  date.refresh(784111777);
  EXPECT_EQ(date.line(), "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n");
  date.refresh(784111778);
  EXPECT_EQ(date.line(), "Date: Sun, 06 Nov 1994 08:49:38 GMT\r\n");
}

}  // namespace
}  // namespace heft::proxy
