// CUDA dispatch: fill the kernel parameters from the validated problem, walk the kernel table in
// priority order, take the first row that fits, launch it. When none fits, say why per family.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <string>

#include "cuda/backend.hpp"
#include "cuda/kernel_table.hpp"
#include "cuda/tail_split.hpp"
#include "memattn/kernels.hpp"

namespace memattn::cuda {
namespace {

constexpr double kLog2e = 1.4426950408889634;

// What a problem needs from a kernel row.
struct Need {
  DType dtype;
  int head_dim;  // max(D, Dv)
  bool bias, dropout;
  bool aligned;  // 16-byte rows and pointers (alignment 8 elements)
  bool bias_tileable = false;  // bias with unit column stride and 16-byte rows and pointer
  // No dbias, or one that a bias-tile row can write: through its fp32 workspace (broadcast
  // dimensions) or from the tile (16-bit, 16-byte rows); those rows carry no per-element dbias
  // stores (backward).
  bool dbias_stageable = true;
  bool deterministic = false;  // bit-reproducible results asked for (backward)
  double queries_per_key = 0;  // visible (query, key) pairs per key (backward)
  int compute_capability;
  int smem_per_block = 0;  // the device's opt-in limit of shared memory per CTA, bytes
};

bool aligned16(const TensorRef& t) {
  if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0) return false;
  for (int d = 0; d + 1 < t.rank; ++d)
    if (t.strides[d] % 8 != 0) return false;
  return true;
}

int compute_capability() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return major * 10 + minor;
}

int smem_per_block_optin() {
  int device = 0, bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  return bytes;
}

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
  n.aligned = p.head_dim % 8 == 0 && p.head_dim_v % 8 == 0 && p.dtype != DType::f32;
  for (const TensorRef* t : tensors) n.aligned = n.aligned && aligned16(*t);
  n.compute_capability = compute_capability();
  n.smem_per_block = smem_per_block_optin();
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

Need forward_need(const ForwardArgs& a, const detail::Problem& p) {
  Need n = need(p, {&a.q, &a.k, &a.v, &a.out});
  n.bias_tileable = p.has_bias && bias_tileable(a.bias, p);
  return n;
}

// How many queries a key sees on average (for rows with min_queries_per_key): Mq without a mask.
double queries_per_key(const detail::Problem& p) {
  std::int64_t keys = 0;
  for (std::int64_t b = 0; b < p.batch; ++b) keys += p.sequence(b).k_len;
  return keys > 0 ? p.visible_pairs() / (double(keys) * double(p.heads_q)) : 0.0;
}

// Whether a dense 16-bit dbias can be written 16 bytes at a time from the bias tile's shared
// memory.
bool dbias_tileable(const TensorRef& dbias) {
  const bool steps[3] = {dbias.sizes[0] > 1, dbias.sizes[1] > 1, dbias.sizes[2] > 1};
  return dbias.dtype != DType::f32 && rows_tileable(dbias, steps);
}

// Whether dbias sums over dimension d (b, h, i, j): the bias is broadcast along it and it has
// more than one element. Such a dbias goes through an fp32 workspace (plan_dbias_accum).
bool dbias_sums_over(const detail::Problem& p, int d) {
  const std::int64_t full[4] = {p.batch, p.heads_q, p.seqlen_q, p.seqlen_k};
  return p.bias_broadcast[d] && full[d] > 1;
}

bool dbias_summed(const detail::Problem& p) {
  for (int d = 0; d < 4; ++d)
    if (dbias_sums_over(p, d)) return true;
  return false;
}

Need backward_need(const BackwardArgs& a, const detail::Problem& p) {
  Need n = need(p, {&a.q, &a.k, &a.v, &a.out, &a.dout, &a.dq, &a.dk, &a.dv});
  n.bias_tileable = p.has_bias && bias_tileable(a.bias, p);
  n.dbias_stageable = !p.has_dbias || dbias_summed(p) || dbias_tileable(a.dbias);
  n.deterministic = a.deterministic;
  n.queries_per_key = queries_per_key(p);
  return n;
}

