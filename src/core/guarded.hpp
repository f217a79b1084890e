// Runs one public entry point so that no exception crosses the API: an allocation that fails in
// spite of the memory checks (other processes took the memory) is out_of_memory, naming `what`.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "memattn/status.hpp"

namespace memattn::detail {

template <class F>
Status guarded(const char* what, F&& run) {
  try {
    return run();
  } catch (const std::bad_alloc&) {
    return {StatusCode::out_of_memory, std::string("host memory: ") + what + " could not be allocated"};
  } catch (const std::exception& e) {
    return {StatusCode::internal_error, std::string("unexpected exception: ") + e.what()};
  }
}

}  // namespace memattn::detail
