// Where state files live and what they are named, their lock, and keeping a
// state aside (admin/state_file.h): real files in a temporary directory.
#include "admin/state_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <regex>

#include "integration/process_util.h"

namespace heft::admin {
namespace {

namespace fs = std::filesystem;

// Sets (or, with nullopt, unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value->c_str(), 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(StateDirectory, SystemdsThenXdgsThenHomes) {
  ScopedEnv systemd("STATE_DIRECTORY", "/var/lib/heft:/var/lib/other");
  ScopedEnv xdg("XDG_DATA_HOME", "/x/data");
  ScopedEnv home("HOME", "/home/op");
  EXPECT_EQ(state_directory(), "/var/lib/heft");  // the first of StateDirectory='s several
  {
    ScopedEnv none("STATE_DIRECTORY", std::nullopt);
    EXPECT_EQ(state_directory(), "/x/data/heft");
    ScopedEnv empty("XDG_DATA_HOME", "");
    EXPECT_EQ(state_directory(), "/home/op/.local/share/heft");
    ScopedEnv homeless("HOME", std::nullopt);
    EXPECT_EQ(state_directory(), ".");
  }
}

// One state file per configuration file: the file's name for people, a hash
// of its absolute path for uniqueness; the same file by another path is the
// same state.
TEST(StateDirectory, EachConfigurationFileHasItsOwnStateFile) {
  ScopedEnv systemd("STATE_DIRECTORY", std::nullopt);
  ScopedEnv xdg("XDG_DATA_HOME", "/x/data");
  const std::string dir = test::make_temp_dir();
  fs::create_directory(dir + "/a");
  fs::create_directory(dir + "/b");
  test::write_file(dir + "/a/Heftfile", "");
  test::write_file(dir + "/b/Heftfile", "");
  const std::string a = default_state_path(dir + "/a/Heftfile");
  const std::string b = default_state_path(dir + "/b/Heftfile");
  EXPECT_TRUE(std::regex_match(a, std::regex("/x/data/heft/Heftfile-[0-9a-f]{8}\\.json"))) << a;
  EXPECT_NE(a, b);
  // The same file through a relative path, "..", and a symbolic link.
  const fs::path cwd = fs::current_path();
  fs::current_path(dir + "/b");
  EXPECT_EQ(default_state_path("../a/Heftfile"), a);
  fs::current_path(cwd);
  fs::create_symlink(dir + "/a/Heftfile", dir + "/link");
  EXPECT_EQ(default_state_path(dir + "/link"), a);
  EXPECT_EQ(config_identity(dir + "/b/../link"), dir + "/a/Heftfile");
  // Names any file system takes; a JSON configuration's name without its ".json".
  test::write_file(dir + "/my site.json", "");
  EXPECT_TRUE(std::regex_match(default_state_path(dir + "/my site.json"),
                               std::regex("/x/data/heft/my_site-[0-9a-f]{8}\\.json")))
      << default_state_path(dir + "/my site.json");
  EXPECT_EQ(default_state_path(""), "/x/data/heft/embedded-demo.json");
  // Stable: the same path gives the same name every time (FNV-1a, not std::hash).
  EXPECT_EQ(default_state_path("/etc/heft/Heftfile"), "/x/data/heft/Heftfile-" + [] {
    uint32_t h = 2166136261u;
    for (unsigned char c : std::string("/etc/heft/Heftfile")) h = (h ^ c) * 16777619u;
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08x", h);
    return std::string(hex);
  }() + ".json");
}

// flock locks belong to an open file: a second acquire, even in this process,
// is refused and learns the holder's PID; released, the lock can be taken again.
TEST(StateLock, OneHolderAtATime) {
  const std::string state = test::make_temp_dir() + "/new/dir/Heftfile-01234567.json";
  StateLock::Outcome outcome;
  long holder = -1;
  std::string error;
  std::unique_ptr<StateLock> first = StateLock::acquire(state, outcome, holder, error);
  ASSERT_TRUE(first) << error;
  EXPECT_EQ(outcome, StateLock::Outcome::locked);
  EXPECT_EQ(first->path(), state + ".lock");
  EXPECT_EQ(test::read_file(state + ".lock"), std::to_string(::getpid()) + "\n");
  std::unique_ptr<StateLock> second = StateLock::acquire(state, outcome, holder, error);
  EXPECT_FALSE(second);
  EXPECT_EQ(outcome, StateLock::Outcome::held_by_another);
  EXPECT_EQ(holder, ::getpid());
  first.reset();
  second = StateLock::acquire(state, outcome, holder, error);
  EXPECT_TRUE(second) << error;
  // A lock file that cannot be made is reported, not taken for a holder.
  EXPECT_FALSE(StateLock::acquire("/proc/nope/state.json", outcome, holder, error));
  EXPECT_EQ(outcome, StateLock::Outcome::unavailable);
  EXPECT_NE(error.find("cannot create /proc/nope"), std::string::npos) << error;
}

TEST(StateFile, KeptAsideUnderATimeStampedNameNeverOverwriting) {
  const std::string dir = test::make_temp_dir();
  const std::string state = dir + "/Heftfile-01234567.json";
  std::vector<std::string> asides;
  for (int i = 0; i < 3; ++i) {  // within one second, most likely: -2, -3 then
    test::write_file(state, "state " + std::to_string(i));
    std::string error;
    std::optional<std::string> aside = keep_state_aside(state, error);
    ASSERT_TRUE(aside) << error;
    EXPECT_TRUE(std::regex_match(*aside, std::regex(dir + "/Heftfile-01234567\\.[0-9]{8}T[0-9]{6}Z(-[23])?\\.json")))
        << *aside;
    EXPECT_FALSE(fs::exists(state));
    EXPECT_EQ(test::read_file(*aside), "state " + std::to_string(i));
    asides.push_back(*aside);
  }
  EXPECT_NE(asides[0], asides[1]);
  EXPECT_NE(asides[1], asides[2]);
  std::string error;
  EXPECT_FALSE(keep_state_aside(dir + "/missing.json", error));
  EXPECT_NE(error.find("cannot keep " + dir + "/missing.json aside"), std::string::npos) << error;
}

TEST(StateFile, StaleTemporaryFilesAreRemovedOthersKept) {
  const std::string dir = test::make_temp_dir();
  const std::string state = dir + "/s.json";
  test::write_file(state, "{}");
  test::write_file(state + ".tmp.12345", "half");
  test::write_file(dir + "/other.json.tmp.1", "not ours");
  remove_stale_temporary_files(state);
  EXPECT_FALSE(fs::exists(state + ".tmp.12345"));
  EXPECT_TRUE(fs::exists(state));
  EXPECT_TRUE(fs::exists(dir + "/other.json.tmp.1"));
}

}  // namespace
}  // namespace heft::admin
