"""Test helpers shared by the attn-mla op tests: every op module exposes ``CONFIGS`` and
``with_config(config, poison=True, ...)`` (the op pinned to one launch config, outputs NaN-poisoned)."""


def pinned(op_module, config, **kwargs):
    """The op pinned to ``config`` with poisoned outputs (``kwargs``: e.g. MLA's ``num_splits``)."""
    return op_module.with_config(config, poison=True, **kwargs)


def every_config(op_module) -> dict:
    """``{config name: pinned op}`` for ``OpSpec.check_each``."""
    return {f"config {name}": pinned(op_module, config) for name, config in op_module.CONFIGS.items()}