// The bytes a tensor spans when its elements fill them without gaps or overlaps (any order of
// the dimensions), else 0.
std::int64_t dense_bytes(const TensorRef& t) {
  int order[4] = {0, 1, 2, 3};
  const int rank = std::clamp(t.rank, 0, 4);
  for (int i = 1; i < rank; ++i)  // insertion sort by stride (std::sort drew g++'s -Warray-bounds here)
    for (int j = i; j > 0 && t.strides[order[j]] < t.strides[order[j - 1]]; --j) std::swap(order[j], order[j - 1]);
  std::int64_t expected = 1;
  for (int i = 0; i < rank; ++i) {
    const int d = order[i];
    if (t.sizes[d] == 0) return 0;
    if (t.sizes[d] == 1) continue;
    if (t.strides[d] != expected) return 0;
    expected *= t.sizes[d];
  }
  return expected * std::int64_t(dtype_size(t.dtype));
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
  if (k.max_head_dim < n.head_dim) return no([&] { return "head dims up to " + std::to_string(k.max_head_dim); });
  if (k.alignment > 1 && !n.aligned)
    return no([] { return std::string("needs head dims, strides and pointers aligned to 8 elements"); });
  if (n.bias && !k.bias) return no([] { return std::string("no bias"); });
  if (n.dropout && !k.dropout) return no([] { return std::string("no dropout"); });
  if (n.bias && k.bias_tile && !n.bias_tileable)
    return no([] { return std::string("bias tile needs a bias with unit key stride and 16-byte aligned rows and pointer"); });
  if (n.bias && k.bias_tile && !n.dbias_stageable)
    return no([] {
      return std::string("bias tile writes a dbias without broadcast dimensions from the tile: needs it 16-bit, with "
                         "unit key stride and 16-byte aligned rows and pointer");
    });
  if (n.deterministic && k.atomics) return no([] { return std::string("uses atomics (not deterministic)"); });
  if (n.smem_per_block > 0)
    if (const int bytes = row_smem_bytes(k); bytes > n.smem_per_block)
      return no([&] {
        return "needs " + std::to_string(bytes) + " bytes of shared memory per CTA (this GPU allows " +
               std::to_string(n.smem_per_block) + ")";
      });
  return true;
}

// MEMATTN_KERNEL=<row name> limits the choice of its pass to that row (for experiments and
// benchmarks of rows that would not be chosen first); unset or empty, every row competes.
const char* forced_row() {
  const char* name = std::getenv("MEMATTN_KERNEL");
  return name != nullptr && *name != '\0' ? name : nullptr;
}

// The first row in priority order that runs the problem, or failing that the first that fits
// but prefers longer sequences; with `reasons`, why each family's last refused row was refused.
template <class Row>
const Row* pick(const std::vector<Row>& table, const Need& n, std::map<std::string, std::string>* reasons) {
  const char* forced = forced_row();
  const Row* short_fallback = nullptr;
  std::string reason;
  std::string* why = reasons != nullptr ? &reason : nullptr;
  for (const Row& k : table) {
    const bool same_pass = forced != nullptr && std::strncmp(forced, k.name, 4) == 0;  // "fwd_" / "bwd_"
    const bool is_forced = same_pass && std::strcmp(forced, k.name) == 0;
    bool ok = fits(k, n, why);
    if (ok && same_pass && !is_forced) {
      ok = false;
      if (why) *why = std::string("MEMATTN_KERNEL selects ") + forced;
    }
    if (ok && k.experimental && !is_forced) {
      ok = false;
      if (why) *why = "experimental (not yet verified on a GPU): only with MEMATTN_KERNEL=" + std::string(k.name);
    }
    // A preference rather than a limit: such a row runs any length when forced, or when no other
    // row fits.
    if (ok && n.queries_per_key < k.min_queries_per_key && !is_forced) {
      if (short_fallback == nullptr) short_fallback = &k;
      continue;
    }
    if (ok) return &k;
    if (reasons != nullptr) (*reasons)[to_string(k.family)] = reason;
  }
  return short_fallback;
}

