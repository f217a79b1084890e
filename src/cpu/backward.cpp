// CPU backward.
//
// 1. delta = rowsum(dO * O) and the LSE, per query row and head.
// 2. Main pass, one task per (sequence, kv head, chunk of key tiles): for each key tile, walk the
//    query tiles of the kv head's query group that can see it, recompute P from the LSE, and
//    accumulate dK, dV for the tile and dQ for the rows. A task owns its key tiles, so dK and dV
//    need no atomics; dQ is owned by the task unless the keys are split into chunks (when there
//    are fewer (sequence, kv head) pairs than threads), in which case per-chunk partial dQ
//    buffers are summed in chunk order afterwards. The result is deterministic for a given
//    thread count.
// 3. dBias pass (when asked): one task per tile of dbias, summing dS over the bias's broadcast
//    dimensions in a fixed order.
#include <algorithm>
#include <cmath>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/mask.hpp"
#include "cpu/backend.hpp"
#include "cpu/gemm.hpp"
#include "cpu/score_tile.hpp"

namespace memattn::cpu {
namespace {

constexpr float kPosInf = std::numeric_limits<float>::infinity();

// Per-row inputs of the backward, laid out [tensor batch, row, head] like Q's rows.
struct RowStats {
  std::vector<float> lse;    // +inf for rows with no visible key, so that P = exp(S - LSE) = 0
  std::vector<float> delta;  // rowsum(dO * O)
  std::int64_t rows_per_batch = 0, heads = 0;
  std::int64_t index(std::int64_t batch, std::int64_t row, std::int64_t h) const {
    return (batch * rows_per_batch + row) * heads + h;
  }
};

RowStats row_stats(const BackwardArgs& a, const detail::Problem& p) {
  RowStats st;
  st.rows_per_batch = a.q.sizes[1];
  st.heads = p.heads_q;
  const std::int64_t n = a.q.sizes[0] * st.rows_per_batch * st.heads;
  st.lse.assign(std::size_t(n), kPosInf);
  st.delta.assign(std::size_t(n), 0.0f);
  const std::int64_t Dv = p.head_dim_v;
#pragma omp parallel
  {
    std::vector<float> o(Dv), dout(Dv);
#pragma omp for schedule(static)
    for (std::int64_t b = 0; b < p.batch; ++b) {
      const detail::Sequence seq = p.sequence(b);
      for (std::int64_t i = 0; i < seq.q_len; ++i)
        for (std::int64_t h = 0; h < p.heads_q; ++h) {
          const std::int64_t row = seq.q_begin + i;
          load_rows(a.out, seq.batch, row, 1, 1, h, 1.0f, o.data(), Dv);
          load_rows(a.dout, seq.batch, row, 1, 1, h, 1.0f, dout.data(), Dv);
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (std::int64_t e = 0; e < Dv; ++e) dot += o[e] * dout[e];
          const float lse = static_cast<const float*>(
              a.lse.data)[seq.batch * a.lse.strides[0] + h * a.lse.strides[1] + row * a.lse.strides[2]];
          const std::int64_t idx = st.index(seq.batch, row, h);
          st.delta[idx] = dot;
          st.lse[idx] = lse == kNegInf ? kPosInf : lse;
        }
    }
  }
  return st;
}

// Scratch for one tile pair; sized for the largest tiles.
struct Scratch {
  std::vector<float> qs, dob, kt, krows, vt, s, dp, keep, dk, dv, row_buf, lse, delta;
  Scratch(const detail::Problem& p, const Tiling& t)
      : qs(t.rows * p.head_dim), dob(t.rows * p.head_dim_v), kt(p.head_dim * t.cols), krows(t.cols * p.head_dim),
        vt(p.head_dim_v * t.cols), s(t.rows * t.cols), dp(t.rows * t.cols), keep(t.rows * t.cols),
        dk(t.cols * p.head_dim), dv(t.cols * p.head_dim_v),
        row_buf(std::max(std::max(p.head_dim, p.head_dim_v), t.cols)), lse(t.rows), delta(t.rows) {}
};

// Loads the keys and values of one key tile: K^T, K and V^T.
void load_key_tile(const BackwardArgs& a, const detail::Problem& p, const detail::Sequence& seq,
                   std::int64_t hk, std::int64_t j0, std::int64_t cols, std::int64_t BK, Scratch& w) {
  load_rows_transposed(a.k, seq.batch, seq.k_begin + j0, cols, BK, hk, 1.0f, w.row_buf.data(), w.kt.data(), BK);
  load_rows(a.k, seq.batch, seq.k_begin + j0, cols, BK, hk, 1.0f, w.krows.data(), p.head_dim);
  load_rows_transposed(a.v, seq.batch, seq.k_begin + j0, cols, BK, hk, 1.0f, w.row_buf.data(), w.vt.data(), BK);
}

// Loads the queries, dO and row statistics of one query tile.
void load_query_tile(const BackwardArgs& a, const detail::Problem& p, const RowStats& st,
                     const detail::Sequence& seq, std::int64_t h, std::int64_t i0, std::int64_t rows,
                     Scratch& w) {
  load_rows(a.q, seq.batch, seq.q_begin + i0, rows, rows, h, 1.0f, w.qs.data(), p.head_dim);
  load_rows(a.dout, seq.batch, seq.q_begin + i0, rows, rows, h, 1.0f, w.dob.data(), p.head_dim_v);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t idx = st.index(seq.batch, seq.q_begin + i0 + r, h);
    w.lse[r] = st.lse[idx];
    w.delta[r] = st.delta[idx];
  }
}

// With the tiles loaded: s <- P * Z / (1 - p) (the dropped probabilities, for dV) and
// dp <- dS = P * (dP - delta) with dP = Z / (1 - p) * dO V^T.
void gradient_tile(const BackwardArgs& a, const detail::Problem& p, const detail::MaskRule& rule,
                   const TileCoords& t, std::int64_t BK, Scratch& w) {
  const TileLayout layout{BK, 1};
  // The forward's scores bit for bit (score_tile.hpp).
  gemm(t.rows, BK, p.head_dim, w.qs.data(), {p.head_dim, 1}, w.kt.data(), BK, w.s.data(), BK, false);
  finish_scores(p, a.bias, rule, t, t.rows, BK, layout, w.s.data(), w.row_buf.data());
  gemm(t.rows, BK, p.head_dim_v, w.dob.data(), {p.head_dim_v, 1}, w.vt.data(), BK, w.dp.data(), BK, false);
  const float keep_scale = float(1.0 / (1.0 - p.dropout_p));
  if (p.has_dropout()) dropout_tile(p, t, BK, layout, w.keep.data());
  for (std::int64_t r = 0; r < t.rows; ++r) {
    float* srow = w.s.data() + r * BK;
    float* dprow = w.dp.data() + r * BK;
    // P = exp(S - LSE) in the forward's domain (score_tile.hpp).
    const float lse = w.lse[r], delta = w.delta[r];
    if (p.has_dropout()) {
      const float* krow = w.keep.data() + r * BK;
#pragma omp simd
      for (std::int64_t c = 0; c < BK; ++c) {
        const float prob = exp_fast(srow[c] - lse);
        const float z = krow[c] * keep_scale;
        dprow[c] = prob * (z * dprow[c] - delta);
        srow[c] = prob * z;
      }
    } else {
#pragma omp simd
      for (std::int64_t c = 0; c < BK; ++c) {
        const float prob = exp_fast(srow[c] - lse);
        dprow[c] = prob * (dprow[c] - delta);
        srow[c] = prob;
      }
    }
  }
}

struct MainTask {
  std::int64_t b, hk, chunk, chunks;
  std::int64_t partial_offset;  // where this chunk's partial dQ goes (chunks > 1)
};

void run_main_task(const BackwardArgs& a, const detail::Problem& p, const Tiling& tiling, const RowStats& st,
                   const MainTask& task, Scratch& w, std::vector<float>& dq_acc, float* partial) {
  const detail::Sequence seq = p.sequence(task.b);
  const detail::MaskRule rule =
      detail::MaskRule::make(seq.q_len, seq.k_len, p.window_left, p.window_right, p.bottom_right);
  const std::int64_t D = p.head_dim, Dv = p.head_dim_v, BK = tiling.cols, BQ = tiling.rows, G = p.group_size();
  float* dq = partial ? partial + task.partial_offset : nullptr;
  if (!dq) {
    dq_acc.assign(std::size_t(G * seq.q_len * D), 0.0f);
    dq = dq_acc.data();
  }
  const std::int64_t tiles = (seq.k_len + BK - 1) / BK;
  const std::int64_t first = tiles * task.chunk / task.chunks, last = tiles * (task.chunk + 1) / task.chunks;
  for (std::int64_t kt = first; kt < last; ++kt) {
    const std::int64_t j0 = kt * BK, cols = std::min(BK, seq.k_len - j0);
    load_key_tile(a, p, seq, task.hk, j0, cols, BK, w);
    std::fill(w.dk.begin(), w.dk.end(), 0.0f);
    std::fill(w.dv.begin(), w.dv.end(), 0.0f);
    std::int64_t qbegin = 0, qend = 0;
    rule.query_range(j0, j0 + cols, seq.q_len, &qbegin, &qend);
    for (std::int64_t g = 0; g < G; ++g) {
      const std::int64_t h = task.hk * G + g;
      for (std::int64_t i0 = qbegin; i0 < qend; i0 += BQ) {
        const std::int64_t rows = std::min(BQ, qend - i0);
        load_query_tile(a, p, st, seq, h, i0, rows, w);
        gradient_tile(a, p, rule, TileCoords{task.b, h, i0, rows, j0, cols}, BK, w);
        // dV += (P Z)^T dO, dK += dS^T Q, dQ += dS K: the transposes are read in place.
        gemm(BK, Dv, rows, w.s.data(), {1, BK}, w.dob.data(), Dv, w.dv.data(), Dv, true);
        gemm(BK, D, rows, w.dp.data(), {1, BK}, w.qs.data(), D, w.dk.data(), D, true);
        gemm(rows, D, BK, w.dp.data(), {BK, 1}, w.krows.data(), D, dq + (g * seq.q_len + i0) * D, D, true);
      }
    }
    // dK = scale * dS^T Q.
    store_rows(a.dk, seq.batch, seq.k_begin + j0, cols, task.hk, w.dk.data(), D, float(p.scale));
    store_rows(a.dv, seq.batch, seq.k_begin + j0, cols, task.hk, w.dv.data(), Dv, 1.0f);
  }
  if (!partial)
    for (std::int64_t g = 0; g < G; ++g)
      store_rows(a.dq, seq.batch, seq.q_begin, seq.q_len, task.hk * G + g, dq + g * seq.q_len * D, D,
                 float(p.scale));
}

// Key rows of a sequence past seqused_k get zero gradients.
void zero_unused_keys(const BackwardArgs& a, const detail::Problem& p) {
  if (!p.varlen) return;
  std::vector<float> zeros(std::max(p.head_dim, p.head_dim_v), 0.0f);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const detail::Sequence seq = p.sequence(b);
    const std::int64_t allocated = p.seqstart_k[b + 1] - p.seqstart_k[b];
    for (std::int64_t j = seq.k_len; j < allocated; ++j)
      for (std::int64_t hk = 0; hk < p.heads_k; ++hk) {
        store_rows(a.dk, seq.batch, seq.k_begin + j, 1, hk, zeros.data(), 0, 1.0f);
        store_rows(a.dv, seq.batch, seq.k_begin + j, 1, hk, zeros.data(), 0, 1.0f);
      }
  }
}

