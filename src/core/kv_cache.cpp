// Validation of a forward call's KV cache (ForwardArgs::kv_cache): its structure, then its values,
// read on the host, then the writes that its new keys ask for. Nothing is written here; the
// append happens in the backends once the whole call is valid.
#include <algorithm>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/checks.hpp"
#include "core/problem.hpp"

namespace memattn::detail {
namespace {

std::string str(std::int64_t x) { return std::to_string(x); }

// Structure of the block table: [B, max_pages], rows that byte offsets can reach.
Status check_table(const IndexTable& t, std::int64_t batch) {
  if (t.rows != batch)
    return invalid("kv_cache.block_table: has " + str(t.rows) + " rows; it must have B = " + str(batch) +
                   " (one per sequence of q)");
  if (t.cols < 1 && t.rows > 0)
    return invalid("kv_cache.block_table: has " + str(t.cols) + " columns; a paged cache needs >= 1 page per sequence");
  if (t.cols < 0 || t.row_stride < 0)
    return invalid("kv_cache.block_table: negative columns or row stride");
  if (t.rows > 1 && t.row_stride < t.cols)
    return invalid("kv_cache.block_table: row stride " + str(t.row_stride) + " is less than its " + str(t.cols) +
                   " columns (rows would overlap)");
  if (t.data == nullptr && t.rows > 0)
    return invalid("kv_cache.block_table: data pointer is null with " + str(t.rows) + " rows");
  std::int64_t span = 0, last = 0;
  if (t.rows > 0 && (mul_overflows(t.rows - 1, t.row_stride, &span) || __builtin_add_overflow(span, t.cols, &last) ||
                     last > std::numeric_limits<std::int64_t>::max() / 4))
    return invalid("kv_cache.block_table: its size and row stride overflow a 64-bit byte offset");
  return Status::Ok();
}

Status copy_table(const IndexTable& t, Location where, void* stream, std::vector<std::int32_t>* out) {
  out->resize(std::size_t(t.rows * t.cols));
  if (out->empty()) return Status::Ok();
  if (where == Location::device) {
    if (t.rows > 1 && t.row_stride != t.cols)
      return invalid("kv_cache.block_table: row stride " + str(t.row_stride) + " with " + str(t.cols) +
                     " columns; the CUDA backend reads the table contiguous");
    return copy_to_host(out->data(), t.data, out->size() * 4, where, stream);
  }
  for (std::int64_t r = 0; r < t.rows; ++r)
    std::copy(t.data + r * t.row_stride, t.data + r * t.row_stride + t.cols, out->begin() + r * t.cols);
  return Status::Ok();
}

Status check_new_keys(const KvCache& c, const TensorRef& q, const TensorRef& k, const TensorRef& v) {
  if (c.k_new.defined() != c.v_new.defined())
    return invalid(std::string(c.k_new.defined() ? "kv_cache.v_new" : "kv_cache.k_new") +
                   ": is missing; new keys and new values come together (kv_cache.k_new and kv_cache.v_new)");
  if (!c.k_new.defined()) return Status::Ok();
  const char* k_layout = "[B, M_new, Hk, D]";
  const char* v_layout = "[B, M_new, Hk, Dv]";
  if (Status s = check_tensor(c.k_new, "kv_cache.k_new", k_layout, 4); !s.ok()) return s;
  if (Status s = check_tensor(c.v_new, "kv_cache.v_new", v_layout, 4); !s.ok()) return s;
  if (Status s = check_dtype(c.k_new, "kv_cache.k_new", q.dtype); !s.ok()) return s;
  if (Status s = check_dtype(c.v_new, "kv_cache.v_new", q.dtype); !s.ok()) return s;
  const std::int64_t m_new = c.k_new.sizes[1];
  if (Status s = check_sizes(c.k_new, "kv_cache.k_new", k_layout, {q.sizes[0], m_new, k.sizes[2], k.sizes[3]});
      !s.ok())
    return s;
  if (Status s = check_sizes(c.v_new, "kv_cache.v_new", v_layout, {q.sizes[0], m_new, k.sizes[2], v.sizes[3]});
      !s.ok())
    return s;
  // The cache receives them: no two of its elements may share an address.
  if (m_new > 0) {
    if (Status s = check_no_overlap(k, "k"); !s.ok()) return s;
    if (Status s = check_no_overlap(v, "v"); !s.ok()) return s;
  }
  return Status::Ok();
}

// One sequence's entry of the page list: the rows of `page` that it uses (from 0) and those that
// its new keys write, [write_begin, used).
struct PageUse {
  std::int64_t b, column, used, write_begin;
};

// No slot that a new key is written to may be any other position's of the call: another
// sequence's (read or written), or the same sequence's through a page listed twice. Page by page,
// so the cost follows the pages in use, not the keys.
Status check_writes(const CachePages& c, std::int64_t batch, bool paged) {
  std::vector<PageUse> uses;
  std::unordered_map<std::int32_t, std::vector<std::size_t>> written;  // page -> its writers in `uses`
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t keys = c.keys(b), held = c.seqlens[std::size_t(b)];
    for (std::int64_t col = 0; col * c.page_size < keys; ++col) {
      const std::int64_t first = col * c.page_size;
      const PageUse u{b, col, std::min(c.page_size, keys - first), std::max<std::int64_t>(0, held - first)};
      if (u.write_begin < u.used) written[c.pages[std::size_t(b * c.pages_per_seq + col)]].push_back(uses.size());
      uses.push_back(u);
    }
  }
  if (written.empty()) return Status::Ok();
  for (std::size_t r = 0; r < uses.size(); ++r) {
    const PageUse& reader = uses[r];
    const std::int32_t page = c.pages[std::size_t(reader.b * c.pages_per_seq + reader.column)];
    const auto found = written.find(page);
    if (found == written.end()) continue;
    for (std::size_t w : found->second) {
      const PageUse& writer = uses[w];
      if (w == r || writer.write_begin >= reader.used) continue;
      const std::int64_t row = writer.write_begin;
      const std::string field = paged ? "kv_cache.block_table" : "kv_cache.batch_idx";
      const std::string where = paged ? "page " + str(page) + ", row " + str(row) : "cache row " + str(page) + ", position " + str(row);
      return invalid(field + ": sequence " + str(writer.b) + " writes its new key at position " +
                     str(writer.column * c.page_size + row) + " to " + where + ", which sequence " + str(reader.b) +
                     " also uses (position " + str(reader.column * c.page_size + row) +
                     "); a slot written by a call must be no other position's");
    }
  }
  return Status::Ok();
}

}  // namespace

