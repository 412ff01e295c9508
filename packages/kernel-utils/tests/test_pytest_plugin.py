import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnops.kernel_utils import pytest_plugin
from attnops.kernel_utils.pytest_plugin import full_size_turn

# A second process asking for one turn file without waiting: exit 1 while it is held, 0 once it is free.
PROBE = """
import fcntl, sys
with open(sys.argv[1], "a") as f:
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(1)
"""


def _free(path) -> bool:
    return subprocess.run([sys.executable, "-c", PROBE, str(path)], timeout=60).returncode == 0


def test_full_size_turns_exclude_other_processes(tmp_path):
    """With two slots, the first turn takes slot 0 and a nested one slot 1; each is held against another process
    while its turn lasts and free after."""
    prefix = tmp_path / "full-size"
    with full_size_turn(prefix, slots=2):
        assert not _free(f"{prefix}.0") and _free(f"{prefix}.1")
        with full_size_turn(prefix, slots=2):
            assert not _free(f"{prefix}.0") and not _free(f"{prefix}.1")
        assert _free(f"{prefix}.1")
    assert _free(f"{prefix}.0") and _free(f"{prefix}.1")


class _Item:
    def __init__(self, name):
        self.name = name
        self.nodeid = f"test_x.py::{name}"


def test_only_full_size_cases_take_a_turn(tmp_path, monkeypatch):
    """As on a GPU (interpreter off): a ``*full_size*`` case holds a turn while it runs and frees it after, and says in
    ``$ATTNOPS_TURN_LOG`` when it took and gave back its turn; any other case takes none; both hand their cached
    memory back once they ran."""
    prefix = tmp_path / "full-size"
    monkeypatch.setattr(pytest_plugin, "FULL_SIZE_LOCKS", prefix)
    monkeypatch.setattr(pytest_plugin.runtime, "interpreting", lambda: False)
    monkeypatch.setenv("ATTNOPS_FULL_SIZE_SLOTS", "1")
    turn_log = tmp_path / "turns.log"
    monkeypatch.setenv("ATTNOPS_TURN_LOG", str(turn_log))
    emptied = []
    monkeypatch.setattr(pytest_plugin.torch.cuda, "empty_cache", lambda: emptied.append(True))
    for name, holds in (("test_seed_row_full_size[row]", True), ("test_seed_row_shrunk[row]", False)):
        emptied.clear()
        call = pytest_plugin.pytest_runtest_call(_Item(name))
        next(call)  # the test body would run here
        assert _free(f"{prefix}.0") is not holds, name
        assert not emptied, name
        with pytest.raises(StopIteration):
            next(call)
        assert _free(f"{prefix}.0"), name
        assert emptied == [True], name
    # the turn log names the full-size case only: when it took its turn and when it gave it back
    events = [line.split(" ", 3)[1::2] for line in turn_log.read_text().splitlines()]
    assert events == [["took", "test_x.py::test_seed_row_full_size[row]"],
                      ["gave", "test_x.py::test_seed_row_full_size[row]"]], events


# every package's tests/conftest.py in this checkout (only kernel-utils' own where the package is tested alone)
CONFTESTS = sorted(Path(__file__).resolve().parents[2].glob("*/tests/conftest.py"))


@pytest.mark.parametrize("path", CONFTESTS, ids=lambda p: p.parts[-3])
def test_every_conftest_takes_the_hooks(path):
    """A pytest hook reaches only the tests under the conftest that exposes it: a package whose conftest leaves
    ``pytest_runtest_call`` out runs its full-size cases without turns (attn-mla's did, 2026-12-06)."""
    spec = importlib.util.spec_from_file_location(f"_conftest_{path.parts[-3].replace('-', '_')}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for hook in ("pytest_collection_modifyitems", "pytest_runtest_call"):
        assert getattr(module, hook, None) is getattr(pytest_plugin, hook), (path, hook)
    assert hasattr(module, "pytest_configure"), path


def test_row_seed_is_the_same_under_any_hash_salt():
    """Two processes with different ``PYTHONHASHSEED`` give a row the same seed (``hash()`` would not), and two ids
    get different seeds."""
    script = (
        "import types; from attnops.kernel_utils.pytest_plugin import row_seed; "
        "print(row_seed(types.SimpleNamespace(id='llama-8b-4k/f16')), row_seed(types.SimpleNamespace(id='x/bf16')))"
    )
    seeds = [
        subprocess.run(
            [sys.executable, "-c", script], env={**os.environ, "PYTHONHASHSEED": salt}, capture_output=True,
            text=True, timeout=120, check=True,
        ).stdout.split()
        for salt in ("1", "2")
    ]
    assert seeds[0] == seeds[1], seeds
    assert seeds[0][0] != seeds[0][1], seeds
