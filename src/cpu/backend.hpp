// The fast CPU path: tiled, online softmax (never an Mq x Mk matrix), OpenMP over tiles.
#pragma once

#include <cstdint>
#include <string>

#include "core/problem.hpp"
#include "memattn/attention.hpp"

namespace memattn::cpu {

// Tile sizes: queries per tile and keys per tile. Large head dims take fewer query rows so that a
// thread's scratch stays bounded.
struct Tiling {
  std::int64_t rows;
  std::int64_t cols;
};

inline Tiling tiling_for(const detail::Problem& p) {
  constexpr std::int64_t kKeys = 64;
  constexpr std::int64_t kRowsSmallHead = 64;
  constexpr std::int64_t kRowsLargeHead = 16;
  constexpr std::int64_t kLargeHeadDims = 1024;  // D + Dv above this takes the short tile
  return {p.head_dim + p.head_dim_v > kLargeHeadDims ? kRowsLargeHead : kRowsSmallHead, kKeys};
}

// A KV cache call's new keys and values (kv_cache.k_new, v_new), copied into their cache slots
// in host memory; the CPU and reference backends run it before attending.
void append_kv_cache(const ForwardArgs& args, const detail::Problem& problem);

Status forward(const ForwardArgs& args, const detail::Problem& problem);
Status backward(const BackwardArgs& args, const detail::Problem& problem);

std::string describe_forward(const detail::Problem& problem);
std::string describe_backward(const detail::Problem& problem);

}  // namespace memattn::cpu
