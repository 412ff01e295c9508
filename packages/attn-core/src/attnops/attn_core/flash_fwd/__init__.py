"""The flash-attention forward kernel (and its host side, checks and reference core) shared by
GQADenseFwd and GQAVarlenFwd: one kernel, dense = batch strides, varlen = cu_seqlens."""
