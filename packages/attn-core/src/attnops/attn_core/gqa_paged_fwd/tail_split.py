"""Which query blocks of a paged warp-specialized launch to split over their keys so that its last round of work
tiles does not leave SMs idle (``plan.WS_TAIL_SPLITS_DEFAULT``).

The persistent kernel hands program ``p`` the tiles ``p``, ``2·P − 1 − p``, ``2·P + p``, ... (``ws_kernel.
_round_tile``: rounds of ``P`` programs in alternate directions over the items heaviest first, every query head of
an item consecutive). Where the tiles are about equally long, a tile count just past a multiple of ``P`` costs a
whole round for a few of them: qwen35-9b-rope's 2048 tiles of ~33 k keys on 132 SMs are 15.5 rounds of work run in
16. Splitting the lightest blocks into ``s`` shares of their key tiles (each share a work item of its own, merged
by ``kernel_utils.split_combine`` afterwards) fills that round with shorter tiles. A candidate ``(k, s)`` splits
the last ``k`` blocks (all whole, see ``ws_launch.PagedSplits``) into ``s`` shares; the schedule is simulated tile
by tile (the static rounds of the persistent grid, or the hardware's first-free-SM order of one program per tile),
a tile's time modelled from its keys (MMA time at ``SM_FLOPS``, plus ``TILE_OVERHEAD_KEYS``, plus a share's fp32
partial store), the combine's read of the workspace added, and the candidate with the shortest modelled launch
wins if it beats the unsplit one by ``MIN_GAIN``.
"""

from __future__ import annotations

import heapq
import math

import torch

from attnops.attn_core.flash_fwd.ws_launch import BLOCK_M

MAX_BLOCKS = 8  # candidates split the last 1..MAX_BLOCKS blocks ...
SPLIT_COUNTS = (2, 3, 4)  # ... into this many shares each
MIN_GAIN = 0.01  # a split must shorten the modelled launch by this fraction
# a tile's fixed cost in keys' time: its Q load, the ring's first fill and the output store; ~1-2 µs of a D = 256 tile
# that reads ~30 keys a µs (qwen35-9b-rope: 33 k keys in ~1.1 ms)
TILE_OVERHEAD_KEYS = 64
MAX_ROUNDS = 1 / MIN_GAIN  # launches of more rounds of tiles than this cannot gain MIN_GAIN from their last one
# The model's rates (H200): the 16-bit MMA rate one SM sustains in the ws kernel (~500 TF/s over 132 SMs:
# qwen35-9b-rope's 17.5-18 ms for 8.98 TFLOP), the copy bandwidth (4.2 TB/s measured) and the combine launch's fixed
# cost. A 128-row tile spends 4·D FLOPs a row per key (Q·Kᵀ and P·V).
SM_FLOPS = 3.8e12
COPY_BYTES_S = 4.2e12
COMBINE_LAUNCH_S = 4e-6


def tile_seconds(keys: float, head_dim: int) -> float:
    """The modelled time of one 128-row work tile over ``keys`` keys (its fixed cost included)."""
    return (keys + TILE_OVERHEAD_KEYS) * BLOCK_M * 4 * head_dim / SM_FLOPS


def round_program(tile, programs: int):
    """The program of the persistent grid that runs ``tile`` (an int, or an int64 tensor of tiles;
    ``ws_kernel._round_tile`` with ``SNAKE``): i in even rounds, programs − 1 − i in odd ones."""
    r, i = tile // programs, tile % programs
    return (r % 2) * (programs - 1 - 2 * i) + i


def longest_program(tile_costs, programs: int, persistent: bool) -> float:
    """The busiest program's sum of tile costs (a list or an f64 tensor, launch order; persistent: the static
    rounds, summed per program at once; else one program per tile, each started on the SM that frees first)."""
    if persistent:
        costs = torch.as_tensor(tile_costs, dtype=torch.float64)
        program = round_program(torch.arange(costs.numel()), programs)
        return float(torch.bincount(program, weights=costs, minlength=programs).max())
    free = [0.0] * programs
    for c in tile_costs:
        heapq.heapreplace(free, free[0] + c)
    return max(free)


def launch_seconds(block_keys: list[int], units: int, head_dim: int, sms: int, persistent: bool, k: int = 0,
                   s: int = 1) -> float:
    """The modelled time of the launch with its last ``k`` blocks in ``s`` shares (k = 0: none split), the
    combine of the shares included."""
    store_s = BLOCK_M * head_dim * 4 / (COPY_BYTES_S / sms)  # a share's fp32 partial, at one SM's share of the copy

    def tiles(keys: list[int], shares: int) -> list[float]:
        extra = store_s if shares > 1 else 0.0
        return [tile_seconds(math.ceil(x / shares), head_dim) + extra for x in keys for _ in range(units * shares)]

    n = len(block_keys)
    costs = tiles(block_keys[:n - k], 1) + tiles(block_keys[n - k:], s)
    t = longest_program(costs, min(len(costs), sms) if persistent else sms, persistent)
    if k:  # the workspace read and the split rows written by the combine
        t += COMBINE_LAUNCH_S + k * BLOCK_M * units * head_dim * (4 * s + 2) / COPY_BYTES_S
    return t


def choose(block_keys: list[int], splittable: int, units: int, head_dim: int, sms: int, persistent: bool,
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
    best, best_time = None, launch_seconds(block_keys, units, head_dim, sms, persistent) * (1 - MIN_GAIN)
    for k in range(1, min(MAX_BLOCKS, splittable, n) + 1):
        for s in SPLIT_COUNTS:
            t = launch_seconds(block_keys, units, head_dim, sms, persistent, k, s)
            if t < best_time:
                best, best_time = (k, s), t
    return best
