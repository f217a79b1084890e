"""Session 15: a model of the hardware's greedy CTA scheduler for the suite's causal rows, to size
the work order's groups (tile_scheduler.hpp, rank_work; dispatch.cpp, work_group).

CTAs start in index order on the first free slot (resident CTA); a tile's time is its number of
steps (key tiles for the forward, query tiles for the backward) plus one for loading and storing.
Prints the makespan over the ideal (total work / slots) pair by pair and with the groups
dispatch.cpp picks (pairs / ceil(2 * slots / tiles) groups, sizes differing by at most one), for
the suite's hidden size and 1.5x it. (Groups of ceil(slots / tiles) pairs, or a last group with
the remainder, left some rows 5-9% over the ideal.)
  python3 bench/ab/s15_schedule.py
"""
import heapq
import math


def makespan(durations, slots):
    free = [0.0] * slots
    for d in durations:
        heapq.heappush(free, heapq.heappop(free) + d)
    return max(free)


def order(weights_heaviest_first, pairs, groups):
    """Tile weights in launch order: `groups` groups of pairs (sizes differing by at most one, the
    larger first), each group tile rank by tile rank; groups 0: one pair after another."""
    if groups <= 0 or groups >= pairs:
        return [w for _ in range(pairs) for w in weights_heaviest_first]
    small, large = divmod(pairs, groups)
    out = []
    for g in range(groups):
        size = small + 1 if g < large else small
        for w in weights_heaviest_first:
            out += [w] * size
    return out


def ratio(weights, pairs, slots, groups):
    items = order(sorted(weights, reverse=True), pairs, groups)
    return makespan(items, slots) / (sum(items) / slots)


def forward_weights(s, block_m=128, block_n=64):
    return [(m + 1) * block_m // block_n + 1 for m in range(s // block_m)]


def backward_weights(s, block_m, block_n):
    return [(s - n * block_n) // block_m + 1 for n in range(s // block_n)]


def main():
    tokens = 16384
    worst = [1.0, 1.0]
    for hidden in (2048, 3072):
        for d in (64, 128, 256):
            for s in (512, 1024, 2048, 4096, 8192, 16384):
                pairs = tokens // s * hidden // d
                # the suite's rows: forward 128 x 64 tiles (two CTAs per SM; D = 256 one), backward
                # one-pass tiles (D = 64: 128 x 128, D = 128: 64 x 128, D = 256: 64 x 64), one per SM
                bwd = {64: (128, 128), 128: (64, 128), 256: (64, 64)}[d]
                for name, weights, slots in (("fwd", forward_weights(s), 132 if d == 256 else 264),
                                             ("bwd", backward_weights(s, *bwd), 132)):
                    tiles = len(weights)
                    groups = max(1, pairs // math.ceil(2 * slots / tiles))
                    before, after = ratio(weights, pairs, slots, 0), ratio(weights, pairs, slots, groups)
                    worst = [max(worst[0], before), max(worst[1], after)]
                    print(f"{name} hidden {hidden} D={d:3d} S={s:5d} pairs {pairs:4d} tiles {tiles:3d}: "
                          f"pair by pair {before:.3f}, {groups:3d} groups {after:.3f}")
    print(f"worst: pair by pair {worst[0]:.3f}, groups {worst[1]:.3f}")


if __name__ == "__main__":
    main()
