// Workspace planning: the scratch memory a row needs besides the caller's tensors, its size and
// its layout, and where it comes from. The forward's global-accumulator rows keep each resident
// CTA's output accumulator there, and a forward with split keys every part's output and LSE; the backward keeps delta (rowsum(dO * O)) there, and as the row
// needs them a dbias accumulator (dbias over broadcast dimensions), the gradients' fp32
// accumulators and the last-wave split's partial sums. Planning fills the sizes and strides the
// kernels read (in the params) and the offsets; binding points the params at one block of memory
// (the caller's, the caller's allocator's, or one allocated on the stream).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/problem.hpp"
#include "cuda/kernel_table.hpp"
#include "memattn/attention.hpp"

namespace memattn::cuda {

constexpr int kGlobalChunk = 64;  // head-dim chunk of the global-accumulator kernels

// A gradient workspace row's floats (GradAccum::ld) for `cols` columns: whole chunks.
inline std::int64_t accum_ld(std::int64_t cols) { return (cols + kGlobalChunk - 1) / kGlobalChunk * kGlobalChunk; }

// Whether dbias sums over dimension d (b, h, i, j): the bias is broadcast along it and it has
// more than one element. Such a dbias goes through an fp32 workspace (plan_backward_workspace).
bool dbias_sums_over(const detail::Problem& p, int d);
bool dbias_summed(const detail::Problem& p);

// Where a backward row accumulates its gradients, which decides its workspace.
enum class GradientStore {
  tensors,        // registers, then straight to dq, dk, dv
  dq_accum,       // the one-pass rows (atomics): dQ added to an fp32 workspace, converted after
  cta_slots,      // the tensor-core global-accumulator rows: dK/dV and dQ chunks per resident CTA
  grad_accums,    // the FFMA global-accumulator rows: fp32 dQ, dK and dV for the whole problem
};
GradientStore gradient_store(const BackwardKernel& k);

// The forward's workspace bytes: with split keys (f->num_splits > 1, from the schedule) every
// part's output and LSE in fp32, then 256-byte aligned; one output accumulator slot per CTA of the
// global-accumulator rows (f->grid_ctas); the Hopper rows' count of drawn work items; sets
// f->o_accum_slot_elems or the partial sizes.
std::size_t plan_forward_workspace(const ForwardKernel& k, const detail::Problem& p, FwdParams* f);
// Where the split parts' LSE starts in that workspace (bytes).
std::size_t partial_lse_offset(const FwdParams& f);
// Points f at its workspace, `base`, as planned for row k.
void bind_forward_workspace(const ForwardKernel& k, void* base, FwdParams* f);

// Byte offsets of the backward's workspace parts (delta at 0), each 256-byte aligned.
struct BackwardWorkspace {
  std::size_t bytes = 0;
  std::size_t dbias_accum = 0;     // 0: none
  std::size_t grad_accum[3] = {};  // dQ (dq_accum and grad_accums), dK, dV (grad_accums)
  std::size_t slots[2] = {};       // dK/dV and dQ slots (cta_slots)
  std::size_t split[2] = {};       // the split tiles' arrival counts and partial sums (dq_accum)
  std::size_t items_drawn = 0;     // the Hopper backward's count of drawn work items (0: none), and
                                   // the dQ order counts after it when deterministic
};

// Lays the backward's workspace out for row k, after the schedule (b's grid CTAs and last-wave
// split); fills the accumulators' shapes and the dbias handling in b.
void plan_backward_workspace(const BackwardKernel& k, const BackwardArgs& a, const detail::Problem& p, BwdParams* b,
                             BackwardWorkspace* workspace);
// Points b at the parts of the workspace that starts at `base`.
void bind_backward_workspace(const BackwardKernel& k, const BackwardWorkspace& workspace, void* base, BwdParams* b);

// Workspace from the caller, from the caller's allocator, or allocated on the stream (and freed
// after the launches).
class Scratch {
 public:
  Scratch(const Options& opt, std::size_t bytes, cudaStream_t stream);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  Status status() const;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
  std::string error_;
  bool owned_ = false;
  bool out_of_memory_ = false;  // the error is a failed allocation (StatusCode::out_of_memory)
};

}  // namespace memattn::cuda
