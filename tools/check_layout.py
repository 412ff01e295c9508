"""Layout rules the lint session enforces (docs/dev/contributing.md):

* every package has pyproject.toml, README.md, CHANGELOG.md and ``__about__.py``;
* every op folder (one holding ``op.py``) has ``__init__``, ``kernel``, ``op``, ``reference`` and ``spec``
  modules, a ``tests/test_<op>.py`` and a ``docs/ops/<op>.md``;
* ``kernel.py`` files are Triton only (no torch import); families never import each other; nothing under
  ``packages/`` imports ``benchmarks`` or a peer library;
* test module names are unique across packages (pytest imports them by basename).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ("attn-core", "attn-mla", "attn-nsa", "kvcache-ops")
OP_FILES = ("__init__.py", "kernel.py", "op.py", "reference.py", "spec.py")
PEERS = ("vllm", "flashinfer", "flash_attn", "vllm_flash_attn", "vllm_flashmla", "deep_gemm", "fla", "benchmarks")


def duplicate_test_modules() -> list[str]:
    """pytest's default import mode needs test module basenames unique across the packages."""
    seen: dict[str, Path] = {}
    found = []
    for test in sorted((ROOT / "packages").glob("*/tests/*.py")):
        if test.name == "conftest.py":
            continue
        if test.name in seen:
            found.append(f"{test.relative_to(ROOT)}: same module name as {seen[test.name].relative_to(ROOT)}")
        seen[test.name] = test
    return found


def problems() -> list[str]:
    found = duplicate_test_modules()
    for pkg_dir in sorted((ROOT / "packages").iterdir()):
        if not pkg_dir.is_dir():
            continue
        module = pkg_dir.name.replace("-", "_")
        src = pkg_dir / "src" / "attnops" / module
        for required in ("pyproject.toml", "README.md", "CHANGELOG.md"):
            if not (pkg_dir / required).exists():
                found.append(f"{pkg_dir.name}: missing {required}")
        if not (src / "__about__.py").exists():
            found.append(f"{pkg_dir.name}: missing src/attnops/{module}/__about__.py")
        for op_py in sorted(src.glob("*/op.py")):
            op = op_py.parent.name
            for name in OP_FILES:
                if not (op_py.parent / name).exists():
                    found.append(f"{pkg_dir.name}/{op}: missing {name}")
            if not (pkg_dir / "tests" / f"test_{op}.py").exists():
                found.append(f"{pkg_dir.name}/{op}: missing tests/test_{op}.py")
            if not (ROOT / "docs" / "ops" / f"{op}.md").exists():
                found.append(f"{pkg_dir.name}/{op}: missing docs/ops/{op}.md")
        others = [f.replace("-", "_") for f in FAMILIES if f != pkg_dir.name]
        for py in sorted(pkg_dir.rglob("*.py")):
            text = py.read_text()
            rel = py.relative_to(ROOT)
            imports = re.findall(r"^\s*(?:from|import)\s+([\w.]+)", text, flags=re.M)
            for imp in imports:
                top = imp.split(".")[0]
                if top in PEERS:
                    found.append(f"{rel}: imports {imp} (peers and benchmarks stay out of packages)")
                if any(imp.startswith(f"attnops.{o}") for o in others):
                    found.append(f"{rel}: imports {imp} (families never import each other)")
            if py.name == "kernel.py" and any(i.split(".")[0] == "torch" for i in imports):
                found.append(f"{rel}: kernel.py imports torch (kernels are Triton only)")
    return found


def main() -> int:
    found = problems()
    for p in found:
        print(p)
    print(f"layout: {len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
