// A gate on a CUDA stream, for tests that a call does not wait for the GPU (bounded variable
// lengths, a bounded KV cache): the stream is held by a host function until the test releases it.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace memattn::testing {

// A host function that holds `stream` until the test releases it, or until `patience` has
// passed: a call that waits for the stream can only return after that, and the gate says so.
struct Gate {
  std::atomic<bool> released{false};
  std::atomic<bool> timed_out{false};
  std::chrono::milliseconds patience;

  static void CUDART_CB hold(void* self) {
    auto* g = static_cast<Gate*>(self);
    const auto deadline = std::chrono::steady_clock::now() + g->patience;
    while (!g->released.load()) {
      if (std::chrono::steady_clock::now() > deadline) {
        g->timed_out = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
};

// Runs `call` on `stream` held by a gate; true when the call returned without waiting for it.
template <class Call>
bool returns_without_waiting(cudaStream_t stream, std::chrono::milliseconds patience, Call&& call) {
  Gate gate;
  gate.patience = patience;
  EXPECT_EQ(cudaLaunchHostFunc(stream, Gate::hold, &gate), cudaSuccess);
  call();
  gate.released = true;
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  return !gate.timed_out;
}

}  // namespace memattn::testing
