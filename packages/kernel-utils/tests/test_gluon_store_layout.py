"""``gluon_fns.store_layout`` / ``to_store_layout``, the move of a warpgroup's [64, n] wgmma accumulator tile to
16-byte pieces along the rows before its output stores (attn-mla's MLA / DSA ws kernels, attn-core's Gluon forward
and backward): checked on the CPU against the accumulator layout Triton itself derives, so that the chain of
conversions stays inside each warp, one lane / register swap per conversion (what Triton 3.6 lowers by warp
shuffles), and ends in 16-byte pieces along 128-byte row segments. (The offline sm_90 builds check the SASS and
the shared memory; the GPU tests the values.)"""

import pytest
from triton._C.libtriton import gluon_ir, ir

from attnops.kernel_utils import gluon_fns

COLS = (64, 128, 256)  # the tiles the kernels store: D 64 / 128 / 256, MLA's 256 latent columns a consumer
WARPS = [(16, 0), (32, 0)]  # a 4-warp warpgroup: warp w holds rows 16w..16w + 15


def _fn(f):
    return getattr(f, "fn", f)  # a constexpr_function's Python body


def _layout(n, bits, steps=None):
    return _fn(gluon_fns.store_layout)(n, bits, steps)


def _bases(layout):
    return ([tuple(b) for b in layout.reg_bases], [tuple(b) for b in layout.lane_bases],
            [tuple(b) for b in layout.warp_bases])


@pytest.mark.parametrize("n", (32,) + COLS)
def test_accumulator_bases_are_tritons(n):
    ctx = ir.context()
    ir.load_dialects(ctx)
    builder = gluon_ir.GluonOpBuilder(ctx)
    acc = builder.to_linear_layout(_fn(gluon_fns.wgmma_acc_layout)(n)._to_ir(builder), [64, n])
    assert _bases(acc) == _bases(_layout(n, 32, 0))
    if n >= 64:
        assert _bases(acc) == _bases(_layout(n, 16, 0))
    assert _bases(acc)[2] == WARPS


@pytest.mark.parametrize("n", COLS)
@pytest.mark.parametrize("bits", [16, 32])
def test_each_conversion_swaps_one_lane_bit_with_one_register_bit(bits, n):
    steps = _fn(gluon_fns.store_swaps)(bits)
    layouts = [_layout(n, bits, k) for k in range(steps + 1)]
    assert _bases(layouts[-1]) == _bases(_layout(n, bits))
    for before, after in zip(layouts, layouts[1:]):
        (r0, l0, w0), (r1, l1, w1) = _bases(before), _bases(after)
        assert w0 == w1 == WARPS  # the warps' rows unchanged: no data crosses a warp
        moved_out = set(l0) - set(l1)
        assert len(moved_out) == 1 and moved_out == set(r1) - set(r0)
        assert set(l1) - set(l0) == set(r0) - set(r1)
        assert sum(a != b for a, b in zip(l0, l1)) == 1  # (the other lanes keep their places)


@pytest.mark.parametrize("n", (32,) + COLS)
@pytest.mark.parametrize("bits", [16, 32])
def test_store_layout_holds_16_bytes_a_thread_along_128_byte_row_segments(bits, n):
    if n < (64 if bits == 16 else 32):
        with pytest.raises(AssertionError):
            _layout(n, bits)
        return
    regs, lanes, warps = _bases(_layout(n, bits))
    vec = 128 // bits
    assert regs[:vec.bit_length() - 1] == [(0, 1 << i) for i in range(vec.bit_length() - 1)]
    assert sorted(c for r, c in lanes if r == 0) == [vec, 2 * vec, 4 * vec]  # 8 lanes x 16 bytes along a row
    assert sorted(r for r, c in lanes if c == 0) == [1, 2]  # 4 rows a warp instruction
    # every element of the tile exactly once: the bases are a basis of the [64, n] index space
    span = {(0, 0)}
    for b in regs + lanes + warps:
        span |= {(r ^ b[0], c ^ b[1]) for r, c in span}
    assert len(span) == 64 * n
    assert 1 << len(regs) == 64 * n // 128  # elements a thread: the tile over 128 threads


def test_the_swaps_are_attn_mlas():
    """The [64, 256] layouts are those attn-mla's latent_ws built before it took this helper (its sm_90 builds
    unchanged): the accumulator's bases and each step's swap as they were there."""
    acc_regs = ((0, 1), (8, 0), (0, 8), (0, 16), (0, 32), (0, 64), (0, 128))
    acc_lanes = ((0, 2), (0, 4), (1, 0), (2, 0), (4, 0))
    assert _bases(_layout(256, 16, 0)) == (list(acc_regs), list(acc_lanes), WARPS)
    assert _bases(_layout(256, 16)) == ([(0, 1), (0, 2), (0, 4), (8, 0), (4, 0), (0, 64), (0, 128)],
                                        [(0, 8), (0, 16), (1, 0), (2, 0), (0, 32)], WARPS)
    assert _bases(_layout(256, 32)) == ([(0, 1), (0, 2), (8, 0), (4, 0), (0, 32), (0, 64), (0, 128)],
                                        [(0, 8), (0, 4), (1, 0), (2, 0), (0, 16)], WARPS)
