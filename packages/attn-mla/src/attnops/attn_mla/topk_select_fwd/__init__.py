from .op import topk_select_fwd

__all__ = ["topk_select_fwd"]
