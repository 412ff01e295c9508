"""The shared split-KV combine through the interpreter: both workspace layouts (splits outermost as the GQA
forward writes them, consecutive per row as MLA does), empty splits, rows with no visible key, sinks, a head dim
that is not a power of two, and more splits than one program's tile holds columns for; each in one step and one
split at a time (the path of large workspaces with padded split slots, forced here by a zero
``SERIAL_COMBINE_BYTES`` on the split counts that are not powers of two)."""

import pytest
import torch

from attnops.kernel_utils import runtime, split_combine
from attnops.kernel_utils.attention_fns import LOG2E
from attnops.kernel_utils.split_combine import combine_columns, combine_splits

DEV = runtime.device()


def _merged(o, lse2, sinks=None):
    """fp64 reference: rows' partials ``o`` [rows, S, D] (each normalized by its own sum) with base-2 lse
    [rows, S] merged; a sink per row adds 2^(sink·log2 e) to the denominator; no mass -> 0."""
    o, lse2 = o.double(), lse2.double()
    m = lse2.max(dim=1, keepdim=True).values
    if sinks is not None:
        m = torch.maximum(m, sinks.double()[:, None] * LOG2E)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    w = torch.exp2(lse2 - m)
    den = w.sum(dim=1) + (torch.exp2(sinks.double() * LOG2E - m[:, 0]) if sinks is not None else 0)
    num = (o * w[:, :, None]).sum(dim=1)
    return torch.where(den[:, None] > 0, num / torch.where(den > 0, den, 1)[:, None], torch.zeros_like(num))


def _partials(gen, rows, splits, d):
    o = torch.randn((rows, splits, d), generator=gen)
    lse2 = torch.randn((rows, splits), generator=gen) * 3
    lse2[0, 1 % splits] = float("-inf")  # an empty split (its partial is finite zeros, as the kernels write)
    o[0, 1 % splits] = 0
    lse2[-1] = float("-inf")  # a row no split saw a key of
    o[-1] = 0
    return o, lse2


@pytest.fixture(params=[False, True], ids=["one-step", "serial"])
def serial(request, monkeypatch):
    if request.param:
        monkeypatch.setattr(split_combine, "SERIAL_COMBINE_BYTES", 0)
    return request.param


@pytest.mark.parametrize("splits,d", [(2, 64), (3, 80), (33, 128), (128, 32)])
def test_splits_outermost_with_sinks(splits, d, serial):
    """GQA forward layout: workspace [splits, tokens·heads, D]; output [B, S, H, D] of a dense call (token =
    b·S + query), one sink per head."""
    gen = torch.Generator().manual_seed(splits)
    b, s, h = 2, 3, 4
    rows = b * s * h
    o, lse2 = _partials(gen, rows, splits, d)
    sinks = torch.randn(h, generator=gen)
    ws_o = o.transpose(0, 1).contiguous().to(DEV)
    ws_lse = lse2.t().contiguous().to(DEV)
    out = torch.full((b, s, h, d), float("nan"), dtype=torch.float16, device=DEV)
    combine_splits(ws_o, ws_lse, out, rows=rows, heads=h, num_splits=splits, row_stride=1, split_stride=rows,
                   out_strides=(s, out.stride(0), out.stride(1), out.stride(2)), sinks=sinks.to(DEV))
    want = _merged(o, lse2, sinks.repeat(b * s)).reshape(b, s, h, d)
    torch.testing.assert_close(out.cpu().double(), want, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("splits", [2, 22, 32])
def test_splits_consecutive_per_row(splits, serial):
    """MLA layout: partials [B, H, splits, D], output a strided [B, H, D] view, no sink."""
    gen = torch.Generator().manual_seed(100 + splits)
    b, h, d = 3, 16, 512
    o, lse2 = _partials(gen, b * h, splits, d)
    store = torch.full((b, h, d + 64), float("nan"), dtype=torch.bfloat16, device=DEV)
    out = store[:, :, :d]
    combine_splits(o.contiguous().to(DEV), lse2.contiguous().to(DEV), out, rows=b * h, heads=h, num_splits=splits,
                   row_stride=splits, split_stride=1, out_strides=(1, out.stride(0), 0, out.stride(1)))
    want = _merged(o, lse2).reshape(b, h, d)
    torch.testing.assert_close(out.cpu().double(), want, atol=2e-2, rtol=1e-2)
    assert store[:, :, d:].isnan().all()  # nothing written past the view's columns


@pytest.mark.parametrize("splits", [2, 3])
def test_blocks_placed_by_index(splits, serial):
    """Blocks of output rows placed by ``block_index`` (the paged warp-specialized kernel's split query blocks):
    partials [blocks, rows of a block, H, splits, D], block i's rows at token ``block_index[i]`` onwards of a
    [T, H, D] output with a sink per head; every other token keeps its NaN."""
    gen = torch.Generator().manual_seed(7 + splits)
    n_blocks, rows, h, d, t = 3, 4, 2, 64, 20
    o, lse2 = _partials(gen, n_blocks * rows * h, splits, d)
    sinks = torch.randn(h, generator=gen)
    starts = torch.tensor([12, 0, 5], dtype=torch.int32)
    out = torch.full((t, h, d), float("nan"), dtype=torch.float16, device=DEV)
    combine_splits(o.contiguous().to(DEV), lse2.contiguous().to(DEV), out, rows=n_blocks * rows * h, heads=h,
                   num_splits=splits, row_stride=splits, split_stride=1,
                   out_strides=(rows, out.stride(0), out.stride(0), out.stride(1)), sinks=sinks.to(DEV),
                   block_index=starts.to(DEV))
    want = _merged(o, lse2, sinks.repeat(n_blocks * rows)).reshape(n_blocks, rows, h, d)
    written = torch.zeros(t, dtype=torch.bool)
    for i, start in enumerate(starts.tolist()):
        torch.testing.assert_close(out[start:start + rows].cpu().double(), want[i], atol=2e-3, rtol=2e-3)
        written[start:start + rows] = True
    assert out[~written.to(DEV)].isnan().all()


def test_combine_columns():
    """Columns a combine program merges: its [splits, columns] tile within COMBINE_TILE_ELEMS, at least 16, at
    most the padded head dim."""
    assert [combine_columns(s, 256) for s in (1, 2, 3, 32, 33, 128)] == [256, 256, 256, 64, 32, 16]
    assert combine_columns(4, 64) == 64 and combine_columns(128, 8) == 8