template <class Row>
const Row* choose(const std::vector<Row>& table, const char* pass, const Need& n, std::string* why) {
  if (const Row* k = pick(table, n, nullptr)) return k;
  std::map<std::string, std::string> reasons;  // per family: the reason of its closest row
  pick(table, n, &reasons);
  std::string s = std::string("backend cuda: no ") + pass + " kernel fits (" + to_string(n.dtype) + ", head dim " +
                  std::to_string(n.head_dim) + (n.bias ? ", bias" : "") + (n.dropout ? ", dropout" : "") +
                  (n.aligned ? "" : ", unaligned") + ", compute capability " +
                  std::to_string(n.compute_capability / 10) + "." + std::to_string(n.compute_capability % 10) + ")";
  if (table.empty()) s += std::string(": this build has no CUDA ") + pass + " kernels";
  for (const auto& [family, reason] : reasons) s += "; " + family + " rows: " + reason;
  *why = s;
  return nullptr;
}

// The forward's view of a call (the backward reads the same tensors); Args is ForwardArgs or
// BackwardArgs.
template <class Args>
FwdParams forward_params(const Args& a, const detail::Problem& p, int block_m) {
  FwdParams f{};
  f.q = a.q.data;
  f.k = a.k.data;
  f.v = a.v.data;
  f.bias = p.has_bias ? a.bias.data : nullptr;
  f.out = a.out.data;
  f.lse = a.lse.defined() ? static_cast<float*>(a.lse.data) : nullptr;
  f.q_batch_stride = a.q.strides[0], f.q_row_stride = a.q.strides[1], f.q_head_stride = a.q.strides[2];
  f.k_batch_stride = a.k.strides[0], f.k_row_stride = a.k.strides[1], f.k_head_stride = a.k.strides[2];
  f.v_batch_stride = a.v.strides[0], f.v_row_stride = a.v.strides[1], f.v_head_stride = a.v.strides[2];
  f.o_batch_stride = a.out.strides[0], f.o_row_stride = a.out.strides[1], f.o_head_stride = a.out.strides[2];
  if (f.lse) f.lse_batch_stride = a.lse.strides[0], f.lse_head_stride = a.lse.strides[1], f.lse_row_stride = a.lse.strides[2];
  if (p.has_bias) {
    const std::int64_t* s = a.bias.strides;
    f.bias_batch_stride = p.bias_broadcast[0] ? 0 : s[0];
    f.bias_head_stride = p.bias_broadcast[1] ? 0 : s[1];
    f.bias_row_stride = p.bias_broadcast[2] ? 0 : s[2];
    f.bias_col_stride = p.bias_broadcast[3] ? 0 : s[3];
    f.bias_is_f32 = a.bias.dtype == DType::f32;
  }
  f.batch = int(p.batch);
  f.heads_q = int(p.heads_q);
  f.heads_k = int(p.heads_k);
  f.group = int(p.group_size());
  f.head_dim = int(p.head_dim);
  f.head_dim_v = int(p.head_dim_v);
  f.seqlen_q = p.seqlen_q;
  f.seqlen_k = p.seqlen_k;
  if (p.varlen) {
    f.seqstart_q = a.varlen.seqstart_q;
    f.seqstart_k = a.varlen.seqstart_k;
    f.seqused_k = a.varlen.seqused_k;
  }
  f.scale = float(p.scale);
  f.scale_log2 = float(p.scale * kLog2e);
  f.window_left = p.window_left;
  f.window_right = p.window_right;
  f.bottom_right = p.bottom_right;
  f.dropout = p.has_dropout();
  f.dropout_threshold = p.dropout_threshold;
  f.dropout_scale = float(1.0 / (1.0 - p.dropout_p));
  f.seed_lo = std::uint32_t(p.dropout_seed);
  f.seed_hi = std::uint32_t(p.dropout_seed >> 32);
  f.dropout_offset = std::uint32_t(p.dropout_offset);
  f.num_m_blocks = int((p.seqlen_q + block_m - 1) / block_m);
  f.num_blocks = std::int64_t(f.num_m_blocks) * p.heads_q * p.batch;
  return f;
}

Status unsupported(std::string why) { return {StatusCode::unsupported, std::move(why)}; }

// CTAs of a row that fit on the current GPU at once. Plans run on every call and the occupancy
// query is not free, so the answer is kept per row and device.
template <class Row>
Status resident_ctas(const Row& k, std::int64_t* ctas) {
  static std::mutex mutex;
  static std::map<std::pair<const Row*, int>, std::int64_t> cache;
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = cache.find({&k, device}); it != cache.end()) {
    *ctas = it->second;
    return Status::Ok();
  }
  KernelResources r;
  if (Status s = k.resources(&r); !s.ok()) return s;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  *ctas = std::int64_t(sms) * std::max(1, r.blocks_per_sm);
  cache[{&k, device}] = *ctas;
  return Status::Ok();
}

