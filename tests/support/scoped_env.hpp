// Sets an environment variable for the scope of a test (e.g. MEMATTN_KERNEL to force a row).
#pragma once

#include <cstdlib>
#include <string>

namespace memattn::testing {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) { setenv(name, value.c_str(), 1); }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

}  // namespace memattn::testing
