// Row selection (select.hpp): what a problem needs from a row, whether a row fits, the first row
// in priority order that does (or the forced one), the per-family reasons when none does, and the
// rows as users see them (list_kernels, describe).
#include "cuda/select.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "cuda/backend.hpp"
#include "cuda/device_info.hpp"
#include "cuda/sm90/tma_map.hpp"
#include "cuda/workspace.hpp"
#include "memattn/kernels.hpp"

namespace memattn::cuda {

bool aligned16(const TensorRef& t) {
  if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0) return false;
  for (int d = 0; d + 1 < t.rank; ++d)
    if (t.strides[d] * std::int64_t(dtype_size(t.dtype)) % 16 != 0) return false;
  return true;
}

namespace {

// What a problem needs from a kernel row.
struct Need {
  DType dtype;
  int head_dim;  // max(D, Dv)
  bool bias, dropout;
  bool aligned;  // 16-byte rows and pointers (alignment 16 bytes' elements)
  bool ieee = false;  // fp32 by FMAs (Precision): no 3xTF32 rows
  bool bias_tileable = false;  // bias with unit column stride and 16-byte rows and pointer
  bool bias_tma_loadable = false;  // a bias of q's dtype that a tensor map describes (Hopper forward)
  // No dbias, or one that a bias-tile row can write: through its fp32 workspace (broadcast
  // dimensions) or from the tile (16-bit, 16-byte rows); those rows carry no per-element dbias
  // stores (backward).
  bool dbias_stageable = true;
  bool deterministic = false;  // bit-reproducible results asked for (backward)
  bool tma_loadable = false;   // Q, K and V described by tensor maps (sm90/tma_map.hpp)
  bool varlen = false;         // packed variable-length sequences
  bool kv_cache = false;       // K and V from a KV cache (ForwardArgs::kv_cache)
  bool one_page_cache = false;  // a cache of one page per sequence (contiguous): strided rows read it too
  double queries_per_key = 0;  // visible (query, key) pairs per key and head
  int compute_capability;
  int smem_per_block = 0;  // the device's opt-in limit of shared memory per CTA, bytes
};

// A row's shared memory per CTA (its main kernel's, as `memattn kernels --resources` reports it),
// asked of the driver once per row. Rows sized for Hopper (up to 227 KB) do not launch on GPUs
// that allow less (A100: 163 KB, sm_86/sm_89: 99 KB); the dispatcher passes over them there.
template <class Row>
int row_smem_bytes(const Row& k) {
  static std::mutex mutex;
  static std::map<const void*, int> bytes;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto found = bytes.find(&k);
  if (found != bytes.end()) return found->second;
  KernelResources r;
  k.resources(&r);     // fills smem_bytes before its occupancy query, which may fail on such a GPU
  cudaGetLastError();  // and leaves no error behind for the next launch's check
  bytes[&k] = r.smem_bytes;
  return r.smem_bytes;
}

Need need(const detail::Problem& p, std::initializer_list<const TensorRef*> tensors) {
  Need n;
  n.dtype = p.dtype;
  n.head_dim = int(std::max(p.head_dim, p.head_dim_v));
  n.bias = p.has_bias;
  n.dropout = p.has_dropout();
  const std::int64_t vector = 16 / std::int64_t(dtype_size(p.dtype));  // elements in 16 bytes
  n.aligned = p.head_dim % vector == 0 && p.head_dim_v % vector == 0;
  for (const TensorRef* t : tensors) n.aligned = n.aligned && aligned16(*t);
  n.compute_capability = compute_capability();
  n.smem_per_block = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin);
  return n;
}

// Whether the key rows of a [B, H, Mq, Mk] tensor move 16 bytes at a time: unit key stride, a
// 16-byte aligned pointer, and 16-byte multiples for the strides of the other dimensions it
// steps along (`steps[d]`; not those it broadcasts or has one element in).
bool rows_tileable(const TensorRef& t, const bool (&steps)[3]) {
  const std::int64_t esize = t.dtype == DType::f32 ? 4 : 2;
  if (t.strides[3] != 1 || reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0) return false;
  for (int d = 0; d < 3; ++d)
    if (steps[d] && t.strides[d] * esize % 16 != 0) return false;
  return true;
}

