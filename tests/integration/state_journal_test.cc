// The state file's journal with real `heft run` processes: changes inside a
// site are appended to STATE.journal before their 200 and survive kill -9 in
// the middle of a stream of writes; a torn last record is ignored with a
// warning naming the file and offset, the records before it kept; a corrupt
// earlier record stops --resume; the journal is compacted into the state
// file once it outgrows it.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "integration/process_util.h"
#include "test_deadline.h"

namespace heft::test {
namespace {

using namespace std::chrono_literals;
const std::string kUpstreams = "/config/apps/http/servers/srv0/routes/0/handle/0/routes/0/handle/0/upstreams";

struct StateJournalTest : ::testing::Test {
  std::string dir = make_temp_dir();
  uint16_t port = free_port();
  uint16_t admin_port = free_port();
  std::string state = dir + "/autosave.json";
  std::string journal = state + ".journal";

  void SetUp() override {
    // No traffic is proxied: the backends need not listen.
    write_file(dir + "/Heftfile", fmt::format("{{\n\tadmin 127.0.0.1:{}\n\tworkers 1\n}}\n:{} {{\n\treverse_proxy {{\n"
                                              "\t\tto 127.0.0.1:1 weight 1\n\t\tto 127.0.0.1:2 weight 1\n\t}}\n}}\n",
                                              admin_port, port));
  }
  // `heft run` (with --resume when `resume`), once its admin API answers.
  Process run(const std::string& log, bool resume) {
    std::vector<std::string> args{HEFT_BINARY, "run", "--config", dir + "/Heftfile", "--state", state};
    if (resume) args.push_back("--resume");
    Process p(args, dir + "/" + log);
    if (!wait_for_port(port) || !wait_for_port(admin_port)) ADD_FAILURE() << "heft did not start:\n" << p.log();
    return p;
  }
  Response admin(const std::string& method, const std::string& path, const std::string& body = "") {
    return admin_call(admin_port, method, path, body);
  }
  std::string weight(int backend) { return admin("GET", fmt::format("{}/{}/weight", kUpstreams, backend)).body; }
  uint64_t size_of(const std::string& path) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    return ec ? 0 : size;
  }
  // Three changes journaled after the first (which saves the state whole):
  // backend 0's weight 11, backend 1's 12, backend 0's 13.
  void three_journaled_changes() {
    ASSERT_EQ(admin("PATCH", kUpstreams + "/1/weight", "2").status, 200);
    ASSERT_EQ(size_of(journal), 0u) << "the first change after a start saves the state file whole";
    int value = 11;
    for (int backend : {0, 1, 0}) {
      Response r = admin("PATCH", fmt::format("{}/{}/weight", kUpstreams, backend), std::to_string(value++));
      ASSERT_EQ(r.status, 200) << r.body;
    }
    ASSERT_GT(size_of(journal), 0u) << "not journaled";
  }
  // The offsets at which each record of the journal starts (after the header).
  std::vector<size_t> record_offsets() {
    const std::string text = read_file(journal);
    std::vector<size_t> out;
    for (size_t at = text.find('\n'); at != std::string::npos && at + 1 < text.size(); at = text.find('\n', at + 1))
      out.push_back(at + 1);
    return out;
  }
};

// kill -9 while writes stream in: --resume brings back the last write
// answered 200 (or the one in flight, if it was saved before the kill).
TEST_F(StateJournalTest, KillNineInTheMiddleOfFiveHundredWritesKeepsTheLastAcknowledged) {
  Process heft = run("first.log", false);
  std::atomic<int> acknowledged{0};
  std::atomic<bool> cut{false};
  std::thread writer([&] {
    HttpClient client(admin_port, 5s);
    for (int i = 1; i <= 500 && !cut; ++i) {
      const std::string body = std::to_string(i);
      Response r = client.request(fmt::format("PATCH {}/0/weight HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: "
                                              "application/json\r\nContent-Length: {}\r\n\r\n{}",
                                              kUpstreams, admin_port, body.size(), body));
      if (r.status != 200) break;
      acknowledged = i;
    }
  });
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (acknowledged < 250 && std::chrono::steady_clock::now() < deadline && heft.running())
    std::this_thread::sleep_for(1ms);
  const int before_kill = acknowledged;
  heft.kill_now();
  cut = true;
  {
    WaitingFor waiting("the writer thread to see heft gone");
    writer.join();
  }
  ASSERT_GE(before_kill, 250) << "250 writes were not answered within 60 s:\n" << heft.log();
  const int last = acknowledged;
  EXPECT_GT(size_of(journal), 0u);
  Process resumed = run("resumed.log", true);
  const std::string saved = weight(0);
  EXPECT_TRUE(saved == fmt::format("{}\n", last) || saved == fmt::format("{}\n", last + 1))
      << "saved " << saved << " but the last write answered 200 set " << last << "\n"
      << resumed.log();
}

// A record cut off by a crash is ignored with a warning naming the file and
// its offset; the records before it are kept, and writes go on.
TEST_F(StateJournalTest, ATornLastRecordIsIgnoredAndTheRecordsBeforeItKept) {
  Process first = run("first.log", false);
  three_journaled_changes();
  first.kill_now();
  const uint64_t whole = size_of(journal);
  {
    std::ofstream out(journal, std::ios::app | std::ios::binary);
    out << "0123456789abcdef {\"method\":\"PATCH\",\"path\":\"/config/apps/ht";  // no end of line
  }
  Process resumed = run("resumed.log", true);
  EXPECT_EQ(weight(0), "13\n");
  EXPECT_EQ(weight(1), "12\n");
  const std::string warning = fmt::format("warn {}: ignoring a torn last record at offset {} (", journal, whole);
  EXPECT_NE(untimed(resumed.log()).find(warning), std::string::npos) << resumed.log();
  EXPECT_NE(resumed.log().find("the 3 records before it are kept"), std::string::npos) << resumed.log();
  // Changes after it are saved and come back.
  ASSERT_EQ(admin("PATCH", kUpstreams + "/1/weight", "21").status, 200);
  ASSERT_EQ(admin("PATCH", kUpstreams + "/0/weight", "22").status, 200);
  resumed.kill_now();
  Process again = run("again.log", true);
  EXPECT_EQ(weight(0), "22\n");
  EXPECT_EQ(weight(1), "21\n");
  EXPECT_EQ(again.log().find("torn"), std::string::npos) << again.log();
}

// A damaged record with records after it is no crash's doing: --resume stops
// and says which, rather than start with less than was acknowledged.
TEST_F(StateJournalTest, ACorruptEarlierRecordStopsTheResume) {
  Process first = run("first.log", false);
  three_journaled_changes();
  first.kill_now();
  const std::vector<size_t> records = record_offsets();
  ASSERT_EQ(records.size(), 3u) << read_file(journal);
  std::string text = read_file(journal);
  const size_t value = text.find("\"value\":12", records[1]);
  ASSERT_NE(value, std::string::npos) << text;
  text[value + 9] = '9';  // 12 -> 19: the checksum no longer holds
  write_file(journal, text);
  const std::string saved = read_file(state);
  Process resumed({HEFT_BINARY, "run", "--config", dir + "/Heftfile", "--state", state, "--resume"},
                  dir + "/resumed.log");
  ASSERT_EQ(resumed.wait(20s), std::optional<int>(1)) << resumed.log();
  const std::string log = untimed(resumed.log());
  EXPECT_NE(log.find(fmt::format("error {}: record 2 at offset {} is corrupt (checksum mismatch)", journal,
                                 records[1])),
            std::string::npos)
      << log;
  EXPECT_NE(log.find(fmt::format("cannot resume from the state file {}", state)), std::string::npos) << log;
  EXPECT_EQ(read_file(state), saved) << "the state file was touched";
  EXPECT_EQ(read_file(journal), text) << "the journal was touched";
}

// Once the journal has outgrown the state file, the next change writes the
// state file whole and starts the journal afresh; a restart has every change.
TEST_F(StateJournalTest, TheJournalIsCompactedIntoTheStateFile) {
  Process heft = run("first.log", false);
  uint64_t largest = 0;
  bool shrank = false;
  uint64_t last_size = 0;
  for (int i = 1; i <= 40; ++i) {
    ASSERT_EQ(admin("PATCH", fmt::format("{}/{}/weight", kUpstreams, i % 2), std::to_string(100 + i)).status, 200);
    const uint64_t now = size_of(journal);
    if (now < last_size) shrank = true;
    last_size = now;
    largest = std::max(largest, now);
  }
  EXPECT_TRUE(shrank) << "the journal never shrank in 40 changes";
  // It outgrows the state file by one record at most before it is compacted.
  EXPECT_LT(largest, size_of(state) + 512) << "journal " << largest << " bytes, state file " << size_of(state);
  heft.signal(SIGTERM);
  ASSERT_TRUE(heft.wait(20s)) << heft.log();
  Process resumed = run("resumed.log", true);
  EXPECT_EQ(weight(0), "140\n");
  EXPECT_EQ(weight(1), "139\n");
}

}  // namespace
}  // namespace heft::test
