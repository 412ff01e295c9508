"""Absorbed-MLA decode: all query heads of a request share each latent key row, so a program computes a
[BLOCK_H heads × BLOCK_N keys] score tile with tensor-core dots (576 = 512 latent + 64 rope channels),
an online softmax in base 2, and ``acc += P · K_latent`` over its slice of the keys (values = latent keys).

Grid ``(head blocks, KV splits, B)``. With one split the program normalizes and writes the output; with
several (small batches: the keys of one request are spread over SMs) it writes a normalized fp32 partial
and its base-2 log-sum-exp, and ``kernel_utils.split_combine`` merges the splits — or, with ``FUSED_COMBINE``, the
last split of each (request, head block) to arrive merges them itself (per-block counter: CTA barrier, one
acq_rel atomic at GPU scope; reset to 0 by that program), saving the combine launch.
"""

import triton
import triton.language as tl

from attnops.kernel_utils.attention_fns import merge_splits, normalize_rows

MERGE_COLS: tl.constexpr = tl.constexpr(128)  # latent columns merged at a time by the fused combine


@triton.jit
def mla_decode_kernel(
    q_ptr, q_pe_ptr, k_ptr, k_pe_ptr, out_ptr, part_o_ptr, part_lse_ptr, counter_ptr,
    H, N_kv, group_size, head_blocks_per_kv, split_len, num_splits, qk_scale,
    stride_qb, stride_qh, stride_pb, stride_ph,
    stride_kb, stride_kt, stride_kh, stride_eb, stride_et, stride_eh,
    stride_ob, stride_oh,
    D: tl.constexpr,  # latent width (512): QK and PV
    PE: tl.constexpr,  # rope width (64): QK only
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT: tl.constexpr,  # write partials for the split combine instead of the output
    NUM_STAGES: tl.constexpr,
    FUSED_COMBINE: tl.constexpr,  # with SPLIT: the last split merges the partials (counter_ptr: int32 zeros)
):
    hb = tl.program_id(0)
    split = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)
    kvh = hb // head_blocks_per_kv
    local = (hb % head_blocks_per_kv) * BLOCK_H + tl.arange(0, BLOCK_H)  # head index inside the KV group
    head_ok = local < group_size
    heads = kvh * group_size + local
    d = tl.arange(0, D)
    e = tl.arange(0, PE)

    q = tl.load(q_ptr + b * stride_qb + heads.to(tl.int64)[:, None] * stride_qh + d[None, :],
                mask=head_ok[:, None], other=0.0)
    q_pe = tl.load(q_pe_ptr + b * stride_pb + heads.to(tl.int64)[:, None] * stride_ph + e[None, :],
                   mask=head_ok[:, None], other=0.0)

    start = split * split_len
    end = tl.minimum(start + split_len, N_kv)
    t = start + tl.arange(0, BLOCK_N)
    k_ptrs = k_ptr + b * stride_kb + kvh * stride_kh + t.to(tl.int64)[:, None] * stride_kt + d[None, :]
    e_ptrs = k_pe_ptr + b * stride_eb + kvh * stride_eh + t.to(tl.int64)[:, None] * stride_et + e[None, :]

    m = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, D], tl.float32)
    # Split variant: at least one step, visibly to LLVM (0 < max(n, 1); the launcher never makes an empty
    # split). With a zero-trip path LLVM put the `acc = 0` movs for it in a block between the loop's last
    # P·V wgmma and the wait after the loop, and ptxas serialized every wgmma of the kernel (C7515: a
    # DEPBAR after each of the 40 per step). Not applied without split: there LLVM already sets acc before
    # the guard, and the max costs a 4 B spill (before the loop) at 255 registers.
    steps = tl.cdiv(end - start, BLOCK_N)
    if SPLIT:
        steps = tl.maximum(steps, 1)
    for i in tl.range(0, steps, num_stages=NUM_STAGES):
        t0 = start + i * BLOCK_N
        key_ok = (t0 + tl.arange(0, BLOCK_N)) < end
        k = tl.load(k_ptrs, mask=key_ok[:, None], other=0.0)
        k_pe = tl.load(e_ptrs, mask=key_ok[:, None], other=0.0)
        # Scores once per key tile. Triton gives a dot whose result feeds another dot warpsPerCTA
        # [num_warps, 1]: on a 64-row tile both warpgroups would compute all of it (1.53 issued MMA per
        # useful FLOP). Each score dot's result therefore goes through the ragged-tile branch below (the
        # forward slice ends at the branch's yield): the dots get [4, 2], each warpgroup computes half the
        # keys, and the rope dot's result is already in the latent dot's accumulator layout.
        ragged = t0 + BLOCK_N > end
        s = tl.dot(q_pe, tl.trans(k_pe))
        if ragged:
            s = tl.where(key_ok[None, :], s, float("-inf"))
        s = tl.dot(q, tl.trans(k), s)
        if ragged:  # already -inf there: the branch is what matters
            s = tl.where(key_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1) * qk_scale)
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(s * qk_scale - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        acc = tl.dot(p.to(k.dtype), k, acc * alpha[:, None])
        m = m_new
        k_ptrs += BLOCK_N * stride_kt
        e_ptrs += BLOCK_N * stride_et

    acc = acc / l[:, None]
    if SPLIT:
        row0 = (b * H + heads.to(tl.int64)) * num_splits  # split 0's partial row of each head
        tl.store(part_o_ptr + (row0 + split)[:, None] * D + d[None, :], acc, mask=head_ok[:, None])
        tl.store(part_lse_ptr + row0 + split, m + tl.log2(l), mask=head_ok)
        if FUSED_COMBINE:
            tl.debug_barrier()  # every thread's partial is written before the arrival is released
            counter = counter_ptr + b * tl.num_programs(0) + hb
            arrived = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
            if arrived == num_splits - 1:  # the block's last split: every other partial is visible
                tl.atomic_xchg(counter, 0, sem="relaxed", scope="gpu")
                # 128 columns at a time: a [BLOCK_H, D] running sum beside a loaded [BLOCK_H, D] partial
                # spilled (248 B at 255 registers, offline sm_90)
                out_rows = out_ptr + b * stride_ob + heads.to(tl.int64)[:, None] * stride_oh
                for c in tl.static_range(0, D, MERGE_COLS):
                    dc = c + tl.arange(0, MERGE_COLS)
                    acc_c, _m, l_c = merge_splits(part_o_ptr, part_lse_ptr, row0, 1, num_splits, head_ok, dc,
                                                  dc < D, D)
                    tl.store(out_rows + dc[None, :], normalize_rows(acc_c, l_c).to(out_ptr.dtype.element_ty),
                             mask=head_ok[:, None] & (dc < D)[None, :])
    else:
        tl.store(out_ptr + b * stride_ob + heads.to(tl.int64)[:, None] * stride_oh + d[None, :],
                 acc.to(out_ptr.dtype.element_ty), mask=head_ok[:, None])
