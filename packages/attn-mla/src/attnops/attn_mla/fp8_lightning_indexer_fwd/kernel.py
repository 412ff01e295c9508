"""Lightning-indexer logits: for a tile of BLOCK_M query rows × BLOCK_N keys of one (batch, key group),
``acc = Σ_h w[s, h] · relu(q[s, h] · k[t])`` with one ``tl.dot`` per head (fp8 or bf16 tensor cores,
fp32 accumulation), then the per-key scale and the window mask.

Heads are the inner loop so that the head reduction stays an elementwise FMA on the accumulator (no
cross-thread reduction); the key tile is loaded once per program and reused by every head. Tiles wholly
outside every row's window skip the dot loop and only write −inf.
"""

import triton
import triton.language as tl


@triton.jit
def lightning_indexer_kernel(
    q_ptr, k_ptr, w_ptr, ks_ptr, ke_ptr, k_scale_ptr, out_ptr,
    S, S_kv, G, heads_per_group,
    stride_qb, stride_qs,
    stride_kb, stride_kt, stride_kg,
    stride_ws, stride_wh,
    stride_sb, stride_st, stride_sg,
    stride_ob, stride_os, stride_ot, stride_og,
    D: tl.constexpr,  # a power of two >= 16
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_SCALE: tl.constexpr,
    CLEAN: tl.constexpr,  # write −inf outside the windows (else those entries are left unwritten)
    UPCAST: tl.constexpr,  # dot in fp32 (interpreter: its fp8/bf16 dot is unreliable)
    NUM_STAGES: tl.constexpr,  # software-pipelining depth of the head loop
):
    pid_n = tl.program_id(0)  # key tiles fastest: neighbouring programs share the query tile in L2
    pid_m = tl.program_id(1)
    bg = tl.program_id(2)
    b = (bg // G).to(tl.int64)
    g = bg % G
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, D)
    row_ok = rows < S
    col_ok = cols < S_kv
    ks = tl.load(ks_ptr + rows, mask=row_ok, other=0)
    ke = tl.load(ke_ptr + rows, mask=row_ok, other=0)
    live = row_ok & (ke > ks)
    lo = tl.min(tl.where(live, ks, S_kv), axis=0)
    hi = tl.max(tl.where(live, ke, 0), axis=0)
    tile_start = pid_n * BLOCK_N
    if (tile_start < hi) & (tile_start + BLOCK_N > lo):
        k_ptrs = (k_ptr + b * stride_kb + cols.to(tl.int64)[:, None] * stride_kt + g * stride_kg
                  + dims[None, :])
        k = tl.load(k_ptrs, mask=col_ok[:, None], other=0.0)
        k_t = tl.trans(k)
        if UPCAST:
            k_t = k_t.to(tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        head0 = g * heads_per_group
        q_ptrs = (q_ptr + b * stride_qb + rows.to(tl.int64)[:, None] * stride_qs + head0 * D + dims[None, :])
        w_rows = w_ptr + rows * stride_ws + head0 * stride_wh
        for i in tl.range(heads_per_group, num_stages=NUM_STAGES):
            q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0)
            if UPCAST:
                q = q.to(tl.float32)
            w = tl.load(w_rows + i * stride_wh, mask=row_ok, other=0.0)
            scores = tl.dot(q, k_t)
            acc += tl.maximum(scores, 0.0) * w[:, None]
            q_ptrs += D
        if HAS_SCALE:
            # relu(σ·x) = σ·relu(x) for σ >= 0 (op.py checks): one multiply per logit after the head sum.
            sigma = tl.load(k_scale_ptr + b * stride_sb + cols.to(tl.int64) * stride_st + g * stride_sg,
                            mask=col_ok, other=0.0)
            acc = acc * sigma[None, :]
        in_window = (cols[None, :] >= ks[:, None]) & (cols[None, :] < ke[:, None])
        out_ptrs = (out_ptr + b * stride_ob + rows.to(tl.int64)[:, None] * stride_os
                    + cols.to(tl.int64)[None, :] * stride_ot + g * stride_og)
        out_mask = row_ok[:, None] & col_ok[None, :]
        if CLEAN:
            tl.store(out_ptrs, tl.where(in_window, acc, float("-inf")), mask=out_mask)
        else:
            tl.store(out_ptrs, acc, mask=out_mask & in_window)
    elif CLEAN:
        out_ptrs = (out_ptr + b * stride_ob + rows.to(tl.int64)[:, None] * stride_os
                    + cols.to(tl.int64)[None, :] * stride_ot + g * stride_og)
        out_mask = row_ok[:, None] & col_ok[None, :]
        tl.store(out_ptrs, tl.full([BLOCK_M, BLOCK_N], float("-inf"), tl.float32), mask=out_mask)
