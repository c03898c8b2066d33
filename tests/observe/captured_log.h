// heft's log captured in a temporary file, for tests of what it writes.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "observe/log.h"

namespace heft::observe {

// Sends the log to a file for the life of the object; text() reads it.
class CapturedLog {
 public:
  CapturedLog() {
    char path[] = "/tmp/heft-log-test-XXXXXX";
    fd_ = ::mkstemp(path);
    path_ = path;
    previous_ = set_log_fd(fd_);
  }
  ~CapturedLog() {
    set_log_fd(previous_);
    ::close(fd_);
    std::remove(path_.c_str());
  }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;

  std::string text() const {
    std::ifstream in(path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  std::vector<std::string> lines() const {
    std::vector<std::string> out;
    std::istringstream in(text());
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }

 private:
  int fd_ = -1;
  int previous_ = 2;
  std::string path_;
};

}  // namespace heft::observe
