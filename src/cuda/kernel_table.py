#!/usr/bin/env python3
"""The CUDA kernel table: the single source of truth for which kernels are compiled.

Each row is one instantiation: family, pass, dtype, head-dim bucket, tile (queries x keys),
warps, accumulator placement, loads (which alignment it needs), features (bias, dropout), and a
priority. This script writes one translation unit per row plus kernel_table_generated.cpp (the
table the dispatcher walks, in priority order), and prints the generated file names.

  kernel_table.py --out DIR [--families 80,90] [--dtypes bf16,fp16] [--head-dims 64,128|all]
                  [--set all|reduced] [--filter REGEX] [--list]

--set reduced keeps one row per (family, accumulator, loads) kind so that every kernel family
compiles quickly (CI); --list prints the rows instead of writing files.
"""
import argparse
import os
import re
import sys
from dataclasses import dataclass

# Register-accumulator head-dim buckets of the sm80 family, with their tile (queries, keys, warps):
# for the plain rows, for the rows with bias and dropout code and 16-byte loads, and for those with
# element loads. Feature code costs registers: 32 query rows per warp spill heavily there. At
# D = 128 the featured 64 x 64 4-warp tile ran 8-9% faster than 128 x 64 with 8 warps (bias and
# dropout, H100, 2026-11-22); the element-load row keeps 128 x 64 until verified with that tile.
SM80_REGISTER_TILES = {
    32: ((128, 128, 8), (128, 128, 8), (128, 128, 8)),
    64: ((128, 64, 4), (128, 128, 8), (128, 128, 8)),
    96: ((128, 64, 8), (128, 64, 8), (128, 64, 8)),
    128: ((128, 64, 4), (64, 64, 4), (128, 64, 8)),
    192: ((128, 64, 8), (128, 64, 8), (128, 64, 8)),
    256: ((128, 64, 8), (128, 64, 8), (128, 64, 8)),
}
# Alternative tiles compiled as extra plain rows after the bucket's default (never chosen first;
# MEMATTN_KERNEL=<name> selects one), for measuring a tile before making it the default.
SM80_EXTRA_TILES = {
    64: ((128, 128, 8),),
    128: ((128, 64, 8),),
}
# The same for the rows with bias/dropout code: smaller tiles with fewer registers, so that more
# warps per SM hide the latency of the per-element bias reads.
SM80_FEATURED_EXTRA_TILES = {
    128: ((128, 64, 8),),
    256: ((64, 64, 4),),
}
# Feature code variants, measured on the H100 (2026-11-22, bf16, S = 2048, TFLOP/s):
# - Paired dropout (_dpair): each Philox call serves the lanes that need its words (same masks,
#   checked bit for bit per row). Every featured row with 16-byte loads has it: forward +3% (D = 128)
#   and +8% (D = 64); backward, which called Philox once per element before, +31%.
# - Bias tile (_btile): the bias of a tile by 16-byte cp.async into shared memory instead of one
#   2-byte global load per score (needs a unit-stride, 16-byte aligned bias; the dispatcher passes
#   over these rows otherwise). Forward D = 128 81 -> 120, D = 64 41 -> 63, D = 256 110 -> 154;
#   backward (both kernels read the tile, the dQ kernel writes dbias from it) D = 128 41 -> 61,
#   D = 64 25 -> 38. Every bucket's featured row has a _btile twin in front of it.
# - One feature only (_bias, _drop rows, chosen before the rows with both): less feature code,
#   fewer registers. Forward on the plain rows' tile where that does not spill (at D = 128 the
#   128 x 64 4-warp tile spills 1-2 KB with either feature; there the bias-only row is 64 x 64):
#   dropout D = 64 69 -> 117, D = 256 162 -> 197; bias D = 64 63 -> 87, D = 128 120 -> 133
#   (128 x 64 with 8 warps: 125; at D = 256 no gain, so no row). Backward (dK/dV spills 16-68 B
#   instead of ~500): dropout D = 64 53 -> 59, D = 128 79 -> 91; bias D = 128 59 -> 66, D = 64 +3%.
SM80_BIAS_TILE_BUCKETS = (64, 128, 256)
# Since round 35 (the tile rows without the per-element path, 2026-11-22 (10)) the D = 128 bias
# row fits the plain row's 128 x 64 tile of four 32-row warps without spills (255 registers, two
# CTAs per SM): dense bias S = 2048 273 against 244 for 64 x 64 (three CTAs per SM, 16-row warps
# that load K and V fragments for half as many rows and twice as many K/V tiles per FLOP) and 190
# for 128 x 64 with eight warps; broadcast bias S = 8192 288 vs 251.
SM80_BIAS_ONLY_TILES = {64: ((128, 64, 4),), 128: ((128, 64, 4), (64, 64, 4), (128, 64, 8))}  # first: the default
# CTAs per SM asked of the compiler for a bias-only tile (registers capped so that they fit): the
# D = 128 64 x 64 tile used 174 registers, two CTAs of 4 warps per SM.
SM80_BIAS_ONLY_MIN_CTAS = {(128, (64, 64, 4)): 3}
SM80_DROPOUT_ONLY_BUCKETS = (64, 256)
SM80_BACKWARD_DROPOUT_ONLY_BUCKETS = (64, 128)
SM80_BACKWARD_BIAS_ONLY_BUCKETS = (64, 128)
# Wide-head forward rows (wide_fwd_kernel.hpp): head-dim bucket -> (queries, keys, warps). The
# output stays in registers, split over the warps along the head dim (128 per thread at 64 x 512
# with 8 warps, 232 registers); Q stays in shared memory, so a key tile costs only its K and V
# (~65 FLOP per L2 byte against the global-accumulator rows' ~29). Plain problems only (bias and
# dropout take the gacc rows); 201 KB of shared memory (not on A100: the dispatcher passes over
# it there). H100, bf16, against the gacc row (2026-11-22 (7)): D = 512 S = 4096 130 -> 249
# TFLOP/s, causal 101 -> 234, S = 1024 130 -> 231; D = 384 (padded to 512) 139 -> 147.
SM80_WIDE_TILES = {512: (64, 64, 8)}
# Wide-head forward rows whose head dim is split over a cluster of CTAs (sm_90 family): bucket ->
# (queries, keys, warps, CTAs). Each CTA of a pair runs the 512 layout on its half of D = 1024
# (its half of Q, K, V and of the output); the partial scores meet through distributed shared
# memory (16 KB per 64 x 64 tile), so each CTA's K/V traffic per FLOP is the D = 512 row's.
# D = 768 as two halves of 384: the 1024 row would leave a quarter of each tile's columns zero.
# Against the gacc rows (H100, bf16, TFLOP/s; 2026-11-22 (9), with the st.async exchange):
# D = 1024 S = 4096 130 -> 218, causal 86 -> 216; D = 768 S = 2048 131 -> 188; D = 640 S = 2048
# 125 -> 148 (a sixth of the columns padding).
SM90_WIDE_SPLIT_TILES = {768: (64, 64, 8, 2), 1024: (64, 64, 8, 2)}
# The same wide rows with both GEMMs on sm_90a's wgmma (sm90/wide_gemms.hpp): bucket -> (queries,
# keys, warps, CTAs). Each warpgroup takes half of S's keys and half of O's head dim and the tensor
# cores read Q, K, P and V from shared memory, where mma.sync's warps copy them into registers
# first (S's 16 x 32 warp tiles read ~11 FLOP per shared-memory byte). Chosen before the mma.sync
# rows on sm_90. H100, bf16, CLI fwd_ms against the mma.sync rows (2026-11-23 (20)): D = 512
# S = 4096 2.20 -> 1.55 ms (1.42x), causal 1.43x; D = 1024 1.41-1.44x, causal 1.39-1.43x; D = 768
# S = 2048 1.37-1.40x; partly filled buckets (D = 448, 640, 896) 1.31-1.42x.
SM90_WIDE_WGMMA_TILES = {512: (64, 64, 8, 1), 768: (64, 64, 8, 2), 1024: (64, 64, 8, 2)}
# Global-accumulator rows (head dims beyond 256): tile and pipeline depth. The output accumulator
# crosses L2 once per key tile, so its traffic per FLOP falls with the keys per tile: 128 keys ran
# 1.65x faster than 64 at D = 512/1024 (H200, 2026-11-22); 128 queries gained nothing.
SM80_GLOBAL_TILE = (64, 128, 4, 3)  # queries, keys, warps, stages
# Alternative global-accumulator tiles (queries, keys, warps), compiled like SM80_EXTRA_TILES.
SM80_GLOBAL_EXTRA_TILES = ((64, 64, 4), (128, 128, 8))
GLOBAL_HEAD_DIM = 65536
# fp32 (FFMA) rows: head-dim bucket -> value chunks of 64 held in registers (0: global workspace).
FP32_BUCKETS = {64: 1, 128: 2, 256: 4, GLOBAL_HEAD_DIM: 0}
FP32_TILE = (64, 64, 8)
ELEMENT_TYPES = {"bf16": "cute::bfloat16_t", "fp16": "cute::half_t"}
# Backward rows (sm80, bf16/fp16, register accumulators): head-dim buckets and the tile of both
# kernels (queries x keys per step, warps). Every warp holds 16 full-width rows of dK and dV, so
# buckets above 128 do not fit in registers with this design.
SM80_BACKWARD_BUCKETS = (32, 64, 96, 128)
SM80_BACKWARD_TILE = (64, 64, 4)
# Plain backward rows whose tile differs from SM80_BACKWARD_TILE (queries per step, keys per CTA,
# dK/dV warps): at D = 64, warps of 32 keys halve the dK/dV kernel's shared-memory reads of Q and
# dO per FLOP (its limit: 73% of the pipe, ncu 2026-11-22 (5)); 32-query steps keep it in
# registers (255, no spills), and CTAs of 2 warps let 4 share an SM. Measured (H100, bf16):
# 64 x 64 w4 -> 32 x 64 w2 at S = 2048 160 -> 169, causal 141 -> 148, S = 8192 182 -> 186,
# causal 170 -> 174 TFLOP/s; 32 x 128 w4 (2 CTAs of 4 warps) lost 5-10%.
SM80_BACKWARD_PLAIN_TILES = {64: (32, 64, 2)}
# Alternative plain tiles compiled for A/Bs (MEMATTN_KERNEL), like SM80_EXTRA_TILES.
SM80_BACKWARD_EXTRA_TILES = {64: ((64, 64, 4),)}
# The dK/dV kernel gives each of its warps 16 keys; the dQ kernel gives each warp 16 queries (its
# warps: queries / 16). Larger tiles ran slower (H100, 2026-11-22, bf16 S = 2048/8192): D = 64
# 128 x 128 with 8 warps 97 -> 87 TFLOP/s, D = 128 64 x 128 with 8 warps 145 -> 129 (both 255
# registers, so one CTA per SM instead of two of 4 warps).
# Buckets with one-kernel rows: the dK/dV kernel adds dQ with fp32 atomics (no dQ kernel, not
# deterministic). Verified, but 0.72-0.89x the two-kernel rows (H200, 2026-11-22): experimental,
# compiled for A/Bs only.
SM80_BACKWARD_ATOMIC_BUCKETS = (64, 128)
# One-pass rows (one_pass_bwd_kernel.hpp): queries per step x keys per CTA, warps; each GEMM with
# its own warp grid and P/dS through shared memory, dQ by fp32 atomics (FlashAttention-2's
# layout). With dQ atomics straight from the fragments they ran at 0.75-0.9x the two-kernel rows
# (H100, 2026-11-22 (5)); 4 warps x 64 keys (two CTAs per SM) lower still. Buckets: multiples
# of 64 (the warp grids need it).
# At D = 256 a CTA owns 64 keys (dK and dV then take 128 registers per thread, as at D = 128 with
# 128 keys) and computes dQ in two column chunks. Once dQ went to the workspace through shared
# memory, one 128-byte row segment per atomic instruction (the fragment atomics had held L2 at
# 83%), the one-pass rows became the default for plain problems at D = 64..256 (at D <= 128 for
# long sequences only, below) (H100, 2026-11-22 (6), bf16, TFLOP/s): D = 256 S = 2048 / 8192
# 179 / 207 (gacc 54-55), causal 143 / 202; D = 128 214 / 262 (two-kernel rows 193 / 213), causal
# S = 8192 234 (200). `deterministic` and dropout keep the two-kernel (D <= 128) and gacc rows.
# At D = 64, 4 warps x 64 keys (two CTAs per SM) ran 5% faster than 8 x 128 (S = 8192 211 vs
# 201, S = 16384 220 vs 210); at D = 128 the 4-warp tile lost 20-25%. Then 128 queries per step
# with 128 keys and 8 warps beat 4 x 64 by 5-8% (S = 2048 196 vs 186, S = 8192 239 vs 220,
# causal 218 vs 203; H100, 2026-11-22 (7)): half the steps, barriers and dQ flushes per FLOP.
# At D = 512 a CTA owns 32 keys (dK and dV again 128 registers per thread) and steps through 32
# queries; S and dP split four ways along the head dim (OnePassBwdTraits::kSdpSlices), dQ goes in
# four 128-column chunks, 199 KB of shared memory. Against the gacc rows (H100, 2026-11-22 (8),
# bf16, TFLOP/s): D = 512 S = 4096 50 -> 140, causal 40 -> 134; D = 384 (padded to 512) 50 -> 103:
# the default for plain problems at D = 257..512.
SM80_BACKWARD_FUSED_TILES = {64: (128, 128, 8), 128: (64, 128, 8), 256: (64, 64, 8), 512: (32, 32, 8)}
SM80_BACKWARD_FUSED_EXTRA_TILES = {64: ((64, 64, 4), (64, 128, 8)), 128: ((64, 64, 4),), 256: (), 512: ()}
# Extra tiles the dispatcher may choose, behind the default: for GPUs with less shared memory per
# CTA than the default needs (D = 64 128 x 128: 166 KB; A100 allows 163 KB).
SM80_BACKWARD_FUSED_FALLBACK_TILES = {64: (64, 64, 4)}
# The bias-tile rows' tiles (the bias tile of 128 x 128 would not fit next to the rest).
SM80_BACKWARD_FUSED_BIAS_TILES = {64: (64, 64, 4), 128: (64, 128, 8)}
SM80_BACKWARD_FUSED_DEFAULT_BUCKETS = (64, 128, 256, 512)
# With one 8-warp CTA per SM, nothing overlaps a CTA's prologue (K, V) and epilogue (dK, dV), so
# at D <= 128 the one-pass rows win only over long query loops: measured (bf16, TFLOP/s, one-pass
# vs two-kernel) D = 128 S = 512 140 vs 158, causal 84 vs 111, S = 2048 causal 150 vs 168,
# S = 2048 214 vs 193, S = 16384 269 vs 212; D = 64 S = 512 106 vs 132, S = 2048 causal 134 vs
# 149, S = 2048 170 vs 170, S = 8192 203 vs 188. The crossover, in queries seen per key (S, or
# about S / 2 when causal): 2048. At D = 256 the alternative (gacc) is 2-4x slower everywhere.
# With D = 64's 128 x 128 tile (one-pass vs two-kernel, H100, 2026-11-22 (7)): S = 512 118-124 vs
# 128, S = 1024 146-148 vs 135-145, S = 2048 causal 151-155 vs 144: crossover 1024. D = 128 after
# the scale moved into the exp2 FFMA: S = 1024 176 vs 180, S = 2048 causal 162 vs 180: still 2048.
# After 2026-11-22 (12-13) (the step cursor, dQ's atomics during the next step's MMAs; `memattn
# run`, H100): D = 128 S = 2048 causal 222 vs 191, S = 1024 241 vs 195, S = 1024 causal (about 512
# queries per key) 177 vs 167; D = 64 S = 1024 causal 147 vs 123, S = 512 162 vs 132: 512 for
# both, the shortest loops measured (below it, untried). The bias-tile rows keep the earlier
# thresholds (not measured again).
SM80_BACKWARD_FUSED_MIN_QUERIES_PER_KEY = {64: 512, 128: 512, 256: 0, 512: 0}
SM80_BACKWARD_FUSED_BIAS_MIN_QUERIES_PER_KEY = {64: 1024, 128: 2048}
# One-pass rows with the head dim split over a cluster of CTAs (sm_90 family): bucket -> (queries,
# keys, warps, CTAs). Every CTA runs the D = 256 row's 64 x 64 steps on its share of the head dim
# (its share of K, V, Q, dO and of dK, dV, dQ) instead of the single CTA's 32 x 32 steps at
# D = 512; S and dP are summed over the cluster through distributed shared memory, by st.async
# into slots in the dQ stage: a pair adds the other CTA's whole partials (32 KB per step), four
# CTAs reduce-scatter then all-gather (2 x 24 KB). H100, bf16, TFLOP/s (2026-11-22 (10)):
# D = 512 pair vs single CTA: S = 4096 176 vs 143, causal 164 vs 136, D = 384 S = 2048 131 vs
# 103, S = 1024 143 vs 119. D = 1024 four vs the earlier pair of D = 512 layouts (32 x 32 steps):
# S = 4096 146 vs 131, causal 138 vs 127; D = 896 S = 2048 120 vs 111; D = 640 90 vs 84 (the
# earlier pair was itself 2.6x the gacc row: 132 vs 51).
SM90_BACKWARD_FUSED_SPLIT_TILES = {512: (64, 64, 8, 2), 1024: (64, 64, 8, 4)}
# One-pass rows with all five GEMMs on sm_90a's wgmma (sm90/one_pass_gemms.hpp): bucket ->
# (queries, keys, warps). The two warpgroups split each GEMM's N mode and the tensor cores read
# every operand from shared memory (no ldmatrix, no operand registers). H100, bf16, CLI bwd_ms
# against the mma.sync row (2026-11-23 (20)): S = 512 1.10x, causal 1.05x; S = 2048 1.14-1.16x;
# S = 8192 1.19x. Chosen before the mma.sync row on sm_90 (the table's math rank).
SM90_BACKWARD_FUSED_WGMMA_TILES = {256: (64, 64, 8)}
# One-pass rows with a bias tile (the step's bias by cp.async with Q and dO; dS back through the
# same tile for 16-byte dbias stores): SM80_BACKWARD_FUSED_BIAS_TILES. At D = 256 the tile does
# not fit next to the rest.
# fp32 backward rows (any head dim): FFMA on 64 x 64 tiles with the gradients accumulated in a
# global fp32 workspace. (The kernel takes bf16/fp16 too; the tensor-core rows below replaced it.)
SM80_BACKWARD_GLOBAL_TILE = (64, 64, 8)
# Tensor-core backward rows for any head dim (bf16/fp16): 64 x 64 tiles, head dims in chunks of 64
# through a pipeline of this many stages, dK/dV/dQ chunks in a per-CTA fp32 workspace slot. They
# come before the FFMA rows (7-8x faster at D = 256..1024, H200, 2026-11-22).
SM80_BACKWARD_GACC_TILE = (64, 64, 4, 3)  # queries, keys, warps, stages
# Larger square gacc tiles (queries = keys, warps): verified, but D = 256 53 -> 28, 512 50 -> 41,
# 1024 51 -> 57 TFLOP/s (H100, 2026-11-22; 204 B of spills in the dQ kernel): experimental.
SM80_BACKWARD_GACC_EXTRA_TILES = ((128, 128, 8),)
CPP_DTYPE = {"bf16": "DType::bf16", "fp16": "DType::f16", "fp32": "DType::f32"}
# Within a bucket: wgmma rows (sm_90a) before mma.sync rows before CUDA-core rows.
MATH_RANK = {"wgmma": 0, "mma": 1, "ffma": 2}