// Whether the bias can be copied into shared memory 16 bytes at a time (a broadcast key
// dimension cannot).
bool bias_tileable(const TensorRef& bias, const detail::Problem& p) {
  const bool steps[3] = {!p.bias_broadcast[0], !p.bias_broadcast[1], !p.bias_broadcast[2]};
  return !p.bias_broadcast[3] && rows_tileable(bias, steps);
}

// How many queries a key sees on average (for rows with min_queries_per_key): Mq without a mask.
// With the lengths left on the device, every sequence counts at its bounds.
double queries_per_key(const detail::Problem& p) {
  double keys = double(p.batch) * double(p.seqlen_k);
  if (p.lengths_known) {
    keys = 0;
    for (std::int64_t b = 0; b < p.batch; ++b) keys += double(p.sequence(b).k_len);
  }
  return keys > 0 ? p.visible_pairs() / (keys * double(p.heads_q)) : 0.0;
}

// Whether a tensor map describes a [B, M, H, D] tensor (its rows as TMA boxes, one head at a time).
bool tma_loadable(const TensorRef& t) {
  return sm90::tma_describable({t.data, t.dtype, t.sizes[3], t.sizes[1], t.sizes[2], t.sizes[0], t.strides[1],
                                t.strides[2], t.strides[0]});
}

// Whether a tensor map describes the bias as (keys, queries, heads, batch), a broadcast dimension
// of the first three as one of size 1: q's dtype and tileable rows.
bool bias_tma_loadable(const TensorRef& bias, const detail::Problem& p) {
  if (bias.dtype != p.dtype || !bias_tileable(bias, p)) return false;
  return sm90::tma_describable({bias.data, bias.dtype, p.seqlen_k, p.bias_broadcast[2] ? 1 : p.seqlen_q,
                                p.bias_broadcast[1] ? 1 : p.heads_q, p.bias_broadcast[0] ? 1 : p.batch,
                                bias.strides[2], bias.strides[1], bias.strides[0]});
}

template <class Row>
bool fits(const Row& k, const Need& n, std::string* why);

// Whether a 3xTF32 backward row takes the problem of a forward (its Need), as far as the
// forward's arguments tell: the gradients' alignment and `deterministic` come with the backward.
bool tf32x3_backward_fits(Need n) {
  n.ieee = false;
  return std::any_of(backward_kernels().begin(), backward_kernels().end(),
                     [&](const BackwardKernel& k) { return k.math == Math::tf32x3 && fits(k, n, nullptr); });
}

Need forward_need(const ForwardArgs& a, const detail::Problem& p) {
  Need n = need(p, {&a.q, &a.k, &a.v, &a.out});
  n.varlen = p.varlen;
  n.kv_cache = p.cache.enabled;
  n.one_page_cache = p.cache.enabled && p.cache.pages_per_seq == 1;
  n.bias_tileable = p.has_bias && bias_tileable(a.bias, p);
  n.bias_tma_loadable = p.has_bias && bias_tma_loadable(a.bias, p);
  n.queries_per_key = queries_per_key(p);
  // `automatic` (types.hpp): 3xTF32 unless the call writes the LSE for a backward that has no
  // 3xTF32 row for the problem. The FMA backward takes the LSE as exact for the scores it
  // recomputes, and 3xTF32 scores differ from those by a few fp32 roundings; the 3xTF32 backward
  // recomputes them bit for bit. Only fp32 has 3xTF32 rows: no table walk for 16-bit calls. A KV
  // cache call's LSE meets no backward (the backward takes no cache).
  n.ieee = a.precision == Precision::ieee ||
           (a.precision == Precision::automatic && a.lse.defined() && p.dtype == DType::f32 && !p.cache.enabled &&
            !tf32x3_backward_fits(n));
  n.tma_loadable = tma_loadable(a.q) && tma_loadable(a.k) && tma_loadable(a.v);
  return n;
}