void main_pass(const BackwardArgs& a, const detail::Problem& p, const Tiling& tiling, const RowStats& st) {
  int threads = 1;
#ifdef _OPENMP
  threads = omp_get_max_threads();
#endif
  // Split the keys of each (sequence, kv head) when there are fewer of those than threads.
  // (An empty problem returns before any backend runs, api.cpp; pairs = 0 stays defined here too.)
  const std::int64_t pairs = p.batch * p.heads_k;
  const std::int64_t chunks = pairs >= threads || pairs < 1 ? 1 : (threads + pairs - 1) / pairs;
  std::vector<MainTask> tasks;
  std::int64_t partial_size = 0;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const detail::Sequence seq = p.sequence(b);
    for (std::int64_t hk = 0; hk < p.heads_k; ++hk)
      for (std::int64_t c = 0; c < chunks; ++c) {
        tasks.push_back({b, hk, c, chunks, partial_size});
        if (chunks > 1) partial_size += p.group_size() * seq.q_len * p.head_dim;
      }
  }
  std::vector<float> partial(std::size_t(partial_size), 0.0f);
#pragma omp parallel
  {
    Scratch scratch(p, tiling);
    std::vector<float> dq_acc;
#pragma omp for schedule(dynamic)
    for (std::int64_t t = 0; t < std::int64_t(tasks.size()); ++t)
      run_main_task(a, p, tiling, st, tasks[t], scratch, dq_acc, chunks > 1 ? partial.data() : nullptr);
  }
  if (chunks == 1) return;
  // Sum the chunks' partial dQ in chunk order (deterministic).
  const std::int64_t D = p.head_dim, G = p.group_size();
