#include "support/naive.hpp"

#include <cmath>
#include <stdexcept>
#include <limits>

#include "core/numeric.hpp"
#include "core/problem.hpp"
#include "memattn/dropout.hpp"

namespace memattn::testing {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Ctx {
  const tools::Workload& w;
  detail::Problem p;
  DType dt;
  float rnd(float x) const { return detail::round_to(dt, x); }
  float at(tools::Tensor t, std::int64_t i0, std::int64_t i1, std::int64_t i2, std::int64_t i3) const {
    const TensorRef& v = w.host(t).view;
    const std::int64_t idx[4] = {i0, i1, i2, i3};
    std::int64_t off = 0;
    for (int d = 0; d < 4; ++d) off += (v.sizes[d] == 1 ? 0 : idx[d]) * v.strides[d];
    return detail::load_float(w.host(t).bytes.data(), v.dtype, off);
  }
  // The keys row i may see: [first, last].
  void visible_keys(const detail::Sequence& s, std::int64_t i, std::int64_t* first, std::int64_t* last) const {
    const std::int64_t d = p.bottom_right ? i + s.k_len - s.q_len : i;
    *first = p.window_left < 0 ? 0 : std::max<std::int64_t>(0, d - p.window_left);
    *last = p.window_right < 0 ? s.k_len - 1 : std::min<std::int64_t>(s.k_len - 1, d + p.window_right);
  }
  float drop(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    if (p.dropout_p == 0) return 1.0f;
    return dropout_keep(p.dropout_seed, p.dropout_offset, b, h, p.heads_q, i, j, p.dropout_p)
               ? float(1.0 / (1.0 - p.dropout_p))
               : 0.0f;
  }
  // Rounded probabilities of row i over its visible keys: prob[j - *first] for j in [*first, *last].
  // Returns false when every key is masked. With given_lse, P = exp(S - given_lse).
  bool probs(const detail::Sequence& s, std::int64_t b, std::int64_t h, std::int64_t i, std::vector<float>& prob,
             std::int64_t* first, std::int64_t* last, float* lse, const float* given_lse = nullptr) const {
    const std::int64_t hk = h / p.group_size();
    visible_keys(s, i, first, last);
    const std::int64_t n = std::max<std::int64_t>(0, *last - *first + 1);
    std::vector<float> sc(std::size_t(n), -INFINITY);
    float mx = -INFINITY;
    for (std::int64_t j = *first; j <= *last; ++j) {
      float acc = 0;
      for (std::int64_t d = 0; d < p.head_dim; ++d)
        acc += at(tools::Tensor::q, s.batch, s.q_begin + i, h, d) * at(tools::Tensor::k, s.batch, s.k_begin + j, hk, d);
      float v = rnd(rnd(acc) * float(p.scale));
      if (p.has_bias) v = rnd(v + at(tools::Tensor::bias, b, h, i, j));
      sc[std::size_t(j - *first)] = v;
      mx = std::max(mx, v);
    }
    prob.assign(std::size_t(n), 0.0f);
    if (mx == -INFINITY) return false;
    if (given_lse) {
      for (std::int64_t e = 0; e < n; ++e) prob[e] = rnd(std::exp(sc[e] - *given_lse));
      *lse = *given_lse;
      return true;
    }
    float sum = 0;
    for (std::int64_t e = 0; e < n; ++e) sum += std::exp(sc[e] - mx);
    for (std::int64_t e = 0; e < n; ++e) prob[e] = rnd(std::exp(sc[e] - mx) / sum);
    *lse = mx + std::log(sum);
    return true;
  }
};

std::int64_t idx4(const TensorRef& t, std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
  return ((a * t.sizes[1] + b) * t.sizes[2] + c) * t.sizes[3] + d;
}

}  // namespace

// The problem's description, validated as for the reference (host memory, whatever the backend).
detail::Problem host_problem(const tools::Workload& w, bool backward) {
  detail::Problem p;
  Status s;
  if (backward) {
    BackwardArgs a = w.host_backward_args();
    a.backend = Backend::reference;
    s = detail::build_problem(a, &p);
  } else {
    ForwardArgs a = w.host_forward_args();
    a.backend = Backend::reference;
    s = detail::build_problem(a, &p);
  }
  if (!s.ok()) throw std::runtime_error("naive comparator: " + s.to_string());
  return p;
}