// MEMATTN_L2_GROUPS=0 keeps the balanced work groups where L2 would shrink them (for comparisons).
bool l2_groups_enabled() {
  const char* v = std::getenv("MEMATTN_L2_GROUPS");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

// L2 bytes of the current GPU, asked once per device.
std::int64_t l2_bytes() {
  static std::mutex mutex;
  static std::map<int, std::int64_t> cache;
  int device = 0, bytes = 0;
  cudaGetDevice(&device);
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = cache.find(device); it != cache.end()) return it->second;
  cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, device);
  return cache[device] = bytes;
}

// The work order's groups of (sequence, head) pairs (work_order.hpp, rank_work) for `tiles`
// tiles per pair; 0: one pair after another. Only a causal-type mask (a right bound, no left
// bound) makes the tiles uneven with the heaviest where the order puts them first (the last query
// tiles, the first key tiles). Then a group's work should span every resident CTA with the
// heaviest tile: its tiles average half the heaviest's work, so a group takes at least
// 2 * resident / tiles pairs. In the model of bench/ab/s15_schedule.py that puts the suite's
// causal rows (and those of 1.5x the hidden size) within 3.1% of the ideal time, from up to 15%.
// `reused_bytes`: what a pair's CTAs read again from L2 (0: not considered). The pairs of the
// groups in flight share it, and where the balanced group's would overflow half of L2 but a group
// of resident / tiles pairs (the fewest whose heaviest tiles still fill the GPU) fits, the group
// is that: on the wgmma one-pass rows at D = 256 and S = 512 causal the kernel took 0.60 ms with
// the balanced group of 33 pairs (1 MB each: Q, dO and dQ workspace rows), 0.57 with 17 and 0.79
// with 66 (H100, 2026-11-23 (22)); S = 1024 -1.6%, S = 2048 within +-1%; at S = 8192 (16 MB a
// pair) the balanced group stays.
template <class Row>
Status work_groups(const Row& k, const detail::Problem& p, int tiles, std::int64_t pairs, std::int64_t* groups,
                   std::int64_t reused_bytes = 0) {
  *groups = 0;
  if (p.window_right == kUnbounded || p.window_left != kUnbounded || tiles <= 0 || pairs <= 1) return Status::Ok();
  std::int64_t resident = 0;
  if (Status s = resident_ctas(k, &resident); !s.ok()) return s;
  std::int64_t group = (2 * resident + tiles - 1) / tiles;
  if (reused_bytes > 0) {
    const std::int64_t lean = (resident + tiles - 1) / tiles, budget = l2_bytes() / 2;
    if (group * reused_bytes > budget && lean * reused_bytes <= budget) group = lean;
  }
  *groups = std::max<std::int64_t>(1, pairs / std::max<std::int64_t>(group, 1));
  return Status::Ok();
}

// A forward ready to launch: the row, its parameters, and the workspace it needs.
struct ForwardPlan {
  const ForwardKernel* kernel = nullptr;
  FwdParams params{};
  std::size_t workspace_bytes = 0;
};

constexpr int kGlobalChunk = 64;  // head-dim chunk of the global-accumulator kernels

// A gradient workspace row's floats (GradAccum::ld) for `cols` columns: whole chunks.
std::int64_t accum_ld(std::int64_t cols) { return (cols + kGlobalChunk - 1) / kGlobalChunk * kGlobalChunk; }

Status plan_forward(const ForwardArgs& args, const detail::Problem& p, ForwardPlan* plan) {
  std::string why;
  plan->kernel = choose(forward_kernels(), "forward", forward_need(args, p), &why);
  if (!plan->kernel) return unsupported(why);
  plan->params = forward_params(args, p, plan->kernel->block_m);
  if (Status s = work_groups(*plan->kernel, p, plan->params.num_m_blocks, p.batch * p.heads_q,
                             &plan->params.work_groups);
      !s.ok())
    return s;
  if (plan->kernel->accumulator != Accumulator::global) return Status::Ok();
  // One workspace slot (the output accumulator of one query tile) per resident CTA; the CTAs
  // take the work items in turn.
  std::int64_t resident = 0;
  if (Status s = resident_ctas(*plan->kernel, &resident); !s.ok()) return s;
  FwdParams& f = plan->params;
  f.grid_ctas = std::min(f.num_blocks, resident);
  f.o_accum_slot_elems =
      std::int64_t(plan->kernel->block_m) * accum_ld(p.head_dim_v);
  plan->workspace_bytes = std::size_t(f.grid_ctas) * std::size_t(f.o_accum_slot_elems) * sizeof(float);
  return Status::Ok();
}

