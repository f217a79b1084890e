// The float64 reference (DESIGN.md §1, written as directly as possible).
//
// It shares no code with the kernels: its mask rule and its Philox are written out here again,
// so that a mistake in the kernels' versions shows up as a mismatch. It works one query row at a
// time and never forms an Mq x Mk matrix, so it can check long sequences (slowly).
#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <vector>

#include "core/guarded.hpp"
#include "core/numeric.hpp"
#include "core/problem.hpp"
#include "memattn/reference.hpp"

namespace memattn::reference {
namespace {

using detail::Problem;
using detail::Sequence;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Philox4x32-10, written from the paper's description.
void philox(std::uint32_t ctr[4], std::uint32_t key0, std::uint32_t key1) {
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t prod0 = std::uint64_t(0xD2511F53u) * ctr[0];
    const std::uint64_t prod1 = std::uint64_t(0xCD9E8D57u) * ctr[2];
    const std::uint32_t next[4] = {
        std::uint32_t(prod1 >> 32) ^ ctr[1] ^ key0, std::uint32_t(prod1),
        std::uint32_t(prod0 >> 32) ^ ctr[3] ^ key1, std::uint32_t(prod0)};
    for (int w = 0; w < 4; ++w) ctr[w] = next[w];
    key0 += 0x9E3779B9u;
    key1 += 0xBB67AE85u;
  }
}

// The dropout multiplier Z / (1 - p) of element (b, h, i, j), as documented in dropout.hpp.
double dropout_factor(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
  if (p.dropout_p == 0.0) return 1.0;
  std::uint32_t ctr[4] = {std::uint32_t(j / 4), std::uint32_t(i), std::uint32_t(b * p.heads_q + h),
                          std::uint32_t(p.dropout_offset)};
  philox(ctr, std::uint32_t(p.dropout_seed), std::uint32_t(p.dropout_seed >> 32));
  const std::uint32_t threshold = std::uint32_t(
      std::min(std::nearbyint(p.dropout_p * 4294967296.0), 4294967295.0));
  return ctr[j % 4] >= threshold ? 1.0 / (1.0 - p.dropout_p) : 0.0;
}

// DESIGN.md §1 mask rule, for one sequence: the keys row i may see, [first, last] inclusive
// (empty when last < first).
void visible_keys(const Problem& p, const Sequence& s, std::int64_t i, std::int64_t* first, std::int64_t* last) {
  const std::int64_t diagonal = p.bottom_right ? i + (s.k_len - s.q_len) : i;
  *first = p.window_left == kUnbounded ? 0 : std::max<std::int64_t>(0, diagonal - p.window_left);
  *last = p.window_right == kUnbounded ? s.k_len - 1 : std::min<std::int64_t>(s.k_len - 1, diagonal + p.window_right);
}

// Reads element [i0, i1, i2, i3] of a rank-4 tensor (size-1 dimensions broadcast).
double at4(const TensorRef& t, std::int64_t i0, std::int64_t i1, std::int64_t i2, std::int64_t i3) {
  const std::int64_t idx[4] = {i0, i1, i2, i3};
  std::int64_t off = 0;
  for (int d = 0; d < 4; ++d) off += (t.sizes[d] == 1 ? 0 : idx[d]) * t.strides[d];
  return detail::load_double(t.data, t.dtype, off);
}

// Row i's scores and probabilities over the keys [row->first, row->last] it can see.
struct Row {
  std::int64_t first = 0, last = -1;
  std::vector<double> p;  // p[j - first]: softmax probability (before dropout)
  double lse = kNegInf;
  double prob(std::int64_t j) const { return j < first || j > last ? 0.0 : p[std::size_t(j - first)]; }
};

void compute_row(const Problem& pr, const TensorRef& q, const TensorRef& k, const TensorRef& bias,
                 const Sequence& seq, std::int64_t b, std::int64_t h, std::int64_t i, Row* row) {
  const std::int64_t hk = h / pr.group_size();
  visible_keys(pr, seq, i, &row->first, &row->last);
  const std::int64_t n = std::max<std::int64_t>(0, row->last - row->first + 1);
  std::vector<double> s(static_cast<std::size_t>(n));
  double max = kNegInf;
  for (std::int64_t j = row->first; j <= row->last; ++j) {
    double dot = 0;
    for (std::int64_t d = 0; d < pr.head_dim; ++d)
      dot += at4(q, seq.batch, seq.q_begin + i, h, d) * at4(k, seq.batch, seq.k_begin + j, hk, d);
    double score = pr.scale * dot;
    if (pr.has_bias) score += at4(bias, b, h, i, j);
    s[std::size_t(j - row->first)] = score;
    if (score > max || std::isnan(score)) max = score;  // a NaN score makes the row NaN, as in math
  }
  row->p.assign(std::size_t(n), 0.0);
  row->lse = kNegInf;
  if (max == kNegInf) return;  // every key masked (or -inf bias)
  double sum = 0;
  for (double score : s) sum += std::exp(score - max);
  row->lse = max + std::log(sum);
  for (std::int64_t e = 0; e < n; ++e) row->p[std::size_t(e)] = std::exp(s[std::size_t(e)] - row->lse);
}

Status check_selection(const Selection& sel, const Problem& p) {
  for (std::int64_t b : sel.sequences)
    if (b < 0 || b >= p.batch)
      return {StatusCode::invalid_argument, "selection: sequence " + std::to_string(b) + " is out of range"};
  for (std::int64_t h : sel.kv_heads)
    if (h < 0 || h >= p.heads_k)
      return {StatusCode::invalid_argument, "selection: kv head " + std::to_string(h) + " is out of range"};
  return Status::Ok();
}

std::vector<std::int64_t> select(const std::vector<std::int64_t>& chosen, std::int64_t n) {
  if (!chosen.empty()) return chosen;
  std::vector<std::int64_t> all(std::size_t(n), 0);
  for (std::int64_t e = 0; e < n; ++e) all[std::size_t(e)] = e;
  return all;
}

std::int64_t index4(const std::int64_t* sizes, std::int64_t a, std::int64_t b, std::int64_t c,
                    std::int64_t d) {
  return ((a * sizes[1] + b) * sizes[2] + c) * sizes[3] + d;
}

}  // namespace