@dataclass(frozen=True)
class Row:
    family: int  # 80 or 90
    pass_: str  # "fwd" or "bwd"
    dtype: str
    head_dim: int  # bucket: D and Dv up to this
    block_m: int
    block_n: int
    warps: int
    accumulator: str  # "registers" or "global"
    loads: str  # "vector16" (needs 8-element alignment) or "element" (any)
    bias: bool
    dropout: bool
    variant: int = 0  # 0: the bucket's default tile; 1, 2, ...: SM80_EXTRA_TILES
    math: str = "mma"  # "mma" (tensor cores, mma.sync), "wgmma" (sm_90a's warpgroup MMA) or "ffma" (CUDA cores)
    experimental: bool = False  # not yet verified on a GPU: chosen only when forced (MEMATTN_KERNEL)
    atomics: bool = False  # backward: dQ added with fp32 atomics by the dK/dV kernel (not deterministic)
    bias_tile: bool = False  # bias through a shared-memory tile (needs an aligned, unit-stride bias)
    dropout_paired: bool = False  # each dropout Philox call serves the lanes that need its words
    fused: bool = False  # backward in one pass (one_pass_bwd_kernel.hpp); dQ by atomics
    min_queries_per_key: int = 0  # chosen only when a key sees this many queries on average
    min_ctas: int = 1  # forward register rows: CTAs per SM the compiler must leave registers for
    wide: bool = False  # forward with the output split over the warps along the head dim (wide_fwd_kernel.hpp)
    head_split: int = 1  # wide and one-pass rows: CTAs of a cluster that share the head dim (sm_90)

    @property
    def features(self):
        return {(False, False): "plain", (True, False): "bias", (False, True): "drop"}.get((self.bias, self.dropout), "full")

    @property
    def name(self):
        loads = "vec" if self.loads == "vector16" else "elem"
        acc = "" if self.accumulator == "registers" else "_gacc"
        math = "" if self.math == "mma" else f"_{self.math}"
        split = f"x{self.head_split}" if self.head_split > 1 else ""
        atomics = f"_fused{split}" if self.fused else "_atomic" if self.atomics else ""
        bias_tile = "_btile" if self.bias_tile else ""
        paired = "_dpair" if self.dropout_paired else ""
        wide = f"_wide{split}" if self.wide else ""
        return (f"{self.pass_}_sm{self.family}_{self.dtype}_d{self.head_dim}_m{self.block_m}n{self.block_n}"
                f"w{self.warps}{acc}{math}{wide}{atomics}{bias_tile}{paired}_{loads}_{self.features}")

    def sort_key(self):
        # Register rows first, the smallest bucket that fits, the newer family; aligned loads before element
        # loads; tensor cores before CUDA cores; the least feature code that covers the problem
        # (none, one feature, both); the one-pass backward first (the dispatcher passes over it
        # when `deterministic`; experimental for now); a bias tile before per-element bias reads
        # (the dispatcher passes over it when the bias cannot be tiled).
        feature_rank = {"plain": 0, "bias": 1, "drop": 1, "full": 2}[self.features]
        return (self.experimental, self.accumulator != "registers", self.head_dim, -self.family,
                self.loads != "vector16", MATH_RANK[self.math], feature_rank, not self.fused, self.atomics,
                not self.bias_tile,
                self.variant)


