// Replays fuzz inputs without libFuzzer: every file named on the command line
// (or found in a directory named there) goes to the target's
// LLVMFuzzerTestOneInput once. A crash, sanitizer report or failed check
// aborts; otherwise it prints how many inputs ran and exits 0. A directory
// that does not exist counts as empty (a target with no regressions yet).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool replay(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", file.c_str());
    return false;
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // A copy of its own, as libFuzzer gives: a read past the end is ASan's to see.
  std::vector<uint8_t> data(bytes.begin(), bytes.end());
  LLVMFuzzerTestOneInput(data.data(), data.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t count = 0;
  bool ok = true;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg = argv[i];
    std::error_code ec;
    if (std::filesystem::is_directory(arg, ec)) {
      std::vector<std::filesystem::path> files;
      for (const auto& entry : std::filesystem::recursive_directory_iterator(arg))
        if (entry.is_regular_file()) files.push_back(entry.path());
      std::sort(files.begin(), files.end());
      for (const auto& file : files) {
        ok &= replay(file);
        ++count;
      }
    } else if (std::filesystem::exists(arg, ec)) {
      ok &= replay(arg);
      ++count;
    }
  }
  std::printf("%zu inputs replayed\n", count);
  return ok ? 0 : 1;
}