struct BackwardPlan {
  const BackwardKernel* kernel = nullptr;
  BwdParams params{};
  std::size_t workspace_bytes = 0;  // delta, dbias accumulator, gradient accumulators
  std::size_t dbias_accum_offset = 0;     // 0: none
  std::size_t grad_accum_offset[3] = {};  // dQ, dK, dV of the FFMA global-accumulator rows
  std::size_t slots_offset[2] = {};       // dK/dV and dQ slots of the tensor-core global rows
  std::size_t split_offset[2] = {};       // the split tiles' arrival counts and partial sums
};

// MEMATTN_TAIL_SPLIT=0 turns the one-pass rows' last-wave split off (for comparisons).
bool tail_split_enabled() {
  const char* v = std::getenv("MEMATTN_TAIL_SPLIT");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

// The one-pass rows' last wave (tail_split.hpp): only where every key tile is the same work (no
// mask, no variable lengths) and the work items fit one CTA each.
template <class Row>
Status choose_tail_split(const Row& k, const detail::Problem& p, const BwdParams& b, TailSplit* split) {
  *split = {b.num_kv_blocks, 1};
  if (!k.tail_split || p.is_masked() || p.varlen || !tail_split_enabled()) return Status::Ok();
  std::int64_t resident = 0;
  if (Status s = resident_ctas(k, &resident); !s.ok()) return s;
  const std::int64_t steps = (p.heads_q / p.heads_k) * ((p.seqlen_q + k.block_m - 1) / k.block_m);
  const TailSplit t = plan_tail_split(b.num_kv_blocks, resident, steps);
  if (t.work_items(b.num_kv_blocks) <= kMaxGridCtas) *split = t;  // one item per CTA: the parts' wait needs it
  return Status::Ok();
}

// dbias over broadcast dimensions goes through an fp32 workspace (BwdParams::dbias_accum): of
// dbias's reduced shape with atomics, or of the full [B, Hq, Mq, Mk] shape when deterministic.
// Returns its size in elements (0: dS is written to dbias directly).
std::int64_t plan_dbias_accum(const detail::Problem& p, bool deterministic, BwdParams* b) {
  const std::int64_t full[4] = {p.batch, p.heads_q, p.seqlen_q, p.seqlen_k};
  for (int d = 0; d < 4; ++d) {
    b->dbias_reduced_sizes[d] = dbias_sums_over(p, d) ? 1 : full[d];
    b->dbias_accum_sizes[d] = deterministic ? full[d] : b->dbias_reduced_sizes[d];
  }
  if (!dbias_summed(p)) return 0;
  b->dbias_atomic = !deterministic;
  std::int64_t stride = 1;
  for (int d = 3; d >= 0; --d) {
    const bool collapsed = b->dbias_accum_sizes[d] == 1 && full[d] > 1;
    b->dbias_accum_strides[d] = collapsed ? 0 : stride;
    stride *= b->dbias_accum_sizes[d];
  }
  return stride;
}

Status plan_backward(const BackwardArgs& a, const detail::Problem& p, BackwardPlan* plan) {
  std::string why;
  plan->kernel = choose(backward_kernels(), "backward", backward_need(a, p), &why);
  if (!plan->kernel) return unsupported(why);
  const BackwardKernel& k = *plan->kernel;
  BwdParams& b = plan->params;
  static_cast<FwdParams&>(b) = forward_params(a, p, k.block_m);
  b.dout = a.dout.data;
  b.dq = a.dq.data;
  b.dk = a.dk.data;
  b.dv = a.dv.data;
  b.dbias = p.has_dbias ? a.dbias.data : nullptr;
  b.do_batch_stride = a.dout.strides[0], b.do_row_stride = a.dout.strides[1], b.do_head_stride = a.dout.strides[2];
  b.dq_batch_stride = a.dq.strides[0], b.dq_row_stride = a.dq.strides[1], b.dq_head_stride = a.dq.strides[2];
  b.dk_batch_stride = a.dk.strides[0], b.dk_row_stride = a.dk.strides[1], b.dk_head_stride = a.dk.strides[2];
  b.dv_batch_stride = a.dv.strides[0], b.dv_row_stride = a.dv.strides[1], b.dv_head_stride = a.dv.strides[2];
  if (p.has_dbias) {
    b.dbias_batch_stride = a.dbias.strides[0], b.dbias_head_stride = a.dbias.strides[1];
    b.dbias_row_stride = a.dbias.strides[2], b.dbias_col_stride = a.dbias.strides[3];
    for (int d = 0; d < 4; ++d) b.dbias_sizes[d] = a.dbias.sizes[d];
  }
  b.delta_rows = a.q.sizes[1];
  b.num_n_blocks = int((p.seqlen_k + k.block_n - 1) / k.block_n);
  b.num_kv_blocks = std::int64_t(b.num_n_blocks) * p.heads_k * p.batch;
  // The wgmma one-pass rows' CTAs read their pair's Q, dO and dQ workspace rows at every key tile
  // (the mma.sync one-pass rows gained nothing from the smaller group at D = 64 and 128).
  const std::int64_t reused = k.atomics && k.math == Math::wgmma && l2_groups_enabled()
                                  ? (p.heads_q / p.heads_k) * p.seqlen_q *
                                        ((p.head_dim + p.head_dim_v) * std::int64_t(dtype_size(p.dtype)) +
                                         accum_ld(p.head_dim) * 4)
                                  : 0;
  if (Status s = work_groups(k, p, b.num_n_blocks, p.batch * p.heads_k, &b.kv_work_groups, reused); !s.ok()) return s;
  if (Status s = work_groups(k, p, b.num_m_blocks, p.batch * p.heads_q, &b.work_groups); !s.ok()) return s;
  TailSplit split;
  if (Status s = choose_tail_split(k, p, b, &split); !s.ok()) return s;
  b.kv_split_first = split.first;
  b.kv_split_parts = split.parts;
  b.kv_work_items = split.work_items(b.num_kv_blocks);
  // Workspace: delta, then (when needed) the dbias accumulator and the gradient accumulators of
  // the global-accumulator rows, each 256-byte aligned.
  constexpr std::size_t kAlign = 256;
  std::size_t bytes = 0;
  const auto reserve = [&](std::size_t n) {
    const std::size_t at = (bytes + kAlign - 1) / kAlign * kAlign;
    bytes = at + n;
    return at;
  };
  reserve(std::size_t(a.q.sizes[0]) * std::size_t(p.heads_q) * std::size_t(a.q.sizes[1]) * sizeof(float));
  const std::int64_t dbias_accum = p.has_dbias ? plan_dbias_accum(p, a.deterministic, &b) : 0;
  b.dbias_tile = k.bias_tile && p.has_dbias && dbias_accum == 0;  // then tileable (fits)
  b.dbias_zero = p.has_dbias && dbias_accum == 0 && (p.is_masked() || p.varlen);
  b.dbias_dense_bytes = b.dbias_zero ? dense_bytes(a.dbias) : 0;
  plan->dbias_accum_offset = dbias_accum > 0 ? reserve(std::size_t(dbias_accum) * sizeof(float)) : 0;
  const auto grad_accum = [&](GradAccum* g, const TensorRef& t, std::int64_t cols, std::size_t* offset) {
    g->batch = t.sizes[0], g->rows = t.sizes[1], g->heads = t.sizes[2];
    g->ld = accum_ld(cols);
    *offset = reserve(std::size_t(g->batch * g->rows * g->heads * g->ld) * sizeof(float));
  };
  if (k.atomics) {
    grad_accum(&b.dq_accum, a.q, p.head_dim, &plan->grad_accum_offset[0]);
    if (split.parts > 1) {  // per split tile: its count, and a slot of dK and dV per part but the last
      const std::size_t tiles = std::size_t(b.num_kv_blocks - split.first);
      const std::size_t slot = 2 * std::size_t(k.block_n) * std::size_t(k.max_head_dim);
      plan->split_offset[0] = reserve(tiles * sizeof(int));
      plan->split_offset[1] = reserve(tiles * std::size_t(split.parts - 1) * slot * sizeof(float));
    }
  } else if (k.accumulator == Accumulator::global && k.math == Math::mma) {
    // One slot per resident CTA: dK and dV chunks of a key tile, dQ chunks of a query tile.
    std::int64_t resident = 0;
    if (Status s = resident_ctas(k, &resident); !s.ok()) return s;
    const auto chunks = [](std::int64_t d) { return (d + kGlobalChunk - 1) / kGlobalChunk; };
    b.kv_grid_ctas = std::min(b.num_kv_blocks, resident);
    b.grid_ctas = std::min(b.num_blocks, resident);
    b.dkdv_slot_elems = std::int64_t(k.block_n) * kGlobalChunk * (chunks(p.head_dim) + chunks(p.head_dim_v));
    b.dq_slot_elems = std::int64_t(k.block_m) * kGlobalChunk * chunks(p.head_dim);
    plan->slots_offset[0] = reserve(std::size_t(b.kv_grid_ctas * b.dkdv_slot_elems) * sizeof(float));
    plan->slots_offset[1] = reserve(std::size_t(b.grid_ctas * b.dq_slot_elems) * sizeof(float));
  } else if (k.accumulator == Accumulator::global) {
    grad_accum(&b.dq_accum, a.q, p.head_dim, &plan->grad_accum_offset[0]);
    grad_accum(&b.dk_accum, a.k, p.head_dim, &plan->grad_accum_offset[1]);
    grad_accum(&b.dv_accum, a.v, p.head_dim_v, &plan->grad_accum_offset[2]);
  }
  plan->workspace_bytes = bytes;
  return Status::Ok();
}

// Workspace from the caller, from the caller's allocator, or allocated on the stream (and freed
// after the launches).
class Scratch {
 public:
  Scratch(const Options& opt, std::size_t bytes, cudaStream_t stream) : stream_(stream) {
    ptr_ = opt.workspace;
    if (bytes == 0 || ptr_ != nullptr) return;
    if (opt.allocate_workspace) {
      ptr_ = opt.allocate_workspace(bytes);
      if (ptr_ == nullptr)
        error_ = "the caller's allocator returned null for " + std::to_string(bytes) + " bytes";
      else if (reinterpret_cast<std::uintptr_t>(ptr_) % 16 != 0)
        error_ = "the caller's allocator returned memory that is not 16-byte aligned";
      return;
    }
    const cudaError_t e = cudaMallocAsync(&ptr_, bytes, stream);
    owned_ = e == cudaSuccess;
    if (!owned_) error_ = cudaGetErrorString(e);
  }
  ~Scratch() {
    if (owned_) cudaFreeAsync(ptr_, stream_);
  }
  Status status() const {
    if (error_.empty()) return Status::Ok();
    return {StatusCode::device_error, "workspace allocation: " + error_};
  }
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
  std::string error_;
  bool owned_ = false;
};

}  // namespace

