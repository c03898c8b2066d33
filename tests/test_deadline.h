// Every test has a deadline (test_deadline.cc, linked into every test
// binary): a test still running after it is ended with a message that names
// it and what it waits for, instead of hanging the suite until ctest's
// timeout. Waits that could block for long say what they wait for:
//
//   heft::test::WaitingFor waiting("the demo backend's thread to end");
//   thread.join();
#pragma once

namespace heft::test {

// Names what the current test waits for while it is alive (one at a time;
// the innermost wins and the outer one is back when it ends).
class WaitingFor {
 public:
  explicit WaitingFor(const char* what);
  ~WaitingFor();
  WaitingFor(const WaitingFor&) = delete;
  WaitingFor& operator=(const WaitingFor&) = delete;

 private:
  const char* outer_;
};

}  // namespace heft::test
