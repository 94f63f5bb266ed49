#!/usr/bin/env python3
"""No circles between a crate's modules: each policy and type has one home
that the others import (issue 64). Reads every crate's `src/` (the paths
its files name: `crate::a::b`, `super::x`, `use crate::{a, b::c}`), maps
each path to the file that defines the module, and fails, naming the
files, where modules reach each other in a circle. A module and its own
submodules (`mod.rs` and the files under it, a file and its inline
`mod tests`) may name each other: that is one home. Called by
scripts/test.sh."""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# `crate::a::b::c`, `super::a::b`, `self::a`: a path and where it starts.
PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
# `use crate::{a, b::c}` / `use super::{a, b}`: the braces' first segments.
GROUP = re.compile(r"\b(crate|super|self)::\{([^}]*)\}", re.S)
# Line comments (a `//` inside a string such as a URL is not one).
COMMENT = re.compile(r'(?<![:"])//[^\n]*')
INLINE_TESTS = re.compile(r"#\[cfg\(test\)\]\s*(?:pub\s+)?mod\s+\w+\s*\{")


def module_of(src: pathlib.Path, file: pathlib.Path) -> tuple:
    """The module path a file defines (`lib.rs`/`main.rs`: the root)."""
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("lib", "main", "mod"):
        parts.pop()
    if parts and parts[0] == "bin":
        return ("bin",) + tuple(parts[1:])
    return tuple(parts)


def target(here: tuple, start: str, segments: list, modules: set):
    """The longest known module the path names, or None."""
    if start == "crate":
        base = []
    elif start == "super":
        base = list(here[:-1])
    else:
        base = list(here)
    while segments and segments[0] == "super":
        base = base[:-1]
        segments = segments[1:]
    best = None
    for n in range(1, len(segments) + 1):
        candidate = tuple(base + segments[:n])
        if candidate in modules:
            best = candidate
    return best


def edges_of(src: pathlib.Path):
    files = {module_of(src, f): f for f in src.rglob("*.rs")}
    modules = set(files)
    edges = {}
    for here, file in files.items():
        if here and here[0] == "bin":
            continue
        text = COMMENT.sub("", file.read_text())
        # An inline test module (at the file's end) is part of its file's
        # home; a `#[cfg(test)]` item elsewhere is read as code.
        inline_tests = INLINE_TESTS.search(text)
        if inline_tests:
            text = text[: inline_tests.start()]
        out = set()
        for start, rest in PATH.findall(text):
            t = target(here, start, rest.strip(":").split("::"), modules)
            if t is not None:
                out.add(t)
        for start, group in GROUP.findall(text):
            for item in group.split(","):
                first = item.strip().split("::")
                if first and first[0]:
                    t = target(here, start, first, modules)
                    if t is not None:
                        out.add(t)
        related = lambda a, b: a[: len(b)] == b or b[: len(a)] == a
        edges[here] = {t for t in out if not related(t, here)}
    # A module holds its submodules: what they name, it reaches.
    for here in files:
        if here and here[:-1] in edges:
            edges[here[:-1]].add(here)
    return files, edges


def circles(edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in list(edges):
        if v not in index:
            visit(v)
    return found


def main():
    failed = False
    for manifest in sorted(ROOT.glob("*/Cargo.toml")):
        src = manifest.parent / "src"
        if not src.is_dir():
            continue
        files, edges = edges_of(src)
        for component in circles(edges):
            failed = True
            names = ", ".join(str(files[m].relative_to(ROOT)) for m in component)
            print(f"modules in a circle: {names}", file=sys.stderr)
            for m in component:
                into = sorted("::".join(t) for t in edges[m] if t in component)
                print(f"  {'::'.join(m)} names {', '.join(into)}", file=sys.stderr)
    if failed:
        sys.exit(1)
    print("module check: no circle between any crate's modules")


if __name__ == "__main__":
    main()