Status workspace_size(const ForwardArgs& args, const detail::Problem& p, std::size_t* bytes) {
  ForwardPlan plan;
  const Status s = plan_forward(args, p, &plan);
  *bytes = s.ok() ? plan.workspace_bytes : 0;
  return s.code() == StatusCode::unsupported ? Status::Ok() : s;  // forward() reports why no row fits
}

Status workspace_size(const BackwardArgs& args, const detail::Problem& p, std::size_t* bytes) {
  BackwardPlan plan;
  const Status s = plan_backward(args, p, &plan);
  *bytes = s.ok() ? plan.workspace_bytes : 0;
  return s.code() == StatusCode::unsupported ? Status::Ok() : s;
}

Status forward(const ForwardArgs& args, const detail::Problem& p) {
  ForwardPlan plan;
  if (Status s = plan_forward(args, p, &plan); !s.ok()) return s;
  if (Status s = detail::check_workspace(args, plan.workspace_bytes); !s.ok()) return s;
  if (p.seqlen_q == 0 || p.batch == 0) return Status::Ok();
  const cudaStream_t stream = static_cast<cudaStream_t>(args.stream);
  const Scratch scratch(args, plan.workspace_bytes, stream);
  if (Status s = scratch.status(); !s.ok()) return s;
  plan.params.o_accum = static_cast<float*>(scratch.get());
  return plan.kernel->launch(plan.params, stream);
}

