// What a successful call must have written, for the API fuzz target: which query rows see a key
// and which keys are seen (the mask rule of attention.hpp, with int128 arithmetic so that huge
// windows cannot overflow here), magnitude bounds of every output for finite, moderate inputs,
// and the comparison with the float64 reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "core/numeric.hpp"
#include "fuzz/buffers.hpp"
#include "fuzz/problem_gen.hpp"
#include "memattn/attention.hpp"
#include "memattn/reference.hpp"

namespace memattn::fuzz {

class Oracle {
 public:
  enum class Verdict { must_refuse, valid, too_large };

  // The problem as the fuzz target meant it. must_refuse when the arguments break a rule the
  // library must enforce (wrong rank, negative or mismatched sizes, heads not a multiple, D
  // outside [1, 65536], invalid mask or dropout or scale or precision, malformed sequence offsets); too_large
  // when this oracle's tables would not fit.
  Verdict build(const TensorRef& q, const TensorRef& k, const TensorRef& v, const VarlenGen& gen, const Options& o) {
    constexpr Verdict refuse = Verdict::must_refuse;
    if (q.rank != 4 || k.rank != 4 || v.rank != 4) return refuse;
    for (int d = 0; d < 4; ++d)
      if (q.sizes[d] < 0 || k.sizes[d] < 0 || v.sizes[d] < 0) return refuse;
    B_ = q.sizes[0], Mq_ = q.sizes[1], Mk_ = k.sizes[1], Hq_ = q.sizes[2], Hk_ = k.sizes[2];
    D_ = q.sizes[3], Dv_ = v.sizes[3];
    if (k.sizes[0] != B_ || v.sizes[0] != B_ || v.sizes[1] != Mk_ || v.sizes[2] != Hk_ || k.sizes[3] != D_) return refuse;
    if (D_ < 1 || D_ > 65536 || Dv_ < 1 || Dv_ > 65536) return refuse;
    if (Hk_ == 0 ? Hq_ > 0 : Hq_ % Hk_ != 0) return refuse;
    left_ = o.mask.window_left, right_ = o.mask.window_right;
    if ((left_ < 0 && left_ != kUnbounded) || (right_ < 0 && right_ != kUnbounded)) return refuse;
    bottom_right_ = o.mask.alignment == Alignment::bottom_right;
    if (!bottom_right_ && o.mask.alignment != Alignment::top_left) return refuse;
    p_ = o.dropout.p;
    if (!(p_ >= 0 && p_ < 1)) return refuse;
    if (o.backend != Backend::automatic && o.backend != Backend::cpu && o.backend != Backend::cuda &&
        o.backend != Backend::reference)
      return refuse;
    if (o.precision != Precision::automatic && o.precision != Precision::ieee && o.precision != Precision::tf32x3)
      return refuse;
    scale_ = o.scale ? *o.scale : 1.0 / std::sqrt(double(D_));
    if (!std::isfinite(scale_)) return refuse;
    seqs_.clear();
    if (B_ > 4096 || double(B_) * (double(Mq_) + double(Mk_)) > 1e6) return Verdict::too_large;
    const Varlen& vl = o.varlen;
    if (!vl.enabled()) {
      for (std::int64_t b = 0; b < B_; ++b) seqs_.push_back({b, 0, Mq_, 0, Mk_});
      return Verdict::valid;
    }
    // Variable lengths: the views as the library must read them (through their strides). The
    // generator backs every view it makes of a legal size and stride.
    if (B_ != 1 || !vl.seqstart_q.data || !vl.seqstart_k.data || !gen.backed()) return refuse;
    const std::int64_t n = vl.seqstart_q.size - 1;
    if (n < 0 || vl.seqstart_k.size != n + 1) return refuse;
    if (vl.seqused_k.defined() && (vl.seqused_k.size != n || (n > 0 && !vl.seqused_k.data))) return refuse;
    if (vl.max_seqlen_q < kUnknownLength || vl.max_seqlen_k < kUnknownLength) return refuse;
    const auto at = [](const IndexRef& x, std::int64_t i) { return std::int64_t(x.data[i * x.stride]); };
    for (const IndexRef* st : {&vl.seqstart_q, &vl.seqstart_k}) {
      if (at(*st, 0) < 0) return refuse;
      for (std::int64_t s = 0; s < n; ++s)
        if (at(*st, s + 1) < at(*st, s)) return refuse;
    }
    if (at(vl.seqstart_q, n) > Mq_ || at(vl.seqstart_k, n) > Mk_) return refuse;
    for (std::int64_t s = 0; s < n; ++s) {
      const std::int64_t klen = at(vl.seqstart_k, s + 1) - at(vl.seqstart_k, s);
      const std::int64_t used = vl.seqused_k.defined() ? at(vl.seqused_k, s) : klen;
      if (used < 0 || used > klen) return refuse;
      const std::int64_t qlen = at(vl.seqstart_q, s + 1) - at(vl.seqstart_q, s);
      if ((vl.max_seqlen_q != kUnknownLength && qlen > vl.max_seqlen_q) ||
          (vl.max_seqlen_k != kUnknownLength && used > vl.max_seqlen_k))
        return refuse;
      seqs_.push_back({0, at(vl.seqstart_q, s), at(vl.seqstart_q, s + 1) - at(vl.seqstart_q, s),
                       at(vl.seqstart_k, s), used});
    }
    return Verdict::valid;
  }

