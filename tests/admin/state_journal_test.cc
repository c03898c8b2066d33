// The state file's journal (admin/state_journal.h) on real files in a
// temporary directory: appended records replay in order onto the snapshot
// they follow; a journal of another snapshot is ignored; damage is told
// apart by where it is.
#include "admin/state_journal.h"

#include <gtest/gtest.h>

#include <fstream>

#include <fmt/format.h>

#include "admin/state_file.h"
#include "integration/process_util.h"

namespace heft::admin {
namespace {

using json = nlohmann::json;

struct JournalFiles : ::testing::Test {
  std::string dir = test::make_temp_dir();
  std::string state = dir + "/state.json";
  std::string snapshot = R"({"a": {"b": [1, 2, 3]}, "c": "x"})";

  void SetUp() override { test::write_file(state, snapshot); }
  JournalReplay replay(json& document) {
    document = json::parse(snapshot);
    return replay_journal(state, snapshot, document);
  }
};

TEST_F(JournalFiles, RecordsReplayInOrderOntoTheSnapshotTheyFollow) {
  StateJournal journal(state);
  EXPECT_FALSE(journal.ready()) << "no snapshot followed yet";
  std::string error;
  EXPECT_FALSE(journal.append({"PATCH", "/config/c", "/c", "y"}, error));
  journal.follow(snapshot);
  ASSERT_TRUE(journal.ready());
  ASSERT_TRUE(journal.append({"PATCH", "/config/a/b/1", "/a/b/1", 20}, error)) << error;
  ASSERT_TRUE(journal.append({"POST", "/config/a/b", "/a/b/3", 4}, error)) << error;
  ASSERT_TRUE(journal.append({"PATCH", "/config/a/b/1", "/a/b/1", 21}, error)) << error;
  ASSERT_TRUE(journal.append({"PUT", "/config/a/d", "/a/d", json{{"e", true}}}, error)) << error;
  EXPECT_EQ(journal.size(), test::read_file(journal_path(state)).size());
  json document;
  const JournalReplay replayed = replay(document);
  EXPECT_TRUE(replayed.errors.empty());
  EXPECT_TRUE(replayed.warnings.empty());
  EXPECT_EQ(replayed.records, 4u);
  EXPECT_EQ(document, json::parse(R"({"a": {"b": [1, 21, 3, 4], "d": {"e": true}}, "c": "x"})"));
}

TEST_F(JournalFiles, TheJournalOfAnotherSnapshotIsIgnored) {
  StateJournal journal(state);
  journal.follow(R"({"an": "earlier state"})");
  std::string error;
  ASSERT_TRUE(journal.append({"PATCH", "/config/c", "/c", "y"}, error)) << error;
  json document;
  const JournalReplay replayed = replay(document);
  EXPECT_TRUE(replayed.errors.empty());
  ASSERT_EQ(replayed.warnings.size(), 1u);
  EXPECT_NE(replayed.warnings[0].find("follows an earlier state file"), std::string::npos) << replayed.warnings[0];
  EXPECT_EQ(document, json::parse(snapshot));
}

TEST_F(JournalFiles, WritingTheStateFileWholeRemovesTheJournal) {
  StateJournal journal(state);
  journal.follow(snapshot);
  std::string error;
  ASSERT_TRUE(journal.append({"PATCH", "/config/c", "/c", "y"}, error)) << error;
  ASSERT_TRUE(write_state_file(state, R"({"c": "y"})", error)) << error;
  EXPECT_FALSE(std::ifstream(journal_path(state)).good());
}

TEST_F(JournalFiles, ATornHeaderOrLastRecordIsAWarningAndOtherDamageAnError) {
  StateJournal journal(state);
  journal.follow(snapshot);
  std::string error;
  ASSERT_TRUE(journal.append({"PATCH", "/config/c", "/c", "y"}, error)) << error;
  ASSERT_TRUE(journal.append({"PATCH", "/config/c", "/c", "z"}, error)) << error;
  const std::string whole = test::read_file(journal_path(state));
  const size_t second = whole.find('\n', whole.find('\n') + 1) + 1;
  json document;
  // The second record cut off anywhere: the first is kept.
  for (size_t cut : {second + 1, second + 20, whole.size() - 1}) {
    test::write_file(journal_path(state), whole.substr(0, cut));
    const JournalReplay replayed = replay(document);
    EXPECT_TRUE(replayed.errors.empty()) << cut;
    ASSERT_EQ(replayed.warnings.size(), 1u) << cut;
    EXPECT_NE(replayed.warnings[0].find(fmt::format("ignoring a torn last record at offset {} ({} bytes", second,
                                                    cut - second)),
              std::string::npos)
        << replayed.warnings[0];
    EXPECT_EQ(replayed.records, 1u);
    EXPECT_EQ(document["c"], "y");
  }
  // The header cut off: nothing was saved in it.
  test::write_file(journal_path(state), whole.substr(0, 10));
  JournalReplay torn_header = replay(document);
  EXPECT_TRUE(torn_header.errors.empty());
  EXPECT_EQ(torn_header.warnings.size(), 1u);
  EXPECT_EQ(document, json::parse(snapshot));
  // The first record damaged, the second whole after it: an error naming the record and its offset.
  std::string damaged = whole;
  damaged[second - 3] = damaged[second - 3] == 'y' ? 'q' : 'y';
  test::write_file(journal_path(state), damaged);
  JournalReplay corrupt = replay(document);
  ASSERT_EQ(corrupt.errors.size(), 1u);
  EXPECT_NE(corrupt.errors[0].message.find(fmt::format("record 1 at offset {} is corrupt (checksum mismatch)",
                                                       whole.find('\n') + 1)),
            std::string::npos)
      << corrupt.errors[0].message;
  EXPECT_EQ(corrupt.errors[0].file, journal_path(state));
  // A whole record for a place the snapshot does not have.
  journal.follow(snapshot);
  ASSERT_TRUE(journal.append({"PATCH", "/config/no/such", "/no/such", 1}, error)) << error;
  JournalReplay misfit = replay(document);
  ASSERT_EQ(misfit.errors.size(), 1u);
  EXPECT_NE(misfit.errors[0].message.find("does not fit the state file: /no: no such place"), std::string::npos)
      << misfit.errors[0].message;
}

}  // namespace
}  // namespace heft::admin