#pragma omp parallel for schedule(dynamic)
  for (std::int64_t t = 0; t < std::int64_t(tasks.size()); t += chunks) {
    const MainTask& first = tasks[t];
    const detail::Sequence seq = p.sequence(first.b);
    const std::int64_t n = G * seq.q_len * D;
    float* sum = partial.data() + first.partial_offset;
    for (std::int64_t c = 1; c < chunks; ++c) {
      const float* part = partial.data() + tasks[t + c].partial_offset;
#pragma omp simd
      for (std::int64_t e = 0; e < n; ++e) sum[e] += part[e];
    }
    for (std::int64_t g = 0; g < G; ++g)
      store_rows(a.dq, seq.batch, seq.q_begin, seq.q_len, first.hk * G + g, sum + g * seq.q_len * D, D,
                 float(p.scale));
  }
}

// dbias tile (ob, oh, it, jt) of the reduced dbias: the sum of dS over the broadcast dimensions.
struct BiasTask {
  std::int64_t ob, oh, it, jt;
};

void run_bias_task(const BackwardArgs& a, const detail::Problem& p, const Tiling& tiling, const RowStats& st,
                   const BiasTask& task, Scratch& w, std::vector<float>& acc) {
  const bool* bc = p.bias_broadcast;
  const std::int64_t BQ = tiling.rows, BK = tiling.cols;
  const std::int64_t out_rows = bc[2] ? 1 : std::min(BQ, a.dbias.sizes[2] - task.it * BQ);
  const std::int64_t out_cols = bc[3] ? 1 : std::min(BK, a.dbias.sizes[3] - task.jt * BK);
  acc.assign(std::size_t(out_rows * out_cols), 0.0f);
  for (std::int64_t b = bc[0] ? 0 : task.ob; b < (bc[0] ? p.batch : task.ob + 1); ++b) {
    const detail::Sequence seq = p.sequence(b);
    const detail::MaskRule rule =
        detail::MaskRule::make(seq.q_len, seq.k_len, p.window_left, p.window_right, p.bottom_right);
    const std::int64_t row_lo = bc[2] ? 0 : task.it * BQ;
    const std::int64_t row_hi = std::min(seq.q_len, bc[2] ? seq.q_len : row_lo + BQ);
    for (std::int64_t h = bc[1] ? 0 : task.oh; h < (bc[1] ? p.heads_q : task.oh + 1); ++h) {
      const std::int64_t hk = h / p.group_size();
      for (std::int64_t i0 = row_lo; i0 < row_hi; i0 += BQ) {
        const std::int64_t rows = std::min(BQ, row_hi - i0);
        std::int64_t kbegin = 0, kend = 0;
        rule.key_range(i0, i0 + rows, &kbegin, &kend);
        if (!bc[3]) {
          kbegin = std::max(kbegin, task.jt * BK);
          kend = std::min(kend, task.jt * BK + BK);
        }
        if (kbegin >= kend) continue;
        load_query_tile(a, p, st, seq, h, i0, rows, w);
        for (std::int64_t j0 = kbegin; j0 < kend; j0 += BK) {
          const std::int64_t cols = std::min(BK, kend - j0);
          load_key_tile(a, p, seq, hk, j0, cols, BK, w);
          gradient_tile(a, p, rule, TileCoords{b, h, i0, rows, j0, cols}, BK, w);
          for (std::int64_t r = 0; r < rows; ++r) {
            const std::int64_t orow = bc[2] ? 0 : i0 + r - task.it * BQ;
            const float* ds = w.dp.data() + r * BK;
            if (bc[3]) {
              float sum = 0.0f;
              for (std::int64_t c = 0; c < cols; ++c) sum += ds[c];
              acc[orow] += sum;
            } else {
              float* arow = acc.data() + orow * out_cols + (j0 - task.jt * BK);
              for (std::int64_t c = 0; c < cols; ++c) arow[c] += ds[c];
            }
          }
        }
      }
    }
  }
  for (std::int64_t r = 0; r < out_rows; ++r) {
    const std::int64_t i = bc[2] ? 0 : task.it * BQ + r;
    const std::int64_t off = bias_offset(a.dbias, bc, task.ob, task.oh, i, bc[3] ? 0 : task.jt * BK);
    from_float(acc.data() + r * out_cols, out_cols, 1.0f,
               static_cast<char*>(a.dbias.data) + off * std::int64_t(dtype_size(a.dbias.dtype)), a.dbias.dtype);
  }
}

