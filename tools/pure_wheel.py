"""Make the pure-Python wheel (``py3-none-any``) from the binary one: the same package
without the Rust extension, so that it runs on the pure-Python core (docs/core.md) wherever
CPython does.

Why from the binary wheel and not a second build: the two must hold the same Python files,
metadata and entry points; deriving one from the other makes that true by construction.
What changes: the extension module is left out, the WHEEL file's tag becomes
``py3-none-any`` and the wheel is purelib, and RECORD lists the files with their new hashes.

    python tools/pure_wheel.py target/wheels/resourceslice-…-abi3-….whl dist/
"""

from __future__ import annotations

import base64
import hashlib
import re
import sys
import zipfile
from pathlib import Path

# The compiled core: resourceslice/_core.abi3.so (or .pyd, on Windows).
EXTENSION = re.compile(r"resourceslice/_core\.[^/]*\.(so|pyd)|resourceslice/_core\.(so|pyd)")


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode()}"


def _pure_wheel_file(text: str) -> str:
    lines = [
        line for line in text.splitlines() if not line.startswith(("Tag:", "Root-Is-Purelib:"))
    ]
    return "\n".join([*lines, "Root-Is-Purelib: true", "Tag: py3-none-any"]) + "\n"


def pure_wheel(binary: Path, out_dir: Path) -> Path:
    name, version = binary.name.split("-")[:2]
    target = out_dir / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(binary) as source:
        members = [m for m in source.infolist() if not EXTENSION.fullmatch(m.filename)]
        if len(members) == len(source.infolist()):
            raise SystemExit(f"{binary}: no resourceslice/_core extension in it")
        record_name = next(m.filename for m in members if m.filename.endswith(".dist-info/RECORD"))
        contents = {m.filename: source.read(m) for m in members if m.filename != record_name}
    wheel_name = next(n for n in contents if n.endswith(".dist-info/WHEEL"))
    contents[wheel_name] = _pure_wheel_file(contents[wheel_name].decode()).encode()
    record = "".join(f"{n},{_record_hash(d)},{len(d)}\n" for n, d in contents.items())
    out_dir.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as wheel:
        for filename, data in contents.items():
            wheel.writestr(filename, data)
        wheel.writestr(record_name, record + f"{record_name},,\n")
    return target


if __name__ == "__main__":
    print(pure_wheel(Path(sys.argv[1]), Path(sys.argv[2])))
