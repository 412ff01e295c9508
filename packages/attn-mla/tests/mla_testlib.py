"""Test helpers shared by the attn-mla op tests: every op module exposes ``CONFIGS`` and
``with_config(config, poison=True, ...)`` (the op pinned to one launch config, outputs NaN-poisoned); input
factories for the MLA / DSA edge cases (fresh random tensors on the test device)."""

import torch

from attnops.kernel_utils import runtime, testing
from attnops.kernel_utils.opspec import Case


def pinned(op_module, config, **kwargs):
    """The op pinned to ``config`` with poisoned outputs (``kwargs``: e.g. MLA's ``num_splits``)."""
    return op_module.with_config(config, poison=True, **kwargs)


def every_config(op_module) -> dict:
    """``{config name: pinned op}`` for ``OpSpec.check_each``."""
    return {f"config {name}": pinned(op_module, config) for name, config in op_module.CONFIGS.items()}


def mla_case(b=2, h=16, n_kv=40, h_kv=1, d=512, pe=64, dtype=torch.float16, seed=0, q_scale=1.0) -> Case:
    """MLADecodeWithKVCacheFwd inputs: q [b, h, d] (times ``q_scale``: sharper softmaxes), q_pe, k
    [b, n_kv, h_kv, d], k_pe."""
    gen, dev = testing.generator(seed), runtime.device()
    return Case({"q": testing.randn((b, h, d), dtype, dev, gen, scale=q_scale),
                 "q_pe": testing.randn((b, h, pe), dtype, dev, gen),
                 "k": testing.randn((b, n_kv, h_kv, d), dtype, dev, gen),
                 "k_pe": testing.randn((b, n_kv, h_kv, pe), dtype, dev, gen)}, outputs=("o",))


def dsa_case(indices, *, s_kv=48, h=16, h_kv=1, d=64, tail=16, q_start=40, stride=1, dtype=torch.float16, seed=0,
             **params) -> Case:
    """DSADecodeWithKVCacheFwd inputs for ``indices`` ([B, S, H_kv, K], any nesting torch accepts): q
    [B, S, h, d + tail], kv [B, s_kv, h_kv, d + tail]; ``params``: the op's other keywords."""
    gen, dev = testing.generator(seed), runtime.device()
    indices = torch.as_tensor(indices, dtype=torch.int32)
    b, s = indices.shape[:2]
    return Case({"q": testing.randn((b, s, h, d + tail), dtype, dev, gen),
                 "kv": testing.randn((b, s_kv, h_kv, d + tail), dtype, dev, gen),
                 "indices": indices.to(dev), "q_start_index_s": q_start, "stride_kv": stride, "dim_tail": tail,
                 **params}, outputs=("o",))

