"""Compiles a two-consumer Gluon kernel built on ``gluon_fns.warpgroup_partition`` for sm_90 (no GPU) and prints
one line per case: ``shared-args ok`` when each partition saw its warpgroup index and every flag as a constexpr,
``wrong-flag rejected`` when a flag that fails a partition's static assert stops the build (so the first line is
not vacuous). Run with TRITON_INTERPRET=0 (the interpreter never compiles)."""

import os

os.environ["TRITON_INTERPRET"] = "0"

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler.errors import CompilationError, CompileTimeAssertionFailure  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon._runtime import GluonASTSource  # noqa: E402

from attnops.kernel_utils.gluon_fns import warpgroup_partition  # noqa: E402


@gluon.jit
def _consumer(out_ptr, n, WG: gl.constexpr, ROWS: gl.constexpr, TAG: gl.constexpr):
    # static asserts: fail at compile time unless WG and the flags arrive as constexprs with the caller's values
    gl.static_assert(WG == 0 or WG == 1)
    gl.static_assert(ROWS == 64)
    gl.static_assert(TAG == 7)
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    rows = WG * ROWS + gl.arange(0, ROWS, layout)
    gl.store(out_ptr + rows, rows.to(gl.float32), mask=rows < n)


@gluon.jit
def two_consumers_kernel(out_ptr, n, ROWS: gl.constexpr, TAG: gl.constexpr):
    consumer_args = (out_ptr, n)
    consumer_flags: gl.constexpr = (ROWS, TAG)
    gl.warp_specialize([
        (warpgroup_partition, (gl.constexpr(_consumer), consumer_args, 0, consumer_flags)),
        (warpgroup_partition, (gl.constexpr(_consumer), consumer_args, 1, consumer_flags)),
    ], [4], [24])


def build(tag: int):
    src = GluonASTSource(two_consumers_kernel, {"out_ptr": "*fp32", "n": "i32", "ROWS": "constexpr",
                                                "TAG": "constexpr"}, constexprs={"ROWS": 64, "TAG": tag})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})


if __name__ == "__main__":
    ptx = build(7).asm["ptx"]
    assert "st.global" in ptx, "the partitions' stores are missing"
    print("shared-args ok")
    try:
        build(8)
    except CompilationError as e:
        while e is not None and not isinstance(e, CompileTimeAssertionFailure):  # (wrapped once per call level)
            e = e.__cause__
        if e is not None:
            print("wrong-flag rejected")
