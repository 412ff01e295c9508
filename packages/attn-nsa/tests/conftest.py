from attnops.kernel_utils.pytest_plugin import pytest_collection_modifyitems, pytest_configure  # noqa: F401