// Whether a dense 16-bit dbias can be written 16 bytes at a time from the bias tile's shared
// memory.
bool dbias_tileable(const TensorRef& dbias) {
  const bool steps[3] = {dbias.sizes[0] > 1, dbias.sizes[1] > 1, dbias.sizes[2] > 1};
  return dbias.dtype != DType::f32 && rows_tileable(dbias, steps);
}

Need backward_need(const BackwardArgs& a, const detail::Problem& p) {
  Need n = need(p, {&a.q, &a.k, &a.v, &a.out, &a.dout, &a.dq, &a.dk, &a.dv});
  n.ieee = a.precision == Precision::ieee;  // `automatic`: the 3xTF32 rows, which come first, where one fits
  n.bias_tileable = p.has_bias && bias_tileable(a.bias, p);
  n.dbias_stageable = !p.has_dbias || dbias_summed(p) || dbias_tileable(a.dbias);
  n.deterministic = a.deterministic;
  n.queries_per_key = queries_per_key(p);
  n.varlen = p.varlen;
  n.tma_loadable = tma_loadable(a.q) && tma_loadable(a.k) && tma_loadable(a.v) && tma_loadable(a.dout);
  return n;
}

// Whether a row can run a problem; when not, and `why` is given, the reason goes there (only
// then is the text built: the dispatcher asks every row before the one it takes, on every call).
template <class Row>
bool fits(const Row& k, const Need& n, std::string* why) {
  const auto no = [why](auto&& text) {
    if (why != nullptr) *why = text();
    return false;
  };
  if (n.compute_capability < (k.family == Family::sm90 ? 90 : 80))
    return no([&] { return "needs compute capability " + std::string(k.family == Family::sm90 ? "9.0" : "8.0"); });
  if (k.family == Family::sm90 && n.compute_capability != 90)
    return no([] { return std::string("sm_90a code runs on Hopper only"); });
  if (k.dtype != n.dtype) return no([&] { return std::string("dtype ") + to_string(k.dtype); });
  if (k.paged && !n.kv_cache) return no([] { return std::string("reads a KV cache: KV cache calls only"); });
  // The sm80 register forward (the rows that split keys) reads a cache of one page per sequence as
  // strided tensors; pages take the paged rows.
  if (n.kv_cache && !k.paged && !(n.one_page_cache && k.split_keys))
    return no([&] {
      return std::string(k.split_keys ? "reads a KV cache of one page per sequence only" : "reads no KV cache");
    });
  if (k.max_head_dim < n.head_dim) return no([&] { return "head dims up to " + std::to_string(k.max_head_dim); });
  if (k.alignment > 1 && !n.aligned)
    return no([] { return std::string("needs head dims, strides and pointers aligned to 16 bytes"); });
  if (k.math == Math::tf32x3 && n.ieee) return no([] { return std::string("3xTF32: precision ieee asks for FMAs"); });
  if (n.bias && !k.bias) return no([] { return std::string("no bias"); });
  if (n.dropout && !k.dropout) return no([] { return std::string("no dropout"); });
  if (n.bias && k.bias_tile && !n.bias_tileable)
    return no([] { return std::string("bias tile needs a bias with unit key stride and 16-byte aligned rows and pointer"); });
  if (n.bias && k.bias_tile && !n.dbias_stageable)
    return no([] {
      return std::string("bias tile writes a dbias without broadcast dimensions from the tile: needs it 16-bit, with "
                         "unit key stride and 16-byte aligned rows and pointer");
    });
  // The Hopper backward orders its dQ reductions when asked (sm90/bwd/dq_writer.hpp); the other
  // rows with atomics cannot.
  if (n.deterministic && k.atomics && !k.tma) return no([] { return std::string("uses atomics (not deterministic)"); });
  // A TMA box stops only at the tensor's end: in a packed batch a sequence's last tile brings in
  // the rows after it (past seqused_k, or the next sequence's), and 0 x NaN is NaN where they hold
  // NaN or inf, while such rows must be seen by nothing. The 16-bit Hopper forward and backward
  // zero those rows in shared memory (sm90/fwd/mainloop.hpp, sm90/bwd/); the fp32 rows do not.
  if (k.tma && n.varlen && k.math == Math::tf32x3)
    return no([] {
      return std::string("TMA boxes cross a packed sequence's end: variable lengths run on the other rows");
    });
  if (k.tma && !n.tma_loadable)
    return no([] {
      return std::string("TMA loads need Q, K, V (and dO) with 16-byte aligned pointers and rows, and every stride a "
                         "nonzero multiple of 16 bytes (no broadcast)");
    });
  // The Hopper forward's bias rows load a bias tile with every key tile: they take no problem
  // without one (the plain rows, ahead of them, do).
  if (k.tma && k.bias && !n.bias)
    return no([] { return std::string("loads a bias tile: problems with a bias only"); });
  if (k.tma && n.bias && !n.bias_tma_loadable)
    return no([] {
      return std::string("bias by TMA needs a bias of q's dtype with unit key stride, 16-byte aligned rows and pointer, "
                         "and no broadcast over keys");
    });
  if (n.smem_per_block > 0)
    if (const int bytes = row_smem_bytes(k); bytes > n.smem_per_block)
      return no([&] {
        return "needs " + std::to_string(bytes) + " bytes of shared memory per CTA (this GPU allows " +
               std::to_string(n.smem_per_block) + ")";
      });
  return true;
}

