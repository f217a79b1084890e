#!/usr/bin/env python3
"""The CUDA kernel table: the single source of truth for which kernels are compiled.

Each row is one instantiation: family, pass, dtype, head-dim bucket, tile (queries x keys),
warps, accumulator placement, loads (which alignment it needs), features (bias, dropout), and a
priority. This script writes the rows' translation units (several rows each: rows_per_unit) plus
kernel_table_generated.cpp (the table the dispatcher walks, in priority order), and prints each
generated file's family, path and number of rows.

  kernel_table.py --out DIR [--families 80,90] [--dtypes bf16,fp16] [--head-dims 64,128|all]
                  [--set all|reduced] [--filter REGEX] [--sm80-targets 80,90,ptx]
                  [--rows-per-unit N] [--list]

--set reduced keeps one row per (family, accumulator, loads) kind so that every kernel family
compiles quickly (CI); --list prints the rows instead of writing files. With --sm80-targets 90
(sm_90 SASS only, no PTX: a build for the H100 in hand) the rows no problem can reach there are
left out (drop_shadowed).
"""
import argparse
import os
import re
import sys
from dataclasses import dataclass
from typing import NamedTuple

# Register-accumulator head-dim buckets of the sm80 family, with their tile (queries, keys, warps):
# for the plain rows, for the rows with bias and dropout code and 16-byte loads, and for those with
# element loads. Feature code costs registers: 32 query rows per warp spill heavily there. At
# D = 128 the featured 64 x 64 4-warp tile ran 8-9% faster than 128 x 64 with 8 warps (bias and
# dropout, H100); the element-load row keeps 128 x 64 until verified with that tile.
SM80_REGISTER_TILES = {
    32: ((128, 128, 8), (128, 128, 8), (128, 128, 8)),
    64: ((128, 64, 4), (128, 128, 8), (128, 128, 8)),
    96: ((128, 64, 8), (128, 64, 8), (128, 64, 8)),
    128: ((128, 64, 4), (64, 64, 4), (128, 64, 8)),
    192: ((128, 64, 8), (128, 64, 8), (128, 64, 8)),
    256: ((128, 64, 8), (128, 64, 8), (128, 64, 8)),
}
# A featured tile for GPUs with less shared memory per CTA than the bucket's default needs, as a
# row right behind it (fallback=True): at D = 256 the 128 x 64 tile takes 128 KB, more than the
# 99 KB per CTA of sm_86/sm_89, and 64 x 64 with 4 warps 96 KB. There it serves every aligned
# problem of the bucket, plain ones included (no other D = 256 row fits).
SM80_FEATURED_FALLBACK_TILES = {256: (64, 64, 4)}
# Few query rows (decoding: one row per sequence, or the g query heads of a kv head as its rows):
# a 64-row tile of 16-row warps behind the plain row, which keeps the problems whose keys see at
# least SM80_MANY_QUERIES queries on average (min_queries_per_key). A 128-row tile ran its MMAs
# for 128 rows where one was real: MHA decoding at 32k keys (B = 1, 32 heads, D = 128) took
# 300 us, at 1.8 TB/s, against SDPA's 196 us (H100).
SM80_FEW_QUERIES_TILES = {64: (64, 64, 4), 128: (64, 64, 4), 256: (64, 64, 4)}
SM80_MANY_QUERIES = 65
# Decoding and chunked prefill (at most SM80_DECODE_QUERIES queries per key: one row, a kv head's
# g query heads as its rows, or a chunk of new rows): one warp of 16 rows per CTA, behind the
# few-queries tile. These read each K/V tile once and are bound by the tiles in flight; the 64-row
# tile ran its MMAs and softmax for 64 rows where 1-16 were real, with one copy in flight per 128
# threads. H100, bf16, forced rows in one process, ms, 64-row tile -> 16-row: tensors, D = 128
# B 16 / 32k / 32-8 heads 0.809 -> 0.759, B 1 / 128k / MHA 0.984 -> 0.786; D = 64 0.508 -> 0.416,
# 0.558 -> 0.421. KV cache (rows located once per tile, paged_kv.hpp), B 16 / 32k / 32-8 paged by
# 16: D = 128 1.883 -> 1.779; chunked prefill (16 rows x 8k, paged) D = 128 0.792 -> 0.739, D = 64
# 0.653 -> 0.579. 32 rows with 2 warps fell between (H200). At D = 256 the 16-row tile spills.
SM80_DECODE_TILES = {64: (16, 64, 1), 128: (16, 64, 1)}
SM80_DECODE_QUERIES = 16
# Up to SM80_DECODE_KERNEL_QUERIES queries per key (one query row, or the g <= 8 query heads of a
# kv head as its rows) the plain problems take the decoding kernel (sm80/decode/): 8 rows as the
# MMAs' n dimension, four warps sharing a work item's keys through a shared-memory ring of K and V
# tiles, its parts planned at one CTA an SM (split_ctas_per_sm). The one-warp 16-row tile keeps 9
# to 16 queries per key (chunked prefill, speculative decoding).
SM80_DECODE_KERNEL_TILES = {64: (8, 64, 4), 128: (8, 64, 4)}
SM80_DECODE_KERNEL_QUERIES = 8


def few_queries_min(head_dim):
    """The few-queries tile's min_queries_per_key: above the decoding tile's range where that exists."""
    return SM80_DECODE_QUERIES + 1 if head_dim in SM80_DECODE_TILES else 0