def all_rows():
    rows = []
    for dtype in ("bf16", "fp16"):
        for head_dim, tiles in SM80_REGISTER_TILES.items():
            (pm, pn, pw), (fm, fn, fw), (em, en, ew) = tiles
            rows.append(Row(80, "fwd", dtype, head_dim, pm, pn, pw, "registers", "vector16", False, False))
            rows.append(Row(80, "fwd", dtype, head_dim, fm, fn, fw, "registers", "vector16", True, True,
                            dropout_paired=True))
            rows.append(Row(80, "fwd", dtype, head_dim, em, en, ew, "registers", "element", True, True))
            for variant, (xm, xn, xw) in enumerate(SM80_EXTRA_TILES.get(head_dim, ()), start=1):
                rows.append(Row(80, "fwd", dtype, head_dim, xm, xn, xw, "registers", "vector16", False, False, variant))
            for variant, (xm, xn, xw) in enumerate(SM80_FEATURED_EXTRA_TILES.get(head_dim, ()), start=1):
                rows.append(Row(80, "fwd", dtype, head_dim, xm, xn, xw, "registers", "vector16", True, True, variant,
                                dropout_paired=True))
            if head_dim in SM80_BIAS_TILE_BUCKETS:
                rows.append(Row(80, "fwd", dtype, head_dim, fm, fn, fw, "registers", "vector16", True, True,
                                bias_tile=True, dropout_paired=True))
            for variant, (bm, bn, warps) in enumerate(SM80_BIAS_ONLY_TILES.get(head_dim, ())):
                rows.append(Row(80, "fwd", dtype, head_dim, bm, bn, warps, "registers", "vector16", True, False,
                                variant, bias_tile=True,
                                min_ctas=SM80_BIAS_ONLY_MIN_CTAS.get((head_dim, (bm, bn, warps)), 1)))
            if head_dim in SM80_DROPOUT_ONLY_BUCKETS:
                rows.append(Row(80, "fwd", dtype, head_dim, pm, pn, pw, "registers", "vector16", False, True,
                                dropout_paired=True))
        for head_dim, (bm, bn, warps) in SM80_WIDE_TILES.items():
            rows.append(Row(80, "fwd", dtype, head_dim, bm, bn, warps, "registers", "vector16", False, False,
                            wide=True))
        for head_dim, (bm, bn, warps, ctas) in SM90_WIDE_SPLIT_TILES.items():
            rows.append(Row(90, "fwd", dtype, head_dim, bm, bn, warps, "registers", "vector16", False, False,
                            wide=True, head_split=ctas))
        for head_dim, (bm, bn, warps, ctas) in SM90_WIDE_WGMMA_TILES.items():
            rows.append(Row(90, "fwd", dtype, head_dim, bm, bn, warps, "registers", "vector16", False, False,
                            math="wgmma", wide=True, head_split=ctas))
        bm, bn, warps, _ = SM80_GLOBAL_TILE
        for loads in ("vector16", "element"):
            rows.append(Row(80, "fwd", dtype, GLOBAL_HEAD_DIM, bm, bn, warps, "global", loads, True, True))
        for variant, (xm, xn, xw) in enumerate(SM80_GLOBAL_EXTRA_TILES, start=1):
            rows.append(Row(80, "fwd", dtype, GLOBAL_HEAD_DIM, xm, xn, xw, "global", "vector16", True, True, variant))
    bm, bn, warps = FP32_TILE
    for head_dim, chunks in FP32_BUCKETS.items():
        acc = "registers" if chunks else "global"
        rows.append(Row(80, "fwd", "fp32", head_dim, bm, bn, warps, acc, "element", True, True, math="ffma"))
    return rows