NaiveForward naive_forward(const tools::Workload& w) {
  Ctx c{w, host_problem(w, false), w.spec().dtype};
  const TensorRef& out = w.host(tools::Tensor::out).view;
  NaiveForward r;
  r.out.assign(std::size_t(out.numel()), kNaN);
  r.lse.assign(std::size_t(out.sizes[0] * c.p.heads_q * out.sizes[1]), kNaN);
  // One (sequence, head) per task: each output element is computed as the serial loop would.
  const std::int64_t pairs = c.p.batch * c.p.heads_q;
#pragma omp parallel for schedule(dynamic)
  for (std::int64_t pair = 0; pair < pairs; ++pair) {
    const std::int64_t b = pair / c.p.heads_q, h = pair % c.p.heads_q;
    const detail::Sequence s = c.p.sequence(b);
    std::vector<float> prob;
    for (std::int64_t i = 0; i < s.q_len; ++i) {
      float lse = -INFINITY;
      std::int64_t first = 0, last = -1;
      const bool any = c.probs(s, b, h, i, prob, &first, &last, &lse);
      r.lse[std::size_t((s.batch * c.p.heads_q + h) * out.sizes[1] + s.q_begin + i)] = lse;
      for (std::int64_t e = 0; e < c.p.head_dim_v; ++e) {
        float acc = 0;
        if (any)
          for (std::int64_t j = first; j <= last; ++j)
            acc += c.rnd(prob[j - first] * c.drop(b, h, i, j)) *
                   c.at(tools::Tensor::v, s.batch, s.k_begin + j, h / c.p.group_size(), e);
        r.out[std::size_t(idx4(out, s.batch, s.q_begin + i, h, e))] = c.rnd(acc);
      }
    }
  }
  return r;
}

