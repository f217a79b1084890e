// CPU forward: one task per (sequence, query head, query tile). Each task walks the key tiles the
// mask leaves visible, keeping a running max and sum per row (online softmax) and
// an fp32 output accumulator; no Mq x Mk matrix is ever formed.
//
// Scores are kept transposed, S^T = K Q^T ([keys x queries]): Q^T is built once per task, each
// key tile is used as loaded (row-major), and the per-query max and sum become element-wise
// vector operations across the query columns.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/mask.hpp"
#include "cpu/backend.hpp"
#include "cpu/gemm.hpp"
#include "cpu/score_tile.hpp"

namespace memattn::cpu {
namespace {

struct Task {
  std::int64_t b, h, i0, rows;
};

struct Scratch {
  std::vector<float> qt, krows, vrows, st, keep, acc, row_max, row_sum, tile_max, alpha, row_buf;
  Scratch(const detail::Problem& p, const Tiling& t)
      : qt(p.head_dim * t.rows), krows(t.cols * p.head_dim), vrows(t.cols * p.head_dim_v), st(t.cols * t.rows),
        keep(t.cols * t.rows), acc(t.rows * p.head_dim_v), row_max(t.rows), row_sum(t.rows), tile_max(t.rows),
        alpha(t.rows), row_buf(std::max(p.head_dim, t.cols)) {}
};

// Folds one transposed tile st [cols x rows] into the running max/sum, turns it into
// probabilities relative to the new max, and rescales the accumulator rows whose max moved.
void online_softmax(std::int64_t rows, std::int64_t cols, std::int64_t dv, Scratch& w) {
  float* st = w.st.data();
  float* tmax = w.tile_max.data();
  float* rmax = w.row_max.data();
  std::copy(rmax, rmax + rows, tmax);
  for (std::int64_t c = 0; c < cols; ++c) {
    const float* col = st + c * rows;
#pragma omp simd
    // A NaN score is sticky (col != col), so that a row with one gets out and LSE NaN, as in math.
    for (std::int64_t r = 0; r < rows; ++r) tmax[r] = col[r] > tmax[r] || col[r] != col[r] ? col[r] : tmax[r];
  }
  // New max per row; a row with nothing visible yet keeps max -inf and exponentiates against 0
  // (exp(-inf - 0) = 0) with its accumulator left as is.
  float* alpha = w.alpha.data();
#pragma omp simd
  for (std::int64_t r = 0; r < rows; ++r) {
    const bool none = tmax[r] == kNegInf;
    alpha[r] = none ? 1.0f : exp_fast(rmax[r] - tmax[r]);
    rmax[r] = tmax[r];
    tmax[r] = none ? 0.0f : tmax[r];
  }
  float* rsum = w.row_sum.data();
  for (std::int64_t r = 0; r < rows; ++r) rsum[r] *= alpha[r];
  for (std::int64_t c = 0; c < cols; ++c) {
    float* col = st + c * rows;
#pragma omp simd
    for (std::int64_t r = 0; r < rows; ++r) {
      col[r] = exp_fast(col[r] - tmax[r]);
      rsum[r] += col[r];
    }
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    if (alpha[r] == 1.0f) continue;
    float* arow = w.acc.data() + r * dv;
#pragma omp simd
    for (std::int64_t e = 0; e < dv; ++e) arow[e] *= alpha[r];
  }
}

// Key (or value) rows [j0, j0 + cols) of sequence `seq`, head `hk`, into dst[r * ld + e]: from the
// tensor's rows, or with a KV cache from the slots of their positions, one page's run at a time.
void load_keys(const TensorRef& t, const detail::Problem& p, const detail::Sequence& seq, std::int64_t j0,
               std::int64_t cols, std::int64_t hk, float* dst, std::int64_t ld) {
  if (!p.cache.enabled) return load_rows(t, seq.batch, seq.k_begin + j0, cols, cols, hk, 1.0f, dst, ld);
  for (std::int64_t j = j0; j < j0 + cols;) {
    const detail::CachePages::Slot slot = p.cache.slot(seq.batch, j);
    const std::int64_t run = std::min(j0 + cols - j, p.cache.page_size - slot.row);
    load_rows(t, slot.page, slot.row, run, run, hk, 1.0f, dst + (j - j0) * ld, ld);
    j += run;
  }
}

void run_task(const ForwardArgs& a, const detail::Problem& p, const Tiling& tiling, const Task& task,
              Scratch& w) {
  const detail::Sequence seq = p.sequence(task.b);
  const detail::MaskRule rule =
      detail::MaskRule::make(seq.q_len, seq.k_len, p.window_left, p.window_right, p.bottom_right);
  const std::int64_t D = p.head_dim, Dv = p.head_dim_v, BK = tiling.cols, R = task.rows;
  const std::int64_t hk = task.h / p.group_size();
  const TileLayout transposed{1, R};

  // Scores in the natural domain, as the backward recomputes them (score_tile.hpp).
  load_rows_transposed(a.q, seq.batch, seq.q_begin + task.i0, R, R, task.h, 1.0f, w.row_buf.data(), w.qt.data(), R);
  std::fill(w.acc.begin(), w.acc.end(), 0.0f);
  std::fill(w.row_max.begin(), w.row_max.end(), kNegInf);
  std::fill(w.row_sum.begin(), w.row_sum.end(), 0.0f);

  std::int64_t kbegin = 0, kend = 0;
  rule.key_range(task.i0, task.i0 + R, &kbegin, &kend);
  for (std::int64_t j0 = kbegin; j0 < kend; j0 += BK) {
    const std::int64_t cols = std::min(BK, kend - j0);
    const TileCoords t{task.b, task.h, task.i0, R, j0, cols};
    load_keys(a.k, p, seq, j0, cols, hk, w.krows.data(), D);
    gemm(cols, R, D, w.krows.data(), {D, 1}, w.qt.data(), R, w.st.data(), R, false);
    finish_scores(p, a.bias, rule, t, R, cols, transposed, w.st.data(), w.row_buf.data());
    online_softmax(R, cols, Dv, w);
    if (p.has_dropout()) {
      dropout_tile(p, t, cols, transposed, w.keep.data());
      for (std::int64_t e = 0; e < cols * R; ++e) w.st[e] *= w.keep[e];
    }
    load_keys(a.v, p, seq, j0, cols, hk, w.vrows.data(), Dv);
    gemm(R, Dv, cols, w.st.data(), {1, R}, w.vrows.data(), Dv, w.acc.data(), Dv, true);
  }

  // O = acc / sum / (1 - p); rows that saw no key get O = 0 and LSE = -inf.
  const float keep_scale = float(1.0 / (1.0 - p.dropout_p));
  for (std::int64_t r = 0; r < R; ++r) {
    const bool empty = w.row_max[r] == kNegInf;
    float* arow = w.acc.data() + r * Dv;
    const float norm = empty ? 0.0f : keep_scale / w.row_sum[r];
    store_rows(a.out, seq.batch, seq.q_begin + task.i0 + r, 1, task.h, arow, Dv, norm);
    if (a.lse.defined()) {
      const float lse = empty ? kNegInf : row_lse(w.row_max[r], w.row_sum[r]);
      const std::int64_t off = seq.batch * a.lse.strides[0] + task.h * a.lse.strides[1] +
                               (seq.q_begin + task.i0 + r) * a.lse.strides[2];
      static_cast<float*>(a.lse.data)[off] = lse;
    }
  }
}

// Copies row m of every head of a [B, M, H, W] tensor's sequence b into the cache's slot.
void copy_heads(const TensorRef& from, std::int64_t b, std::int64_t m, const TensorRef& to,
                detail::CachePages::Slot slot) {
  const std::int64_t bytes = std::int64_t(dtype_size(from.dtype));
  for (std::int64_t h = 0; h < from.sizes[2]; ++h)
    std::memcpy(static_cast<char*>(to.data) + row_offset(to, slot.page, slot.row, h) * bytes,
                static_cast<const char*>(from.data) + row_offset(from, b, m, h) * bytes,
                std::size_t(from.sizes[3] * bytes));
}

}  // namespace

void append_kv_cache(const ForwardArgs& args, const detail::Problem& p) {
  const KvCache& c = args.kv_cache;
  if (!p.cache.enabled || p.cache.new_keys == 0) return;
#pragma omp parallel for collapse(2)
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t m = 0; m < p.cache.new_keys; ++m) {
      const detail::CachePages::Slot slot = p.cache.slot(b, p.cache.seqlens[std::size_t(b)] + m);
      copy_heads(c.k_new, b, m, args.k, slot);
      copy_heads(c.v_new, b, m, args.v, slot);
    }
}

Status forward(const ForwardArgs& args, const detail::Problem& p) {
  const Tiling tiling = tiling_for(p);
  std::vector<Task> tasks;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t q_len = p.sequence(b).q_len;
    for (std::int64_t h = 0; h < p.heads_q; ++h)
      for (std::int64_t i0 = 0; i0 < q_len; i0 += tiling.rows)
        tasks.push_back({b, h, i0, std::min(tiling.rows, q_len - i0)});
  }
#pragma omp parallel
  {
    Scratch scratch(p, tiling);
#pragma omp for schedule(dynamic)
    for (std::int64_t t = 0; t < std::int64_t(tasks.size()); ++t) run_task(args, p, tiling, tasks[t], scratch);
  }
  return Status::Ok();
}

std::string describe_forward(const detail::Problem& p) {
  const Tiling t = tiling_for(p);
  return "cpu-fast forward (tile " + std::to_string(t.rows) + " queries x " + std::to_string(t.cols) +
         " keys, fp32 accumulation, OpenMP)";
}

}  // namespace memattn::cpu
