from .op import fp8_lightning_indexer_fwd

__all__ = ["fp8_lightning_indexer_fwd"]
