"""The interpreter's bounds check (attnops.kernel_utils.bounds), installed by the test plugin for every CPU run."""

import pytest
import torch
from triton_probe_kernels import atomic_add_kernel, copy_kernel, load_at_kernel

from attnops.kernel_utils import bounds, runtime

pytestmark = pytest.mark.skipif(not runtime.interpreting(), reason="checks Triton's interpreter (CPU runs)")


def test_masked_accesses_inside_the_tensors_pass():
    x, y = torch.randn(10), torch.zeros(10)
    copy_kernel[(1,)](x, y, 10, 10, BLOCK=16)  # lanes 10..15 masked off
    assert torch.equal(x, y)


@pytest.mark.parametrize("limit", [11, 16])
def test_a_load_past_the_tensor_raises(limit):
    x, y = torch.randn(10), torch.zeros(16)
    with pytest.raises(Exception, match="OutOfBoundsAccess.*load"):
        copy_kernel[(1,)](x, y, 10, limit, BLOCK=16)


def test_a_store_past_the_tensor_raises():
    x, y = torch.randn(16), torch.zeros(12)
    with pytest.raises(Exception, match="OutOfBoundsAccess.*store"):
        copy_kernel[(1,)](x, y, 12, 16, BLOCK=16)


def test_a_view_may_reach_its_whole_storage_but_not_past_it():
    """The check is per storage: a kernel given a slice may touch the rest of the slice's storage (the slice's
    own bounds are the op's to enforce), but nothing past the storage."""
    base_x, base_y = torch.randn(20), torch.zeros(20)
    copy_kernel[(1,)](base_x[4:8], base_y[4:8], 4, 16, BLOCK=16)  # elements 4..19 of the storages
    with pytest.raises(Exception, match="OutOfBoundsAccess"):
        copy_kernel[(1,)](base_x[8:12], base_y[8:12], 4, 16, BLOCK=16)  # 8..23: past the end


def test_atomics_are_checked():
    x = torch.zeros(8)
    atomic_add_kernel[(1,)](x, 8, BLOCK=8)
    assert torch.equal(x, torch.ones(8))
    with pytest.raises(Exception, match="OutOfBoundsAccess.*atomic"):
        atomic_add_kernel[(1,)](x, 16, BLOCK=16)


def test_the_plugin_installed_it():
    assert bounds.installed()


def test_a_pointer_may_not_wander_into_another_argument():
    """An offset from x that lands inside y (another argument of the same launch) is caught: every pointer keeps
    the storage of the argument it came from."""
    x, y, out = torch.randn(8), torch.randn(8), torch.zeros(1)
    load_at_kernel[(1,)](x, y, out, 7)
    assert out.item() == x[7].item()
    into_y = (y.data_ptr() - x.data_ptr()) // x.element_size() + 3
    with pytest.raises(Exception, match="OutOfBoundsAccess.*outside its argument"):
        load_at_kernel[(1,)](x, y, out, into_y)