// The first row in priority order that runs the problem, or failing that the first that fits
// but prefers longer sequences; with `reasons`, why each family's last refused row was refused.
template <class Row>
const Row* pick(const std::vector<Row>& table, const Need& n, std::map<std::string, std::string>* reasons) {
  const Row* short_fallback = nullptr;
  std::string reason;
  std::string* why = reasons != nullptr ? &reason : nullptr;
  for (const Row& k : table) {
    bool ok = fits(k, n, why);
    // A preference rather than a limit: such a row runs any length when forced, or when no other
    // row fits.
    if (ok && n.queries_per_key < k.min_queries_per_key) {
      if (short_fallback == nullptr) short_fallback = &k;
      continue;
    }
    if (ok) return &k;
    if (reasons != nullptr) (*reasons)[to_string(k.family)] = reason;
  }
  return short_fallback;
}

// The problem in the terms rows are chosen by, for messages.
std::string describe(const Need& n) {
  return std::string(to_string(n.dtype)) + ", head dim " + std::to_string(n.head_dim) + (n.bias ? ", bias" : "") +
         (n.dropout ? ", dropout" : "") + (n.kv_cache ? ", KV cache" : "") + (n.aligned ? "" : ", unaligned") +
         ", compute capability " +
         std::to_string(n.compute_capability / 10) + "." + std::to_string(n.compute_capability % 10);
}

// The forced row (overrides.kernel) runs whatever its priority, at any query
// loop length; it only has to fit. Otherwise the first row pick() finds.
template <class Row>
Status choose(const std::vector<Row>& table, Pass pass, const Need& n, const std::string& forced, const Row** row) {
  *row = nullptr;
  if (!forced.empty()) {
    const auto k = std::find_if(table.begin(), table.end(), [&](const Row& r) { return forced == r.name; });
    if (k == table.end())  // validation has checked the name (build_problem)
      return {StatusCode::invalid_argument, "overrides.kernel: \"" + forced + "\" is not a " + to_string(pass) +
                                                " row of this build (`memattn kernels` lists them)"};
    std::string why;
    if (!fits(*k, n, &why))
      return {StatusCode::invalid_argument,
              "overrides.kernel: the forced row " + forced + " cannot run this problem (" + describe(n) + "): " + why};
    *row = &*k;
    return Status::Ok();
  }
  if ((*row = pick(table, n, nullptr)) != nullptr) return Status::Ok();
  std::map<std::string, std::string> reasons;  // per family: the reason of its closest row
  pick(table, n, &reasons);
  std::string s = std::string("backend cuda: no ") + to_string(pass) + " kernel fits (" + describe(n) + ")";
  if (table.empty()) s += std::string(": this build has no CUDA ") + to_string(pass) + " kernels";
  for (const auto& [family, reason] : reasons) s += "; " + family + " rows: " + reason;
  return {StatusCode::unsupported, s};
}

