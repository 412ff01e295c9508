from attnops.kernel_utils.pytest_plugin import pytest_collection_modifyitems, pytest_runtest_call
from attnops.kernel_utils.pytest_plugin import pytest_configure as _kernel_utils_configure


def pytest_configure(config):
    _kernel_utils_configure(config)
    # pytest-timeout's marker (the GPU runs use the plugin; CI does not install it): declared here so that
    # --strict-markers accepts the tests that need more than the runs' default per-test limit
    config.addinivalue_line("markers", "timeout(seconds): per-test time limit under pytest-timeout")


__all__ = ["pytest_collection_modifyitems", "pytest_configure", "pytest_runtest_call"]