def backward_rows():
    rows = []
    bm, bn, warps = SM80_BACKWARD_TILE
    for dtype in ("bf16", "fp16"):
        for head_dim in SM80_BACKWARD_BUCKETS:
            pm, pn, pw = SM80_BACKWARD_PLAIN_TILES.get(head_dim, SM80_BACKWARD_TILE)
            rows.append(Row(80, "bwd", dtype, head_dim, pm, pn, pw, "registers", "vector16", False, False))
            for variant, (xm, xn, xw) in enumerate(SM80_BACKWARD_EXTRA_TILES.get(head_dim, ()), start=1):
                rows.append(Row(80, "bwd", dtype, head_dim, xm, xn, xw, "registers", "vector16", False, False, variant))
            for bias_tile in (True, False):
                rows.append(Row(80, "bwd", dtype, head_dim, bm, bn, warps, "registers", "vector16", True, True,
                                bias_tile=bias_tile, dropout_paired=True))
            rows.append(Row(80, "bwd", dtype, head_dim, bm, bn, warps, "registers", "element", True, True))
            if head_dim in SM80_BACKWARD_BIAS_ONLY_BUCKETS:
                rows.append(Row(80, "bwd", dtype, head_dim, bm, bn, warps, "registers", "vector16", True, False,
                                bias_tile=True))
            if head_dim in SM80_BACKWARD_DROPOUT_ONLY_BUCKETS:
                rows.append(Row(80, "bwd", dtype, head_dim, bm, bn, warps, "registers", "vector16", False, True,
                                dropout_paired=True))
    bm, bn, warps = SM80_BACKWARD_GLOBAL_TILE
    rows.append(Row(80, "bwd", "fp32", GLOBAL_HEAD_DIM, bm, bn, warps, "global", "element", True, True, math="ffma"))
    # One-kernel rows (dQ by atomics), experimental: the buckets the suite measures.
    bm, bn, warps = SM80_BACKWARD_TILE
    for dtype in ("bf16", "fp16"):
        for head_dim in SM80_BACKWARD_ATOMIC_BUCKETS:
            for features in ("plain", "full"):
                full = features == "full"
                rows.append(Row(80, "bwd", dtype, head_dim, bm, bn, warps, "registers", "vector16", full, full,
                                atomics=True, experimental=True))
    for dtype in ("bf16", "fp16"):
        for head_dim, (bm, bn, warps) in SM80_BACKWARD_FUSED_TILES.items():
            rows.append(Row(80, "bwd", dtype, head_dim, bm, bn, warps, "registers", "vector16", False, False,
                            atomics=True, fused=True,
                            experimental=head_dim not in SM80_BACKWARD_FUSED_DEFAULT_BUCKETS,
                            min_queries_per_key=SM80_BACKWARD_FUSED_MIN_QUERIES_PER_KEY[head_dim]))
            if head_dim in SM80_BACKWARD_FUSED_BIAS_TILES:
                tm, tn, tw = SM80_BACKWARD_FUSED_BIAS_TILES[head_dim]
                rows.append(Row(80, "bwd", dtype, head_dim, tm, tn, tw, "registers", "vector16", True, False,
                                atomics=True, fused=True, bias_tile=True,
                                min_queries_per_key=SM80_BACKWARD_FUSED_BIAS_MIN_QUERIES_PER_KEY[head_dim]))
            for variant, tile in enumerate(SM80_BACKWARD_FUSED_EXTRA_TILES[head_dim], start=1):
                fallback = tile == SM80_BACKWARD_FUSED_FALLBACK_TILES.get(head_dim)
                rows.append(Row(80, "bwd", dtype, head_dim, *tile, "registers", "vector16", False, False,
                                variant, atomics=True, fused=True, experimental=not fallback,
                                min_queries_per_key=SM80_BACKWARD_FUSED_MIN_QUERIES_PER_KEY[head_dim] if fallback else 0))
    for dtype in ("bf16", "fp16"):
        for head_dim, (bm, bn, warps, ctas) in SM90_BACKWARD_FUSED_SPLIT_TILES.items():
            rows.append(Row(90, "bwd", dtype, head_dim, bm, bn, warps, "registers", "vector16", False, False,
                            atomics=True, fused=True, head_split=ctas))
        for head_dim, (bm, bn, warps) in SM90_BACKWARD_FUSED_WGMMA_TILES.items():
            rows.append(Row(90, "bwd", dtype, head_dim, bm, bn, warps, "registers", "vector16", False, False,
                            math="wgmma", atomics=True, fused=True,
                            min_queries_per_key=SM80_BACKWARD_FUSED_MIN_QUERIES_PER_KEY[head_dim]))
    bm, bn, warps, _ = SM80_BACKWARD_GACC_TILE
    for dtype in ("bf16", "fp16"):
        for loads in ("vector16", "element"):
            rows.append(Row(80, "bwd", dtype, GLOBAL_HEAD_DIM, bm, bn, warps, "global", loads, True, True))
        for variant, (xm, xn, xw) in enumerate(SM80_BACKWARD_GACC_EXTRA_TILES, start=1):
            rows.append(Row(80, "bwd", dtype, GLOBAL_HEAD_DIM, xm, xn, xw, "global", "vector16", True, True, variant,
                            experimental=True))
    return rows


