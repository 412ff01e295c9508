"""The flat scaled cast through the interpreter: e4m3 widened to 16 bits (exact: every e4m3 value is a 16-bit
value), f32 scaled and rounded once to 16 bits, a size that is not a multiple of the block, an empty tensor, and
the error on strided or mismatched tensors."""

import pytest
import torch

from attnops.kernel_utils import runtime
from attnops.kernel_utils.cast import CAST_BLOCK, scaled_cast
from attnops.kernel_utils.fp8 import E4M3

DEV = runtime.device()


@pytest.mark.parametrize("dst_dtype", [torch.float16, torch.float32])
def test_e4m3_widens_exactly(dst_dtype):
    g = torch.Generator().manual_seed(0)
    src = (torch.randn(3, CAST_BLOCK + 17, generator=g) * 64).to(E4M3).to(DEV)
    dst = torch.full(src.shape, float("nan"), dtype=dst_dtype, device=DEV)
    scaled_cast(src, dst)
    assert torch.equal(dst.cpu(), src.cpu().float().to(dst_dtype))


def test_f32_scaled_rounds_once():
    g = torch.Generator().manual_seed(1)
    src = torch.randn(2 * CAST_BLOCK - 5, generator=g).to(DEV)
    dst = torch.full_like(src, float("nan"), dtype=torch.float16)
    scaled_cast(src, dst, 0.125)
    assert torch.equal(dst.cpu(), (src.cpu() * 0.125).to(torch.float16))


def test_empty_is_a_no_op():
    src = torch.empty(0, 8, dtype=E4M3, device=DEV)
    assert scaled_cast(src, torch.empty(0, 8, dtype=torch.float16, device=DEV)).numel() == 0


def test_bad_tensors_raise():
    src = torch.randn(8, 8, device=DEV)
    with pytest.raises(ValueError, match="contiguous"):
        scaled_cast(src.t(), torch.empty(8, 8, device=DEV))
    with pytest.raises(ValueError, match="one size"):
        scaled_cast(src, torch.empty(8, 7, device=DEV))
