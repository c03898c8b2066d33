// The README's first command: `heft run` where there is no Heftfile serves the
// embedded demo (a, b, c weighted 5, 3, 2 behind :8080, admin on 127.0.0.1:2019).
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>

#include "integration/process_util.h"

namespace heft::test {
namespace {

bool port_in_use(uint16_t port) {
  int fd = connect_to(port, std::chrono::milliseconds(500));
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

TEST(EmbeddedDefault, ServesTheWeightedDemoOn8080) {
  // The demo binds fixed ports; on a machine where they are taken there is nothing to check.
  if (port_in_use(8080) || port_in_use(2019)) GTEST_SKIP() << "port 8080 or 2019 is in use here";
  std::string dir = make_temp_dir();  // no Heftfile in it
  Process heft({"/bin/sh", "-c", "cd '" + dir + "' && exec '" HEFT_BINARY "' run"}, dir + "/heft.log");
  ASSERT_TRUE(wait_for_port(8080, std::chrono::seconds(10))) << heft.log();

  HttpClient client(8080);
  std::map<std::string, int> counts;
  for (int i = 0; i < 100; ++i) {
    Response r = client.get("/");
    ASSERT_EQ(r.status, 200) << heft.log();
    counts[r.header("x-backend")]++;
  }
  EXPECT_EQ(counts["a"], 50);
  EXPECT_EQ(counts["b"], 30);
  EXPECT_EQ(counts["c"], 20);
  std::string log = heft.log();
  EXPECT_NE(log.find("embedded demo"), std::string::npos) << log;
  EXPECT_NE(log.find("curl -si localhost:8080"), std::string::npos) << log;

  heft.signal(SIGTERM);
  EXPECT_EQ(heft.wait(std::chrono::seconds(15)), 0) << heft.log();
}

}  // namespace
}  // namespace heft::test
