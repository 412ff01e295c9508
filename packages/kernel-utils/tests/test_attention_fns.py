"""attention_fns through the interpreter: key ranges against a brute-force mask, RoPE layouts, tanh,
online softmax with fully masked rows, split merge and sinks."""

import math

import pytest
import torch
import triton
import triton.language as tl

from attnops.kernel_utils import runtime
from attnops.kernel_utils.attention_fns import (
    LOG2E,
    add_sink,
    clamp_range,
    kv_block_range,
    merge_partial,
    normalize_rows,
    online_softmax_step,
    rope_pairing,
    rope_rotate,
    rope_tables,
    rope_tile,
    row_lse2,
    split_kv_range,
    tanh_f32,
    visible,
    window_bounds,
)

DEV = runtime.device()


@triton.jit
def _range_kernel(out_ptr, vis_ptr, q_lo, q_hi, kv_len, WL, WR, BLOCK_N: tl.constexpr, NK: tl.constexpr):
    n_lo, full_lo, full_hi, n_hi = kv_block_range(q_lo, q_hi, kv_len, WL, WR, BLOCK_N)
    tl.store(out_ptr + 0, n_lo)
    tl.store(out_ptr + 1, full_lo)
    tl.store(out_ptr + 2, full_hi)
    tl.store(out_ptr + 3, n_hi)
    a, b = split_kv_range(n_lo, n_hi, 1, 3, BLOCK_N)
    tl.store(out_ptr + 4, a)
    tl.store(out_ptr + 5, b)
    tl.store(out_ptr + 6, clamp_range(full_lo, a, b))
    rows = q_lo + tl.arange(0, 16)
    keys = tl.arange(0, NK)
    tl.store(vis_ptr + tl.arange(0, 16)[:, None] * NK + keys[None, :], visible(rows, keys, kv_len, WL, WR).to(tl.int8))


@pytest.mark.parametrize("causal,wl,wr", [(True, -1, -1), (False, -1, -1), (True, 5, -1), (False, 3, 7), (True, 40, 2)])
@pytest.mark.parametrize("q_lo,kv_len", [(-20, 10), (0, 50), (13, 64), (40, 45)])
def test_key_ranges_cover_exactly_the_visible_keys(causal, wl, wr, q_lo, kv_len):
    WL, WR = window_bounds(causal, wl, wr)
    q_hi = q_lo + 15
    out = torch.zeros(8, dtype=torch.int32, device=DEV)
    vis = torch.zeros(16, 64, dtype=torch.int8, device=DEV)
    _range_kernel[(1,)](out, vis, q_lo, q_hi, kv_len, WL, WR, BLOCK_N=16, NK=64)
    n_lo, full_lo, full_hi, n_hi, a, b, _ = out.tolist()[:7]
    i = torch.arange(q_lo, q_hi + 1)[:, None]
    j = torch.arange(64)[None, :]
    expect = (j < kv_len) & (j <= i + (0 if causal else 10**9)) & (j >= i - (wl if wl >= 0 else 10**9))
    if wr >= 0:
        expect &= j <= i + wr
    assert torch.equal(vis.bool().cpu(), expect)
    cols = expect.any(0).nonzero().flatten().tolist()
    if cols:
        assert n_lo <= cols[0] and n_hi > cols[-1] and n_lo % 16 == 0
    else:
        assert n_lo == n_hi
    assert n_lo <= full_lo <= full_hi and full_hi <= max(n_hi, n_lo)
    if full_hi > full_lo:
        assert bool(expect[:, full_lo:full_hi].all())
    assert n_lo <= a <= b <= max(n_hi, n_lo)


