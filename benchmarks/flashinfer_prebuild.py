"""Compile the FlashInfer modules our adapters need but the peer kit does not ship, on a machine without a GPU.

FlashInfer JIT-compiles a module per (dtype, head dim, window, softcap, RoPE, backend) on first use; the kit ships
14 of them. On the H200 machine the rest took ~4 min each and a whole call did not finish them (2026-12-02), so
issue 8's rows that need them had no FlashInfer time. The compile needs only nvcc (13.0 here and there) and the
headers, so it runs here, and the `.so` files travel in `.peers-jit/` (git-ignored, carried like `.peers`;
`benchmarks/peers_env.sh` adds them to the unpacked kit's AOT folder).

    python -m benchmarks.flashinfer_prebuild census --filter GQADenseFwd,GQAVarlenFwd   # which modules
    python -m benchmarks.flashinfer_prebuild build [--filter ...]                       # compile the missing
    python -m benchmarks.flashinfer_prebuild pack [--filter ...]                        # .peers-jit/*.tar.xz

`census` runs each row's FlashInfer adapter on the CPU with FlashInfer's module loader replaced by a recorder,
so the module names are the ones FlashInfer itself derives (backend choice included), not our guess of them.
Environment: the kit's flashinfer and tvm-ffi importable (PYTHONPATH), FLASHINFER_CUDA_ARCH_LIST=9.0a,
FLASHINFER_WORKSPACE_BASE, CUDA_HOME with curand's headers (pip wheel nvidia-curand), MAX_JOBS.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import time
from pathlib import Path

import torch

MODULE_LIST = Path(__file__).parent / "flashinfer_modules.json"
PACK_DIR = Path(__file__).parent.parent / ".peers-jit"
_DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


class _Recorded(Exception):
    """Raised by the stub loader: the adapter got as far as asking FlashInfer for a module."""


def _pretend_sm90() -> None:
    """What plan() asks of the device, answered as an H200 would; tensors stay on the CPU."""
    import sys
    from types import SimpleNamespace

    import flashinfer.mla  # noqa: F401  (imported so that its module namespaces are patched below)

    h200 = SimpleNamespace(name="NVIDIA H200", major=9, minor=0, multi_processor_count=132,
                           shared_memory_per_block_optin=232448, shared_memory_per_multiprocessor=233472,
                           total_memory=141 << 30)
    answers = {"is_sm90a_supported": lambda device: True, "get_compute_capability": lambda device: (9, 0),
               "get_device_properties": lambda device: h200}
    for name, module in list(sys.modules.items()):
        if name.startswith("flashinfer"):
            for attr, fn in answers.items():
                if hasattr(module, attr):
                    setattr(module, attr, fn)
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    torch.cuda.get_device_properties = lambda *a, **k: h200
    for name in ("empty", "zeros", "tensor", "full", "arange", "ones"):  # pinned host buffers need CUDA
        setattr(torch, name, _without_pinning(getattr(torch, name)))


def _without_pinning(factory):
    return lambda *a, **k: factory(*a, **{x: y for x, y in k.items() if x != "pin_memory"})


def census(row_filter: str) -> list[str]:
    from flashinfer.jit import core

    from . import baselines
    from .run import family_specs
    from .sweep import matches

    _pretend_sm90()
    wanted: dict[str, bool] = {}

    def record(spec):
        wanted.setdefault(spec.name, spec.is_aot)
        raise _Recorded(spec.name)

    for cls in vars(core).values():
        if isinstance(cls, type) and hasattr(cls, "build_and_load"):
            cls.build_and_load = record
    for family in ("attn-core", "attn-mla"):
        for spec in family_specs(family):
            for w in spec.workloads:
                adapters = [a for a in baselines.adapters_for(spec.name, spec.family) if a.name == "flashinfer"]
                if not adapters or not matches(w.id, row_filter):
                    continue
                before = set(wanted)
                try:
                    adapters[0].prepare(spec.make_case(w, torch.device("cpu"), False, 0))
                    outcome = "no module asked"
                except (_Recorded, baselines.Unsupported) as e:
                    outcome = type(e).__name__
                except Exception as e:  # a CPU-only gap of the stubs: say so, the row is left out
                    outcome = f"census failed: {type(e).__name__}: {str(e)[:120]}"
                print(f"{w.id}: {outcome} {sorted(set(wanted) - before)}", flush=True)
    missing = sorted(name for name, aot in wanted.items() if not aot)
    if row_filter:  # a partial census must not shrink the list the build and the pack read
        print(f"{len(wanted)} modules asked for, not in the kit: {missing} (list unchanged: --filter given)")
    else:
        MODULE_LIST.write_text(json.dumps(missing, indent=1) + "\n")
        print(f"{len(wanted)} modules asked for, {len(missing)} not in the kit -> {MODULE_LIST}")
    return missing


def jit_spec(name: str):
    """The JitSpec FlashInfer builds for a module name (names encode every template parameter)."""
    from flashinfer.jit.attention import gen_batch_decode_module, gen_batch_mla_module
    from flashinfer.jit.attention.modules import _gen_batch_prefill_module  # the one that takes the stride mode

    def field(key):
        return re.search(key + r"_([A-Za-z0-9]+)", name).group(1)

    if name.startswith("batch_prefill_attention_sink_"):
        return _sink_spec(name)
    dq, dkv, do = (_DTYPES[field(k)] for k in ("dtype_q", "dtype_kv", "dtype_o"))
    if name.startswith("batch_mla_attention"):
        spec = gen_batch_mla_module("fa3", dq, dkv, do, torch.int32, int(field("head_dim_ckv")),
                                    int(field("head_dim_kpe")), False)
    else:
        args = (dq, dkv, do, torch.int32, int(field("head_dim_qk")), int(field("head_dim_vo")),
                int(field("posenc")), field("use_swa") == "True", field("use_logits_cap") == "True")
        if name.startswith("batch_decode"):
            spec = gen_batch_decode_module(*args)
        else:
            stride_mode = "equal" if name.endswith("_kv_stride_equal") else "runtime"  # FA2's paged specialisation
            spec = _gen_batch_prefill_module("fa3" if name.endswith("_sm90") else "fa2", *args, False,
                                             paged_kv_stride_mode=stride_mode, module_surface="full")
    if spec.name != name:
        raise ValueError(f"module name round trip: asked {name}, FlashInfer names it {spec.name}")
    return spec


def _sink_spec(name: str):
    """The attention-sink variant (a customized prefill module, also what its decode wrapper runs): its name is
    ``batch_prefill_attention_sink_<q>_<kv>_<dqk>_<dvo>_posenc_<n>_f16qk_<b>_swa_<b>_<backend>``; FlashInfer's own
    argument builder makes the spec from those fields."""
    from flashinfer.attention._core import BatchAttentionWithAttentionSinkWrapper
    from flashinfer.jit.attention import gen_customize_batch_prefill_module
    from flashinfer.utils import PosEncodingMode

    m = re.fullmatch(r"batch_prefill_attention_sink_([a-z0-9]+)_([a-z0-9]+)_(\d+)_(\d+)_posenc_(\d)_f16qk_(\w+?)"
                     r"_swa_(\w+?)_(fa2|fa3)", name)
    if m is None:
        raise ValueError(f"not an attention-sink module name: {name}")
    dq, dkv, dqk, dvo, posenc, f16qk, swa, backend = m.groups()
    backend, args, kwargs = BatchAttentionWithAttentionSinkWrapper._sink_jit_args(
        torch.device("cpu"), backend, _DTYPES[dq], _DTYPES[dkv], int(dqk), int(dvo), 0 if swa == "True" else -1,
        PosEncodingMode(int(posenc)).name, f16qk == "True")
    spec = gen_customize_batch_prefill_module(backend, *args, **kwargs)
    if spec.name != name:
        raise ValueError(f"module name round trip: asked {name}, FlashInfer names it {spec.name}")
    return spec


def build(names: list[str]) -> None:
    for name in names:
        spec = jit_spec(name)
        if spec.is_aot or spec.jit_library_path.exists():
            print(f"have  {name}", flush=True)
            continue
        t = time.perf_counter()
        spec.build(verbose=False)
        print(f"built {name} in {time.perf_counter() - t:.0f} s", flush=True)


def pack(names: list[str]) -> Path:
    """One tar.xz of the built modules as `<name>/<name>.so`: the layout of FlashInfer's own AOT folder
    (`flashinfer/data/aot`), the only place it loads a module from without running ninja first (a module in
    the JIT cache is rebuilt-or-confirmed by ninja, which FLASHINFER_DISABLE_JIT forbids)."""
    from flashinfer.jit import env

    root = env.FLASHINFER_JIT_DIR
    files = [jit_spec(n).jit_library_path.relative_to(root) for n in names]
    built = [f for f in files if (root / f).exists()]
    for f in files:
        if f not in built:
            print(f"not built yet: {f.parent.name}")
    PACK_DIR.mkdir(exist_ok=True)
    out = PACK_DIR / f"flashinfer-jit-{env.FLASHINFER_WORKSPACE_DIR.name}.tar.xz"
    subprocess.run(["tar", "cJf", str(out), "-C", str(root), *map(str, built)], check=True)
    print(f"{out}: {len(built)} of {len(files)} modules, {out.stat().st_size / 2**20:.1f} MiB")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", choices=("census", "build", "pack"))
    p.add_argument("--filter", default="",
                   help="rows (comma-separated id substrings): census names their modules; build and pack take "
                        "only those (a census of them first) instead of the whole list")
    args = p.parse_args(argv)
    if args.step == "census":
        census(args.filter)
        return 0
    # (one family's rows: the 44 paged rows' 9 modules took ~60 min on 2 cores, the whole list ~25 min more)
    names = census(args.filter) if args.filter else json.loads(MODULE_LIST.read_text())
    build(names) if args.step == "build" else pack(names)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
