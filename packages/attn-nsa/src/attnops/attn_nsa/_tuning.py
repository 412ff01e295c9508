"""Launch-configuration choice shared by the family's ops.

Each op declares a short list of ``triton.Config`` and a ``valid(config, args)`` rule. On a GPU the kernel is
wrapped in ``triton.autotune`` over the valid configs (keyed on the shape class and a power-of-two bucket of
the token count, so serving-size changes do not re-tune); the first call per key benchmarks them outside any
timed region. Under the interpreter, with ``ATTNOPS_AUTOTUNE=0``, or for an op built with ``autotune=False``
(its default rule holds the H200 sweep's winners: the autotuner's own timing picked configs 14-41 %
slower than the best on 2026-12-01), the op's ``default`` picks one config without benchmarking. Tests pass
``config=`` to run one specific config (every config is checked on the GPU).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import triton

from attnops.kernel_utils import runtime


def autotune_enabled() -> bool:
    return not runtime.interpreting() and os.environ.get("ATTNOPS_AUTOTUNE", "1") not in ("", "0")


def config_name(c: triton.Config) -> str:
    kw = "-".join(f"{k}{v}" for k, v in sorted(c.kwargs.items()))
    return f"{kw}-w{c.num_warps}-s{c.num_stages}"


class TunedKernel:
    def __init__(
        self,
        kernel,
        configs: Sequence[triton.Config],
        key: Sequence[str],
        valid: Callable[[triton.Config, dict], bool],
        default: Callable[[Sequence[triton.Config], dict], triton.Config],
        autotune: bool = True,
    ):
        self.kernel = kernel
        self.configs = tuple(configs)
        self.valid = valid
        self.default = default
        self.autotune = autotune  # False: the default rule decides on the GPU too (measured, deterministic)
        self._autotuned = None
        self._key = list(key)
        self.last_config: triton.Config | None = None  # of the last launch (sweeps report what the op ran)

    def valid_configs(self, args: dict) -> list[triton.Config]:
        return [c for c in self.configs if self.valid(c, args)]

    def _tuner(self):
        if self._autotuned is None:
            def prune(configs, nargs, **kwargs):
                args = {**(nargs or {}), **kwargs}
                return [c for c in configs if self.valid(c, args)]

            self._autotuned = triton.autotune(
                configs=list(self.configs), key=self._key, prune_configs_by={"early_config_prune": prune}
            )(self.kernel)
        return self._autotuned

    def launch(self, grid, args: dict, config: triton.Config | None = None, hints: dict | None = None):
        """Launch with ``config``, else autotuned (GPU), else the default config; ``hints`` are extra facts
        (not kernel arguments) the default rule may use. Returns the config used."""
        info = {**args, **(hints or {})}
        valid = self.valid_configs(info)
        if config is None and not valid:
            raise ValueError("no launch config serves this call's shape (head dims / group size)")
        if config is None and self.autotune and autotune_enabled():
            tuner = self._tuner()
            tuner[grid](**args)
            self.last_config = tuner.best_config  # the config of this call's key (cached or just benchmarked)
            return self.last_config
        if config is None:
            config = self.default(valid, info)
        elif not self.valid(config, info):
            raise ValueError(f"config {config_name(config)} is not valid for this call")
        self.kernel[grid](**args, **config.all_kwargs())
        self.last_config = config
        return config