@triton.jit
def _rope_kernel(x_ptr, cos_ptr, sin_ptr, y_ptr, BD: tl.constexpr, R: tl.constexpr, INTERLEAVED: tl.constexpr):
    rows = tl.arange(0, 16)
    d = tl.arange(0, BD)
    partner, col, sign, rot = rope_pairing(d, R, INTERLEAVED)
    x = tl.load(x_ptr + rows[:, None] * BD + d[None, :])
    xp = tl.load(x_ptr + rows[:, None] * BD + partner[None, :])
    c, s = rope_tables(cos_ptr, sin_ptr, 15 - rows, col, rot, rows < 16, R // 2)
    tl.store(y_ptr + rows[:, None] * BD + d[None, :], rope_rotate(x, xp, c, s, sign))
    tl.store(y_ptr + 16 * BD + rows[:, None] * BD + d[None, :], tanh_f32(x * 30.0))


def _rope_reference(x, cos, sin, r, interleaved):
    """fp32 RoPE of the 16 test rows; the kernels place row i at position 15 - i."""
    c, s = cos.flip(0), sin.flip(0)
    ref = x.clone()
    i0, i1 = (slice(0, r, 2), slice(1, r, 2)) if interleaved else (slice(0, r // 2), slice(r // 2, r))
    ref[:, i0] = x[:, i0] * c - x[:, i1] * s
    ref[:, i1] = x[:, i1] * c + x[:, i0] * s
    return ref


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rotary_dim", [16, 32])
def test_rope_layouts_and_tanh(interleaved, rotary_dim):
    bd, r = 32, rotary_dim
    x = torch.randn(16, bd)
    cos, sin = torch.randn(16, r // 2), torch.randn(16, r // 2)
    y = torch.empty(32, bd)
    _rope_kernel[(1,)](x, cos, sin, y, BD=bd, R=r, INTERLEAVED=interleaved)
    ref = _rope_reference(x, cos, sin, r, interleaved)
    torch.testing.assert_close(y[:16], ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(y[16:], torch.tanh(x * 30.0), atol=1e-6, rtol=0)


@triton.jit
def _rope_tile_kernel(x_ptr, cos_ptr, sin_ptr, y_ptr, BD: tl.constexpr, R: tl.constexpr, INTERLEAVED: tl.constexpr):
    rows = tl.arange(0, 16)
    d = tl.arange(0, BD)
    x_rows = x_ptr + rows * BD
    x = tl.load(x_rows[:, None] + d[None, :])
    y = rope_tile(x, x_rows, rows[:, None] < 16, cos_ptr, sin_ptr, 15 - rows, rows < 12, R // 2, R, INTERLEAVED)
    tl.store(y_ptr + rows[:, None] * BD + d[None, :], y)


# R = BD: halves split in registers; R | BD: grouped split (partial); R = 12: partner re-read (R ∤ BD)
@pytest.mark.parametrize("interleaved", [False, True], ids=["neox", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [32, 16, 12], ids=["R=BD", "R|BD", "R-not-dividing-BD"])
def test_rope_tile_layouts(interleaved, rotary_dim):
    bd, r = 32, rotary_dim
    x = torch.randn(16, bd)
    cos, sin = torch.randn(16, r // 2), torch.randn(16, r // 2)
    y = torch.full((16, bd), float("nan"))
    _rope_tile_kernel[(1,)](x, cos, sin, y, BD=bd, R=r, INTERLEAVED=interleaved)
    ref = _rope_reference(x, cos, sin, r, interleaved)
    ref[12:] = x[12:]  # rows outside pos_mask pass through
    torch.testing.assert_close(y, ref, atol=1e-5, rtol=1e-5)


@triton.jit
def _softmax_kernel(s_ptr, v_ptr, sink_ptr, o_ptr, lse_ptr, scale, NT: tl.constexpr):
    rows = tl.arange(0, 16)
    cols = tl.arange(0, 16)
    d = tl.arange(0, 16)
    m_i = tl.full([16], float("-inf"), tl.float32)
    l_i = tl.zeros([16], tl.float32)
    acc = tl.zeros([16, 16], tl.float32)
    m2 = tl.full([16], float("-inf"), tl.float32)
    l2 = tl.zeros([16], tl.float32)
    acc2 = tl.zeros([16, 16], tl.float32)
    for t in tl.static_range(NT):
        s = tl.load(s_ptr + t * 256 + rows[:, None] * 16 + cols[None, :])
        v = tl.load(v_ptr + t * 256 + cols[:, None] * 16 + d[None, :])
        p, alpha, m_i, l_i = online_softmax_step(s, m_i, l_i, scale)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        # the same tile as a one-tile "split", merged
        pt, _, mt, lt = online_softmax_step(s, tl.full([16], float("-inf"), tl.float32), tl.zeros([16], tl.float32),
                                            scale)
        acc2, m2, l2 = merge_partial(acc2, m2, l2, normalize_rows(tl.dot(pt, v), lt), row_lse2(mt, lt))
    sink2 = tl.load(sink_ptr + rows)
    acc, m_i, l_i = add_sink(acc, m_i, l_i, sink2)
    acc2, m2, l2 = add_sink(acc2, m2, l2, sink2)
    tl.store(o_ptr + rows[:, None] * 16 + d[None, :], normalize_rows(acc, l_i))
    tl.store(o_ptr + 256 + rows[:, None] * 16 + d[None, :], normalize_rows(acc2, l2))
    tl.store(lse_ptr + rows, row_lse2(m_i, l_i))


def test_online_softmax_split_merge_sinks_and_empty_rows():
    torch.manual_seed(0)
    nt = 3
    s = torch.randn(nt, 16, 16) * 4
    s[:, 0] = -math.inf  # row 0: no visible key anywhere
    s[0, 1] = -math.inf  # row 1: nothing in the first tile
    s[:, 2, 3:] = -math.inf
    v = torch.randn(nt, 16, 16)
    sinks = torch.randn(16)
    sinks[3] = -math.inf  # no sink on row 3
    sinks[0] = -math.inf  # empty row with a -inf sink: still 0, no NaN
    scale = 0.3 * LOG2E
    o = torch.empty(2, 16, 16)
    lse = torch.empty(16)
    _softmax_kernel[(1,)](s, v, sinks * LOG2E, o, lse, scale, NT=nt)
    sc = torch.cat(list(s), 1) * 0.3  # natural units
    vv = torch.cat(list(v), 0)
    full = torch.cat([sc, sinks[:, None]], 1)
    w = torch.softmax(full, 1)[:, :-1]
    ref = w @ vv
    ref[0] = 0
    assert bool(torch.isfinite(o).all())
    torch.testing.assert_close(o[0], ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(o[1], ref, atol=1e-5, rtol=1e-5)
    assert bool(torch.isfinite(lse[1:]).all())
    torch.testing.assert_close(lse[1:] / LOG2E, torch.logsumexp(full, 1)[1:], atol=1e-5, rtol=1e-5)
