// The float64 reference (DESIGN.md §1, written as directly as possible).
//
// It shares no code with the kernels: its mask rule and its Philox are written out here again,
// so that a mistake in the kernels' versions shows up as a mismatch. It works one query row (or,
// for dK/dV, one key row) at a time and never forms an Mq x Mk matrix, so it can check long
// sequences; it holds float64 copies of the selected rows of q, k, v and dout.
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

// The rows of one (sequence, head) of a [B, M, H, W] tensor as float64, row-major [rows][W].
// Converting each element once, not at every use, is what makes the reference fast enough to
// check a GPU run in seconds: the loops below read contiguous doubles.
struct Panel {
  std::int64_t width = 0;
  std::vector<double> values;
  const double* row(std::int64_t r) const { return values.data() + r * width; }
};

Panel gather(const TensorRef& t, std::int64_t batch, std::int64_t begin, std::int64_t rows, std::int64_t head,
             std::int64_t width) {
  Panel p;
  p.width = width;
  p.values.resize(std::size_t(rows * width));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t e = 0; e < width; ++e) p.values[std::size_t(r * width + e)] = at4(t, batch, begin + r, head, e);
  return p;
}

// With a KV cache, the keys of sequence b: its cache positions [0, seqlens[b]), then the rows of
// kv_cache.k_new (or v_new: `fresh`), read there, so that the reference writes nothing. Position j
// lives in page block_table[b, j / page_size] at row j % page_size, or in cache row batch_idx[b]
// (default b) at row j.
Panel gather_cached(const TensorRef& cache, const TensorRef& fresh, const KvCache& c, std::int64_t b,
                    std::int64_t keys, std::int64_t head, std::int64_t width) {
  const std::int64_t held = c.seqlens.data[b * c.seqlens.stride];
  const std::int64_t page_size = cache.sizes[1];
  Panel p;
  p.width = width;
  p.values.resize(std::size_t(keys * width));
  for (std::int64_t j = 0; j < keys; ++j) {
    std::int64_t page = b, row = j;
    if (c.block_table.defined()) {
      page = c.block_table.data[b * c.block_table.row_stride + j / page_size];
      row = j % page_size;
    } else if (c.batch_idx.defined()) {
      page = c.batch_idx.data[b * c.batch_idx.stride];
    }
    for (std::int64_t e = 0; e < width; ++e)
      p.values[std::size_t(j * width + e)] = j < held ? at4(cache, page, row, head, e) : at4(fresh, b, j - held, head, e);
  }
  return p;
}

// Four partial sums: independent chains the compiler can keep in flight; the order of a float64
// sum does not matter at the tolerances checked.
double dot(const double* a, const double* b, std::int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  std::int64_t d = 0;
  for (; d + 4 <= n; d += 4) {
    s0 += a[d] * b[d];
    s1 += a[d + 1] * b[d + 1];
    s2 += a[d + 2] * b[d + 2];
    s3 += a[d + 3] * b[d + 3];
  }
  for (; d < n; ++d) s0 += a[d] * b[d];
  return (s0 + s1) + (s2 + s3);
}

// The operands of the selected (sequence, head) pairs: q (and dout) per query head, k and v per
// kv head; indexed by position in the selection.
struct Operands {
  std::int64_t group = 1, heads = 0, kv_heads = 0;  // heads: selected query heads per sequence
  std::vector<Panel> q, k, v, dout;
  const Panel& q_of(std::size_t sb, std::int64_t sh) const { return q[sb * std::size_t(heads) + std::size_t(sh)]; }
  const Panel& dout_of(std::size_t sb, std::int64_t sh) const { return dout[sb * std::size_t(heads) + std::size_t(sh)]; }
  const Panel& k_of(std::size_t sb, std::int64_t sh) const { return k[sb * std::size_t(kv_heads) + std::size_t(sh / group)]; }
  const Panel& v_of(std::size_t sb, std::int64_t sh) const { return v[sb * std::size_t(kv_heads) + std::size_t(sh / group)]; }
};

