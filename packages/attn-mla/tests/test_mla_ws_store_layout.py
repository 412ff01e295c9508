"""The warp-specialized consumers' store layout (``latent_ws.store_layout`` / ``to_store_layout``, used by the MLA
and DSA Gluon kernels): checked on the CPU against the accumulator layout Triton itself derives, so that the chain
of conversions stays inside each warp, one lane / register swap per conversion (what Triton 3.6 lowers by warp
shuffles), and ends in 16-byte pieces along the rows. (The offline sm_90 build checks the shared memory; the GPU
tests the values.)"""

import pytest
from triton._C.libtriton import gluon_ir, ir

from attnops.attn_mla import latent_ws
from attnops.kernel_utils.gluon_fns import wgmma_acc_layout


def _fn(f):
    return getattr(f, "fn", f)  # a constexpr_function's Python body


def _bases(layout):
    return ([tuple(b) for b in layout.reg_bases], [tuple(b) for b in layout.lane_bases],
            [tuple(b) for b in layout.warp_bases])


def test_accumulator_bases_are_tritons():
    ctx = ir.context()
    ir.load_dialects(ctx)
    builder = gluon_ir.GluonOpBuilder(ctx)
    shape = [latent_ws.HEADS.value, latent_ws.HALF.value]
    acc = builder.to_linear_layout(_fn(wgmma_acc_layout)(latent_ws.HALF.value)._to_ir(builder), shape)
    assert _bases(acc) == (list(latent_ws._ACC_REGS), list(latent_ws._ACC_LANES), list(latent_ws._ACC_WARPS))
    assert _bases(_fn(latent_ws.store_layout)(16, 0)) == _bases(acc)


@pytest.mark.parametrize("bits", [16, 32])
def test_each_conversion_swaps_one_lane_bit_with_one_register_bit(bits):
    steps = _fn(latent_ws.store_swaps)(bits)
    layouts = [_fn(latent_ws.store_layout)(bits, k) for k in range(steps + 1)]
    assert _bases(layouts[-1]) == _bases(_fn(latent_ws.store_layout)(bits))
    for before, after in zip(layouts, layouts[1:]):
        (r0, l0, w0), (r1, l1, w1) = _bases(before), _bases(after)
        assert w0 == w1 == list(latent_ws._ACC_WARPS)  # the warps' rows unchanged: no data crosses a warp
        moved_out = set(l0) - set(l1)
        assert len(moved_out) == 1 and moved_out == set(r1) - set(r0)
        assert set(l1) - set(l0) == set(r0) - set(r1)
        assert sum(a != b for a, b in zip(l0, l1)) == 1  # (the other lanes keep their places)


@pytest.mark.parametrize("bits", [16, 32])
def test_store_layout_holds_16_bytes_a_thread_along_128_byte_row_segments(bits):
    regs, lanes, warps = _bases(_fn(latent_ws.store_layout)(bits))
    vec = 128 // bits
    assert regs[:vec.bit_length() - 1] == [(0, 1 << i) for i in range(vec.bit_length() - 1)]
    assert sorted(c for r, c in lanes if r == 0) == [vec, 2 * vec, 4 * vec]  # 8 lanes x 16 bytes along a row
    assert sorted(r for r, c in lanes if c == 0) == [1, 2]  # 4 rows a warp instruction
    # every element of the tile exactly once: the bases are a basis of the [64, 256] index space
    span = {(0, 0)}
    for b in regs + lanes + warps:
        span |= {(r ^ b[0], c ^ b[1]) for r, c in span}
    assert len(span) == latent_ws.HEADS.value * latent_ws.HALF.value