# KV cache rows (kPagedKV, paged_kv.hpp): the few-queries tile of these buckets, each key row's
# address looked up from its page (any page size), split keys for decoding. A cache of one page per
# sequence (contiguous, with or without batch_idx, or a block table of one column) runs on the rows
# that split keys instead, as strided K and V (fwd_kernel.hpp, nothing located). H200, bf16, 32-8
# heads, `memattn run --graph`, us, paged rows -> plain rows: one query row B 1 / 8k D 128 with one
# appended key 35.0 -> 25.3 (tensors 21.0), without 23.4 -> 21.1; D 64 25.7 -> 17.8; B 64 / 2k
# 155 -> 137; B 16 / 32k 504 -> 494 (tensors 490); chunks of 16 rows, B 16 / 8k 459 -> 243; of 512
# rows against 32k 1114 -> 812 (tensors 800, both on the sm80 rows).
SM80_PAGED_BUCKETS = (64, 128, 256)
# Feature code variants, measured on the H100 (bf16, S = 2048, TFLOP/s):
# - Paired dropout (_dpair): each Philox call serves the lanes that need its words (same masks,
#   checked bit for bit per row). Every featured row with 16-byte loads has it: forward +3% (D = 128)
#   and +8% (D = 64); backward, which called Philox once per element before, +31%.
# - Bias tile (_btile): the bias of a tile by 16-byte cp.async into shared memory instead of one
#   2-byte global load per score (needs a unit-stride, 16-byte aligned bias; the dispatcher passes
#   over these rows otherwise). Forward D = 128 81 -> 120, D = 64 41 -> 63, D = 256 110 -> 154;
#   backward (both kernels read the tile, the dQ kernel writes dbias from it) D = 128 41 -> 61,
#   D = 64 25 -> 38. Every bucket's featured row has a _btile twin in front of it.
# - One feature only (_bias, _drop rows, chosen before the rows with both): less feature code,
#   fewer registers. Forward on the plain rows' tile: dropout D = 64 69 -> 117, D = 256 162 -> 197;
#   bias D = 64 63 -> 87, D = 128 120 -> 133 (at D = 256 no gain, so no row). Backward (dK/dV
#   spills 16-68 B instead of ~500): dropout D = 64 53 -> 59, D = 128 79 -> 91; bias D = 128
#   59 -> 66, D = 64 +3%.
SM80_BIAS_TILE_BUCKETS = (64, 128, 256)
# The forward's bias-only rows read the bias from the tile only (no per-element path), on the plain
# rows' tile. At D = 128 that is 128 x 64 with four 32-row warps, without spills (255 registers,
# two CTAs per SM): dense bias S = 2048 273 TFLOP/s against 244 for 64 x 64 (three CTAs per SM,
# but 16-row warps load K and V fragments for half as many rows and twice as many K/V tiles per
# FLOP) and 190 for 128 x 64 with eight warps; broadcast bias S = 8192 288 vs 251.
SM80_BIAS_ONLY_BUCKETS = (64, 128)
SM80_DROPOUT_ONLY_BUCKETS = (64, 256)
SM80_BACKWARD_DROPOUT_ONLY_BUCKETS = (64, 128)
SM80_BACKWARD_BIAS_ONLY_BUCKETS = (64, 128)
# Wide-head forward rows (wide_fwd_kernel.hpp): head-dim bucket -> (queries, keys, warps). The
# output stays in registers, split over the warps along the head dim (128 per thread at 64 x 512
# with 8 warps, 232 registers); Q stays in shared memory, so a key tile costs only its K and V
# (~65 FLOP per L2 byte against the global-accumulator rows' ~29). Plain problems only (bias and
# dropout take the gacc rows). H100, bf16, against the gacc row: D = 512 S = 4096 130 -> 249
# TFLOP/s, causal 101 -> 234, S = 1024 130 -> 231; D = 384 (padded to 512) 139 -> 147. It needs
# 201 KB of shared memory, more than A100 (163 KB) or sm_86/sm_89 (99 KB) allow, and on Hopper the
# wgmma row of the bucket comes first: it serves the newer GPUs with 227 KB per CTA (sm_100),
# which run the sm80 family's PTX.
SM80_WIDE_TILES = {512: (64, 64, 8)}
# The wide rows of the sm_90 family (wide_fwd_kernel.hpp with sm90/wide_gemms.hpp): bucket ->
# (queries, keys, warps, CTAs). Both GEMMs run on sm_90a's wgmma: each warpgroup takes half of S's
# keys and half of O's head dim and the tensor cores read Q, K, P and V from shared memory, where
# mma.sync's warps copy them into registers first (S's 16 x 32 warp tiles read ~11 FLOP per
# shared-memory byte). H100, bf16, CLI fwd_ms against the same rows on mma.sync: D = 512 S = 4096
# 2.20 -> 1.55 ms (1.42x), causal 1.43x; D = 1024 1.41-1.44x, causal 1.39-1.43x; D = 768
# S = 2048 1.37-1.40x; partly filled buckets (D = 448, 640, 896) 1.31-1.42x.
# Above 512 the head dim is split over a cluster of two CTAs: each runs the 512 layout on its half
# of D = 1024 (its half of Q, K, V and of the output), and the partial scores meet through
# distributed shared memory (16 KB per 64 x 64 tile), so each CTA's K/V traffic per FLOP is the
# D = 512 row's. D = 768 as two halves of 384: the 1024 row would leave a quarter of each tile's
# columns zero. On mma.sync, against the gacc rows (H100, bf16, TFLOP/s): D = 1024 S = 4096
# 130 -> 218, causal 86 -> 216; D = 768 S = 2048 131 -> 188; D = 640 S = 2048 125 -> 148 (a sixth
# of the columns padding).
SM90_WIDE_WGMMA_TILES = {512: (64, 64, 8, 1), 768: (64, 64, 8, 2), 1024: (64, 64, 8, 2)}
# The Hopper forward (sm90/fwd/): (bucket, queries, keys, K/V stages, consumer schedule, min queries
# per key). Q, K and V arrive by TMA into shared-memory rings that a producer warpgroup fills; two
# or three consumer warpgroups of 64 query rows each run both GEMMs on wgmma (12 or 16 warps,
# sm90_forward_warps). Plain problems of fixed lengths with tensors a tensor map describes
# (select.cpp); one query row per key or fewer (decoding) keeps the sm80 rows, which split the
# keys. H100, bf16, memattn run, TFLOP/s:
# - Ping-pong (the warpgroups take turns at the tensor cores) pays where the softmax is as long as
#   the GEMMs: independent -> ping-pong, D = 64 S = 8192 405 -> 434, S = 2048 355 -> 379, causal
#   361 -> 380; but D = 128 S = 8192 696 -> 662, causal 592 -> 549, D = 256 752 -> 693 (each
#   warpgroup's P V already runs under its own softmax).
# - D = 64 with 192 keys per tile (fewer barriers and row reductions per FLOP): S = 8192 434 -> 468,
#   causal 380 -> 409, S = 2048 379 -> 389; but S = 512 275 -> 257, causal 176 -> 148 (512 keys are
#   2.7 tiles of 192): 192 keys from 1024 queries per key on, 128 below. (ptxas reports 24 bytes of
#   spills for the 192-key row, included in these figures.)
# - D = 64 with three consumer warpgroups (192 queries, 16 warps, 160 registers per consumer
#   thread, 48 bytes of spills), the turns going round the three: the K and V tiles serve half as
#   many queries again per load, and two warpgroups' GEMMs run under a third's softmax. Against
#   128 x 192: S = 2048 405 -> 427, S = 8192 470 -> 504, S = 16384 471 -> 511, causal 8192
#   408 -> 430, causal 16384 454 -> 461; 192 x 64 (no spills) ran 2-10% behind 192 x 96; at
#   S = 512 264 against 277 on 128 x 128: from 2048 queries per key on, then from 1024, where it
#   ran ahead of 128 x 192 too (H200, ms, B x S = 16384, 32 heads: S = 2048 causal 0.400-0.407
#   against 0.430-0.437, S = 1024 0.399-0.403 against 0.415; 128 x 128 kept below, S = 1024
#   causal 0.273-0.274 against 0.291-0.297), and the 128 x 192 row went. Against 128 x 128 (H200,
#   ms, two rounds, one call) 192 x 96 lost below 2048 queries per key: S = 1024 0.388-0.398 against
#   0.375, S = 2048 causal (1024.5 a key) 0.408-0.412 against 0.404-0.405; and won from there: S =
#   2048 0.658-0.668 against 0.682-0.690, S = 4096 1.232-1.237 against 1.320, causal 0.697-0.704
#   against 0.725-0.727. So 192 x 96 from 2048 queries per key. Not at D = 128: 192 x 64
#   (4 bytes of spills; 144 with ping-pong, which ran 10-15% slower) against 128 x 128, S = 2048
#   638 vs 630, S = 8192 705 vs 720, S = 16384 712 vs 705, causal 8192 612 vs 601, causal 16384
#   641 vs 610 (one run each): there two warpgroups' GEMMs already hold the tensor cores (87-97% of
#   the GEMM ceiling), and 64-key tiles double the softmax and barrier work per FLOP.
# - D = 192 on 128 x 96 with two K/V stages (193 KB; 128 keys would need 240): against the D = 256
#   row (a quarter of its columns zeros) and the sm80 D = 192 row, S = 2048 689 / 537 / 314,
#   S = 8192 780 / 576 / 331, causal 622 / 481 / 326. (112 keys failed gmma_acc_as_a_operand's
#   static check of S's fragment; not looked into further.)
SM90_FORWARD_TILES = [(64, 192, 96, 3, "ping_pong", 2048), (64, 128, 128, 3, "ping_pong", SM80_MANY_QUERIES),
                      (128, 128, 128, 2, "independent", SM80_MANY_QUERIES),
                      (192, 128, 96, 2, "independent", SM80_MANY_QUERIES),
                      (256, 128, 64, 2, "independent", SM80_MANY_QUERIES)]


# The Hopper forward with a bias (FwdBiasTraits: each key tile's bias by TMA into a two-stage ring
# beside K and V, whole 64-key boxes) or with dropout (FwdDropoutTraits: the dropped probabilities
# zeroed between the softmax and P V, each Philox call shared by two lanes): head dim, queries,
# keys, K/V stages, schedule, queries per key, as above. The bias ring takes 32 KB a stage at
# 128 x 128 (16 KB at D = 256's 128 x 64), so at D = 128 and 256 the output goes through the Q tile
# (storage.hpp), and D = 64 keeps two consumer warpgroups of 128 keys (192 x 96 has no whole
# boxes); dropout's Philox rounds (a call per four scores a lane pair) need registers that D = 64's
# three-warpgroup row (160 a thread) does not have. Dropout with a bias runs on the sm80 rows.
SM90_FORWARD_FEATURE_TILES = [(64, 128, 128, 3, "ping_pong", SM80_MANY_QUERIES),
                              (128, 128, 128, 2, "independent", SM80_MANY_QUERIES),
                              (256, 128, 64, 2, "independent", SM80_MANY_QUERIES)]


