"""Launch-configuration choice shared by the family's ops.

Each op declares a short list of ``triton.Config``, a ``valid(config, args)`` rule and a ``default(valid, args)``
rule that holds the H200 sweeps' winners (``benchmarks/tune_attn_nsa.py`` forces and times every config per
seed row). Nothing is autotuned at run time: Triton's autotuner, timing configs with its own ``do_bench``,
picked configs 14-41 % slower than the best in five of 17 rows on 2026-12-01, and its pick changed between
processes (row times moved with it); a rule is deterministic and costs no first-call benchmarking. Tests and
sweeps pass ``config=`` to run one specific config (every config is checked on the GPU).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import triton


def config_name(c: triton.Config) -> str:
    kw = "-".join(f"{k}{v}" for k, v in sorted(c.kwargs.items()))
    regs = f"-r{c.maxnreg}" if c.maxnreg else ""
    return f"{kw}-w{c.num_warps}-s{c.num_stages}{regs}"


class TunedKernel:
    def __init__(
        self,
        kernel,
        configs: Sequence[triton.Config],
        valid: Callable[[triton.Config, dict], bool],
        default: Callable[[Sequence[triton.Config], dict], triton.Config],
    ):
        self.kernel = kernel
        self.configs = tuple(configs)
        self.valid = valid
        self.default = default
        self.last_config: triton.Config | None = None  # of the last launch (sweeps report what the op ran)

    def valid_configs(self, args: dict) -> list[triton.Config]:
        return [c for c in self.configs if self.valid(c, args)]

    def launch(self, grid, args: dict, config: triton.Config | None = None, hints: dict | None = None):
        """Launch with ``config``, else the default rule's config; ``hints`` are extra facts
        (not kernel arguments) the default rule may use. Returns the config used."""
        info = {**args, **(hints or {})}
        valid = self.valid_configs(info)
        if config is None and not valid:
            raise ValueError("no launch config serves this call's shape (head dims / group size)")
        if config is None:
            config = self.default(valid, info)
        elif not self.valid(config, info):
            raise ValueError(f"config {config_name(config)} is not valid for this call")
        self.kernel[grid](**args, **config.all_kwargs())
        self.last_config = config
        return config