Status describe_forward(const ForwardArgs& args, const detail::Problem& p, std::string* text) {
  ForwardPlan plan;
  if (Status s = plan_forward(args, p, &plan); !s.ok()) return s;
  *text = describe(*plan.kernel);
  if (plan.workspace_bytes)
    *text += ", workspace " + std::to_string(plan.workspace_bytes >> 20) + " MiB for " +
             std::to_string(plan.params.grid_ctas) + " CTAs";
  return Status::Ok();
}

Status backward(const BackwardArgs& args, const detail::Problem& p) {
  BackwardPlan plan;
  if (Status s = plan_backward(args, p, &plan); !s.ok()) return s;
  if (Status s = detail::check_workspace(args, plan.workspace_bytes); !s.ok()) return s;
  if (p.batch == 0) return Status::Ok();
  const cudaStream_t stream = static_cast<cudaStream_t>(args.stream);
  const Scratch scratch(args, plan.workspace_bytes, stream);
  if (Status s = scratch.status(); !s.ok()) return s;
  char* base = static_cast<char*>(scratch.get());
  BwdParams& b = plan.params;
  b.delta = reinterpret_cast<float*>(base);
  if (plan.dbias_accum_offset) b.dbias_accum = reinterpret_cast<float*>(base + plan.dbias_accum_offset);
  if (plan.kernel->atomics) {
    b.dq_accum.data = reinterpret_cast<float*>(base + plan.grad_accum_offset[0]);
    if (b.kv_split_parts > 1) {
      b.kv_split_arrivals = reinterpret_cast<int*>(base + plan.split_offset[0]);
      b.kv_split_sums = reinterpret_cast<float*>(base + plan.split_offset[1]);
    }
  } else if (plan.kernel->accumulator == Accumulator::global && plan.kernel->math == Math::mma) {
    b.dkdv_slots = reinterpret_cast<float*>(base + plan.slots_offset[0]);
    b.dq_slots = reinterpret_cast<float*>(base + plan.slots_offset[1]);
  } else if (plan.kernel->accumulator == Accumulator::global) {
    b.dq_accum.data = reinterpret_cast<float*>(base + plan.grad_accum_offset[0]);
    b.dk_accum.data = reinterpret_cast<float*>(base + plan.grad_accum_offset[1]);
    b.dv_accum.data = reinterpret_cast<float*>(base + plan.grad_accum_offset[2]);
  }
  return plan.kernel->launch(b, stream);
}