# fp32 on the Hopper forward (sm90/fwd/tf32x3_*.hpp: 3xTF32 warpgroup MMAs, K and V split once per
# CTA by a warpgroup of their own): head-dim bucket -> (queries, keys, K/V stages). K and V take
# both TF32 parts in shared memory: 32-key tiles at D = 128 (192 KB with two stages). Three stages
# at D = 64 (224 KB) ran level with two (H200, B 4 x S 4096: 91.4 vs 91.5 TFLOP/s).
SM90_TF32X3_FORWARD_TILES = {64: (128, 64, 2), 128: (128, 32, 2)}


def sm90_forward_warps(block_m):
    """The producer warpgroup and a consumer warpgroup per 64 query rows."""
    return 4 * (1 + block_m // 64)


# Global-accumulator rows (head dims beyond 256): tile and pipeline depth. The output accumulator
# crosses L2 once per key tile, so its traffic per FLOP falls with the keys per tile: 128 keys ran
# 1.65x faster than 64 at D = 512/1024 (H200); 128 queries gained nothing.
SM80_GLOBAL_TILE = (64, 128, 4, 3)  # queries, keys, warps, stages
GLOBAL_HEAD_DIM = 65536
# fp32 (FFMA) rows: head-dim bucket -> value chunks of 64 held in registers (0: global workspace).
FP32_BUCKETS = {64: 1, 128: 2, 256: 4, GLOBAL_HEAD_DIM: 0}
FP32_TILE = (64, 64, 8)
# fp32 on TF32 tensor cores, three products per fp32 product (tf32x3.hpp): the register forward
# (fwd_kernel.hpp) with fp32 tiles, head-dim bucket -> (queries, keys, warps). Rows with aligned
# loads and no features, with aligned loads and every feature, and with element loads and every
# feature; `precision = ieee` takes the FFMA rows.
TF32X3_FORWARD_TILES = {32: (64, 64, 4), 64: (64, 64, 4), 128: (64, 64, 4)}
# Any head dim: the global-accumulator forward (fwd_global_kernel.hpp) with fp32 chunks. 64 keys
# per tile, where the 16-bit rows take 128: P's two TF32 parts are 64 registers a thread at 64.
TF32X3_GLOBAL_TILE = (64, 64, 4)
ELEMENT_TYPES = {"bf16": "cute::bfloat16_t", "fp16": "cute::half_t", "fp32": "float"}
ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
# Backward rows (sm80, bf16/fp16, register accumulators): head-dim buckets and the tile of both
# kernels (queries x keys per step, warps). Every warp holds 16 full-width rows of dK and dV, so
# buckets above 128 do not fit in registers with this design.
# The dK/dV kernel gives each of its warps 16 keys; the dQ kernel gives each warp 16 queries (its
# warps: queries / 16). Larger tiles ran slower (H100, bf16 S = 2048/8192): D = 64 128 x 128 with
# 8 warps 97 -> 87 TFLOP/s, D = 128 64 x 128 with 8 warps 145 -> 129 (both 255 registers, so one
# CTA per SM instead of two of 4 warps).
SM80_BACKWARD_BUCKETS = (32, 64, 96, 128)
SM80_BACKWARD_TILE = (64, 64, 4)
# Plain backward rows whose tile differs from SM80_BACKWARD_TILE (queries per step, keys per CTA,
# dK/dV warps): at D = 64, warps of 32 keys halve the dK/dV kernel's shared-memory reads of Q and
# dO per FLOP (its limit: ncu put the pipe at 73%); 32-query steps keep it in registers (255, no
# spills), and CTAs of 2 warps let 4 share an SM. Measured (H100, bf16): 64 x 64 w4 -> 32 x 64 w2
# at S = 2048 160 -> 169, causal 141 -> 148, S = 8192 182 -> 186, causal 170 -> 174 TFLOP/s;
# 32 x 128 w4 (2 CTAs of 4 warps) lost 5-10%.
SM80_BACKWARD_PLAIN_TILES = {64: (32, 64, 2)}
# One-pass rows (one_pass_bwd_kernel.hpp): bucket -> (queries per step, keys per CTA, warps). Each
# GEMM has its own warp grid, P and dS go through shared memory, and dQ is added to an fp32
# workspace with atomics (FlashAttention-2's layout; never with `deterministic`). Buckets are
# multiples of 64 (the warp grids need it). dQ leaves through shared memory, one 128-byte row
# segment per atomic instruction: straight from the fragments the atomics held L2 at 83% and the
# rows ran at 0.75-0.9x the two-kernel rows. H100, bf16, TFLOP/s:
# - D = 64, 128 queries x 128 keys with 8 warps: 5-8% over 64 x 64 with 4 warps (two CTAs per SM),
#   S = 2048 196 vs 186, S = 8192 239 vs 220, causal 218 vs 203 (half the steps, barriers and dQ
#   flushes per FLOP); 64 x 64 had beaten 64 x 128 with 8 warps by 5% (S = 8192 211 vs 201,
#   S = 16384 220 vs 210).
# - D = 128, 64 x 128 with 8 warps: S = 2048 / 8192 214 / 262 (the two-kernel rows 193 / 213),
#   causal S = 8192 234 (200); the 4-warp 64 x 64 tile lost 20-25%.
# - D = 256, 64 x 64 with 8 warps (dK and dV take 128 registers per thread, as at D = 128 with 128
#   keys; dQ in two column chunks): S = 2048 / 8192 179 / 207 (the gacc rows 54-55), causal
#   143 / 202. It needs 211 KB of shared memory: where the wgmma row below runs (Hopper) that comes
#   first, and this one serves the newer GPUs with 227 KB per CTA (sm_100).
# - D = 512, 32 x 32 with 8 warps (dK and dV again 128 registers per thread): S and dP split four
#   ways along the head dim (OnePassBwdTraits::kSdpSlices), dQ in two 256-column chunks, 197 KB of
#   shared memory. Against the gacc rows: S = 4096 50 -> 140, causal 40 -> 134; D = 384 (padded to
#   512) 50 -> 103. On Hopper the cluster rows below come first; this one serves sm_100 as above.
SM80_BACKWARD_FUSED_TILES = {64: (128, 128, 8), 128: (64, 128, 8), 256: (64, 64, 8), 512: (32, 32, 8)}
# A tile for GPUs with less shared memory per CTA than the default needs, as a row right behind it
# (fallback=True): D = 64's 128 x 128 tile takes 165 KB, more than A100's 163 KB; 64 x 64 with
# 4 warps takes 67 KB.
SM80_BACKWARD_FUSED_FALLBACK_TILES = {64: (64, 64, 4)}
# One-pass rows with a bias tile (the step's bias by cp.async with Q and dO; dS back through the
# same tile for 16-byte dbias stores): bucket -> tile. The bias tile of D = 64's 128 x 128 would
# not fit next to the rest; at D = 256 no bias tile fits.
SM80_BACKWARD_FUSED_BIAS_TILES = {64: (64, 64, 4), 128: (64, 128, 8)}
# With one 8-warp CTA per SM, nothing overlaps a CTA's prologue (K, V) and epilogue (dK, dV), so
# at D <= 128 the one-pass rows win only over long query loops: they are chosen when a key sees
# at least this many queries on average (S, or about S / 2 when causal). With each step's dQ
# atomics issued during the next step's MMAs (`memattn run`, H100, bf16, TFLOP/s, one-pass vs
# two-kernel): D = 128 S = 2048 causal 222 vs 191, S = 1024 241 vs 195, S = 1024 causal (about 512
# queries per key) 177 vs 167; D = 64 S = 1024 causal 147 vs 123, S = 512 162 vs 132: 512 for
# both, the shortest loops measured. At D = 256 and 512 the alternative (gacc) is 2-4x slower
# everywhere. The bias-tile rows keep the thresholds the plain rows had before the atomics moved
# into the next step (D = 64 S = 1024 146-148 vs 135-145, S = 2048 causal 151-155 vs 144: 1024;
# D = 128 S = 2048 causal 162 vs 180: 2048), not measured again.
SM80_BACKWARD_FUSED_MIN_QUERIES_PER_KEY = {64: 512, 128: 512, 256: 0, 512: 0}
SM80_BACKWARD_FUSED_BIAS_MIN_QUERIES_PER_KEY = {64: 1024, 128: 2048}
# One-pass rows with the head dim split over a cluster of CTAs (sm_90 family): bucket -> (queries,
# keys, warps, CTAs). Every CTA runs the D = 256 row's 64 x 64 steps on its share of the head dim
# (its share of K, V, Q, dO and of dK, dV, dQ) instead of the single CTA's 32 x 32 steps at
# D = 512; S and dP are summed over the cluster through distributed shared memory, by st.async
# into slots in the dQ stage: a pair adds the other CTA's whole partials (32 KB per step), four
# CTAs reduce-scatter then all-gather (2 x 24 KB). H100, bf16, TFLOP/s: D = 512 pair vs single
# CTA: S = 4096 176 vs 143, causal 164 vs 136, D = 384 S = 2048 131 vs 103, S = 1024 143 vs 119.
# D = 1024 four vs a pair of D = 512 layouts (32 x 32 steps): S = 4096 146 vs 131, causal 138 vs
# 127; D = 896 S = 2048 120 vs 111; D = 640 90 vs 84 (the pair was itself 2.6x the gacc row: 132
# vs 51).
SM90_BACKWARD_FUSED_SPLIT_TILES = {512: (64, 64, 8, 2), 1024: (64, 64, 8, 4)}
# One-pass rows with all five GEMMs on sm_90a's wgmma (sm90/one_pass_gemms.hpp): bucket ->
# (queries, keys, warps). The two warpgroups split S and dP by keys and the tensor cores read every
# operand from shared memory (no ldmatrix, no operand registers); with 128 keys each warpgroup
# computes dK and dV for its own 64 keys, behind a barrier of its own threads. H100, bf16, CLI
# bwd_ms against the mma.sync row of the bucket: D = 256 S = 512 1.10x, causal 1.05x, S = 2048
# 1.14-1.16x, S = 8192 1.19x; D = 128 (64 x 128 against the same tile) S = 2048 283 -> 359
# TFLOP/s, causal 237 -> 298, S = 8192 314 -> 412, causal 295 -> 386, then the warpgroup's own
# barrier before dK and dV +1.5-3% (364, 300, 423, 393); D = 64 (128 x 128, against the same tile)
# S = 2048 245 -> 295, causal 202 -> 237, S = 8192 272 -> 338, causal 256 -> 315 (64 x 128 had
# given 255, 213, 293, 275: half the steps, barriers and dQ reductions per FLOP, at 60 bytes of
# spills). Chosen before the mma.sync rows on sm_90 (the table's math rank), and from shorter
# query loops than they are: against the two-kernel rows at about 256 queries per key (the
# shortest measured) D = 128 S = 256 0.600 -> 0.532 ms, S = 512 causal 0.646 -> 0.576; D = 64
# (64 x 128) 0.756 -> 0.692, 0.818 -> 0.776. The 128-key rows then moved to S^T and dP^T (keys as
# wgmma rows), so that P^T and dS^T feed dV and dK from registers and only dS^T is stored: D = 128
# S = 2048 385 vs 368, causal 316 vs 303, S = 8192 447 vs 422, causal 419 vs 395; D = 64 S = 2048
# 316 vs 294, causal 248 vs 237, S = 8192 369 vs 340, causal 338 vs 316; S = 512 +4% (CLI, same run).
# D = 192 has the D = 256 row's tile with 64-byte-swizzled head-dim tiles (each warpgroup's 96
# columns of dK, dV and dQ are whole 32-column atoms): against the D = 256 row at D = 192, S = 2048
# 300 vs 256 TFLOP/s, S = 8192 331 vs 286, causal 325 vs 275 (236 registers, no spills).
SM90_BACKWARD_FUSED_WGMMA_TILES = {64: (128, 128, 8), 128: (64, 128, 8), 192: (64, 64, 8), 256: (64, 64, 8)}
SM90_BACKWARD_FUSED_WGMMA_MIN_QUERIES_PER_KEY = {64: 256, 128: 256, 192: 0, 256: 0}
# The Hopper backward (sm90/bwd/): bucket -> (queries per step, keys, Q/dO stages, min queries per
# key). The key rows' GEMMs above in a warp-specialised kernel: producer warps load K, V and each
# step's Q, dO (TMA) and row statistics into a ring, so that a step starts on its barrier instead of
# a CTA barrier after every warp's copies; the two consumer warpgroups (64 keys each, 240 registers)
# meet once per step, before the dQ GEMM, with dS^T and the dQ stage double-buffered, dV issued
# before that barrier and dQ, dK after it. 12 warps. Plain problems (fixed or packed variable
# lengths) with tensors a tensor map describes (select.cpp). H100, bf16, CLI, TFLOP/s against the
# wgmma one-pass row (same run): D = 128 S = 2048 383 -> 406, causal 315 -> 319, S = 8192 448 ->
# 493, causal 425 -> 454; but S = 512 246 -> 237, causal 153 -> 144 (few steps per key tile leave
# the prologue exposed): at first from 1024 queries per key, where they broke even (S = 1024 326 vs
# 327, causal 229 vs 232; S = 1536 371 vs 358, causal S = 2048 317 vs 310, causal S = 4096 394 vs
# 380), the wgmma row below that. The
# per-step thread index (mainloop.hpp) then +2-5%, and dK issued after the barrier with dQ staged
# under it (mainloop.hpp) +4-7% (H200: S = 2048 430 -> 449, causal 341 -> 353, S = 8192 475 -> 505,
# causal 470 -> 500, S = 16384 488 -> 510). D = 64 (128 x 128, 332 bytes of spills at 240 registers)
# had run within 1-2% of its wgmma one-pass row (64 x 128 2-15% behind); with that order ahead of it
# (H200, same build): S = 1024 271 -> 279, S = 2048 318 -> 330, causal 249 -> 252, S = 8192 364 ->
# 377, causal 338 -> 352. Since the persistent grid (a CTA's setup paid once per SM, the next
# item's loads under the last one's steps) they win from 128 queries per key (H200, CLI, ms, B x S
# = 16384, against the wgmma one-pass row / the two-kernel row): D = 64 S = 512 0.660 vs 0.763,
# causal 0.596 vs 0.644; S = 256 0.470 vs 0.525, causal 0.497 vs 0.534 (two-kernel); S = 128
# 0.382 vs 0.443 (two-kernel); D = 128 S = 512 0.548 vs 0.630, causal 0.450 vs 0.495, S = 256
# 0.403 vs 0.435; S = 256 causal and S = 128 within 3% of the best. At 64 (S = 128 causal) they
# lose 10-12% to the two-kernel rows.
# With dropout (BwdDropoutTraits) the same tiles: the keep bits of each step's P^T come from the
# common paired Philox code (four lanes share a call's words), before P^T and dS^T are formed.
SM90_BACKWARD_TMA_TILES = {64: (128, 128, 2, 128), 128: (64, 128, 2, 128)}
# The same with a bias tile (as SM80_BACKWARD_FUSED_BIAS_TILES: the step's bias by cp.async, dS back
# through it for dbias). H100, bf16, dense bias, CLI against the sm80 bias rows: D = 128 S = 2048
# 2.95 -> 2.48 ms, S = 8192 10.83 -> 8.87, causal 6.97 -> 6.00; D = 64 S = 2048 4.08 -> 3.52,
# causal 2.97 -> 2.80, S = 8192 15.04 -> 12.75. From 1024 queries per key at D = 128 too: there
# sm80's one-pass bias row already beat the two-kernel row (S = 2048 causal 2.71 -> 2.05 ms), and
# the wgmma row beat that one on every problem measured.
SM90_BACKWARD_FUSED_WGMMA_BIAS_TILES = {64: (128, 128, 8), 128: (64, 128, 8)}
SM90_BACKWARD_FUSED_WGMMA_BIAS_MIN_QUERIES_PER_KEY = {64: 1024, 128: 1024}
# fp32 backward rows (any head dim): FFMA on 64 x 64 tiles with the gradients accumulated in a
# global fp32 workspace. (The kernel takes bf16/fp16 too; the tensor-core rows below replaced it.)
SM80_BACKWARD_GLOBAL_TILE = (64, 64, 8)
# fp32 backward rows on TF32 tensor cores (3xTF32, tf32x3.hpp): the one-pass kernel with fp32 tiles
# (P and dS too), bucket -> (queries per step, keys per CTA, warps). Its scores are the 3xTF32
# forward's, bit for bit (gemm_smem_2slice_tf32x3), so the forward's LSE normalises them exactly.
# At D = 128, 32-query steps: against 64 (255 registers, 110 bytes of spills, 195 KB of shared
# memory) 30.8 -> 38.5 TFLOP/s, causal 28.0 -> 36.7 (H100, B 4 x S 4096, 16 heads; 48 bytes of
# spills, 130 KB); at D = 64 they lost (64 x 64 38.7, causal 34.9; 32 x 64 32.3, 31.0). D = 256 on
# the D = 512 16-bit row's 32 x 32 grids (one row of warps for dK/dV, dQ in one chunk): 170 KB,
# 255 registers, 44 bytes of spills; against the FMA rows 11.2 -> 31.9 TFLOP/s, causal 10.2 -> 31.3.
SM80_BACKWARD_TF32X3_TILES = {64: (64, 64, 8), 128: (32, 64, 8), 256: (32, 32, 8)}
# Tensor-core backward rows for any head dim (bf16/fp16): 64 x 64 tiles, head dims in chunks of 64
# through a pipeline of this many stages, dK/dV/dQ chunks in a per-CTA fp32 workspace slot. They
# come before the FFMA rows (7-8x faster at D = 256..1024, H200). Square 128 x 128 tiles with 8
# warps ran D = 256 53 -> 28, 512 50 -> 41, 1024 51 -> 57 TFLOP/s (H100; 204 B of spills in the
# dQ kernel).
SM80_BACKWARD_GACC_TILE = (64, 64, 4, 3)  # queries, keys, warps, stages
CPP_DTYPE = {"bf16": "DType::bf16", "fp16": "DType::f16", "fp32": "DType::f32"}
# Within a bucket: wgmma rows (sm_90a) before mma.sync rows before 3xTF32 rows before CUDA-core rows.
MATH_RANK = {"wgmma": 0, "mma": 1, "tf32x3": 2, "ffma": 3}


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
    loads: str  # "vector16" (needs 16-byte alignment) or "element" (any)
    bias: bool
    dropout: bool
    # "mma" (tensor cores, mma.sync), "wgmma" (sm_90a's warpgroup MMA), "tf32x3" (fp32 as three TF32
    # products: mma.sync, or wgmma on the TMA rows) or "ffma" (CUDA cores)
    math: str = "mma"
    atomics: bool = False  # backward: dQ added with fp32 atomics (not deterministic): the one-pass rows
    bias_tile: bool = False  # bias through a shared-memory tile (needs an aligned, unit-stride bias)
    dropout_paired: bool = False  # each dropout Philox call serves the lanes that need its words
    fused: bool = False  # backward in one pass (one_pass_bwd_kernel.hpp); dQ by atomics
    min_queries_per_key: int = 0  # chosen only when a key sees this many queries on average
    wide: bool = False  # forward with the output split over the warps along the head dim (wide_fwd_kernel.hpp)
    head_split: int = 1  # wide and one-pass rows: CTAs of a cluster that share the head dim (sm_90)
    tma: bool = False  # Q, K, V (and dO) by TMA into rings of a warp-specialised kernel (sm90/fwd/, sm90/bwd/)
    paged: bool = False  # forward: K and V from a KV cache's pages (paged_kv.hpp); cache problems only
    decode: bool = False  # forward: the decoding kernel (sm80/decode/), at most 8 rows a work item
    # A smaller tile behind the bucket's default, for GPUs whose shared memory per CTA the default
    # does not fit (SM80_FEATURED_FALLBACK_TILES, SM80_BACKWARD_FUSED_FALLBACK_TILES).
    fallback: bool = False

    @property
    def features(self):
        if self.paged:
            return "paged"
        return {(False, False): "plain", (True, False): "bias", (False, True): "drop"}.get((self.bias, self.dropout), "full")

    @property
    def name(self):
        loads = "vec" if self.loads == "vector16" else "elem"
        acc = "" if self.accumulator == "registers" else "_gacc"
        math = "" if self.math == "mma" else f"_{self.math}"
        split = f"x{self.head_split}" if self.head_split > 1 else ""
        fused = f"_fused{split}" if self.fused else ""
        bias_tile = "_btile" if self.bias_tile else ""
        paired = "_dpair" if self.dropout_paired else ""
        wide = f"_wide{split}" if self.wide else ""
        tma = "_tma" if self.tma else ""
        decode = "_decode" if self.decode else ""
        return (f"{self.pass_}_sm{self.family}_{self.dtype}_d{self.head_dim}_m{self.block_m}n{self.block_n}"
                f"w{self.warps}{acc}{math}{tma}{wide}{fused}{decode}{bias_tile}{paired}_{loads}_{self.features}")

    @property
    def sort_head_dim(self):
        """Where the row sorts among the buckets: its own head dim, but a plain wgmma row's (the
        Hopper forward, the one-pass wgmma backward) at three quarters of it, ahead of the sm80
        buckets it covers with at most a quarter of its columns zeros: wgmma outruns mma.sync by
        more than that. H100, bf16, TFLOP/s at S = 2048 / 8192 / 8192 causal, D = 96 on the D = 128
        rows against the sm80 D = 96 rows: forward 478 / 536 / 449 vs 246 / 267 / 261, backward
        277 / 321 / 300 vs 167 / 180 / 183."""
        wgmma = self.tma or (self.fused and self.math == "wgmma")
        return self.head_dim * 3 // 4 if wgmma and self.features == "plain" else self.head_dim

    def sort_key(self):
        # Register rows first, the smallest bucket that fits (sort_head_dim), the newer family; aligned
        # loads before element loads; tensor cores before CUDA cores; the least feature code that covers the problem
        # (none, one feature, both); the one-pass backward first (the dispatcher passes over it
        # when `deterministic`); a bias tile before per-element bias reads (the dispatcher passes
        # over it when the bias cannot be tiled); a fallback tile behind the default it stands in for;
        # a row for many queries per key in front of the few-queries tile (the dispatcher passes over
        # it when the keys see fewer); the paged rows, which only KV cache problems reach (and only
        # they), after the others of their bucket. FMA rows after every tensor-core row (fp32: the
        # 3xTF32 global-accumulator rows run any head dim faster than the FMA register rows).
        feature_rank = {"plain": 0, "paged": 0, "bias": 1, "drop": 1, "full": 2}[self.features]
        return (self.math == "ffma", self.accumulator != "registers", self.sort_head_dim, -self.family,
                self.loads != "vector16",
                MATH_RANK[self.math], feature_rank, self.paged, not self.fused, not self.bias_tile, not self.tma,
                self.fallback, -self.min_queries_per_key)


def all_rows():
    rows = []
    for dtype in ("bf16", "fp16"):
        for head_dim, tiles in SM80_REGISTER_TILES.items():
            (pm, pn, pw), (fm, fn, fw), (em, en, ew) = tiles
            few = SM80_FEW_QUERIES_TILES.get(head_dim)
            rows.append(Row(80, "fwd", dtype, head_dim, pm, pn, pw, "registers", "vector16", False, False,
                            min_queries_per_key=SM80_MANY_QUERIES if few else 0))
            decode = SM80_DECODE_TILES.get(head_dim)
            if few:
                rows.append(Row(80, "fwd", dtype, head_dim, *few, "registers", "vector16", False, False,
                                min_queries_per_key=few_queries_min(head_dim)))
            if decode:
                rows.append(Row(80, "fwd", dtype, head_dim, *decode, "registers", "vector16", False, False,
                                min_queries_per_key=SM80_DECODE_KERNEL_QUERIES + 1))
            if head_dim in SM80_DECODE_KERNEL_TILES:
                rows.append(Row(80, "fwd", dtype, head_dim, *SM80_DECODE_KERNEL_TILES[head_dim], "registers",
                                "vector16", False, False, decode=True))
            rows.append(Row(80, "fwd", dtype, head_dim, fm, fn, fw, "registers", "vector16", True, True,
                            dropout_paired=True))
            rows.append(Row(80, "fwd", dtype, head_dim, em, en, ew, "registers", "element", True, True))
            if head_dim in SM80_FEATURED_FALLBACK_TILES:
                xm, xn, xw = SM80_FEATURED_FALLBACK_TILES[head_dim]
                rows.append(Row(80, "fwd", dtype, head_dim, xm, xn, xw, "registers", "vector16", True, True,
                                dropout_paired=True, fallback=True))
            if head_dim in SM80_BIAS_TILE_BUCKETS:
                rows.append(Row(80, "fwd", dtype, head_dim, fm, fn, fw, "registers", "vector16", True, True,
                                bias_tile=True, dropout_paired=True))
            if head_dim in SM80_BIAS_ONLY_BUCKETS:
                rows.append(Row(80, "fwd", dtype, head_dim, pm, pn, pw, "registers", "vector16", True, False,
                                bias_tile=True))
            if head_dim in SM80_DROPOUT_ONLY_BUCKETS:
                rows.append(Row(80, "fwd", dtype, head_dim, pm, pn, pw, "registers", "vector16", False, True,
                                dropout_paired=True))
        for head_dim in SM80_PAGED_BUCKETS:
            decode = SM80_DECODE_TILES.get(head_dim)
            rows.append(Row(80, "fwd", dtype, head_dim, *SM80_FEW_QUERIES_TILES[head_dim], "registers", "vector16",
                            False, False, paged=True, min_queries_per_key=few_queries_min(head_dim)))
            if decode:
                rows.append(Row(80, "fwd", dtype, head_dim, *decode, "registers", "vector16", False, False,
                                paged=True))
        for head_dim, (bm, bn, warps) in SM80_WIDE_TILES.items():
            rows.append(Row(80, "fwd", dtype, head_dim, bm, bn, warps, "registers", "vector16", False, False,
                            wide=True))
        for head_dim, bm, bn, _, _, min_queries in SM90_FORWARD_TILES:
            rows.append(Row(90, "fwd", dtype, head_dim, bm, bn, sm90_forward_warps(bm), "registers", "vector16", False,
                            False, math="wgmma", tma=True, min_queries_per_key=min_queries))
        for head_dim, bm, bn, _, _, min_queries in SM90_FORWARD_FEATURE_TILES:
            rows.append(Row(90, "fwd", dtype, head_dim, bm, bn, sm90_forward_warps(bm), "registers", "vector16", True,
                            False, math="wgmma", tma=True, bias_tile=True, min_queries_per_key=min_queries))
            rows.append(Row(90, "fwd", dtype, head_dim, bm, bn, sm90_forward_warps(bm), "registers", "vector16", False,
                            True, math="wgmma", tma=True, dropout_paired=True, min_queries_per_key=min_queries))
        for head_dim, (bm, bn, warps, ctas) in SM90_WIDE_WGMMA_TILES.items():
            rows.append(Row(90, "fwd", dtype, head_dim, bm, bn, warps, "registers", "vector16", False, False,
                            math="wgmma", wide=True, head_split=ctas))
        bm, bn, warps, _ = SM80_GLOBAL_TILE
        for loads in ("vector16", "element"):
            rows.append(Row(80, "fwd", dtype, GLOBAL_HEAD_DIM, bm, bn, warps, "global", loads, True, True))
    bm, bn, warps = FP32_TILE
    for head_dim, chunks in FP32_BUCKETS.items():
        acc = "registers" if chunks else "global"
        rows.append(Row(80, "fwd", "fp32", head_dim, bm, bn, warps, acc, "element", True, True, math="ffma"))
    for head_dim, (bm, bn, warps) in TF32X3_FORWARD_TILES.items():
        for loads, features in (("vector16", False), ("vector16", True), ("element", True)):
            rows.append(Row(80, "fwd", "fp32", head_dim, bm, bn, warps, "registers", loads, features, features,
                            math="tf32x3"))
    bm, bn, warps = TF32X3_GLOBAL_TILE
    for loads in ("vector16", "element"):
        rows.append(Row(80, "fwd", "fp32", GLOBAL_HEAD_DIM, bm, bn, warps, "global", loads, True, True, math="tf32x3"))
    for head_dim, (bm, bn, _) in SM90_TF32X3_FORWARD_TILES.items():
        # The producer and split warpgroups, then a consumer warpgroup per 64 query rows.
        rows.append(Row(90, "fwd", "fp32", head_dim, bm, bn, 4 * (2 + bm // 64), "registers", "vector16", False, False,
                        math="tf32x3", tma=True, min_queries_per_key=SM80_MANY_QUERIES))
    return rows


def backward_rows():
    rows = []
    bm, bn, warps = SM80_BACKWARD_TILE
    for dtype in ("bf16", "fp16"):
        for head_dim in SM80_BACKWARD_BUCKETS:
            pm, pn, pw = SM80_BACKWARD_PLAIN_TILES.get(head_dim, SM80_BACKWARD_TILE)
            rows.append(Row(80, "bwd", dtype, head_dim, pm, pn, pw, "registers", "vector16", False, False))
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
    for head_dim, (bm, bn, warps) in SM80_BACKWARD_TF32X3_TILES.items():
        rows.append(Row(80, "bwd", "fp32", head_dim, bm, bn, warps, "registers", "vector16", False, False,
                        math="tf32x3", atomics=True, fused=True))
    for dtype in ("bf16", "fp16"):
        for head_dim, (bm, bn, warps) in SM80_BACKWARD_FUSED_TILES.items():
            min_queries = SM80_BACKWARD_FUSED_MIN_QUERIES_PER_KEY[head_dim]
            rows.append(Row(80, "bwd", dtype, head_dim, bm, bn, warps, "registers", "vector16", False, False,
                            atomics=True, fused=True, min_queries_per_key=min_queries))
            if head_dim in SM80_BACKWARD_FUSED_BIAS_TILES:
                tm, tn, tw = SM80_BACKWARD_FUSED_BIAS_TILES[head_dim]
                rows.append(Row(80, "bwd", dtype, head_dim, tm, tn, tw, "registers", "vector16", True, False,
                                atomics=True, fused=True, bias_tile=True,
                                min_queries_per_key=SM80_BACKWARD_FUSED_BIAS_MIN_QUERIES_PER_KEY[head_dim]))
            if head_dim in SM80_BACKWARD_FUSED_FALLBACK_TILES:
                xm, xn, xw = SM80_BACKWARD_FUSED_FALLBACK_TILES[head_dim]
                rows.append(Row(80, "bwd", dtype, head_dim, xm, xn, xw, "registers", "vector16", False, False,
                                atomics=True, fused=True, min_queries_per_key=min_queries, fallback=True))
    for dtype in ("bf16", "fp16"):
        for head_dim, (bm, bn, warps, ctas) in SM90_BACKWARD_FUSED_SPLIT_TILES.items():
            rows.append(Row(90, "bwd", dtype, head_dim, bm, bn, warps, "registers", "vector16", False, False,
                            atomics=True, fused=True, head_split=ctas))
        for head_dim, (bm, bn, warps) in SM90_BACKWARD_FUSED_WGMMA_TILES.items():
            rows.append(Row(90, "bwd", dtype, head_dim, bm, bn, warps, "registers", "vector16", False, False,
                            math="wgmma", atomics=True, fused=True,
                            min_queries_per_key=SM90_BACKWARD_FUSED_WGMMA_MIN_QUERIES_PER_KEY[head_dim]))
            if head_dim in SM90_BACKWARD_TMA_TILES:
                tm, tn, _, tq = SM90_BACKWARD_TMA_TILES[head_dim]
                rows.append(Row(90, "bwd", dtype, head_dim, tm, tn, sm90_forward_warps(tn), "registers", "vector16",
                                False, False, math="wgmma", atomics=True, fused=True, tma=True,
                                min_queries_per_key=tq))
                rows.append(Row(90, "bwd", dtype, head_dim, tm, tn, sm90_forward_warps(tn), "registers", "vector16",
                                False, True, math="wgmma", atomics=True, fused=True, tma=True, dropout_paired=True,
                                min_queries_per_key=tq))
            if head_dim in SM90_BACKWARD_FUSED_WGMMA_BIAS_TILES:
                tm, tn, tw = SM90_BACKWARD_FUSED_WGMMA_BIAS_TILES[head_dim]
                rows.append(Row(90, "bwd", dtype, head_dim, tm, tn, tw, "registers", "vector16", True, False,
                                math="wgmma", atomics=True, fused=True, bias_tile=True,
                                min_queries_per_key=SM90_BACKWARD_FUSED_WGMMA_BIAS_MIN_QUERIES_PER_KEY[head_dim]))
    bm, bn, warps, _ = SM80_BACKWARD_GACC_TILE
    for dtype in ("bf16", "fp16"):
        for loads in ("vector16", "element"):
            rows.append(Row(80, "bwd", dtype, GLOBAL_HEAD_DIM, bm, bn, warps, "global", loads, True, True))
    return rows


def row_kind(r):
    """What makes a row a different kernel (not just another size of one): what `reduced` keeps one of."""
    return (r.family, r.pass_, r.dtype == "fp32", r.accumulator, r.math, r.atomics, r.fused, r.bias_tile,
            r.dropout_paired, r.wide, r.head_split, r.tma, r.paged, r.decode, r.loads, r.features)


def catch_all(r):
    """Whether a row runs every problem of its pass and dtype (any head dim, alignment, feature)."""
    return r.head_dim >= GLOBAL_HEAD_DIM and r.loads == "element" and r.bias and r.dropout


def reduced(rows):
    """One row per kernel kind (row_kind), smallest head dim first, and every dtype's catch-all
    rows: each problem of each dtype built still has a row (the GPU tests run every dtype)."""
    seen, out = set(), []
    for r in sorted(rows, key=lambda r: (r.head_dim, r.dtype)):
        kind = row_kind(r)
        if (kind not in seen and not r.fallback) or catch_all(r):
            seen.add(kind)
            out.append(r)
    return out


def covers(a, b, on_sm90=False):
    """Whether row a fits every problem that row b fits, on every GPU that b runs on (or on sm_90
    alone), apart from shared memory: the conditions of the dispatcher's fits() (select.cpp) and
    of its min_queries_per_key preference."""
    return (a.pass_ == b.pass_ and a.dtype == b.dtype and a.head_dim >= b.head_dim and
            (on_sm90 or a.family == 80 or b.family == 90) and  # family-90 rows run on sm_90 only
            (a.loads == "element" or b.loads == "vector16") and
            (a.bias or not b.bias) and (a.dropout or not b.dropout) and
            # a bias-tile row refuses a bias it cannot tile (only problems with bias have one)
            (not a.bias_tile or b.bias_tile or not b.bias) and
            (not a.atomics or b.atomics) and  # atomics: never with `deterministic`
            (not a.tma or b.tma) and  # a TMA row refuses tensors no tensor map describes
            (not (a.tma and a.bias) or (b.tma and b.bias)) and  # the Hopper bias rows: bias problems only
            (a.math != "tf32x3" or b.math == "tf32x3") and  # 3xTF32 rows refuse `precision = ieee`
            a.paged == b.paged and  # a paged KV cache runs on the paged rows alone
            # a cache of one page per sequence runs on the rows that split keys too (strided tensors)
            (splits_keys(a) or not splits_keys(b)) and
            a.min_queries_per_key <= b.min_queries_per_key)


def drop_shadowed(rows):
    """The rows (in priority order) that some earlier row does not cover. Only for builds whose
    sm80 code runs on sm_90 alone (its SASS, no PTX): there the dispatcher never reaches a row
    behind the sm90 family's row of its bucket, or a fallback tile behind its default (those
    serve other GPUs: less shared memory, or sm_100 through the PTX). Every row fits sm_90's
    227 KB of shared memory per CTA, so shared memory does not decide there."""
    return [b for i, b in enumerate(rows) if not any(covers(a, b, on_sm90=True) for a in rows[:i])]


def buckets_for(rows, head_dim):
    """The register buckets the dispatcher can pick for head dim D: each pass's smallest >= D, and
    the bucket of the first row in priority order that serves D (a plain wgmma row sorts ahead of
    smaller sm80 buckets: Row.sort_head_dim)."""
    buckets = set()
    for pass_ in ("fwd", "bwd"):
        fitting = sorted((r for r in rows
                          if r.pass_ == pass_ and r.accumulator == "registers" and r.head_dim >= head_dim),
                         key=Row.sort_key)
        if fitting:
            buckets.add(min(r.head_dim for r in fitting))
            buckets.add(fitting[0].head_dim)
    return sorted(buckets)


def splits_keys(r):
    """Whether a row's kernel can split a query tile's keys over CTAs (split_keys.hpp): the sm80
    register forward (fwd_kernel.hpp)."""
    return (r.pass_ == "fwd" and r.family == 80 and r.accumulator == "registers" and r.math in ("mma", "tf32x3")
            and not r.wide)


def split_ctas_per_sm(r):
    """The CTAs an SM that a split-keys row's part count fills (0: as many as fit). The decoding
    kernel's parts are planned at one an SM though two fit: its four warps read a part at about
    the SM's share of the bandwidth, and more parts only add to the combine (H200, bf16, 32-8 heads,
    B 1-64, 2k and 8k keys: the best count was the one that gives each SM one CTA, and with it the
    kernel ran level with the one-warp tile or ahead)."""
    return 1 if r.decode else 0


def template_args(r):
    loads = "Loads::vector16" if r.loads == "vector16" else "Loads::element"
    features = " | ".join([f for f, on in (("kBias", r.bias), ("kDropout", r.dropout),
                                          ("kBiasTile", r.bias_tile),
                                          ("kDropoutPaired", r.dropout_paired), ("kPagedKV", r.paged)) if on]) or "kPlain"
    if r.pass_ == "bwd" and r.accumulator == "global" and r.math == "ffma":
        element = ELEMENT_TYPES[r.dtype]
        return f"sm80::SimtBwdTraits<{element}>, {features}"
    if r.pass_ == "bwd" and r.tma:
        stages = SM90_BACKWARD_TMA_TILES[r.head_dim][2]
        return f"sm90::BwdTraits<{ELEMENT_TYPES[r.dtype]}, {r.head_dim}, {r.block_m}, {r.block_n}, {stages}>, {features}"
    if r.pass_ == "bwd" and r.fused:
        # The plain 128-key wgmma rows compute S^T and dP^T (one_pass_gemms.hpp's key rows); the
        # bias-tile rows keep query rows, whose dS tile dbias leaves through.
        key_rows = r.math == "wgmma" and r.block_n == 128 and not r.bias_tile
        math = ", GemmKind::wgmma_key_rows" if key_rows else ", GemmKind::wgmma" if r.math == "wgmma" else ""
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
    if r.tma and r.dtype == "fp32":
        stages = SM90_TF32X3_FORWARD_TILES[r.head_dim][2]
        return f"sm90::Tf32x3FwdTraits<{r.head_dim}, {r.block_n}, {stages}>, {features}"
    if r.tma:
        tiles = SM90_FORWARD_FEATURE_TILES if r.bias or r.dropout else SM90_FORWARD_TILES
        stages, schedule = next((t[3], t[4]) for t in tiles if (t[0], t[1], t[2]) == (r.head_dim, r.block_m, r.block_n))
        return (f"sm90::FwdTraits<{ELEMENT_TYPES[r.dtype]}, {r.head_dim}, {r.block_n}, {stages}, "
                f"sm90::ConsumerSchedule::{schedule}, {r.block_m // 64}>, {features}")
    if r.decode:
        return (f"sm80::DecodeTraits<{ELEMENT_TYPES[r.dtype]}, {r.head_dim}, {r.block_m}, {r.block_n}, {r.warps}>, "
                f"{features}")
    if r.wide:
        math = ", GemmKind::wgmma" if r.math == "wgmma" else ""
        split = f", {r.head_split}" if r.head_split > 1 or math else ""
        traits = (f"WideFwdTraits<{ELEMENT_TYPES[r.dtype]}, {r.head_dim // r.head_split}, {r.block_m}, "
                  f"{r.block_n}, {r.warps}{split}{math}>")
    elif r.math == "ffma":
        traits = f"sm80::Fp32FwdTraits<{FP32_BUCKETS[r.head_dim]}>"
    elif r.accumulator == "global":
        traits = (f"sm80::GlobalFwdTraits<{ELEMENT_TYPES[r.dtype]}, {r.block_m}, {r.block_n}, {r.warps}, "
                  f"{SM80_GLOBAL_TILE[3]}, {loads}>")
    else:
        traits = (f"sm80::FwdTraits<{ELEMENT_TYPES[r.dtype]}, {r.head_dim}, {r.block_m}, {r.block_n}, {r.warps}, "
                  f"{loads}>")
    return f"{traits}, {features}"


def write_if_changed(path, text):
    if os.path.exists(path) and open(path).read() == text:
        return
    with open(path, "w") as f:
        f.write(text)


def launcher(r):
    """The header that launches a row's kernel, its launch and resource functions, its params type.
    The wide forward and the one-pass backward are kernel templates both families instantiate
    (src/cuda/common); the TMA forward is the sm90 family's; the others are the sm80 family's."""
    if r.pass_ == "fwd" and r.tma:
        return "cuda/sm90/fwd/launch.hpp", "sm90::launch_forward", "sm90::forward_resources", "FwdParams"
    if r.pass_ == "fwd" and r.wide:
        return "cuda/common/wide_fwd_launch.hpp", "launch_forward_wide", "forward_wide_resources", "FwdParams"
    if r.pass_ == "bwd" and r.tma:
        return "cuda/sm90/bwd/launch.hpp", "sm90::launch_backward", "sm90::backward_resources", "BwdParams"
    if r.pass_ == "bwd" and r.fused:
        return ("cuda/common/one_pass_bwd_launch.hpp", "launch_backward_one_pass", "backward_one_pass_resources",
                "BwdParams")
    if r.pass_ == "bwd":
        suffix = "" if r.accumulator == "registers" else "_global" if r.math == "ffma" else "_gacc"
        return "cuda/sm80/bwd_launch.hpp", f"sm80::launch_backward{suffix}", f"sm80::backward{suffix}_resources", "BwdParams"
    if r.decode:
        return "cuda/sm80/decode/launch.hpp", "sm80::launch_forward_decode", "sm80::forward_decode_resources", "FwdParams"
    suffix = "_fp32" if r.math == "ffma" else "_global" if r.accumulator == "global" else ""
    return "cuda/sm80/fwd_launch.hpp", f"sm80::launch_forward{suffix}", f"sm80::forward{suffix}_resources", "FwdParams"


# Rows per generated translation unit. nvcc's cost per unit apart from the kernels (CUTLASS's
# headers parsed by cudafe++ and by cicc, the host compile) was two thirds of a D = 64 Hopper
# forward row's 12.5 s on one core: three such rows took 38 s as three units, 21 s as one. Units
# of several rows cut the build's work, but a build of few rows on many cores wants a unit each:
# up to MAX_ROWS_PER_UNIT rows a unit while that leaves UNITS_PER_CORE units a core to balance.
MAX_ROWS_PER_UNIT = 4
UNITS_PER_CORE = 3


def rows_per_unit(rows, cores):
    return max(1, min(MAX_ROWS_PER_UNIT, len(rows) // (UNITS_PER_CORE * cores)))


class Unit(NamedTuple):
    """A generated translation unit: rows of one family that share a launch header."""
    name: str
    family: int
    header: str
    rows: list


def translation_units(rows, per_unit):
    """The rows grouped into translation units: rows of one family that share a launch header,
    up to per_unit of them (the bf16 and fp16 twins of a row side by side); the backward's units
    (two kernels a row and more) and the fullest first, so that a parallel build starts its
    longest compiles first."""
    groups = {}
    for r in rows:
        groups.setdefault((r.family, launcher(r)[0]), []).append(r)
    units = []
    for (family, header), members in groups.items():
        members.sort(key=lambda r: (r.pass_, r.head_dim, r.name.replace(r.dtype, "")))
        kind = re.sub(r"^cuda/(common/)?|/?_?launch\.hpp$", "", header).replace("/", "_")  # sm80_fwd, wide_fwd
        if not kind.startswith("sm"):
            kind += f"_sm{family}"
        for i in range(0, len(members), per_unit):
            units.append(Unit(f"{kind}_{i // per_unit:02d}", family, header, members[i:i + per_unit]))
    return sorted(units, key=lambda u: (u.rows[0].pass_ != "bwd", -len(u.rows)))


def generate(rows, out, per_unit):
    os.makedirs(out, exist_ok=True)
    files = []
    # The folder is this script's: units of an earlier configuration go, so that none is mistaken for this one's.
    units = translation_units(rows, per_unit)
    for stale in set(os.listdir(out)) - {f"{u.name}.cu" for u in units} - {"kernel_table_generated.cpp"}:
        if stale.endswith(".cu"):
            os.remove(os.path.join(out, stale))
    for name, family, header, members in units:
        path = os.path.join(out, f"{name}.cu")
        functions = []
        for r in members:
            _, launch, resources, params = launcher(r)
            functions.append(f"""Status {r.name}(const {params}& p, cudaStream_t stream) {{
  return {launch}<{template_args(r)}>(p, stream);
}}

Status {r.name}_resources(KernelResources* r) {{ return {resources}<{template_args(r)}>(r); }}
""")
        body = "\n".join(functions)
        write_if_changed(path, f"""// Generated by src/cuda/kernel_table.py: {len(members)} kernel-table row(s). Do not edit.
#include "{header}"

namespace memattn::cuda::generated {{

{body}
}}  // namespace memattn::cuda::generated
""")
        files.append((family, path, len(members)))
    params = {"fwd": "FwdParams", "bwd": "BwdParams"}
    decls = "\n".join(f"Status {r.name}(const {params[r.pass_]}&, cudaStream_t);\n"
                      f"Status {r.name}_resources(KernelResources*);" for r in rows)

    def entries(pass_):
        return "\n".join(
            f'      {{"{r.name}", Family::sm{r.family}, {CPP_DTYPE[r.dtype]}, {r.head_dim}, {r.block_m}, {r.block_n}, '
            f'{r.warps}, Accumulator::{r.accumulator}, Math::{r.math}, {16 // ELEMENT_BYTES[r.dtype] if r.loads == "vector16" else 1}, '
            f'{str(r.bias).lower()}, {str(r.dropout).lower()}, {str(r.bias_tile).lower()}, {str(r.atomics).lower()}, '
            f'{str(r.fused and r.head_split == 1).lower()}, {str(splits_keys(r)).lower()}, {split_ctas_per_sm(r)}, '
            f'{str(r.tma).lower()}, {str(r.paged).lower()}, '
            f'{r.min_queries_per_key}, {i}, '
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
    files.append((0, table, 0))
    return files


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    ap.add_argument("--families", default="80,90")
    ap.add_argument("--dtypes", default="bf16,fp16,fp32")
    ap.add_argument("--head-dims", default="all")
    ap.add_argument("--set", choices=("all", "reduced"), default="all")
    ap.add_argument("--filter", default="", help="keep only rows whose name matches this regular expression")
    ap.add_argument("--sm80-targets", default="80,90,ptx",
                    help="what the sm80 family's code is built for: SASS architectures, and ptx")
    ap.add_argument("--buckets-for", type=int, metavar="D",
                    help="print the register head-dim buckets that serve head dim D (each pass's smallest bucket "
                         ">= D; empty when only the any-D rows do), for --head-dims")
    ap.add_argument("--rows-per-unit", type=int,
                    help="kernel-table rows per generated translation unit (1: a unit per row; default: "
                         "from the number of rows and of this machine's cores, rows_per_unit)")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    split = lambda s: [x for x in s.replace(";", ",").split(",") if x]
    families = {int(f) for f in split(args.families)}
    dtypes = set(split(args.dtypes))
    rows = [r for r in all_rows() + backward_rows()
            if r.family in families and r.dtype in dtypes]
    if args.buckets_for is not None:
        print(";".join(str(b) for b in buckets_for(rows, args.buckets_for)))
        return 0
    if args.head_dims != "all":
        keep = {int(h) for h in split(args.head_dims) if h != "none"}  # none: the any-D rows alone
        rows = [r for r in rows if r.head_dim in keep or r.accumulator == "global"]
    if args.set == "reduced":
        rows = reduced(rows)
    if args.filter:
        rows = [r for r in rows if re.search(args.filter, r.name)]
    rows.sort(key=lambda r: (r.pass_,) + r.sort_key())
    if set(split(args.sm80_targets)) == {"90"}:
        rows = drop_shadowed(rows)
    if args.list:
        for i, r in enumerate(rows):
            print(f"{i:3d} {r.name}")
        return 0
    if not args.out:
        ap.error("--out is required unless --list")
    if args.rows_per_unit is not None and args.rows_per_unit < 1:
        ap.error(f"--rows-per-unit (MEMATTN_KERNEL_ROWS_PER_UNIT) must be at least 1, got {args.rows_per_unit}")
    per_unit = args.rows_per_unit or rows_per_unit(rows, os.cpu_count() or 1)
    for family, path, count in generate(rows, args.out, per_unit):
        print(f"{family}|{path}|{count}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