  double work() const {
    double pairs = 0;
    for (const Seq& s : seqs_) pairs += double(s.q_len) * double(s.k_len);
    return pairs * double(Hq_) * double(D_ + Dv_) + double(B_) * (double(Mq_) + double(Mk_)) * (double(Hq_) + double(Hk_));
  }

  // Finite options whose outputs stay far from float overflow for inputs of magnitude <= 2.
  bool moderate_options() const { return std::abs(scale_) <= 4.0 && p_ <= 0.95; }

  void check_forward(const ForwardArgs& a, bool lse, double m) {
    visibility();
    const double keep = 1.0 / (1.0 - p_);
    const double out_bound = m * keep * 1.01 + 1e-30;  // a convex combination of v, scaled by dropout
    const bool finite_out = out_bound < 0.5 * dtype_max(a.out.dtype);
    for_each_element(a.out, [&](const std::int64_t* i, std::int64_t off) {
      const double x = detail::load_double(a.out.data, a.out.dtype, off);
      if (!row_visible(i[0], i[1]))
        FUZZ_CHECK(x == 0, "out" + where(i) + " = " + num(x) + " in a row that sees no key (want 0)");
      else if (finite_out)
        FUZZ_CHECK(std::isfinite(x) && std::abs(x) <= out_bound, "out" + where(i) + " = " + num(x) + " (|v| <= " + num(m) + ")");
    });
    if (lse)
      for_each_element(a.lse, [&](const std::int64_t* i, std::int64_t off) {
        const double x = detail::load_double(a.lse.data, a.lse.dtype, off);
        if (!row_visible(i[0], i[2]))
          FUZZ_CHECK(x == -std::numeric_limits<double>::infinity(), "lse" + where(i, 3) + " = " + num(x) + " in a row that sees no key (want -inf)");
        else
          FUZZ_CHECK(std::isfinite(x), "lse" + where(i, 3) + " = " + num(x));
      });
    if (!differential(a.backend, a.q.dtype)) return;
    reference::ForwardResult r;
    const Status s = reference::forward(a, &r);
    FUZZ_CHECK(s.ok(), "the reference refused what the CPU path ran: " + s.to_string());
    const double score_bound = std::abs(scale_) * double(D_) * m * m + m;
    compare(a.out, r.out, nullptr, (4 * eps(a.out.dtype) + 2e-4) * m * keep, "out");
    if (lse) compare(a.lse, r.lse, nullptr, 2e-4 * (1 + score_bound + std::log(double(Mk_) + 1)), "lse");
  }

