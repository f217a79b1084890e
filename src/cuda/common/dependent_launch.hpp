// Programmatic dependent launch (sm_90), the kernels' side. A kernel launched as the dependent of
// the kernel before it on its stream (launch.hpp's `dependent` launches) may start once every CTA
// of that kernel has let it, and must wait for that kernel's end before it reads what that kernel
// wrote. Both are no-ops before sm_90 and in a kernel that was launched plainly. Why: the split
// keys' combine follows the forward kernel, and decoding (a few us of kernels) feels the launch
// gap between them (H100, CUDA graph replays, B 1 / 32-8 heads / D = 128 decoding: 0.5-1 us of
// 28-74). The forward launched as the dependent of a KV cache's append gained nothing (38 us both
// ways at B 1 / 8k keys), so it follows the append plainly.
#pragma once

namespace memattn::cuda {

// Lets the kernel launched as this one's dependent start (as early as it may: its CTAs become
// resident and wait).
__device__ __forceinline__ void let_dependents_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Waits until the kernel this one depends on has finished and its writes are visible.
__device__ __forceinline__ void wait_for_prerequisite_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace memattn::cuda
