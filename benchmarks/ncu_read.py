"""Read an Nsight Compute report (``ncu --export x`` writes ``x.ncu-rep``) where ncu is not installed: the
metrics of each profiled kernel whose names match a pattern, and the texts of ncu's rules (bottleneck, warp
stalls, occupancy, ...). The GPU machine's ncu writes the report; this machine reads it back.

    python3 -m benchmarks.ncu_read x.ncu-rep --metric 'pipe_tensor_op_hmma_cycles_active.avg.pct|pcsamp_warps_issue'
    python3 -m benchmarks.ncu_read x.ncu-rep --rules

The file is a 4-byte magic, then length-prefixed (u32, little endian) protobuf messages. Read from the format as
found in ncu 2025 reports (no schema): a string table message (a field-4 message of metric names) precedes the
result messages; a result holds the kernel's name (field 5), its metrics (field 13: name index, value message
with a double, float or integer) and its rule results (field 19: the rule's name, then its texts).
"""

from __future__ import annotations

import argparse
import re
import struct
from pathlib import Path


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def fields(buf: bytes) -> list[tuple[int, int, int | bytes]] | None:
    """(field number, wire type, value) of a protobuf message; None where ``buf`` is not one."""
    out, i = [], 0
    try:
        while i < len(buf):
            key, i = _varint(buf, i)
            number, wire = key >> 3, key & 7
            if number == 0:
                return None
            if wire == 0:
                value, i = _varint(buf, i)
            elif wire in (1, 5):
                size = 8 if wire == 1 else 4
                value, i = buf[i:i + size], i + size
            elif wire == 2:
                size, i = _varint(buf, i)
                value, i = buf[i:i + size], i + size
            else:
                return None
            if i > len(buf):
                return None
            out.append((number, wire, value))
    except IndexError:
        return None
    return out


def messages(path: Path) -> list[bytes]:
    data = path.read_bytes()
    out, i = [], 4  # after the magic
    while i + 4 <= len(data):
        (size,) = struct.unpack_from("<I", data, i)
        out.append(data[i + 4:i + 4 + size])
        i += 4 + size
    return out


def _number(value_msg: bytes) -> float | int | None:
    for _, wire, raw in fields(value_msg) or []:
        if wire == 1:
            return struct.unpack("<d", raw)[0]
        if wire == 5:
            return struct.unpack("<f", raw)[0]
        if wire == 0:
            return raw
    return None


def _string_table(msg: list) -> list[str] | None:
    for number, wire, raw in msg:
        if number == 4 and wire == 2:
            entries = fields(raw)
            if entries and len(entries) > 100 and all(w == 2 for _, w, _ in entries):
                return [s.decode(errors="replace") for _, _, s in entries]
    return None


def kernels(path: Path) -> list[dict]:
    """Per profiled kernel: {"name", "metrics": {name: value}, "rules": {rule: [texts]}}."""
    names: list[str] = []
    out = []
    for raw in messages(path):
        msg = fields(raw) or []
        names = _string_table(msg) or names
        if not any(number == 13 for number, _, _ in msg):
            continue
        kernel = {"name": "?", "metrics": {}, "rules": {}}
        for number, wire, value in msg:
            if number == 5 and wire == 2:
                kernel["name"] = value.decode(errors="replace")
            elif number == 13 and wire == 2:
                sub = fields(value) or []
                index = next((v for n, w, v in sub if n == 1 and w == 0), None)
                held = next((_number(v) for n, w, v in sub if n == 2 and w == 2), None)
                if index is not None and index < len(names):
                    kernel["metrics"][names[index]] = held
            elif number == 19 and wire == 2:
                rule = next((v for n, w, v in fields(value) or [] if n == 1 and w == 2), b"?").decode(errors="replace")
                kernel["rules"][rule] = [t.decode() for t in re.findall(rb"[\x20-\x7e]{20,}", value)]
        out.append(kernel)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("report", type=Path)
    p.add_argument("--metric", default="gpu__time_duration.sum|pipe_tensor_cycles_active.avg.pct|pcsamp_warps_issue",
                   help="regular expression over metric names")
    p.add_argument("--rules", action="store_true", help="print ncu's rule texts too")
    args = p.parse_args(argv)
    pattern = re.compile(args.metric)
    for kernel in kernels(args.report):
        print(f"== {kernel['name']}")
        for name in sorted(kernel["metrics"]):
            if pattern.search(name) and kernel["metrics"][name] not in (None, 0, 0.0):
                print(f"  {name:86s} {kernel['metrics'][name]}")
        if args.rules:
            for rule, texts in kernel["rules"].items():
                print(f"  [{rule}] " + " ".join(texts)[:1200])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