def row_kind(r):
    """What makes a row a different kernel (not just another size of one): what `reduced` keeps one of."""
    return (r.family, r.pass_, r.dtype == "fp32", r.accumulator, r.math, r.atomics, r.fused, r.bias_tile,
            r.dropout_paired, r.wide, r.head_split, r.loads, r.features)


def reduced(rows):
    """One row per kernel kind (row_kind), smallest head dim first."""
    seen, out = set(), []
    for r in sorted(rows, key=lambda r: (r.head_dim, r.dtype)):
        kind = row_kind(r)
        if kind not in seen and r.variant == 0:
            seen.add(kind)
            out.append(r)
    return out


def template_args(r):
    loads = "Loads::vector16" if r.loads == "vector16" else "Loads::element"
    features = " | ".join([f for f, on in (("kBias", r.bias), ("kDropout", r.dropout),
                                          ("kBiasTile", r.bias_tile),
                                          ("kDropoutPaired", r.dropout_paired)) if on]) or "kPlain"
    if r.pass_ == "bwd" and r.accumulator == "global" and r.math == "ffma":
        element = "float" if r.dtype == "fp32" else ELEMENT_TYPES[r.dtype]
        return f"sm80::SimtBwdTraits<{element}>, {features}"
    if r.pass_ == "bwd" and r.fused:
        math = ", GemmKind::wgmma" if r.math == "wgmma" else ""
        split = f", {r.head_split}" if r.head_split > 1 or math else ""
        return (f"OnePassBwdTraits<{ELEMENT_TYPES[r.dtype]}, {r.head_dim // r.head_split}, {r.block_m}, "
                f"{r.block_n}, {r.warps}{split}{math}>, {features}")
    if r.pass_ == "bwd" and r.accumulator == "global":
        return (f"sm80::GlobalBwdTraits<{ELEMENT_TYPES[r.dtype]}, {r.block_m}, {r.warps}, {SM80_BACKWARD_GACC_TILE[3]}, "
                f"{loads}>, {features}")
    if r.pass_ == "bwd":
        dq_warps = r.block_m // 16  # the dQ kernel: 16 queries per warp; r.warps is the dK/dV kernel's
        dq = f"sm80::FwdTraits<{ELEMENT_TYPES[r.dtype]}, {r.head_dim}, {r.block_m}, {r.block_n}, {dq_warps}, {loads}>"
        dkdv = f"sm80::FwdTraits<{ELEMENT_TYPES[r.dtype]}, {r.head_dim}, {r.block_n}, {r.block_m}, {r.warps}, {loads}>"
        return f"{dq}, {dkdv}, {features}"
    if r.wide:
        math = ", GemmKind::wgmma" if r.math == "wgmma" else ""
        split = f", {r.head_split}" if r.head_split > 1 or math else ""
        traits = (f"WideFwdTraits<{ELEMENT_TYPES[r.dtype]}, {r.head_dim // r.head_split}, {r.block_m}, "
                  f"{r.block_n}, {r.warps}{split}{math}>")
    elif r.dtype == "fp32":
        traits = f"sm80::Fp32FwdTraits<{FP32_BUCKETS[r.head_dim]}>"
    elif r.accumulator == "global":
        traits = (f"sm80::GlobalFwdTraits<{ELEMENT_TYPES[r.dtype]}, {r.block_m}, {r.block_n}, {r.warps}, "
                  f"{SM80_GLOBAL_TILE[3]}, {loads}>")
    else:
        ctas = f", {r.min_ctas}" if r.min_ctas > 1 else ""
        traits = (f"sm80::FwdTraits<{ELEMENT_TYPES[r.dtype]}, {r.head_dim}, {r.block_m}, {r.block_n}, {r.warps}, "
                  f"{loads}{ctas}>")
    return f"{traits}, {features}"


