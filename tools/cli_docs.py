#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes (or checks) the help blocks of docs/cli.md from the binary: under every `## bwplan CMD` heading the first
```text block is replaced by the output of `bwplan CMD --help` (`bwplan --help` for `## bwplan `).

    tools/cli_docs.py build/bwplan --write docs/cli.md
    tools/cli_docs.py build/bwplan --check docs/cli.md      # exit 1 when a block differs

tests/cli_docs_test (ctest) runs the check. Standard library only.
"""
import argparse
import re
import subprocess
import sys


def render(binary, text):
    out, pos = [], 0
    for m in re.finditer(r"^## bwplan ?([a-z-]*) *\n", text, re.M):
        start = text.find("```text\n", m.end())
        end = text.find("```", start + 8)
        if start < 0 or end < 0:
            continue
        cmd = [binary] + ([m.group(1)] if m.group(1) else []) + ["--help"]
        help_text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        out.append(text[pos:start + 8])
        out.append(help_text)
        pos = end
    out.append(text[pos:])
    return "".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bwplan")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write")
    g.add_argument("--check")
    a = ap.parse_args()
    path = a.write or a.check
    with open(path, encoding="utf-8") as f:
        text = f.read()
    new = render(a.bwplan, text)
    if a.write:
        with open(path, "w", encoding="utf-8") as f:
            f.write(new)
        return 0
    if new != text:
        print(f"{path} is stale: regenerate with tools/cli_docs.py {a.bwplan} --write {path}")
        return 1
    print(f"{path}: every help block is what the binary prints")
    return 0


if __name__ == "__main__":
    sys.exit(main())
