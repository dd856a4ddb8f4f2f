"""Collect the dotted names a Python source uses from given libraries, with ``ast`` only.

``import torch.distributed as dist`` then ``dist.all_reduce(...)`` -> ``torch.distributed.all_reduce``;
``from torchao.float8 import Float8LinearConfig`` then ``Float8LinearConfig.from_recipe_name`` ->
``torchao.float8.Float8LinearConfig.from_recipe_name``. Imports inside functions count (the
trainer imports torch lazily). Attribute chains are followed as far as they are plain names and
attributes; calls and subscripts end a chain (what a call returns is not a library path).

Used by tests/train/test_pinned_api.py; ``python3 tests/train/api_names.py FILES...`` prints them.
"""

from __future__ import annotations

import ast
import sys
from typing import Dict, Iterable, Set

LIBRARIES = ("torch", "torchao", "transformers", "peft", "accelerate")


def _root(name: str) -> str:
    return name.split(".", 1)[0]


class _Collector(ast.NodeVisitor):
    def __init__(self, libraries: Iterable[str]):
        self.libraries = set(libraries)
        self.alias: Dict[str, str] = {}  # local name -> dotted library path
        self.names: Set[str] = set()

    # imports -----------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if _root(a.name) in self.libraries:
                self.names.add(a.name)
                if a.asname:
                    self.alias[a.asname] = a.name
                else:
                    self.alias[_root(a.name)] = _root(a.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module or _root(node.module) not in self.libraries:
            return
        for a in node.names:
            full = f"{node.module}.{a.name}"
            self.names.add(full)
            self.alias[a.asname or a.name] = full

    # uses --------------------------------------------------------------------------------
    def visit_Attribute(self, node: ast.Attribute) -> None:
        chain = []
        cur: ast.AST = node
        while isinstance(cur, ast.Attribute):
            chain.append(cur.attr)
            cur = cur.value
        if isinstance(cur, ast.Name) and cur.id in self.alias:
            self.names.add(".".join([self.alias[cur.id]] + list(reversed(chain))))
            return  # the whole chain is recorded; its prefixes are implied
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.alias:
            self.names.add(self.alias[node.id])


def collect(source: str, libraries: Iterable[str] = LIBRARIES) -> Set[str]:
    tree = ast.parse(source)
    c = _Collector(libraries)
    # imports first (a module may use a name above a function-level import of it)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            c.visit(node)
    c.visit(tree)
    return c.names


def collect_files(paths: Iterable[str], libraries: Iterable[str] = LIBRARIES) -> Dict[str, Set[str]]:
    out: Dict[str, Set[str]] = {}
    for p in paths:
        with open(p, encoding="utf-8") as f:
            out[p] = collect(f.read(), libraries)
    return out


if __name__ == "__main__":
    allnames: Set[str] = set()
    for names in collect_files(sys.argv[1:]).values():
        allnames |= names
    print("\n".join(sorted(allnames)))
