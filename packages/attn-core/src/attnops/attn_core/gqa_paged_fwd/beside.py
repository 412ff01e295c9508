"""Whether a mixed paged batch's small class (its decode requests, on the Triton split-KV kernel) runs beside its
warp-specialized large launch, and how many SMs the large launch leaves it (``plan.SMALL_BESIDE_DEFAULT``).

Why: llama-8b-serving-step (one 1024-token prefill and 31 decodes over 4096 keys each) runs its two launches one
after the other, 133 µs of prefill tiles and then 122 µs of decodes reading ~520 MB at the copy speed (H200,
2026-12-03, per-kernel times): one launch computes, the other reads, and neither overlaps the other. A side stream
alone does not overlap them: the persistent grid takes every SM (a program holds most of an SM's shared memory), and
where the decode launch came first (the reverted ``run_beside`` of 2026-12-03) its programs spread over every SM and
kept the prefill's programs waiting. So the large launch goes first with a persistent grid of ``P − R`` programs,
and the decode launch, planned for the ``R`` SMs left (its split count), runs beside it on a side stream
(``kernel_utils.runtime.side_stream``).

Model: the large launch's tiles on ``P − R`` programs (``tail_split``'s static rounds and tile cost), the small
class's K / V bytes read at ``min(copy speed, R · SM_COPY_BYTES_S)``; the ``R`` whose slower side is fastest wins if
it beats running the two one after the other (the large launch on every SM, then the small class at the copy speed)
by ``MIN_GAIN``. For serving-step: 256 tiles of ~3.6 k keys in 2 rounds on 132 programs (~128 µs) + 124 µs of reads
(~252; measured 255) against 3 rounds on 86 programs (~192 µs) beside the reads on 46 SMs (~177 µs): ~192.
"""

from __future__ import annotations

import torch

from attnops.attn_core.gqa_paged_fwd import tail_split

# What one SM's share of a decode launch reads per second when few SMs run it. Not measured: the assumption that
# about half of the H200's 132 SMs reach its copy speed (4.2 TB/s / 66). The sweep's forced counts
# (``small_beside=R``) measure the real trade.
SM_COPY_BYTES_S = 64e9
MIN_GAIN = 0.03  # beside must shorten the modelled pair by this fraction


def small_seconds(small_bytes: float, sms: int) -> float:
    """The small class's reads on ``sms`` SMs."""
    return small_bytes / min(tail_split.COPY_BYTES_S, sms * SM_COPY_BYTES_S)


def large_seconds(tile_costs: torch.Tensor, programs: int) -> float:
    """The persistent large launch on ``programs`` programs: its busiest one (``tail_split.longest_program``)."""
    return tail_split.longest_program(tile_costs, min(programs, tile_costs.numel()), persistent=True)


def seconds(tile_keys: list[int], head_dim: int, sms: int, small_bytes: float, reserved: int) -> float:
    """The modelled time of the pair: one after the other (``reserved`` 0) or beside each other with ``reserved``
    SMs left to the small class."""
    costs = _tile_costs(tile_keys, head_dim)
    if reserved == 0:
        return large_seconds(costs, sms) + small_seconds(small_bytes, sms)
    return max(large_seconds(costs, sms - reserved), small_seconds(small_bytes, reserved))


def choose(tile_keys: list[int], head_dim: int, sms: int, small_bytes: float) -> int | None:
    """The SMs to leave to the small class (``1 <= R < sms``), or None where running beside does not pay."""
    if not tile_keys or small_bytes <= 0 or sms < 2:
        return None
    costs = _tile_costs(tile_keys, head_dim)
    best, best_time = None, (large_seconds(costs, sms) + small_seconds(small_bytes, sms)) * (1 - MIN_GAIN)
    for reserved in range(1, sms):
        t = max(large_seconds(costs, sms - reserved), small_seconds(small_bytes, reserved))
        if t < best_time:
            best, best_time = reserved, t
    return best


def _tile_costs(tile_keys: list[int], head_dim: int) -> torch.Tensor:
    return torch.tensor([tail_split.tile_seconds(k, head_dim) for k in tile_keys], dtype=torch.float64)