// heads: the selected query heads, group by group (kv head kv_heads[g] owns heads[g*G .. g*G+G)).
Operands gather_operands(const Problem& pr, const std::vector<std::int64_t>& seqs, const std::vector<std::int64_t>& heads,
                         const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef* dout,
                         const KvCache* cache = nullptr) {
  Operands ops;
  ops.group = pr.group_size();
  ops.heads = std::int64_t(heads.size());
  ops.kv_heads = ops.heads / ops.group;
  ops.q.resize(seqs.size() * heads.size());
  ops.k.resize(seqs.size() * std::size_t(ops.kv_heads));
  ops.v.resize(ops.k.size());
  if (dout) ops.dout.resize(ops.q.size());
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (std::size_t sb = 0; sb < seqs.size(); ++sb) {
    for (std::int64_t sh = 0; sh < ops.heads; ++sh) {
      const Sequence s = pr.sequence(seqs[sb]);
      const std::int64_t h = heads[std::size_t(sh)], hk = h / ops.group;
      const std::size_t at = sb * heads.size() + std::size_t(sh);
      ops.q[at] = gather(q, s.batch, s.q_begin, s.q_len, h, pr.head_dim);
      if (dout) ops.dout[at] = gather(*dout, s.batch, s.q_begin, s.q_len, h, pr.head_dim_v);
      if (sh % ops.group == 0) {
        const std::size_t kv = sb * std::size_t(ops.kv_heads) + std::size_t(sh / ops.group);
        if (cache != nullptr && cache->enabled()) {
          ops.k[kv] = gather_cached(k, cache->k_new, *cache, s.batch, s.k_len, hk, pr.head_dim);
          ops.v[kv] = gather_cached(v, cache->v_new, *cache, s.batch, s.k_len, hk, pr.head_dim_v);
        } else {
          ops.k[kv] = gather(k, s.batch, s.k_begin, s.k_len, hk, pr.head_dim);
          ops.v[kv] = gather(v, s.batch, s.k_begin, s.k_len, hk, pr.head_dim_v);
        }
      }
    }
  }
  return ops;
}

// The dropout multipliers of row i over the keys [first, last] (all 1 without dropout).
void dropout_row(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t first,
                 std::int64_t last, std::vector<double>* z) {
  z->assign(std::size_t(std::max<std::int64_t>(0, last - first + 1)), 1.0);
  if (p.dropout_p == 0.0) return;
  for (std::int64_t j = first; j <= last; ++j) (*z)[std::size_t(j - first)] = dropout_factor(p, b, h, i, j);
}

// Row i's scores and probabilities over the keys [row->first, row->last] it can see.
struct Row {
  std::int64_t first = 0, last = -1;
  std::vector<double> p;  // p[j - first]: softmax probability (before dropout)
  double lse = kNegInf;
};

// The score of (i, j): scale * <q_i, k_j> plus the bias.
double score(const Problem& pr, const double* q_row, const Panel& k, const TensorRef& bias, std::int64_t b,
             std::int64_t h, std::int64_t i, std::int64_t j) {
  double s = pr.scale * dot(q_row, k.row(j), pr.head_dim);
  if (pr.has_bias) s += at4(bias, b, h, i, j);
  return s;
}