void bias_pass(const BackwardArgs& a, const detail::Problem& p, const Tiling& tiling, const RowStats& st) {
  const bool* bc = p.bias_broadcast;
  const std::int64_t nb = bc[0] ? 1 : a.dbias.sizes[0], nh = bc[1] ? 1 : a.dbias.sizes[1];
  const std::int64_t ni = bc[2] ? 1 : (a.dbias.sizes[2] + tiling.rows - 1) / tiling.rows;
  const std::int64_t nj = bc[3] ? 1 : (a.dbias.sizes[3] + tiling.cols - 1) / tiling.cols;
  std::vector<BiasTask> tasks;
  for (std::int64_t ob = 0; ob < nb; ++ob)
    for (std::int64_t oh = 0; oh < nh; ++oh)
      for (std::int64_t it = 0; it < ni; ++it)
        for (std::int64_t jt = 0; jt < nj; ++jt) tasks.push_back({ob, oh, it, jt});
#pragma omp parallel
  {
    Scratch scratch(p, tiling);
    std::vector<float> acc;
#pragma omp for schedule(dynamic)
    for (std::int64_t t = 0; t < std::int64_t(tasks.size()); ++t) run_bias_task(a, p, tiling, st, tasks[t], scratch, acc);
  }
}

}  // namespace

Status backward(const BackwardArgs& args, const detail::Problem& p) {
  const Tiling tiling = tiling_for(p);
  const RowStats st = row_stats(args, p);
  zero_unused_keys(args, p);
  main_pass(args, p, tiling, st);
  if (p.has_dbias) bias_pass(args, p, tiling, st);
  return Status::Ok();
}

std::string describe_backward(const detail::Problem& p) {
  const Tiling t = tiling_for(p);
  return "cpu-fast backward (tile " + std::to_string(t.rows) + " queries x " + std::to_string(t.cols) +
         " keys, tasks over key tiles, fp32 accumulation, OpenMP" + (p.has_dbias ? ", dbias pass" : "") + ")";
}

}  // namespace memattn::cpu
