"""Every op of this family, as declared in its ``spec.py`` (read by the benchmark harness and report)."""

SPECS = ()