  void check_backward(const BackwardArgs& a, bool dbias, double m) {
    visibility();
    const double keep = 1.0 / (1.0 - p_), sc = std::abs(scale_);
    const double rows_per_key = double(Mq_) * double(Hk_ ? Hq_ / Hk_ : 1);
    // |dP| <= Dv |dO| |V| / (1 - p); sum_j |dS_ij| <= 2 max |dP| (softmax's Jacobian); then
    // dq = scale dS K, dk = scale dS^T Q, dv = (P Z)^T dO / (1 - p), dbias sums dS.
    const double dp = double(Dv_) * m * m * keep;
    const double bound_dq = 2 * sc * 2 * dp * m * 1.01 + 1e-30;
    const double bound_dk = 2 * sc * 2 * dp * m * rows_per_key * 1.01 + 1e-30;
    const double bound_dv = keep * m * rows_per_key * 1.01 + 1e-30;
    const double bound_dbias = 2 * dp * double(B_) * double(Hq_) * double(Mq_) * double(Mk_) + 1e-30;
    const auto grad = [&](const TensorRef& t, double bound, bool by_row, const char* name) {
      const bool finite = bound < 0.5 * dtype_max(t.dtype);
      for_each_element(t, [&](const std::int64_t* i, std::int64_t off) {
        const double x = detail::load_double(t.data, t.dtype, off);
        const bool live = by_row ? row_visible(i[0], i[1]) : key_seen(i[0], i[1]);
        if (!live)
          FUZZ_CHECK(x == 0, std::string(name) + where(i) + " = " + num(x) + (by_row ? " in a row that sees no key" : " for a key no row sees") + " (want 0)");
        else if (finite)
          FUZZ_CHECK(std::isfinite(x), std::string(name) + where(i) + " = " + num(x) + " (bound " + num(bound) + ")");
      });
    };
    grad(a.dq, bound_dq, true, "dq");
    grad(a.dk, bound_dk, false, "dk");
    grad(a.dv, bound_dv, false, "dv");
    if (dbias && bound_dbias < 0.5 * dtype_max(a.dbias.dtype))
      for_each_element(a.dbias, [&](const std::int64_t* i, std::int64_t off) {
        const double x = detail::load_double(a.dbias.data, a.dbias.dtype, off);
        FUZZ_CHECK(std::isfinite(x), "dbias" + where(i) + " = " + num(x));
      });
    if (!differential(a.backend, a.q.dtype)) return;
    reference::BackwardResult r;
    const Status s = reference::backward(a, &r);
    FUZZ_CHECK(s.ok(), "the reference refused what the CPU path ran: " + s.to_string());
    const double tol = 8 * eps(a.q.dtype) + 1e-3;
    compare(a.dq, r.dq, nullptr, tol * bound_dq, "dq");
    compare(a.dk, r.dk, nullptr, tol * bound_dk, "dk");
    compare(a.dv, r.dv, nullptr, tol * bound_dv, "dv");
    if (dbias) {
      bool reduced[4];
      for (int d = 0; d < 4; ++d) reduced[d] = a.bias.sizes[d] == 1 || a.bias.strides[d] == 0;
      compare(a.dbias, r.dbias, reduced, tol * bound_dbias, "dbias");
    }
  }

 private:
  struct Seq {
    std::int64_t batch, q_begin, q_len, k_begin, k_len;
  };

  static double dtype_max(DType t) { return t == DType::f16 ? 65504.0 : 3.0e38; }
  static double eps(DType t) {
    switch (t) {
      case DType::f16: return 0x1p-11;
      case DType::bf16: return 0x1p-8;
      case DType::f64: return 0x1p-52;
      default: return 0x1p-24;
    }
  }
  static std::string num(double x) {
    char text[32];
    std::snprintf(text, sizeof text, "%.9g", x);
    return text;
  }
  static std::string where(const std::int64_t* i, int rank = 4) {
    std::string s = "[";
    for (int d = 0; d < rank; ++d) s += (d ? "," : "") + std::to_string(i[d]);
    return s + "]";
  }
  // The CPU path (not the reference itself, which a comparison with itself would not test).
  static bool differential(Backend b, DType dtype) {
    return dtype != DType::f64 && (b == Backend::cpu || b == Backend::automatic);
  }

