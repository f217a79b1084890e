"""Consistency of the kernel table (src/cuda/kernel_table.py), checked without a GPU.

The dispatcher takes the first row that fits, so the table must always have a row that fits:
for every dtype a row that takes any head dim, any alignment and every feature. Every row must
be the first fitting row for some problem on some GPU: none may stand behind an earlier row that
fits everything it fits, unless it is a fallback tile (less shared memory) for GPUs where that
earlier row does not fit. Names must be unique (they name the generated files and
MEMATTN_KERNEL), the reduced list that CI compiles must hold one row of every kernel kind, and
row fields that only some kernels read must not appear on the others.
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "cuda"))
import kernel_table as kt  # noqa: E402


covers = kt.covers


class KernelTable(unittest.TestCase):
    def setUp(self):
        self.rows = kt.all_rows() + kt.backward_rows()

    def test_names_are_unique(self):
        names = [r.name for r in self.rows]
        self.assertEqual(len(names), len(set(names)), sorted(n for n in names if names.count(n) > 1))

    def test_every_problem_has_a_row(self):
        # Any D up to 65536, element loads (any alignment), bias and dropout.
        for pass_ in ("fwd", "bwd"):
            for dtype in ("bf16", "fp16", "fp32"):
                catch_all = [r for r in self.rows if r.pass_ == pass_ and r.dtype == dtype and kt.catch_all(r)]
                self.assertTrue(catch_all, f"{pass_} {dtype}: no row takes every problem")

    def test_priority_order_is_explicit(self):
        # No two rows of a pass and dtype tie on the sort key (the order would be the list's).
        for pass_ in ("fwd", "bwd"):
            for dtype in ("bf16", "fp16", "fp32"):
                keys = [r.sort_key() for r in self.rows if r.pass_ == pass_ and r.dtype == dtype]
                self.assertEqual(len(keys), len(set(keys)), f"{pass_} {dtype}")

    def test_every_row_can_be_chosen_first(self):
        # A row behind one that covers it is never chosen, unless it is a fallback tile: a smaller
        # tile of the same kernel for GPUs whose shared memory the row in front does not fit.
        for pass_ in ("fwd", "bwd"):
            for dtype in ("bf16", "fp16", "fp32"):
                rows = sorted((r for r in self.rows if r.pass_ == pass_ and r.dtype == dtype), key=lambda r: r.sort_key())
                for i, b in enumerate(rows):
                    for a in rows[:i]:
                        if not covers(a, b):
                            continue
                        with self.subTest(row=b.name, behind=a.name):
                            self.assertTrue(b.fallback, f"{b.name} is never chosen: {a.name} comes first")
                            self.assertEqual(kt.row_kind(a), kt.row_kind(b))
                            self.assertLess(b.block_m * b.block_n, a.block_m * a.block_n)

    def test_sm90_builds_leave_out_only_unreachable_rows(self):
        # With the sm80 family's code for sm_90 alone, the rows left out are the fallback tiles and
        # the mma.sync rows behind a wgmma row of their bucket, each covered by a row that stays.
        rows = sorted(self.rows, key=lambda r: (r.pass_,) + r.sort_key())
        kept = kt.drop_shadowed(rows)
        dropped = [r for r in rows if r not in kept]
        self.assertTrue(dropped)
        for b in dropped:
            with self.subTest(row=b.name):
                self.assertTrue(b.fallback or b.family == 80)
                front = [a for a in kept if covers(a, b, on_sm90=True) and rows.index(a) < rows.index(b)]
                self.assertTrue(front)
                self.assertTrue(b.fallback or any(a.family == 90 for a in front))
        self.assertEqual([r for r in rows if r.family == 90], [r for r in kept if r.family == 90])
        self.assertEqual([r for r in rows if r.accumulator == "global"], [r for r in kept if r.accumulator == "global"])

    def test_reduced_list_holds_every_kind(self):
        reduced = kt.reduced(self.rows)
        self.assertEqual({kt.row_kind(r) for r in reduced}, {kt.row_kind(r) for r in self.rows if not r.fallback})
        # One row per kind, besides the catch-all rows that every dtype keeps.
        self.assertEqual(len([r for r in reduced if not kt.catch_all(r)]),
                         len({kt.row_kind(r) for r in reduced if not kt.catch_all(r)}))
        for pass_ in ("fwd", "bwd"):
            for dtype in ("bf16", "fp16", "fp32"):
                with self.subTest(pass_=pass_, dtype=dtype):
                    self.assertTrue([r for r in reduced if r.pass_ == pass_ and r.dtype == dtype and kt.catch_all(r)])

    def test_row_fields_match_their_kernels(self):
        for r in self.rows:
            with self.subTest(row=r.name):
                if r.wide:  # plain problems, 16-byte loads
                    self.assertEqual((r.pass_, r.features, r.loads), ("fwd", "plain", "vector16"))
                if r.atomics:  # dQ by atomics: only the one-pass backward
                    self.assertTrue(r.fused)
                if r.fused:  # never chosen with `deterministic` (the dispatcher); dropout on the Hopper rows only
                    self.assertTrue(r.atomics and r.pass_ == "bwd" and (r.tma or not r.dropout))
                if r.min_queries_per_key:  # the one-pass backward, or a plain, paged or Hopper bias or
                    # dropout forward with a smaller tile
                    self.assertTrue(r.fused or (r.pass_ == "fwd" and (r.features in ("plain", "paged") or
                                                                     (r.tma and r.features in ("bias", "drop")))))
                    # A tile for fewer queries sorts behind it, in its bucket, down to one for any: a
                    # smaller one, or the sm80 family's (which splits the keys where few queries see them).
                    if r.pass_ == "fwd":
                        # (its features, or every feature: a bucket without a bias-only or dropout-only sm80 row)
                        few = [f for f in self.rows if (f.pass_, f.dtype, f.head_dim) == ("fwd", r.dtype, r.head_dim)
                               and f.features in (r.features, "full" if r.features in ("bias", "drop") else r.features)
                               and (f.block_m < r.block_m or f.family < r.family)
                               and f.min_queries_per_key < r.min_queries_per_key and f.sort_key() > r.sort_key()]
                        self.assertTrue(few, f"{r.name}: no few-queries tile behind it")
                if r.bias_tile:
                    self.assertTrue(r.bias and r.loads == "vector16")
                if r.paged:  # the sm80 register forward (paged_kv.hpp), without bias or dropout, splitting keys
                    self.assertEqual((r.pass_, r.family, r.accumulator, r.math, r.wide, r.bias, r.dropout),
                                     ("fwd", 80, "registers", "mma", False, False, False))
                    self.assertTrue(kt.splits_keys(r))
                if r.fallback:  # right behind the default tile of its bucket and kind
                    self.assertEqual((r.accumulator, r.loads), ("registers", "vector16"))
                if r.head_split > 1:  # clusters (sm_90) on plain problems with 16-byte loads; the kernels
                    # split the wide forward and the one-pass backward layouts
                    self.assertTrue(r.family == 90 and (r.wide or r.fused) and r.head_dim % r.head_split == 0)
                    self.assertEqual((r.features, r.loads, r.accumulator), ("plain", "vector16", "registers"))

    def test_one_page_caches_find_a_plain_twin_of_each_paged_row(self):
        # A cache of one page per sequence runs on the rows that split keys, as strided K and V
        # (select.cpp): each paged row has a plain twin of its tile in front of it.
        for r in self.rows:
            if not r.paged:
                continue
            with self.subTest(row=r.name):
                twins = [t for t in self.rows if not t.paged and kt.splits_keys(t) and t.features == "plain" and
                         (t.pass_, t.dtype, t.head_dim, t.block_m, t.block_n, t.warps, t.loads) ==
                         (r.pass_, r.dtype, r.head_dim, r.block_m, r.block_n, r.warps, r.loads)]
                self.assertEqual(len(twins), 1)
                self.assertLess(twins[0].sort_key(), r.sort_key())

    def test_priorities_put_smaller_buckets_first(self):
        # Within a pass and dtype, across families, a register row of a smaller bucket sorts first,
        # so that a problem takes the tightest bucket that fits, except that a plain wgmma row goes
        # ahead of the sm80 buckets it covers with at most a quarter of its columns padding (no
        # other family-90 row of a larger bucket takes what a family-80 row of a smaller one serves).
        for pass_ in ("fwd", "bwd"):
            for dtype in ("bf16", "fp16"):
                rows = sorted((r for r in self.rows if r.pass_ == pass_ and r.dtype == dtype),
                              key=lambda r: r.sort_key())
                registers = [r for r in rows if r.accumulator == "registers"]
                for i, b in enumerate(registers):
                    for a in registers[:i]:
                        if a.head_dim > b.head_dim:
                            with self.subTest(row=b.name, behind=a.name):
                                self.assertTrue(a.math == "wgmma" and a.features == "plain" and b.family == 80
                                                and 4 * b.head_dim >= 3 * a.head_dim)

    def test_buckets_for_includes_the_first_row_that_serves(self):
        rows = kt.all_rows() + kt.backward_rows()
        self.assertEqual(kt.buckets_for(rows, 96), [96, 128])  # D = 96: the Hopper D = 128 rows first
        self.assertEqual(kt.buckets_for(rows, 64), [64])
        self.assertEqual(kt.buckets_for(rows, 150), [192])
        self.assertEqual(kt.buckets_for(rows, 100), [128])

    def test_units_hold_every_row_once_with_one_launcher(self):
        # A unit compiles with its family's options and includes one launch header.
        for per_unit in (1, 3, 4):
            units = kt.translation_units(self.rows, per_unit)
            names = [u.name for u in units]
            self.assertEqual(len(names), len(set(names)))
            held = [r.name for u in units for r in u.rows]
            self.assertEqual(sorted(held), sorted(r.name for r in self.rows))
            for name, family, header, members in units:
                self.assertTrue(1 <= len(members) <= per_unit, name)
                self.assertEqual({(r.family, kt.launcher(r)[0]) for r in members}, {(family, header)}, name)

    def test_rows_per_unit_keeps_units_for_every_core(self):
        self.assertEqual(kt.rows_per_unit(self.rows[:17], 16), 1)  # run.sh's few rows: one a unit
        self.assertEqual(kt.rows_per_unit(self.rows[:177], 16), 3)
        self.assertEqual(kt.rows_per_unit(self.rows, 2), kt.MAX_ROWS_PER_UNIT)


if __name__ == "__main__":
    unittest.main()
