from attnops.kernel_utils.pytest_plugin import (  # noqa: F401
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_runtest_call,
)
