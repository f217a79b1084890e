// The problem flags shared by `memattn run` and `memattn kernels`, and their translation into a
// ProblemSpec. Flag names are a contract: later versions add flags, never rename them.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

#include "workload/workload.hpp"

namespace memattn::cli {

struct ProblemFlags {
  std::int64_t batch = 1, seqlen_q = 1024, seqlen_k = -1, heads_q = 8, heads_k = -1, head_dim = 64, head_dim_v = -1;
  std::string dtype = "bf16";
  bool causal = false;
  std::string alignment;  // empty: top-left, or bottom-right with a KV cache (the only one it takes)
  std::int64_t window_left = kUnbounded, window_right = kUnbounded;
  std::string bias = "none";
  double dropout = 0.0;
  std::uint64_t seed = 0, offset = 0;
  std::optional<double> scale;
  std::string varlen, varlen_k;
  std::string backend = "auto";
  std::string precision = "auto";
  bool deterministic = false;
  // Options::overrides: kernel-table rows to force (each on the pass it is a row of), and the
  // causal backward's L2-sized groups and the one-pass backward's last-wave split turned off.
  std::vector<std::string> kernels;
  bool no_l2_groups = false, no_tail_split = false;
  int num_splits = 0;  // the forward's split keys: 0 = the dispatcher's choice
  // A KV cache (workload's CacheSpec): kv_cache empty for none; the sizes unset unless given.
  std::string kv_cache;
  std::optional<std::int64_t> page_size, cache_len, new_keys;

  CLI::Option* size_options[5] = {};  // batch, seqlen-q, heads-q, head-dim, seqlen-k: given or not
};

void add_problem_flags(CLI::App* app, ProblemFlags* flags);

// The size defaults for a backend when the user gave no sizes: a small problem on the CPU, a
// GPU-sized one on CUDA.
void apply_backend_defaults(ProblemFlags* flags, Backend backend);

// Backend named by --backend; `automatic` resolves to cuda when a GPU and kernels are there.
Status parse_backend(const std::string& text, Backend* backend);
Status parse_dtype(const std::string& text, DType* dtype);

// The spec of the flags (windows as given: clamp_windows once the lengths are final).
Status make_spec(const ProblemFlags& flags, tools::ProblemSpec* spec);

// A window wider than the longest sequence becomes that length (the same mask): --window-left
// 99999999999999999999 is refused by the parser, 9223372036854775807 clamped here. Called once
// the lengths are final (after --load).
void clamp_windows(tools::ProblemSpec* spec);

// Refuses, before anything is allocated, a problem whose host tensors (workload_bytes) overflow
// or exceed the memory available (or `limit` bytes, when it is >= 0); the message names the
// largest size flag (or --load), the bytes needed and the bytes available.
Status check_host_memory(const tools::ProblemSpec& spec, bool loaded, std::int64_t limit = -1);

// Validators of run's own flags: an integer >= 0, a value that is not empty.
CLI::Validator count_at_least_zero();
CLI::Validator non_empty_value();

}  // namespace memattn::cli
