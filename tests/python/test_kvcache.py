"""memattn.attention_with_kvcache on CPU tensors: decoding and chunked prefill over contiguous and
paged caches against a float64 reference written here, the cache written in place exactly at the
new keys' positions, paged and contiguous caches holding the same keys giving the same output, bad
indices refused with the cache untouched, and torch.compile tracing the op's in-place update."""
import math

import pytest
import torch

import memattn


def reference(q, keys, values, lengths, causal, window):
    """Attention of q [B, Mq, Hq, D] over each sequence's first lengths[b] keys [B, *, Hk, D], in
    float64, with masks aligned bottom-right. window: (left, right) with None unbounded."""
    b_, mq, hq, d = q.shape
    hk = keys.shape[2]
    out = torch.zeros(b_, mq, hq, values.shape[3], dtype=torch.float64)
    lse = torch.full((b_, hq, mq), -math.inf, dtype=torch.float64)
    left, right = window if window is not None else (None, 0 if causal else None)
    for b in range(b_):
        n = int(lengths[b])
        for h in range(hq):
            k = keys[b, :n, h // (hq // hk)].double()
            v = values[b, :n, h // (hq // hk)].double()
            s = q[b, :, h].double() @ k.T / math.sqrt(d)
            i = torch.arange(mq).unsqueeze(1) + (n - mq)
            j = torch.arange(n).unsqueeze(0)
            visible = torch.ones(mq, n, dtype=torch.bool)
            if left is not None:
                visible &= j >= i - left
            if right is not None:
                visible &= j <= i + right
            s = s.masked_fill(~visible, -math.inf)
            row_lse = torch.logsumexp(s, dim=1)
            p = torch.exp(s - row_lse.unsqueeze(1)).nan_to_num(0.0)
            out[b, :, h] = p @ v
            lse[b, h] = row_lse
    return out, lse


def appended(keys, k_new, held):
    """Each sequence's keys after the append: keys[b, :held[b]] then k_new[b], padded to the longest
    ([B, max, Hk, D]), and their counts."""
    lengths = [h + (0 if k_new is None else k_new.shape[1]) for h in held]
    n = max(lengths)
    rows = []
    for b, h in enumerate(held):
        parts = [keys[b, :h]] + ([] if k_new is None else [k_new[b]])
        rows.append(torch.cat(parts + [keys.new_zeros(n - lengths[b], *keys.shape[2:])]))
    return torch.stack(rows), lengths


def expect_reference(out, q, keys, values, k_new, v_new, held, causal=True, window=None):
    """out within its dtype's tolerance of the float64 reference over the keys after the append."""
    all_keys, lengths = appended(keys, k_new, held)
    all_values, _ = appended(values, v_new, held)
    ref, _ = reference(q, all_keys, all_values, lengths, causal, window)
    err = (out.double() - ref).norm() / ref.norm()
    assert err <= TOLERANCE[out.dtype], err


class Cache:
    """The same logical keys (each sequence's positions [0, capacity)) stored contiguous or paged
    (pages in a shuffled order, two spare pages); slots that hold no key are NaN."""

    def __init__(self, keys, values, held, page_size=None, generator=None):
        self.held = held
        b_, capacity, hk, _ = keys.shape
        self.page_size = page_size
        if page_size is None:
            self.k = torch.full_like(keys, math.nan)
            self.v = torch.full_like(values, math.nan)
            self.block_table = None
            self.slot = lambda b, j: (b, j)
        else:
            per_seq = -(-capacity // page_size)
            order = torch.randperm(b_ * per_seq + 2, generator=generator).to(torch.int32)
            self.block_table = order[: b_ * per_seq].reshape(b_, per_seq).contiguous()
            self.k = torch.full((b_ * per_seq + 2, page_size, hk, keys.shape[3]), math.nan, dtype=keys.dtype)
            self.v = torch.full((b_ * per_seq + 2, page_size, hk, values.shape[3]), math.nan, dtype=values.dtype)
            self.slot = lambda b, j: (int(self.block_table[b, j // page_size]), j % page_size)
        for b in range(b_):
            for j in range(held[b]):
                self.k[self.slot(b, j)] = keys[b, j]
                self.v[self.slot(b, j)] = values[b, j]

    def keys_of(self, tensor, b, n):
        return torch.stack([tensor[self.slot(b, j)] for j in range(n)]) if n else tensor.new_zeros(0, *tensor.shape[2:])


def draw(dtype, b_=3, mq=1, hq=4, hk=2, d=24, dv=16, capacity=40, m_new=0, generator=None):
    g = generator
    q = torch.randn(b_, mq, hq, d, generator=g).to(dtype)
    keys = torch.randn(b_, capacity, hk, d, generator=g).to(dtype)
    values = torch.randn(b_, capacity, hk, dv, generator=g).to(dtype)
    k_new = torch.randn(b_, m_new, hk, d, generator=g).to(dtype) if m_new else None
    v_new = torch.randn(b_, m_new, hk, dv, generator=g).to(dtype) if m_new else None
    return q, keys, values, k_new, v_new


TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 3e-3}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mq,m_new,window", [(1, 0, None), (1, 1, None), (4, 4, None), (2, 3, (5, 0))])
@pytest.mark.parametrize("page_size", [None, 1, 7, 16])
def test_matches_reference_and_appends(dtype, mq, m_new, window, page_size):
    held = [5, 0, 30]
    q, keys, values, k_new, v_new = draw(dtype, mq=mq, m_new=m_new)
    cache = Cache(keys, values, held, page_size)
    k_before, v_before = cache.k.clone(), cache.v.clone()
    seqlens = torch.tensor(held, dtype=torch.int32)
    out, lse = memattn.attention_with_kvcache(q, cache.k, cache.v, k_new, v_new, cache_seqlens=seqlens,
                                              block_table=cache.block_table, window=window, return_lse=True)
    # The cache after the call: as before, with the new keys at positions held[b] onwards.
    for b in range(q.shape[0]):
        for m in range(m_new):
            k_before[cache.slot(b, held[b] + m)] = k_new[b, m]
            v_before[cache.slot(b, held[b] + m)] = v_new[b, m]
    assert torch.equal(cache.k.nan_to_num(7.0), k_before.nan_to_num(7.0))
    assert torch.equal(cache.v.nan_to_num(7.0), v_before.nan_to_num(7.0))
    assert torch.equal(seqlens, torch.tensor(held, dtype=torch.int32))  # not updated
    lengths = [h + m_new for h in held]
    n = max(lengths)
    all_keys = torch.stack([torch.cat([cache.keys_of(cache.k, b, lengths[b]),
                                       cache.k.new_zeros(n - lengths[b], *cache.k.shape[2:])]) for b in range(3)])
    all_values = torch.stack([torch.cat([cache.keys_of(cache.v, b, lengths[b]),
                                         cache.v.new_zeros(n - lengths[b], *cache.v.shape[2:])]) for b in range(3)])
    ref_out, ref_lse = reference(q, all_keys, all_values, lengths, True, window)
    assert torch.isfinite(out).all()
    err = (out.double() - ref_out).norm() / ref_out.norm()
    assert err <= TOLERANCE[dtype], err
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert torch.allclose(lse.double()[finite], ref_lse[finite], rtol=1e-5, atol=1e-5)


def test_paged_equals_contiguous_and_batch_idx():
    held = [9, 17, 2]
    q, keys, values, k_new, v_new = draw(torch.float32, mq=2, m_new=2)
    contiguous = Cache(keys, values, held)
    paged = Cache(keys, values, held, 8)
    seqlens = torch.tensor(held, dtype=torch.int32)
    a = memattn.attention_with_kvcache(q, contiguous.k, contiguous.v, k_new, v_new, cache_seqlens=seqlens)
    b = memattn.attention_with_kvcache(q, paged.k, paged.v, k_new, v_new, cache_seqlens=seqlens,
                                       block_table=paged.block_table)
    assert torch.equal(a, b)
    # The sequences in other rows of a larger cache, through cache_batch_idx.
    rows = torch.tensor([3, 0, 1], dtype=torch.int32)
    k_big = torch.full((4, *contiguous.k.shape[1:]), math.nan)
    v_big = torch.full((4, *contiguous.v.shape[1:]), math.nan)
    for b in range(3):
        k_big[rows[b]], v_big[rows[b]] = keys[b], values[b]
        k_big[rows[b], held[b]:], v_big[rows[b], held[b]:] = math.nan, math.nan
    c = memattn.attention_with_kvcache(q, k_big, v_big, k_new, v_new, cache_seqlens=seqlens, cache_batch_idx=rows)
    assert torch.equal(a, c)
    expect_reference(a, q, keys, values, k_new, v_new, held)
    # Both caches received the new keys at the same positions of their sequences.
    assert torch.equal(k_big[rows.long()].nan_to_num(5.0), contiguous.k.nan_to_num(5.0))
    assert torch.equal(v_big[rows.long()].nan_to_num(5.0), contiguous.v.nan_to_num(5.0))


def test_decoding_loop_grows_the_cache():
    """Greedy-decoding shape: one new key per step, the length advanced by the caller; each step's
    output equals attention over everything appended so far."""
    hk, d = 2, 16
    cache_k = torch.zeros(2, 12, hk, d)
    cache_v = torch.zeros(2, 12, hk, d)
    seqlens = torch.zeros(2, dtype=torch.int32)
    ks, vs = [], []
    for _ in range(6):
        q = torch.randn(2, 1, 4, d)
        k = torch.randn(2, 1, hk, d)
        v = torch.randn(2, 1, hk, d)
        ks.append(k), vs.append(v)
        out = memattn.attention_with_kvcache(q, cache_k, cache_v, k, v, cache_seqlens=seqlens)
        seqlens += 1
        expected = memattn.attention(q, torch.cat(ks, 1), torch.cat(vs, 1))
        assert torch.allclose(out, expected, rtol=1e-6, atol=1e-6)
        expect_reference(out, q, torch.cat(ks, 1), torch.cat(vs, 1), None, None, [len(ks)] * 2)


def refused(match, q, k, v, **kwargs):
    k0, v0 = k.clone(), v.clone()
    with pytest.raises(ValueError, match=match):
        memattn.attention_with_kvcache(q, k, v, **kwargs)
    assert torch.equal(k.nan_to_num(3.0), k0.nan_to_num(3.0)) and torch.equal(v.nan_to_num(3.0), v0.nan_to_num(3.0))


def test_bad_indices_are_refused_with_the_cache_untouched():
    q, keys, values, k_new, v_new = draw(torch.float32, m_new=1)
    paged = Cache(keys, values, [4, 4, 4], 4)
    seqlens = torch.tensor([4, 4, 4], dtype=torch.int32)
    new = dict(k_new=k_new, v_new=v_new)
    table = paged.block_table.clone()
    table[1, 1] = table.shape[0] * table.shape[1] + 5
    refused("kv_cache.block_table", q, paged.k, paged.v, cache_seqlens=seqlens, block_table=table, **new)
    table = paged.block_table.clone()
    table[2, 1] = table[0, 1]  # sequences 0 and 2 would both append to one page
    refused("kv_cache.block_table", q, paged.k, paged.v, cache_seqlens=seqlens, block_table=table, **new)
    refused("kv_cache.seqlens", q, paged.k, paged.v, cache_seqlens=torch.tensor([4, 40, 4], dtype=torch.int32),
            block_table=paged.block_table, **new)
    refused("kv_cache.seqlens", q, paged.k, paged.v, cache_seqlens=torch.tensor([4, 4], dtype=torch.int32),
            block_table=paged.block_table, **new)
    refused("cache_seqlens must be a 1-d int32", q, paged.k, paged.v, cache_seqlens=seqlens.long(),
            block_table=paged.block_table, **new)
    refused("block_table must be a 2-d int32", q, paged.k, paged.v, cache_seqlens=seqlens,
            block_table=paged.block_table.long(), **new)
    refused("kv_cache.v_new", q, paged.k, paged.v, cache_seqlens=seqlens, block_table=paged.block_table, k_new=k_new)
    refused("kv_cache.k_new", q, paged.k, paged.v, cache_seqlens=seqlens, block_table=paged.block_table,
            k_new=k_new.to(torch.bfloat16), v_new=v_new)
    contiguous = Cache(keys, values, [4, 4, 4])
    refused("kv_cache.batch_idx", q, contiguous.k, contiguous.v, cache_seqlens=seqlens,
            cache_batch_idx=torch.tensor([0, 0, 1], dtype=torch.int32), **new)


def test_one_int_length_and_no_mask():
    q, keys, values, _, _ = draw(torch.float32, mq=3)
    cache = Cache(keys, values, [20, 20, 20])
    out = memattn.attention_with_kvcache(q, cache.k, cache.v, cache_seqlens=20, causal=False)
    expected = memattn.attention(q, keys[:, :20], values[:, :20])
    assert torch.allclose(out, expected, rtol=1e-6, atol=1e-6)
    expect_reference(out, q, keys, values, None, None, [20] * 3, causal=False)


def test_max_seqlen_k_bounds_the_keys():
    q, keys, values, k_new, v_new = draw(torch.float32, m_new=1)
    seqlens = torch.tensor([4, 9, 30], dtype=torch.int32)  # 31 keys at most after the append
    cache = Cache(keys, values, [4, 9, 30])
    refused("kv_cache.max_seqlen_k", q, cache.k, cache.v, cache_seqlens=seqlens, k_new=k_new, v_new=v_new,
            max_seqlen_k=30)
    outs = []
    for bound in (None, 31, 40):
        cache = Cache(keys, values, [4, 9, 30])
        outs.append(memattn.attention_with_kvcache(q, cache.k, cache.v, k_new, v_new, cache_seqlens=seqlens,
                                                   max_seqlen_k=bound))
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


def test_compiled_call_updates_the_cache_as_eager_does():
    q, keys, values, k_new, v_new = draw(torch.float32, mq=2, m_new=2)
    eager, compiled_cache = Cache(keys, values, [3, 8, 1], 4), None
    compiled_cache = Cache(keys, values, [3, 8, 1], 4)
    compiled_cache.block_table = eager.block_table
    compiled_cache.k, compiled_cache.v = eager.k.clone(), eager.v.clone()
    seqlens = torch.tensor([3, 8, 1], dtype=torch.int32)

    def step(q, k_cache, v_cache, k_new, v_new, seqlens, table):
        return memattn.attention_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=seqlens,
                                              block_table=table) * 2

    expected = step(q, eager.k, eager.v, k_new, v_new, seqlens, eager.block_table)
    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    got = compiled(q, compiled_cache.k, compiled_cache.v, k_new, v_new, seqlens, compiled_cache.block_table)
    assert torch.equal(got, expected)
    expect_reference(expected / 2, q, keys, values, k_new, v_new, [3, 8, 1])
    assert torch.equal(compiled_cache.k.nan_to_num(1.0), eager.k.nan_to_num(1.0))
    assert torch.equal(compiled_cache.v.nan_to_num(1.0), eager.v.nan_to_num(1.0))


def test_eager_call_marks_the_cache_modified():
    """Eager calls skip the custom op's dispatch; the caches' version counters still move, so
    autograd catches a tensor saved for a backward and then overwritten by the append, as it does
    through the op (taken when an input requires a gradient)."""
    q, keys, values, k_new, v_new = draw(torch.float32, mq=1, m_new=1)
    cache = Cache(keys, values, [3, 5, 0], 4)
    seqlens = torch.tensor([3, 5, 0], dtype=torch.int32)
    before = (cache.k._version, cache.v._version)
    out = memattn.attention_with_kvcache(q, cache.k, cache.v, k_new, v_new, cache_seqlens=seqlens,
                                         block_table=cache.block_table)
    assert cache.k._version > before[0] and cache.v._version > before[1]
    expect_reference(out, q, keys, values, k_new, v_new, [3, 5, 0])

    leaf = cache.k.nan_to_num(0.0).requires_grad_()
    saved = leaf * 1.0
    y = (saved * saved).sum()  # saves `saved` for its backward
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        memattn.attention_with_kvcache(q, saved.detach(), cache.v, k_new, v_new,
                                       cache_seqlens=seqlens, block_table=cache.block_table)
        y.backward()


@pytest.mark.skipif(memattn._ops._autograd is None, reason="memattn._autograd (the C++ eager path) is not built")
def test_eager_cxx_call_equals_the_python_call(monkeypatch):
    """Eager calls go through memattn._autograd's C++ call where the package has it, else through
    the Python binding: the same outputs, LSE and appended caches bit for bit, the same refusals."""
    q, keys, values, k_new, v_new = draw(torch.float32, mq=2, m_new=2)
    held = [9, 17, 2]
    seqlens = torch.tensor(held, dtype=torch.int32)
    results = []
    for path in ("C++", "Python"):
        if path == "Python":
            monkeypatch.setattr(memattn._ops, "_autograd", None)
        cache = Cache(keys, values, held, 8, generator=torch.Generator().manual_seed(1))  # one page order
        out, lse = memattn.attention_with_kvcache(q, cache.k, cache.v, k_new, v_new, cache_seqlens=seqlens,
                                                  block_table=cache.block_table, window=(5, 0), return_lse=True)
        results.append((out, lse, cache.k.nan_to_num(7.0), cache.v.nan_to_num(7.0)))
        bad = torch.tensor([4, 40, 4], dtype=torch.int32)
        refused("kv_cache.seqlens", q, cache.k, cache.v, k_new=k_new, v_new=v_new, cache_seqlens=bad,
                block_table=cache.block_table)
    for a, b in zip(*results):
        assert torch.equal(a, b)
    expect_reference(results[0][0], q, keys, values, k_new, v_new, held, window=(5, 0))


def test_opcheck():
    if not hasattr(torch.library, "opcheck"):
        pytest.skip("torch.library.opcheck is newer than this torch")
    q, keys, values, k_new, v_new = draw(torch.float32, mq=1, m_new=1)
    cache = Cache(keys, values, [3, 5, 0])
    k = cache.k.nan_to_num(0.0)
    v = cache.v.nan_to_num(0.0)
    seqlens = torch.tensor([3, 5, 0], dtype=torch.int32)
    torch.library.opcheck(torch.ops.memattn.attention_kvcache.default,
                          (q, k, v, k_new, v_new, seqlens, None, None, -1, 0, None, 0, -1),
                          test_utils=("test_schema", "test_faketensor"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("page_size", [None, 16, 64, 256])
@pytest.mark.parametrize("mq,m_new", [(1, 1), (5, 5)])
def test_cuda_equals_the_cpu_backend(page_size, mq, m_new):
    """The CUDA backend's paged rows against the CPU backend on the same cache: the output within
    bf16 tolerance, the cache after the append equal."""
    held = [40, 0, 290]
    q, keys, values, k_new, v_new = draw(torch.bfloat16, mq=mq, m_new=m_new, hq=8, hk=2, d=128, dv=128,
                                         capacity=300)
    cache = Cache(keys, values, held, page_size)
    seqlens = torch.tensor(held, dtype=torch.int32)
    table = cache.block_table
    k_gpu, v_gpu = cache.k.cuda(), cache.v.cuda()
    out = memattn.attention_with_kvcache(q.cuda(), k_gpu, v_gpu, k_new.cuda(), v_new.cuda(), cache_seqlens=seqlens.cuda(),
                                         block_table=None if table is None else table.cuda())
    expected = memattn.attention_with_kvcache(q, cache.k, cache.v, k_new, v_new, cache_seqlens=seqlens, block_table=table)
    expect_reference(expected, q, keys, values, k_new, v_new, held)  # the CPU side is right, not merely equal
    err = (out.cpu().float() - expected.float()).norm() / expected.float().norm()
    assert err <= 2e-2, err
    assert torch.equal(k_gpu.cpu().nan_to_num(3.0), cache.k.nan_to_num(3.0))
    assert torch.equal(v_gpu.cpu().nan_to_num(3.0), cache.v.nan_to_num(3.0))
