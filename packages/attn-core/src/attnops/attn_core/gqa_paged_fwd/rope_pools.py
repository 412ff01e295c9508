"""RoPE calls on the warp-specialized paged kernel: its TMA loader copies key pages as they are, so a call that
rotates its cached keys (GQAPagedFwd with ``pos_encoding_mode='rope'``) gets a rotated copy of the pages its table
reaches, the queries rotated at their positions, and then runs like a call without RoPE.

Why: the Triton tile rotates every key tile in every query block's loop and runs ~2x slower than the ws kernel on
the same shapes (H100, 2026-12-06: llama-8b-rope-prefill 571 µs, its twin without RoPE at twice the requests 430).
The copy is every reachable page of K and V once (V too, so one table serves both) plus a rotation pass over K:
~4 passes over the request's K bytes, ~35-50 µs on llama-8b-rope-prefill's 67 MB against ~300 µs saved.
Measured there (H100, beside the peers, checked): 571 -> 314 µs, FlashInfer 511 (docs/perf/attn-core.md).
"""

from __future__ import annotations

import torch

from attnops.attn_core.flash_fwd.launch import rotate_rows
from attnops.kernel_utils import testing

# Calls whose copy would exceed this stay on the Triton tile (rotation in its key loop): the copy is scratch
# memory of the call.
MAX_COPY_BYTES = 1 << 30
# and calls whose table has more than this many slots per page their KV lengths reach (at plan time): the copy's
# cost grows with the table, the work's with the lengths.
MAX_TABLE_SLACK = 2
ROPE_POOL_COPY_DEFAULT = True


def copy_bytes(k_pool: torch.Tensor, table: torch.Tensor) -> int:
    """Bytes of the K and V copies: every page slot of ``table`` (``[B, W]``) of a ``[pages, PS, H_kv, D]`` pool."""
    return 2 * table.numel() * k_pool[0].numel() * k_pool.element_size()


def rotated_pools(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, table: torch.Tensor,
                  cache_lens: torch.Tensor, cu_q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                  rotary_dim: int, interleaved: bool, max_q: int):
    """``(q, k_pool, v_pool, table)`` for a call without RoPE that computes the same attention: request b's W table
    slots become pages ``b·W .. b·W + W − 1`` of new contiguous pools (its keys rotated at their positions 0, 1,
    ...), its queries rotated at ``cache_len − q_len + i`` (GQAPagedFwd: the cache counts
    the query tokens). Table entries past a request's pages may hold anything: they are clamped into the pool (their
    copies are never read). No host sync."""
    batch, width = table.shape
    pages, page_size, kv_heads, d = k_pool.shape
    ids = table.reshape(-1).clamp(0, pages - 1)
    keys = k_pool.index_select(0, ids).view(batch, width * page_size, kv_heads, d)
    v_copy = v_pool.index_select(0, ids)
    k_rot = testing.kernel_buffer(v_copy.shape, v_copy.dtype, v_copy.device)
    # (slots at positions past the tables' rows are copied unrotated, as the Triton tile reads them)
    rotate_rows(keys, cos, sin, rotary_dim, interleaved, batch=batch, max_rows=width * page_size,
                out=k_rot.view(batch, width * page_size, kv_heads, d))
    q_lens = cu_q[1:] - cu_q[:-1]
    q_rot = rotate_rows(q, cos, sin, rotary_dim, interleaved, batch=batch, max_rows=max_q, cu=cu_q,
                        pos_off=(cache_lens - q_lens).to(torch.int32))
    new_table = torch.arange(batch * width, dtype=torch.int32, device=table.device).view(batch, width)
    return q_rot, k_rot, v_copy, new_table
