#!/usr/bin/env python3
"""Runs every bwplan command of the README's shell blocks, as a new user would paste them (issue 17).

Usage: readme_commands.py --bwplan BUILD/bwplan --readme README.md [--list]

Each ```sh block line that starts with `bwplan ` or `./build/bwplan ` (continuation lines joined) is run in
a scratch directory laid out as the README assumes: `./build/bwplan` is the binary under test, `../my-model/`
holds a published config.json (a bundled preset's copy), and the files one command writes (`-o plan.json`,
`> job.json`) are there for the next. Lines of other programs (`bash .ci/deps`, `cmake`, `aws …`) are not
run; the quick-start line's bwplan command is. A command passes when it exits 0 and its stdout is not empty
(or it wrote its -o file); a failure prints the command, its exit status and stderr's last line. Standard
library only.
"""
import argparse
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile


def readme_commands(text: str) -> list[str]:
    """The bwplan commands of the README's ```sh blocks, continuation lines joined, in order."""
    out: list[str] = []
    in_sh = False
    pending = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.startswith("```"):
            in_sh = line.strip() in ("```sh", "```bash", "```shell")
            pending = ""
            continue
        if not in_sh:
            continue
        if pending:
            line = pending + " " + line.strip()
            pending = ""
        if line.endswith("\\"):
            pending = line[:-1].rstrip()
            continue
        # the quick-start lines chain set-up steps with && before the bwplan command: keep the bwplan part
        parts = [p.strip() for p in line.split("&&")]
        for p in parts:
            if p.startswith("bwplan ") or p.startswith("./build/bwplan "):
                out.append(p)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bwplan", required=True)
    ap.add_argument("--readme", required=True)
    ap.add_argument("--list", action="store_true", help="print the commands and exit")
    a = ap.parse_args()
    readme = pathlib.Path(a.readme)
    cmds = readme_commands(readme.read_text(encoding="utf-8"))
    if a.list:
        print("\n".join(cmds))
        return 0
    if len(cmds) < 10:
        print(f"readme_commands: only {len(cmds)} bwplan commands found in {readme}; the parser lost some", file=sys.stderr)
        return 1
    bwplan = pathlib.Path(a.bwplan).resolve()
    root = readme.resolve().parent
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp) / "work"
        (work / "build").mkdir(parents=True)
        os.symlink(bwplan, work / "build" / "bwplan")
        (pathlib.Path(tmp) / "my-model").mkdir()
        shutil.copy(root / "configs" / "models" / "llama-3.1-8b.json", pathlib.Path(tmp) / "my-model" / "config.json")
        env = dict(os.environ, PATH=f"{work / 'build'}{os.pathsep}{os.environ.get('PATH', '')}", NO_COLOR="1")
        for cmd in cmds:
            redirect = None
            m = re.search(r"\s>\s*(\S+)\s*$", cmd)
            line = cmd[: m.start()] if m else cmd
            if m:
                redirect = work / m.group(1)
            argv = shlex.split(line)
            argv[0] = str(work / "build" / "bwplan")
            r = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=300)
            if redirect is not None:
                redirect.write_text(r.stdout, encoding="utf-8")
            wrote = "-o" in argv and (work / argv[argv.index("-o") + 1]).is_file()
            ok = r.returncode == 0 and (r.stdout.strip() or wrote)
            status = "ok  " if ok else "FAIL"
            print(f"{status} {cmd}")
            if not ok:
                failures += 1
                last = (r.stderr.strip().splitlines() or ["(no stderr)"])[-1]
                print(f"     exit {r.returncode}: {last}")
    print(f"readme_commands: {len(cmds) - failures} of {len(cmds)} README commands ran")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