def write_if_changed(path, text):
    if os.path.exists(path) and open(path).read() == text:
        return
    with open(path, "w") as f:
        f.write(text)


def launcher(r):
    """The header that launches a row's kernel, its launch and resource functions, its params type.
    The wide forward and the one-pass backward are kernel templates both families instantiate
    (src/cuda/common); the others are the sm80 family's."""
    if r.pass_ == "fwd" and r.wide:
        return "cuda/common/wide_fwd_launch.hpp", "launch_forward_wide", "forward_wide_resources", "FwdParams"
    if r.pass_ == "bwd" and r.fused:
        return ("cuda/common/one_pass_bwd_launch.hpp", "launch_backward_one_pass", "backward_one_pass_resources",
                "BwdParams")
    if r.pass_ == "bwd":
        suffix = ("_atomic" if r.atomics else "" if r.accumulator == "registers" else "_global" if r.math == "ffma"
                  else "_gacc")
        return "cuda/sm80/bwd_launch.hpp", f"sm80::launch_backward{suffix}", f"sm80::backward{suffix}_resources", "BwdParams"
    suffix = "_fp32" if r.dtype == "fp32" else "_global" if r.accumulator == "global" else ""
    return "cuda/sm80/fwd_launch.hpp", f"sm80::launch_forward{suffix}", f"sm80::forward{suffix}_resources", "FwdParams"


