"""Plain-torch reference of TopKSelectFwd (spec: attn-mla.md), one (b, s, g) row at a time, in float64."""

import torch


def topk_select_fwd_ref(index_score, starts, ends, topk) -> torch.Tensor:
    b_, s_, s_kv, g_ = index_score.shape
    out = torch.full((b_, s_, g_, topk), s_kv, dtype=torch.int32, device=index_score.device)
    lo_all = starts.clamp(min=0).tolist()
    hi_all = ends.clamp(max=s_kv).tolist()
    for b in range(b_):
        for s in range(s_):
            lo, hi = lo_all[b][s], hi_all[b][s]
            if hi <= lo:
                continue  # empty window: all padding
            for g in range(g_):
                window = index_score[b, s, lo:hi, g].double()
                # Stable descending sort: equal scores keep position order, so ties go to the lower position.
                order = torch.sort(window, descending=True, stable=True).indices[:topk]
                out[b, s, g, : order.numel()] = (order + lo).to(torch.int32)
    return out
