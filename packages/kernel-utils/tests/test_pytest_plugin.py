import subprocess
import sys

from attnops.kernel_utils.pytest_plugin import full_size_turn

# A second process asking for the same turn without waiting: exit 1 while it is held, 0 once it is free.
PROBE = """
import fcntl, sys
with open(sys.argv[1], "a") as f:
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(1)
"""


def _other_process_gets_turn(path) -> bool:
    return subprocess.run([sys.executable, "-c", PROBE, str(path)], timeout=60).returncode == 0


def test_full_size_turn_excludes_other_processes(tmp_path):
    lock = tmp_path / "full-size.lock"
    with full_size_turn(lock):
        assert not _other_process_gets_turn(lock)
    assert _other_process_gets_turn(lock)