NaiveBackward naive_backward(const tools::Workload& w) {
  Ctx c{w, host_problem(w, true), w.spec().dtype};
  const detail::Problem& p = c.p;
  const TensorRef &qv = w.host(tools::Tensor::q).view, &kv = w.host(tools::Tensor::k).view,
                  &vv = w.host(tools::Tensor::v).view;
  std::vector<float> dk(std::size_t(qv.sizes[0] * kv.sizes[1] * kv.sizes[2] * kv.sizes[3]), 0);
  std::vector<float> dv(std::size_t(qv.sizes[0] * vv.sizes[1] * vv.sizes[2] * vv.sizes[3]), 0);
  std::int64_t db_sizes[4] = {1, 1, 1, 1};
  std::vector<float> dbias;
  if (w.has(tools::Tensor::dbias)) {
    const TensorRef& bv = w.host(tools::Tensor::bias).view;
    for (int d = 0; d < 4; ++d) db_sizes[d] = p.bias_broadcast[d] ? 1 : bv.sizes[d];
    dbias.assign(std::size_t(db_sizes[0] * db_sizes[1] * db_sizes[2] * db_sizes[3]), 0);
  }
  TensorRef kshape = kv, vshape = vv;  // contiguous index shapes (K/V may have batch stride 0)
  kshape.sizes[0] = vshape.sizes[0] = qv.sizes[0];
  NaiveBackward r;
  r.dq.assign(std::size_t(qv.numel()), kNaN);
  r.dk.assign(dk.size(), kNaN);
  r.dv.assign(dv.size(), kNaN);
  const float scale = float(p.scale);
  // One (sequence, kv head) per task, its query heads and rows in the serial order, so that every
  // dK and dV element sums its terms as the serial loop would; with a dbias (summed over
  // broadcast dimensions across tasks) the tasks run one after another, in the serial order.
  const std::int64_t group = p.group_size(), kv_pairs = p.batch * p.heads_k;
#pragma omp parallel for schedule(dynamic) if (dbias.empty())
  for (std::int64_t pair = 0; pair < kv_pairs; ++pair) {
    const std::int64_t b = pair / p.heads_k, hk = pair % p.heads_k;
    const detail::Sequence s = p.sequence(b);
    const std::int64_t k_rows = p.varlen ? p.seqstart_k[b + 1] - p.seqstart_k[b] : s.k_len;
    std::vector<float> prob, dp;
    for (std::int64_t h = hk * group; h < (hk + 1) * group; ++h) {
      for (std::int64_t i = 0; i < s.q_len; ++i) {
        float lse;
        const std::int64_t m = s.q_begin + i;
        const TensorRef& lv = w.host(tools::Tensor::lse).view;
        const float given = detail::load_float(w.host(tools::Tensor::lse).bytes.data(), DType::f32,
                                               s.batch * lv.strides[0] + h * lv.strides[1] + m * lv.strides[2]);
        for (std::int64_t d = 0; d < p.head_dim; ++d) r.dq[idx4(qv, s.batch, m, h, d)] = 0;
        std::int64_t first = 0, last = -1;
        if (!c.probs(s, b, h, i, prob, &first, &last, &lse, &given)) continue;
        dp.assign(std::size_t(s.k_len), 0);
        float delta = 0;
        for (std::int64_t e = 0; e < p.head_dim_v; ++e)
          delta += c.rnd(c.at(tools::Tensor::dout, s.batch, m, h, e) * c.at(tools::Tensor::out, s.batch, m, h, e));
        delta = c.rnd(delta);
        for (std::int64_t j = first; j <= last; ++j) {
          float acc = 0;
          for (std::int64_t e = 0; e < p.head_dim_v; ++e)
            acc += c.at(tools::Tensor::dout, s.batch, m, h, e) * c.at(tools::Tensor::v, s.batch, s.k_begin + j, hk, e);
          dp[j] = c.rnd(c.rnd(acc) * c.drop(b, h, i, j));
        }
        std::vector<float> dq_row(std::size_t(p.head_dim), 0);
        for (std::int64_t j = first; j <= last; ++j) {
          const float ds = c.rnd(prob[j - first] * (dp[j] - delta));
          const float pd = c.rnd(prob[j - first] * c.drop(b, h, i, j));
          for (std::int64_t d = 0; d < p.head_dim; ++d) {
            dq_row[d] += ds * c.at(tools::Tensor::k, s.batch, s.k_begin + j, hk, d);
            dk[idx4(kshape, s.batch, s.k_begin + j, hk, d)] += ds * c.at(tools::Tensor::q, s.batch, m, h, d);
          }
          for (std::int64_t e = 0; e < p.head_dim_v; ++e)
            dv[idx4(vshape, s.batch, s.k_begin + j, hk, e)] += pd * c.at(tools::Tensor::dout, s.batch, m, h, e);
          if (!dbias.empty()) {
            const std::int64_t at[4] = {p.bias_broadcast[0] ? 0 : b, p.bias_broadcast[1] ? 0 : h,
                                        p.bias_broadcast[2] ? 0 : i, p.bias_broadcast[3] ? 0 : j};
            dbias[std::size_t(((at[0] * db_sizes[1] + at[1]) * db_sizes[2] + at[2]) * db_sizes[3] + at[3])] += ds;
          }
        }
        for (std::int64_t d = 0; d < p.head_dim; ++d)
          r.dq[idx4(qv, s.batch, m, h, d)] = c.rnd(scale * c.rnd(dq_row[d]));
      }
    }
    for (std::int64_t j = 0; j < k_rows; ++j) {
      for (std::int64_t d = 0; d < p.head_dim; ++d) {
        const std::int64_t e = idx4(kshape, s.batch, s.k_begin + j, hk, d);
        r.dk[e] = c.rnd(scale * c.rnd(dk[e]));
      }
      for (std::int64_t d = 0; d < p.head_dim_v; ++d) {
        const std::int64_t e = idx4(vshape, s.batch, s.k_begin + j, hk, d);
        r.dv[e] = c.rnd(dv[e]);
      }
    }
  }
  for (float x : dbias) r.dbias.push_back(c.rnd(x));
  return r;
}

}  // namespace memattn::testing