template <class Row>
bool has_row(const std::vector<Row>& table, const std::string& name) {
  return std::any_of(table.begin(), table.end(), [&](const Row& k) { return name == k.name; });
}

}  // namespace

Status choose_forward(const ForwardArgs& args, const detail::Problem& p, const ForwardKernel** row) {
  return choose(forward_kernels(), Pass::forward, forward_need(args, p), args.overrides.kernel, row);
}

Status choose_backward(const BackwardArgs& args, const detail::Problem& p, const BackwardKernel** row) {
  return choose(backward_kernels(), Pass::backward, backward_need(args, p), args.overrides.kernel, row);
}

std::optional<Pass> row_pass(const std::string& name) {
  if (has_row(forward_kernels(), name)) return Pass::forward;
  if (has_row(backward_kernels(), name)) return Pass::backward;
  return std::nullopt;
}

const char* to_string(Family family) { return family == Family::sm90 ? "sm90" : "sm80"; }

const char* to_string(Accumulator accumulator) {
  return accumulator == Accumulator::registers ? "registers" : "global";
}

const char* to_string(Math math) {
  return math == Math::mma      ? "tensor cores"
         : math == Math::wgmma  ? "tensor cores (wgmma)"
         : math == Math::tf32x3 ? "tensor cores (3xTF32)"
                                : "FFMA";
}

template <class Params>
std::string describe(const KernelRow<Params>& k) {
  using std::to_string;
  return std::string(k.name) + " (" + to_string(k.family) + ", " + to_string(k.dtype) + ", head dim <= " +
         to_string(k.max_head_dim) + ", tile " + to_string(k.block_m) + "x" + to_string(k.block_n) + ", " +
         to_string(k.warps) + " warps, " + to_string(k.math) + ", accumulator in " + to_string(k.accumulator) +
         ", alignment " +
         to_string(k.alignment) + (k.bias ? ", bias" : "") + (k.bias_tile ? " (shared-memory tile)" : "") +
         (k.dropout ? ", dropout" : "") +
         (k.atomics ? ", atomics" : "") + (k.tma ? ", TMA loads, warp-specialised" : "") +
         (k.paged ? ", K and V from a KV cache's pages" : "") +
         (k.min_queries_per_key > 0 ? ", keys seeing >= " + to_string(k.min_queries_per_key) + " queries" : "") +
         ", priority " + to_string(k.priority) + ")";
}

template std::string describe(const KernelRow<FwdParams>&);
template std::string describe(const KernelRow<BwdParams>&);

}  // namespace memattn::cuda

namespace memattn {

std::vector<KernelInfo> list_kernels(bool with_resources) {
  std::vector<KernelInfo> rows;
  const auto add = [&](const auto& k) {
    KernelInfo info{k.name, cuda::describe(k), k.priority, {}};
    cuda::KernelResources r;
    if (with_resources && cuda::device_count() > 0) {
      const Status s = k.resources(&r);
      info.resources = s.ok() ? std::to_string(r.registers) + " registers, " + std::to_string(r.local_bytes) +
                                    " B local (spills), " + std::to_string(r.smem_bytes / 1024) + " KiB shared, " +
                                    std::to_string(r.blocks_per_sm) + " CTA/SM x " + std::to_string(r.threads / 32) +
                                    " warps"
                              : s.to_string();
    }
    rows.push_back(info);
  };
  for (const cuda::ForwardKernel& k : cuda::forward_kernels()) add(k);
  for (const cuda::BackwardKernel& k : cuda::backward_kernels()) add(k);
  return rows;
}

}  // namespace memattn
