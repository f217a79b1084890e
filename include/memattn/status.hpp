// Results of memattn calls: a code and a readable message that names the offending argument.
#pragma once

#include <string>
#include <utility>

namespace memattn {

enum class StatusCode : int {
  ok = 0,
  invalid_argument,  // the caller's input is wrong; nothing was written
  unsupported,       // valid input that this build or device cannot run; nothing was written
  device_error,      // the CUDA runtime reported an error
  internal_error,
  out_of_memory,     // the memory the call needs (bytes named in the message) could not be had; nothing was written
};

const char* to_string(StatusCode code);

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }

  bool ok() const { return code_ == StatusCode::ok; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid_argument: q: ..." style, or "ok".
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::ok;
  std::string message_;
};

}  // namespace memattn