Status describe_backward(const BackwardArgs& args, const detail::Problem& p, std::string* text) {
  BackwardPlan plan;
  if (Status s = plan_backward(args, p, &plan); !s.ok()) return s;
  *text = describe(*plan.kernel);
  const BwdParams& b = plan.params;
  if (b.kv_split_parts > 1)
    *text += ", the last " + std::to_string(b.num_kv_blocks - b.kv_split_first) + " of " +
             std::to_string(b.num_kv_blocks) + " key tiles split over " + std::to_string(b.kv_split_parts) +
             " CTAs each";
  return Status::Ok();
}

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

namespace memattn::cuda {

const char* to_string(Family family) { return family == Family::sm90 ? "sm90" : "sm80"; }

const char* to_string(Accumulator accumulator) {
  return accumulator == Accumulator::registers ? "registers" : "global";
}

const char* to_string(Math math) {
  return math == Math::mma ? "tensor cores" : math == Math::wgmma ? "tensor cores (wgmma)" : "FFMA";
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
         (k.atomics ? ", atomics" : "") +
         (k.min_queries_per_key > 0 ? ", keys seeing >= " + to_string(k.min_queries_per_key) + " queries" : "") +
         (k.experimental ? ", experimental" : "") + ", priority " + to_string(k.priority) + ")";
}

}  // namespace memattn::cuda

namespace memattn::cuda {
template std::string describe(const KernelRow<FwdParams>&);
template std::string describe(const KernelRow<BwdParams>&);
}  // namespace memattn::cuda
