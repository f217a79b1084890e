"""Consistency of the kernel table (src/cuda/kernel_table.py), checked without a GPU.

The dispatcher takes the first row that fits, so the table must always have a row that fits:
for every dtype a non-experimental row that takes any head dim, any alignment and every feature.
Names must be unique (they name the generated files and MEMATTN_KERNEL), the reduced list that
CI compiles must hold one row of every kernel kind, and row fields that only some kernels read
must not appear on the others.
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "cuda"))
import kernel_table as kt  # noqa: E402


class KernelTable(unittest.TestCase):
    def setUp(self):
        self.rows = kt.all_rows() + kt.backward_rows()

    def test_names_are_unique(self):
        names = [r.name for r in self.rows]
        self.assertEqual(len(names), len(set(names)), sorted(n for n in names if names.count(n) > 1))

    def test_every_problem_has_a_verified_row(self):
        # Any D up to 65536, element loads (any alignment), bias and dropout, not experimental.
        for pass_ in ("fwd", "bwd"):
            for dtype in ("bf16", "fp16", "fp32"):
                catch_all = [r for r in self.rows
                             if r.pass_ == pass_ and r.dtype == dtype and not r.experimental and
                             r.head_dim >= kt.GLOBAL_HEAD_DIM and r.loads == "element" and r.bias and r.dropout]
                self.assertTrue(catch_all, f"{pass_} {dtype}: no row takes every problem")

    def test_reduced_list_holds_every_kind(self):
        reduced = kt.reduced(self.rows)
        self.assertEqual({kt.row_kind(r) for r in reduced}, {kt.row_kind(r) for r in self.rows if r.variant == 0})
        self.assertEqual(len(reduced), len({kt.row_kind(r) for r in reduced}))

    def test_row_fields_match_their_kernels(self):
        for r in self.rows:
            with self.subTest(row=r.name):
                if r.min_ctas > 1:  # __launch_bounds__ of the forward register kernel
                    self.assertTrue(r.pass_ == "fwd" and r.accumulator == "registers" and not r.wide)
                if r.wide:  # plain problems, 16-byte loads
                    self.assertEqual((r.pass_, r.features, r.loads), ("fwd", "plain", "vector16"))
                if r.fused:  # dQ by atomics: never chosen with `deterministic` (the dispatcher)
                    self.assertTrue(r.atomics and r.pass_ == "bwd" and not r.dropout)
                if r.min_queries_per_key:
                    self.assertTrue(r.fused)
                if r.bias_tile:
                    self.assertTrue(r.bias and r.loads == "vector16")
                if r.head_split > 1:  # clusters (sm_90) on plain problems with 16-byte loads; the kernels
                    # split the wide forward and the one-pass backward layouts
                    self.assertTrue(r.family == 90 and (r.wide or r.fused) and r.head_dim % r.head_split == 0)
                    self.assertEqual((r.features, r.loads, r.accumulator), ("plain", "vector16", "registers"))

    def test_fallback_tiles_are_extra_tiles(self):
        for head_dim, tile in kt.SM80_BACKWARD_FUSED_FALLBACK_TILES.items():
            self.assertIn(tile, kt.SM80_BACKWARD_FUSED_EXTRA_TILES[head_dim])

    def test_priorities_put_smaller_buckets_first(self):
        # Within a pass and dtype, across families, a verified register row of a smaller bucket
        # sorts first, so that a problem takes the tightest bucket that fits (a family-90 row of a
        # larger bucket must not take what a family-80 row of a smaller one serves).
        for pass_ in ("fwd", "bwd"):
            for dtype in ("bf16", "fp16"):
                rows = sorted((r for r in self.rows if r.pass_ == pass_ and r.dtype == dtype and not r.experimental),
                              key=lambda r: r.sort_key())
                buckets = [r.head_dim for r in rows if r.accumulator == "registers"]
                self.assertEqual(buckets, sorted(buckets), f"{pass_} {dtype}")


if __name__ == "__main__":
    unittest.main()