void compute_row(const Problem& pr, const double* q_row, const Panel& k, const TensorRef& bias, const Sequence& seq,
                 std::int64_t b, std::int64_t h, std::int64_t i, Row* row) {
  visible_keys(pr, seq, i, &row->first, &row->last);
  const std::int64_t n = std::max<std::int64_t>(0, row->last - row->first + 1);
  row->p.assign(std::size_t(n), 0.0);
  double max = kNegInf;
  for (std::int64_t j = row->first; j <= row->last; ++j) {
    const double s = score(pr, q_row, k, bias, b, h, i, j);
    row->p[std::size_t(j - row->first)] = s;
    if (s > max || std::isnan(s)) max = s;  // a NaN score makes the row NaN, as in math
  }
  row->lse = kNegInf;
  if (max == kNegInf) {  // every key masked (or -inf bias)
    row->p.assign(std::size_t(n), 0.0);
    return;
  }
  double sum = 0;
  for (double s : row->p) sum += std::exp(s - max);
  row->lse = max + std::log(sum);
  for (double& s : row->p) s = std::exp(s - row->lse);
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

// The selected query heads, group by group (kv head hk owns heads hk*G .. hk*G+G-1).
std::vector<std::int64_t> selected_heads(const Problem& pr, const Selection& selection) {
  std::vector<std::int64_t> heads;
  for (std::int64_t hk : select(selection.kv_heads, pr.heads_k))
    for (std::int64_t g = 0; g < pr.group_size(); ++g) heads.push_back(hk * pr.group_size() + g);
  return heads;
}

std::int64_t longest(const Problem& pr, const std::vector<std::int64_t>& seqs, std::int64_t Sequence::*len) {
  std::int64_t n = 0;
  for (std::int64_t b : seqs) n = std::max(n, pr.sequence(b).*len);
  return n;
}

std::int64_t blocks_of(std::int64_t n, std::int64_t block) { return (n + block - 1) / block; }

// Query rows per parallel task, and key rows per task of the backward's dK/dV pass: enough tasks
// for 16 cores from a few (sequence, head) pairs of a few thousand rows.
constexpr std::int64_t kRowBlock = 64;
constexpr std::int64_t kKeyBlock = 16;

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
  const std::vector<std::int64_t> heads = selected_heads(pr, selection);
  const std::int64_t nh = std::int64_t(heads.size());
  const Operands ops = gather_operands(pr, seqs, heads, q, args.k, args.v, nullptr, &args.kv_cache);
  // Rows are independent: blocks of them keep every core busy when a sampled selection has fewer
  // (sequence, head) pairs than there are cores (4 pairs for `memattn run --verify`'s default).
  const std::int64_t blocks = blocks_of(longest(pr, seqs, &Sequence::q_len), kRowBlock);
  const long long total = (long long)(seqs.size() * heads.size()) * blocks;
  long long done = 0;
#pragma omp parallel for collapse(3) schedule(dynamic)
  for (std::size_t sb = 0; sb < seqs.size(); ++sb) {
    for (std::int64_t sh = 0; sh < nh; ++sh) {
      for (std::int64_t blk = 0; blk < blocks; ++blk) {
        const std::int64_t b = seqs[sb], h = heads[std::size_t(sh)];
        const Sequence seq = pr.sequence(b);
        const Panel &qp = ops.q_of(sb, sh), &kp = ops.k_of(sb, sh), &vp = ops.v_of(sb, sh);
        Row row;
        std::vector<double> z, acc(static_cast<std::size_t>(pr.head_dim_v));
        for (std::int64_t i = blk * kRowBlock; i < std::min(seq.q_len, (blk + 1) * kRowBlock); ++i) {
          compute_row(pr, qp.row(i), kp, args.bias, seq, b, h, i, &row);
          dropout_row(pr, b, h, i, row.first, row.last, &z);
          const std::int64_t m = seq.q_begin + i;
          result->lse[std::size_t((seq.batch * pr.heads_q + h) * q.sizes[1] + m)] = row.lse;
          std::fill(acc.begin(), acc.end(), 0.0);
          for (std::int64_t j = row.first; j <= row.last; ++j) {
            const double p = row.p[std::size_t(j - row.first)];
            if (p == 0.0) continue;
            const double w = p * z[std::size_t(j - row.first)];
            const double* vj = vp.row(j);
            for (std::int64_t e = 0; e < pr.head_dim_v; ++e) acc[std::size_t(e)] += w * vj[e];
          }
          for (std::int64_t e = 0; e < pr.head_dim_v; ++e)
            result->out[std::size_t(index4(out_sizes, seq.batch, m, h, e))] = acc[std::size_t(e)];
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

  // Two passes, each split into independent blocks. Pass 1, over blocks of query rows: each row's
  // probabilities, dQ, and the LSE and delta = <dO_i, O_i> = sum_j P dP that pass 2 needs. Pass 2,
  // over blocks of keys of every selected sequence and kv head: dK, dV and dbias of those keys,
  // recomputing P and dP from the LSE and delta. A dbias summed over the keys (size-1 key
  // dimension) would be shared by the key blocks, so that case runs pass 2 serially.
  const std::vector<std::int64_t> heads = selected_heads(pr, selection);
  const std::int64_t nh = std::int64_t(heads.size()), nk = std::int64_t(kv_heads.size());
  const Operands ops = gather_operands(pr, seqs, heads, q, k, v, &dout);
  const std::int64_t longest_q = longest(pr, seqs, &Sequence::q_len);
  const std::int64_t row_blocks = blocks_of(longest_q, kRowBlock);
  const std::int64_t key_blocks = blocks_of(longest(pr, seqs, &Sequence::k_len), kKeyBlock);
  // LSE and delta of row i of selected pair (sb, sh), at (sb * nh + sh) * longest_q + i.
  std::vector<double> row_lse(seqs.size() * std::size_t(nh * longest_q), kNegInf);
  std::vector<double> row_delta(row_lse.size(), 0.0);
  const long long total = (long long)(seqs.size() * heads.size()) * row_blocks + key_blocks;
  long long done = 0;
  auto report = [&] {
    if (progress) {
#pragma omp critical(memattn_reference_progress)
      progress(++done, total);
    }
  };
  auto bias_index = [&](std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
    const std::int64_t idx[4] = {b, h, i, j};
    std::int64_t at[4];
    for (int d = 0; d < 4; ++d) at[d] = pr.bias_broadcast[d] ? 0 : idx[d];
    return std::size_t(index4(db_sizes, at[0], at[1], at[2], at[3]));
  };

#pragma omp parallel for collapse(3) schedule(dynamic)
  for (std::size_t sb = 0; sb < seqs.size(); ++sb) {
    for (std::int64_t sh = 0; sh < nh; ++sh) {
      for (std::int64_t blk = 0; blk < row_blocks; ++blk) {
        const std::int64_t b = seqs[sb], h = heads[std::size_t(sh)];
        const Sequence seq = pr.sequence(b);
        const Panel &qp = ops.q_of(sb, sh), &kp = ops.k_of(sb, sh), &vp = ops.v_of(sb, sh);
        const Panel& dop = ops.dout_of(sb, sh);
        Row row;
        std::vector<double> z, dp, dq(static_cast<std::size_t>(D));
        for (std::int64_t i = blk * kRowBlock; i < std::min(seq.q_len, (blk + 1) * kRowBlock); ++i) {
          compute_row(pr, qp.row(i), kp, args.bias, seq, b, h, i, &row);
          const std::size_t at = (sb * std::size_t(nh) + std::size_t(sh)) * std::size_t(longest_q) + std::size_t(i);
          row_lse[at] = row.lse;
          if (row.lse == kNegInf) continue;  // every key masked: zero gradients
          dropout_row(pr, b, h, i, row.first, row.last, &z);
          // dP[i,j] = Z/(1-p) * <dO_i, V_j>; delta_i = sum_j P dP = <dO_i, O_i>.
          dp.assign(row.p.size(), 0.0);
          double delta = 0;
          for (std::size_t e = 0; e < row.p.size(); ++e) {
            if (row.p[e] == 0.0) continue;
            if (z[e] != 0.0) dp[e] = z[e] * dot(dop.row(i), vp.row(row.first + std::int64_t(e)), Dv);
            delta += row.p[e] * dp[e];
          }
          row_delta[at] = delta;
          std::fill(dq.begin(), dq.end(), 0.0);
          for (std::size_t e = 0; e < row.p.size(); ++e) {
            if (row.p[e] == 0.0) continue;
            const double ds = row.p[e] * (dp[e] - delta);  // dS = P (dP - delta)
            const double* kj = kp.row(row.first + std::int64_t(e));
            for (std::int64_t d = 0; d < D; ++d) dq[std::size_t(d)] += pr.scale * ds * kj[d];
          }
          for (std::int64_t d = 0; d < D; ++d)
            result->dq[index4(q_sizes, seq.batch, seq.q_begin + i, h, d)] = dq[std::size_t(d)];
        }
        report();
      }
    }
  }

  const bool dbias_over_keys = pr.has_bias && pr.bias_broadcast[3];
#pragma omp parallel for schedule(dynamic) if (!dbias_over_keys)
  for (std::int64_t blk = 0; blk < key_blocks; ++blk) {
    std::vector<double> dk(static_cast<std::size_t>(D)), dv(static_cast<std::size_t>(Dv));
    for (std::size_t sb = 0; sb < seqs.size(); ++sb) {
      const std::int64_t b = seqs[sb];
      const Sequence seq = pr.sequence(b);
      for (std::int64_t sk = 0; sk < nk; ++sk) {
        const std::int64_t hk = kv_heads[std::size_t(sk)];
        const Panel &kp = ops.k_of(sb, sk * G), &vp = ops.v_of(sb, sk * G);
        for (std::int64_t j = blk * kKeyBlock; j < std::min(seq.k_len, (blk + 1) * kKeyBlock); ++j) {
          std::fill(dk.begin(), dk.end(), 0.0);
          std::fill(dv.begin(), dv.end(), 0.0);
          for (std::int64_t sh = sk * G; sh < (sk + 1) * G; ++sh) {
            const std::int64_t h = heads[std::size_t(sh)];
            const Panel &qp = ops.q_of(sb, sh), &dop = ops.dout_of(sb, sh);
            for (std::int64_t i = 0; i < seq.q_len; ++i) {
              const std::size_t at = (sb * std::size_t(nh) + std::size_t(sh)) * std::size_t(longest_q) + std::size_t(i);
              std::int64_t first, last;
              visible_keys(pr, seq, i, &first, &last);
              if (j < first || j > last || row_lse[at] == kNegInf) continue;
              const double p = std::exp(score(pr, qp.row(i), kp, args.bias, b, h, i, j) - row_lse[at]);
              if (p == 0.0) continue;
              const double z = dropout_factor(pr, b, h, i, j);
              const double dp = z != 0.0 ? z * dot(dop.row(i), vp.row(j), Dv) : 0.0;
              const double ds = p * (dp - row_delta[at]);
              const double* qi = qp.row(i);
              for (std::int64_t d = 0; d < D; ++d) dk[std::size_t(d)] += pr.scale * ds * qi[d];
              if (z != 0.0) {
                const double* doi = dop.row(i);
                for (std::int64_t e = 0; e < Dv; ++e) dv[std::size_t(e)] += p * z * doi[e];
              }
              if (pr.has_bias) result->dbias[bias_index(b, h, i, j)] += ds;
            }
          }
          for (std::int64_t d = 0; d < D; ++d) result->dk[index4(k_sizes, seq.batch, seq.k_begin + j, hk, d)] = dk[std::size_t(d)];
          for (std::int64_t e = 0; e < Dv; ++e) result->dv[index4(v_sizes, seq.batch, seq.k_begin + j, hk, e)] = dv[std::size_t(e)];
        }
      }
    }
    report();
  }
  // Sums over batch or heads would be partial: with such a selection dbias is not computed.
  const bool dbias_shared = pr.has_bias && (pr.bias_broadcast[0] || pr.bias_broadcast[1]);
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