namespace {

Status run_forward(const ForwardArgs& args, ForwardResult* result, const Progress& progress,
                   const Selection& selection) {
  ForwardArgs host = args;
  host.backend = Backend::reference;
  host.overrides = {};  // the CUDA dispatcher's overrides mean nothing to the reference
  Problem pr;
  if (Status s = detail::build_problem(host, &pr); !s.ok()) return s;
  if (Status s = check_selection(selection, pr); !s.ok()) return s;
  const TensorRef& q = args.q;
  const std::int64_t out_sizes[4] = {q.sizes[0], q.sizes[1], pr.heads_q, pr.head_dim_v};
  // An empty problem (no (query, key) pair): every row sees no key. Return before the loops, whose
  // index lists are as long as the batch and the heads (either may be huge here).
  const bool empty = pr.empty;
  result->out.assign(std::size_t(out_sizes[0] * out_sizes[1] * out_sizes[2] * out_sizes[3]), empty ? 0.0 : kNaN);
  result->lse.assign(std::size_t(q.sizes[0] * pr.heads_q * q.sizes[1]), empty ? kNegInf : kNaN);
  if (empty) return Status::Ok();

  const std::vector<std::int64_t> seqs = select(selection.sequences, pr.batch);
  std::vector<std::int64_t> heads;
  for (std::int64_t hk : select(selection.kv_heads, pr.heads_k))
    for (std::int64_t g = 0; g < pr.group_size(); ++g) heads.push_back(hk * pr.group_size() + g);
  const std::int64_t nh = std::int64_t(heads.size());
  // Rows are independent: blocks of them keep every core busy when a sampled selection has fewer
  // (sequence, head) pairs than there are cores (4 pairs for `memattn run --verify`'s default).
  constexpr std::int64_t kRowBlock = 64;
  std::int64_t longest = 0;
  for (std::int64_t b : seqs) longest = std::max(longest, pr.sequence(b).q_len);
  const std::int64_t blocks = (longest + kRowBlock - 1) / kRowBlock;
  const long long total = (long long)(seqs.size() * heads.size()) * blocks;
  long long done = 0;
#pragma omp parallel for collapse(3) schedule(dynamic)
  for (std::size_t sb = 0; sb < seqs.size(); ++sb) {
    for (std::int64_t sh = 0; sh < nh; ++sh) {
      for (std::int64_t blk = 0; blk < blocks; ++blk) {
        const std::int64_t b = seqs[sb], h = heads[std::size_t(sh)];
        const Sequence seq = pr.sequence(b);
        const std::int64_t hk = h / pr.group_size();
        Row row;
        for (std::int64_t i = blk * kRowBlock; i < std::min(seq.q_len, (blk + 1) * kRowBlock); ++i) {
          compute_row(pr, q, args.k, args.bias, seq, b, h, i, &row);
          const std::int64_t m = seq.q_begin + i;
          result->lse[std::size_t((seq.batch * pr.heads_q + h) * q.sizes[1] + m)] = row.lse;
          for (std::int64_t e = 0; e < pr.head_dim_v; ++e) {
            double acc = 0;
            for (std::int64_t j = row.first; j <= row.last; ++j)
              if (row.prob(j) != 0.0)
                acc += row.prob(j) * dropout_factor(pr, b, h, i, j) * at4(args.v, seq.batch, seq.k_begin + j, hk, e);
            result->out[std::size_t(index4(out_sizes, seq.batch, m, h, e))] = acc;
          }
        }
        if (progress) {
#pragma omp critical(memattn_reference_progress)
          progress(++done, total);
        }
      }
    }
  }
  return Status::Ok();
}

Status run_backward(const BackwardArgs& args, BackwardResult* result, const Progress& progress,
                    const Selection& selection) {
  BackwardArgs host = args;
  host.backend = Backend::reference;
  host.overrides = {};  // the CUDA dispatcher's overrides mean nothing to the reference
  Problem pr;
  if (Status s = detail::build_problem(host, &pr); !s.ok()) return s;
  if (Status s = check_selection(selection, pr); !s.ok()) return s;
  const TensorRef &q = args.q, &k = args.k, &v = args.v, &dout = args.dout;
  const std::int64_t D = pr.head_dim, Dv = pr.head_dim_v, G = pr.group_size();
  const std::int64_t q_sizes[4] = {q.sizes[0], q.sizes[1], pr.heads_q, D};
  const std::int64_t k_sizes[4] = {k.sizes[0], k.sizes[1], pr.heads_k, D};
  const std::int64_t v_sizes[4] = {k.sizes[0], k.sizes[1], pr.heads_k, Dv};
  const bool empty = pr.empty;  // as in forward(): every gradient is 0, no loop runs
  result->dq.assign(std::size_t(q.numel()), empty ? 0.0 : kNaN);
  result->dk.assign(std::size_t(k.numel()), empty ? 0.0 : kNaN);
  result->dv.assign(std::size_t(v.numel()), empty ? 0.0 : kNaN);
  if (empty) {
    result->dbias.clear();
    if (pr.has_bias) {
      std::size_t n = 1;
      for (int d = 0; d < 4; ++d) n *= std::size_t(pr.bias_broadcast[d] ? 1 : args.bias.sizes[d]);
      result->dbias.assign(n, 0.0);
    }
    return Status::Ok();
  }

  const std::vector<std::int64_t> seqs = select(selection.sequences, pr.batch);
  const std::vector<std::int64_t> kv_heads = select(selection.kv_heads, pr.heads_k);
  // Rows that belong to a selected sequence start at zero; rows outside stay NaN (unwritten).
  for (std::int64_t b : seqs) {
    const Sequence seq = pr.sequence(b);
    const std::int64_t k_rows = pr.varlen ? pr.seqstart_k[b + 1] - pr.seqstart_k[b] : seq.k_len;
    for (std::int64_t i = 0; i < seq.q_len; ++i)
      for (std::int64_t hk : kv_heads)
        for (std::int64_t h = hk * G; h < (hk + 1) * G; ++h)
          for (std::int64_t d = 0; d < D; ++d) result->dq[index4(q_sizes, seq.batch, seq.q_begin + i, h, d)] = 0;
    for (std::int64_t j = 0; j < k_rows; ++j)
      for (std::int64_t h : kv_heads) {
        for (std::int64_t d = 0; d < D; ++d) result->dk[index4(k_sizes, seq.batch, seq.k_begin + j, h, d)] = 0;
        for (std::int64_t d = 0; d < Dv; ++d) result->dv[index4(v_sizes, seq.batch, seq.k_begin + j, h, d)] = 0;
      }
  }
  std::int64_t db_sizes[4] = {1, 1, 1, 1};
  if (pr.has_bias) {
    for (int d = 0; d < 4; ++d) db_sizes[d] = pr.bias_broadcast[d] ? 1 : args.bias.sizes[d];
    result->dbias.assign(std::size_t(db_sizes[0] * db_sizes[1] * db_sizes[2] * db_sizes[3]), 0.0);
  } else {
    result->dbias.clear();
  }

  // With a partial selection, dbias slices of unselected (sequence, head) pairs are not computed.
  const bool partial = std::int64_t(seqs.size()) < pr.batch || std::int64_t(kv_heads.size()) < pr.heads_k;
  if (pr.has_bias && partial && !pr.bias_broadcast[0] && !pr.bias_broadcast[1]) {
    std::vector<double> selected(result->dbias.size(), kNaN);
    for (std::int64_t b : seqs)
      for (std::int64_t hk : kv_heads)
        for (std::int64_t h = hk * G; h < (hk + 1) * G; ++h)
          for (std::int64_t i = 0; i < db_sizes[2]; ++i)
            for (std::int64_t j = 0; j < db_sizes[3]; ++j) selected[index4(db_sizes, b, h, i, j)] = 0.0;
    result->dbias.swap(selected);
  }

  // Work is split over (sequence, kv head): dk and dv of one kv head come from its own group of
  // query heads. A dbias summed across batch or heads would be shared, so that case runs serially.
  const bool dbias_shared = pr.has_bias && (pr.bias_broadcast[0] || pr.bias_broadcast[1]);
  const long long total = (long long)(seqs.size() * kv_heads.size());
  const std::int64_t nk = std::int64_t(kv_heads.size());
  long long done = 0;
#pragma omp parallel for collapse(2) schedule(dynamic) if (!dbias_shared)
  for (std::size_t sb = 0; sb < seqs.size(); ++sb) {
    for (std::int64_t sk = 0; sk < nk; ++sk) {
      const std::int64_t b = seqs[sb], hk = kv_heads[std::size_t(sk)];
      const Sequence seq = pr.sequence(b);
      Row row;
      std::vector<double> dp(std::size_t(seq.k_len));
      for (std::int64_t h = hk * G; h < (hk + 1) * G; ++h) {
        for (std::int64_t i = 0; i < seq.q_len; ++i) {
          compute_row(pr, q, k, args.bias, seq, b, h, i, &row);
          if (row.lse == kNegInf) continue;  // every key masked: zero gradients
          const std::int64_t m = seq.q_begin + i;
          // dP[i,j] = Z/(1-p) * <dO_i, V_j>; delta_i = sum_j P dP = <dO_i, O_i>.
          double delta = 0;
          for (std::int64_t j = row.first; j <= row.last; ++j) {
            dp[j] = 0;
            if (row.prob(j) == 0.0) continue;
            const double z = dropout_factor(pr, b, h, i, j);
            double dot = 0;
            if (z != 0.0)
              for (std::int64_t e = 0; e < Dv; ++e)
                dot += at4(dout, seq.batch, m, h, e) * at4(v, seq.batch, seq.k_begin + j, hk, e);
            dp[j] = z * dot;
            delta += row.prob(j) * dp[j];
          }
          for (std::int64_t j = row.first; j <= row.last; ++j) {
            if (row.prob(j) == 0.0) continue;
            const double z = dropout_factor(pr, b, h, i, j);
            const double ds = row.prob(j) * (dp[j] - delta);  // dS = P (dP - delta)
            const std::int64_t n = seq.k_begin + j;
            for (std::int64_t d = 0; d < D; ++d) {
              result->dq[index4(q_sizes, seq.batch, m, h, d)] += pr.scale * ds * at4(k, seq.batch, n, hk, d);
              result->dk[index4(k_sizes, seq.batch, n, hk, d)] += pr.scale * ds * at4(q, seq.batch, m, h, d);
            }
            if (z != 0.0)
              for (std::int64_t e = 0; e < Dv; ++e)
                result->dv[index4(v_sizes, seq.batch, n, hk, e)] += row.prob(j) * z * at4(dout, seq.batch, m, h, e);
            if (pr.has_bias) {
              const std::int64_t idx[4] = {b, h, i, j};
              std::int64_t at[4];
              for (int d = 0; d < 4; ++d) at[d] = pr.bias_broadcast[d] ? 0 : idx[d];
              result->dbias[index4(db_sizes, at[0], at[1], at[2], at[3])] += ds;
            }
          }
        }
      }
      if (progress) {
#pragma omp critical(memattn_reference_progress)
        progress(++done, total);
      }
    }
  }
  if (dbias_shared && partial) result->dbias.assign(result->dbias.size(), kNaN);
  return Status::Ok();
}

}  // namespace

Status forward(const ForwardArgs& args, ForwardResult* result, const Progress& progress,
               const Selection& selection) {
  return detail::guarded("the reference's float64 results", [&] { return run_forward(args, result, progress, selection); });
}

Status backward(const BackwardArgs& args, BackwardResult* result, const Progress& progress,
                const Selection& selection) {
  return detail::guarded("the reference's float64 results", [&] { return run_backward(args, result, progress, selection); });
}

}  // namespace memattn::reference