def generate(rows, out):
    os.makedirs(out, exist_ok=True)
    files = []
    for r in rows:
        path = os.path.join(out, f"{r.name}.cu")
        header, launch, resources, params = launcher(r)
        write_if_changed(path, f"""// Generated by src/cuda/kernel_table.py: one kernel-table row. Do not edit.
#include "{header}"

namespace memattn::cuda::generated {{

Status {r.name}(const {params}& p, cudaStream_t stream) {{
  return {launch}<{template_args(r)}>(p, stream);
}}

Status {r.name}_resources(KernelResources* r) {{ return {resources}<{template_args(r)}>(r); }}

}}  // namespace memattn::cuda::generated
""")
        files.append((r.family, path))
    params = {"fwd": "FwdParams", "bwd": "BwdParams"}
    decls = "\n".join(f"Status {r.name}(const {params[r.pass_]}&, cudaStream_t);\n"
                      f"Status {r.name}_resources(KernelResources*);" for r in rows)

    def entries(pass_):
        return "\n".join(
            f'      {{"{r.name}", Family::sm{r.family}, {CPP_DTYPE[r.dtype]}, {r.head_dim}, {r.block_m}, {r.block_n}, '
            f'{r.warps}, Accumulator::{r.accumulator}, Math::{r.math}, {8 if r.loads == "vector16" else 1}, '
            f'{str(r.bias).lower()}, {str(r.dropout).lower()}, {str(r.bias_tile).lower()}, {str(r.atomics).lower()}, '
            f'{str(r.fused and r.head_split == 1).lower()}, {str(r.experimental).lower()}, {r.min_queries_per_key}, {i}, '
            f'&generated::{r.name}, &generated::{r.name}_resources}},'
            for i, r in enumerate(x for x in rows if x.pass_ == pass_))

    table = os.path.join(out, "kernel_table_generated.cpp")
    write_if_changed(table, f"""// Generated by src/cuda/kernel_table.py. Do not edit.
#include "cuda/kernel_table.hpp"

namespace memattn::cuda {{
namespace generated {{
{decls}
}}  // namespace generated

const std::vector<ForwardKernel>& forward_kernels() {{
  static const std::vector<ForwardKernel> table = {{
{entries("fwd")}
  }};
  return table;
}}

const std::vector<BackwardKernel>& backward_kernels() {{
  static const std::vector<BackwardKernel> table = {{
{entries("bwd")}
  }};
  return table;
}}

}}  // namespace memattn::cuda
""")
    files.append((0, table))
    return files


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    ap.add_argument("--families", default="80,90")
    ap.add_argument("--dtypes", default="bf16,fp16,fp32")
    ap.add_argument("--head-dims", default="all")
    ap.add_argument("--set", choices=("all", "reduced"), default="all")
    ap.add_argument("--filter", default="", help="keep only rows whose name matches this regular expression")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    split = lambda s: [x for x in s.replace(";", ",").split(",") if x]
    families = {int(f) for f in split(args.families)}
    dtypes = set(split(args.dtypes))
    rows = [r for r in all_rows() + backward_rows()
            if r.family in families and r.dtype in dtypes]
    if args.head_dims != "all":
        keep = {int(h) for h in split(args.head_dims)}
        rows = [r for r in rows if r.head_dim in keep or r.accumulator == "global"]
    if args.set == "reduced":
        rows = reduced(rows)
    if args.filter:
        rows = [r for r in rows if re.search(args.filter, r.name)]
    rows.sort(key=lambda r: (r.pass_,) + r.sort_key())
    if args.list:
        for i, r in enumerate(rows):
            print(f"{i:3d} {r.name}")
        return 0
    if not args.out:
        ap.error("--out is required unless --list")
    for family, path in generate(rows, args.out):
        print(f"{family}|{path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
