"""Helpers shared by the attn-nsa tests (not a test module)."""

from __future__ import annotations

import pytest
import torch

from attnops.attn_nsa._tuning import config_name
from attnops.kernel_utils import runtime, testing

DEV = runtime.device()


def config_params(configs):
    return [pytest.param(c, id=config_name(c)) for c in configs]


def check_with_config(spec, run, case, config):
    """Launch one specific config through the op's ``_run`` (after the public checks) and compare."""
    return spec.check(case, lambda **inputs: run(**inputs, config=config))


def run_bad_input(fn, inputs, error, message):
    with pytest.raises(error, match=message):
        fn(**inputs)


def i32(values):
    return torch.tensor(values, dtype=torch.int32, device=DEV)


def f16(shape, seed=0):
    return testing.randn(shape, torch.float16, DEV, testing.generator(seed))