Status check_kv_cache(const KvCache& c, const Options& opt, const TensorRef& q, const TensorRef& k,
                      const TensorRef& v, const TensorRef& bias, Lengths lengths, Problem* p) {
  if (!c.seqlens.defined())
    return invalid("kv_cache.seqlens: is missing; a KV cache call needs the keys each sequence holds");
  if (opt.varlen.enabled())
    return invalid("varlen: variable lengths and a KV cache exclude each other (kv_cache.seqlens gives each "
                   "sequence's keys; q is [B, Mq, Hq, D])");
  if (bias.defined()) return invalid("bias: not taken with a KV cache");
  if (opt.dropout.p != 0.0) return invalid("dropout.p: must be 0 with a KV cache (inference)");
  if (!opt.mask.is_none() && opt.mask.alignment != Alignment::bottom_right)
    return invalid("mask.alignment: with a KV cache the queries are the last positions of each sequence, so the "
                   "mask must be aligned bottom_right");
  const std::int64_t batch = q.sizes[0];
  const bool paged = c.block_table.defined();
  if (Status s = check_index(c.seqlens, "kv_cache.seqlens", batch, "B, one per sequence of q"); !s.ok()) return s;
  const Location where = p->backend == Backend::cuda ? Location::device : Location::host;
  if (Status s = check_readable(c.seqlens, "kv_cache.seqlens", where); !s.ok()) return s;
  if (paged && c.batch_idx.defined())
    return invalid("kv_cache.batch_idx: a paged cache (kv_cache.block_table given) finds each sequence's pages in "
                   "the block table; leave batch_idx empty");
  if (c.batch_idx.defined()) {
    if (Status s = check_index(c.batch_idx, "kv_cache.batch_idx", batch, "B, one per sequence of q"); !s.ok())
      return s;
    if (Status s = check_readable(c.batch_idx, "kv_cache.batch_idx", where); !s.ok()) return s;
  }
  if (paged)
    if (Status s = check_table(c.block_table, batch); !s.ok()) return s;
  if (Status s = check_new_keys(c, q, k, v); !s.ok()) return s;
  if (!paged && !c.batch_idx.defined() && k.sizes[0] != batch)
    return invalid("k: a contiguous cache without kv_cache.batch_idx has one row per sequence: B_cache = " +
                   str(k.sizes[0]) + " must be B = " + str(batch));
  CachePages& cache = p->cache;
  cache.enabled = true;
  cache.new_keys = c.k_new.defined() ? c.k_new.sizes[1] : 0;
  cache.page_size = k.sizes[1];
  cache.pages_per_seq = paged ? c.block_table.cols : 1;
  std::int64_t capacity = 0;  // keys per sequence
  if (mul_overflows(cache.pages_per_seq, cache.page_size, &capacity))
    return invalid("kv_cache.block_table: " + str(cache.pages_per_seq) + " pages of " + str(cache.page_size) +
                   " keys overflow 64 bits");
  const std::string capacity_text =
      paged ? str(cache.pages_per_seq) + " pages of " + str(cache.page_size) + " keys" : "Mk_max = " + str(capacity);
  const std::int64_t bound = c.max_seqlen_k;
  if (bound != kUnknownLength && (bound < cache.new_keys || bound > capacity))
    return invalid("kv_cache.max_seqlen_k: " + str(bound) + " must be kUnknownLength or lie between the " +
                   str(cache.new_keys) + " new keys and the cache's capacity (" + capacity_text + ")");
  if (bound != kUnknownLength && p->backend == Backend::cuda && lengths == Lengths::as_needed) {
    // Varlen::bounded's contract: nothing is read on the host; the kernels clamp (cache_sequence_info,
    // paged_kv.hpp, cuda/kv_cache.cu).
    p->lengths_known = false;
    p->seqlen_k = bound;
    return Status::Ok();
  }
  if (Status s = copy_index(c.seqlens, "kv_cache.seqlens", where, opt.stream, &cache.seqlens); !s.ok()) return s;
  if (paged) {
    if (Status s = copy_table(c.block_table, where, opt.stream, &cache.pages); !s.ok()) return s;
  } else if (c.batch_idx.defined()) {
    if (Status s = copy_index(c.batch_idx, "kv_cache.batch_idx", where, opt.stream, &cache.pages); !s.ok()) return s;
  } else {
    cache.pages.resize(std::size_t(batch));
    for (std::int64_t b = 0; b < batch; ++b) cache.pages[std::size_t(b)] = std::int32_t(b);
  }

  std::int64_t longest = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t held = cache.seqlens[std::size_t(b)];
    if (held < 0) return invalid("kv_cache.seqlens: sequence " + str(b) + " holds " + str(held) + " keys (negative)");
    if (held + cache.new_keys > capacity)
      return invalid("kv_cache.seqlens: sequence " + str(b) + " holds " + str(held) + " keys and " +
                     str(cache.new_keys) + " new ones come (kv_cache.k_new); its cache holds " + capacity_text);
    if (bound != kUnknownLength && held + cache.new_keys > bound)
      return invalid("kv_cache.max_seqlen_k = " + str(bound) + " is less than the " + str(held + cache.new_keys) +
                     " keys of sequence " + str(b) + " after the append");
    longest = std::max(longest, held + cache.new_keys);
    // The pages of the positions in use (a contiguous cache's one row, when it holds a key); the
    // table's later entries are never read.
    const std::int64_t in_use = (held + cache.new_keys + cache.page_size - 1) / std::max<std::int64_t>(cache.page_size, 1);
    for (std::int64_t col = 0; col < in_use; ++col) {
      const std::int64_t page = cache.pages[std::size_t(b * cache.pages_per_seq + col)];
      if (page < 0 || page >= k.sizes[0])
        return invalid(paged ? "kv_cache.block_table: entry [" + str(b) + ", " + str(col) + "] = " + str(page) +
                                   " is not a page of k (num_pages = " + str(k.sizes[0]) + ")"
                             : "kv_cache.batch_idx: sequence " + str(b) + "'s cache row " + str(page) +
                                   " is not a row of k (B_cache = " + str(k.sizes[0]) + ")");
    }
  }
  p->seqlen_k = bound != kUnknownLength ? bound : longest;  // the grid and split choice follow the bound
  return check_writes(cache, batch, paged);
}

}  // namespace memattn::detail
