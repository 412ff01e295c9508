"""Which query blocks of a paged warp-specialized launch to split over their keys so that its last round of work
tiles does not leave SMs idle (``plan.WS_TAIL_SPLITS_DEFAULT``).

The persistent kernel hands program ``p`` the tiles ``p``, ``2·P − 1 − p``, ``2·P + p``, ... (``ws_kernel.
_round_tile``: rounds of ``P`` programs in alternate directions over the items heaviest first, every query head of
an item consecutive). Where the tiles are about equally long, a tile count just past a multiple of ``P`` costs a
whole round for a few of them: qwen35-9b-rope's 2048 tiles of ~33 k keys on 132 SMs are 15.5 rounds of work run in
16. Splitting the lightest blocks into ``s`` shares of their key tiles (each share a work item of its own, merged
by ``kernel_utils.split_combine`` afterwards) fills that round with shorter tiles. A candidate ``(k, s)`` splits
the last ``k`` blocks (all whole, see ``PagedSplits``) into ``s`` shares; the schedule is simulated tile by tile
(the static rounds of the persistent grid, or the hardware's first-free-SM order of one program per tile) with a
tile's time modelled as its keys plus ``TILE_OVERHEAD_KEYS``, and the candidate with the shortest longest program
wins if it beats the unsplit launch by ``MIN_GAIN``.
"""

from __future__ import annotations

import heapq
import math

MAX_BLOCKS = 8  # candidates split the last 1..MAX_BLOCKS blocks ...
SPLIT_COUNTS = (2, 3, 4)  # ... into this many shares each
MIN_GAIN = 0.01  # a split must shorten the modelled launch by this fraction
# a tile's fixed cost in keys' time: its Q load, the ring's first fill and the output (or partial) store; ~1-2 µs
# of a D = 256 tile that reads ~30 keys a µs (qwen35-9b-rope: 33 k keys in ~1.1 ms)
TILE_OVERHEAD_KEYS = 64
MAX_ROUNDS = 1 / MIN_GAIN  # launches of more rounds of tiles than this cannot gain MIN_GAIN from their last one


def round_program(tile: int, programs: int) -> int:
    """The program of the persistent grid that runs ``tile`` (``ws_kernel._round_tile`` with ``SNAKE``)."""
    r, i = divmod(tile, programs)
    return programs - 1 - i if r % 2 else i


def longest_program(tile_costs: list[float], programs: int, persistent: bool) -> float:
    """The modelled launch time: the busiest program's sum of tile costs (persistent: the static rounds; else one
    program per tile, each started on the SM that frees first)."""
    if persistent:
        load = [0.0] * programs
        for t, c in enumerate(tile_costs):
            load[round_program(t, programs)] += c
        return max(load)
    free = [0.0] * programs
    for c in tile_costs:
        heapq.heapreplace(free, free[0] + c)
    return max(free)


def choose(block_keys: list[int], splittable: int, units: int, sms: int, persistent: bool,
           forced: tuple[int, int] | None = None) -> tuple[int, int] | None:
    """``(k, s)``: split the last ``k`` of the blocks (key counts ``block_keys``, heaviest first; each is ``units``
    tiles, one per query head) into ``s`` shares each, or None. Only the last ``splittable`` blocks may be split
    (whole blocks at the end of the order). ``forced``: that candidate if it is possible, whatever the model says."""
    n = len(block_keys)
    if forced is not None:
        k, s = forced
        return (k, s) if 1 <= k <= min(splittable, n) and s >= 2 else None
    if n == 0 or n * units > MAX_ROUNDS * sms:
        return None

    def cost(keys: int, shares: int) -> float:
        return math.ceil(keys / shares) + TILE_OVERHEAD_KEYS

    def launch_time(tile_costs: list[float]) -> float:  # (the persistent grid: one program per tile up to the SMs)
        return longest_program(tile_costs, min(len(tile_costs), sms) if persistent else sms, persistent)

    whole = [cost(x, 1) for x in block_keys for _ in range(units)]
    best, best_time = None, launch_time(whole) * (1 - MIN_GAIN)
    for k in range(1, min(MAX_BLOCKS, splittable, n) + 1):
        for s in SPLIT_COUNTS:
            shares = [cost(x, s) for x in block_keys[n - k:] for _ in range(s * units)]
            t = launch_time(whole[:(n - k) * units] + shares)
            if t < best_time:
                best, best_time = (k, s), t
    return best