  // Which packed rows see a key and which keys are seen, per batch entry.
  void visibility() {
    row_vis_.assign(std::size_t(B_ * Mq_), false);
    key_seen_.assign(std::size_t(B_ * Mk_), false);
    for (const Seq& s : seqs_) {
      // Row i sees the keys [lo, hi]; the keys seen by some row, counted with a difference array
      // (+1 at lo, -1 past hi), so that this is O(Mq + Mk), not O(Mq Mk).
      std::vector<std::int64_t> starts(std::size_t(s.k_len) + 1, 0);
      const __int128 shift = bottom_right_ ? __int128(s.k_len) - s.q_len : 0;
      for (std::int64_t i = 0; i < s.q_len; ++i) {
        const __int128 diag = i + shift;
        const __int128 lo = left_ == kUnbounded ? 0 : std::max<__int128>(0, diag - left_);
        const __int128 hi = right_ == kUnbounded ? __int128(s.k_len) - 1 : std::min<__int128>(__int128(s.k_len) - 1, diag + right_);
        if (lo > hi) continue;
        row_vis_[std::size_t(s.batch * Mq_ + s.q_begin + i)] = true;
        ++starts[std::size_t(lo)];
        --starts[std::size_t(hi) + 1];
      }
      std::int64_t open = 0;
      for (std::int64_t j = 0; j < s.k_len; ++j)
        if ((open += starts[std::size_t(j)]) > 0) key_seen_[std::size_t(s.batch * Mk_ + s.k_begin + j)] = true;
    }
  }
  bool row_visible(std::int64_t b, std::int64_t i) const { return row_vis_[std::size_t(b * Mq_ + i)]; }
  bool key_seen(std::int64_t b, std::int64_t j) const { return key_seen_[std::size_t(b * Mk_ + j)]; }

  // x (a strided output) against the reference's contiguous result: |x - ref| <= tol, where the
  // reference has a value (NaN marks what it does not define). `reduced`: dimensions the
  // reference gives with size 1 (dbias's broadcast dimensions).
  static void compare(const TensorRef& x, const std::vector<double>& ref, const bool* reduced, double tol,
                      const char* name) {
    TensorRef t = x;
    for (int d = 0; d < t.rank; ++d)  // a dimension of size 0 stays 0 (no element to compare)
      if (reduced && reduced[d] && t.sizes[d] > 0) t.sizes[d] = 1;
    std::size_t e = 0;
    for_each_element(t, [&](const std::int64_t* i, std::int64_t off) {
      FUZZ_CHECK(e < ref.size(), std::string(name) + ": the reference has fewer elements");
      const double want = ref[e++], got = detail::load_double(t.data, t.dtype, off);
      if (std::isnan(want)) return;
      // Plus the dtype's spacing at zero: fp16 flushes values below 2^-24 (small gradients of tiny inputs).
      const double floor = t.dtype == DType::f16 ? 0x1p-24 : 1e-37;
      FUZZ_CHECK(got == want || std::abs(got - want) <= tol + floor,
                 std::string(name) + where(i, t.rank) + " = " + num(got) + ", the reference says " + num(want) +
                     " (tolerance " + num(tol) + ")");
    });
  }

  std::int64_t B_ = 0, Mq_ = 0, Mk_ = 0, Hq_ = 0, Hk_ = 0, D_ = 0, Dv_ = 0;
  std::int64_t left_ = kUnbounded, right_ = kUnbounded;
  bool bottom_right_ = false;
  double p_ = 0, scale_ = 1;
  std::vector<Seq> seqs_;
  std::vector<bool> row_vis_, key_seen_;
};

}  // namespace memattn::fuzz
