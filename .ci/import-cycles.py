#!/usr/bin/env python3
"""Import cycles between the source files of each crate of the workspace.

A file imports another when its code names an item of the other's module: a `use` of it
(braces expanded), or a path through it (`crate::a::b::f`, `super::x`, a child module's
name). `mod` declarations are not imports. The strongly connected components of that graph
with more than one file are the cycles; each is printed with its size and whether it
crosses a folder.

    .ci/import-cycles.py            # every cycle
    .ci/import-cycles.py --edges    # with the imports inside each cycle that is too big
    .ci/import-cycles.py --check    # exit 1 when a cycle has more than 3 files or crosses a
                                    # folder and is not within one that
                                    # .ci/import-cycles.allowed still lists

The allowed list only shrinks: each entry is a cycle left on purpose (named in the note of
the change that measured it), one file set per paragraph, and a cycle that grows past its
entry fails the check as a new one would.
"""

import re
import subprocess
import sys
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def crates():
    """(name, src root file) of each workspace member, library and binary targets."""
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--no-deps", "--format-version", "1", "--offline"],
            cwd=ROOT,
            capture_output=True,
            check=True,
            text=True,
        ).stdout
    )
    for p in meta["packages"]:
        for t in p["targets"]:
            if set(t["kind"]) & {"lib", "bin", "proc-macro"}:
                yield f'{p["name"]}:{t["name"]}', Path(t["src_path"])


def strip(text):
    """The code without comments, string and char literals (a literal becomes `""`)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:]) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + len(hashes) + 2)
            i = n if end < 0 else end + 1 + len(hashes)
            out.append('""')
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append('""')
        elif c == "'":
            m = re.match(r"'(?:\\.[^']*|[^'\\])'", text[i:])
            if m:
                out.append("' '")
                i += m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def without_inline_tests(text):
    """The code without `#[cfg(test)] mod x { … }` blocks (tests are not the structure)."""
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += text[j] == "{"
            depth -= text[j] == "}"
            j += 1
        out.append(text[i : m.start()])
        i = j
    out.append(text[i:])
    return "".join(out)


def modules(root):
    """{module path tuple: file} for the crate whose root file is `root`, following `mod`."""
    out = {}

    def walk(file, path):
        out[path] = file
        text = strip(file.read_text(errors="replace"))
        # a file's own `#[path]` attributes are rare here; plain `mod x;` only
        for m in re.finditer(r"(?m)^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text):
            name = m.group(1)
            if file.name in ("mod.rs", "lib.rs", "main.rs"):
                base = file.parent
            else:
                base = file.parent / file.stem
            for cand in (base / f"{name}.rs", base / name / "mod.rs"):
                if cand.exists():
                    walk(cand, path + (name,))
                    break

    walk(root, ())
    return out


def expand_use(tree):
    """`a::{b, c::{d, e}}` → ['a::b', 'a::c::d', 'a::c::e']."""
    tree = re.sub(r"\s+", "", tree)
    i = tree.find("{")
    if i < 0:
        return [tree]
    prefix, inner = tree[:i], tree[i + 1 : tree.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    if cur:
        parts.append(cur)
    out = []
    for p in parts:
        for e in expand_use(p):
            out.append(prefix + e if e != "self" else prefix.rstrip(":"))
    return out


def references(text, here, children):
    """Module paths (tuples) that the code of module `here` names."""
    refs = []
    for m in re.finditer(r"\buse\s+([^;]+);", text):
        for path in expand_use(m.group(1)):
            path = re.sub(r"\bas\s*\w+$", "", path).rstrip(":")
            refs.append(path)
    for m in re.finditer(r"\b(?:crate|super|self)(?:::\w+)+", text):
        refs.append(m.group(0))
    out = []
    for r in refs:
        segs = [s for s in r.split("::") if s]
        if not segs:
            continue
        if segs[0] == "crate":
            out.append(tuple(segs[1:]))
        elif segs[0] in ("super", "self"):
            base = list(here)
            while segs and segs[0] in ("super", "self"):
                if segs[0] == "super" and base:
                    base.pop()
                segs = segs[1:]
            out.append(tuple(base + segs))
        elif segs[0] in children:
            out.append(tuple(list(here) + segs))
    return out


def reexports(text, here, children):
    """{name: module path + item} of what a module's `pub use` lists, and its globs."""
    named, globs = {}, []
    for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", text):
        for path in expand_use(m.group(1)):
            alias = re.search(r"as(\w+)$", re.sub(r"\s+", "", path))
            path = re.sub(r"\bas\s*\w+$", "", path).rstrip(":")
            resolved = references(f"use {path};", here, children)
            if not resolved:
                continue
            target = resolved[0]
            if target and target[-1] == "*":
                globs.append(target[:-1])
            elif target:
                named[alias.group(1) if alias else target[-1]] = target
    return named, globs


def defines(text, item):
    return re.search(
        rf"\b(?:fn|struct|enum|trait|type|const|static|union|macro_rules!)\s+{re.escape(item)}\b",
        text,
    )


def graph(root):
    mods = modules(root)
    texts = {f: without_inline_tests(strip(f.read_text(errors="replace"))) for f in mods.values()}
    kids = {
        path: {p[-1] for p in mods if len(p) == len(path) + 1 and p[: len(path)] == path}
        for path in mods
    }
    exported = {path: reexports(texts[f], path, kids[path]) for path, f in mods.items()}

    def resolve(ref, depth=0):
        for n in range(len(ref), -1, -1):
            if ref[:n] in mods:
                break
        module, rest = ref[:n], ref[n:]
        if rest and depth < 8 and not defines(texts[mods[module]], rest[0]):
            named, globs = exported[module]
            if rest[0] in named:
                return resolve(named[rest[0]] + rest[1:], depth + 1)
            for g in globs:
                if g in mods and defines(texts[mods[g]], rest[0]):
                    return resolve(g + rest, depth + 1)
        return mods[module]

    edges = {f: set() for f in mods.values()}
    for path, file in mods.items():
        text = texts[file]
        # a module's own `pub use` lines are how its children are offered, not a need of it
        uses = re.sub(r"\bpub(?:\([^)]*\))?\s+use\s+[^;]+;", "", text)
        for ref in references(uses, path, kids[path]):
            target = resolve(ref)
            if target != file:
                edges[file].add(target)
    return edges


def sccs(edges):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in edges:
        if v not in index:
            strong(v)
    return [c for c in out if len(c) > 1]


def folders(file):
    """The folders a file's module belongs to: its directory, and for a module with
    children (`x/mod.rs`, or `x.rs` beside `x/`) also the folder of those children or of
    its parent, so a parent and its children are one folder."""
    out = {file.parent}
    if file.name == "mod.rs":
        out.add(file.parent.parent)
    beside = file.parent / file.stem
    if beside.is_dir():
        out.add(beside)
    return out


def allowed():
    """The file sets of .ci/import-cycles.allowed, one per paragraph (`#` lines are notes)."""
    path = ROOT / ".ci" / "import-cycles.allowed"
    sets, cur = [], set()
    for line in path.read_text().splitlines() if path.exists() else []:
        line = line.strip()
        if line.startswith("#"):
            continue
        if not line:
            if cur:
                sets.append(cur)
            cur = set()
            continue
        cur.add(line)
    if cur:
        sets.append(cur)
    return sets


def main():
    check = "--check" in sys.argv
    known = allowed()
    show_edges = "--edges" in sys.argv
    bad = 0
    total = 0
    for name, root in sorted(crates()):
        edges = graph(root)
        for comp in sccs(edges):
            total += 1
            files = sorted(str(f.relative_to(ROOT)) for f in comp)
            crosses = not set.intersection(*(folders(ROOT / f) for f in files))
            wrong = len(files) > 3 or crosses
            listed = wrong and any(set(files) <= a for a in known)
            bad += wrong and not listed
            mark = "TOO BIG" if len(files) > 3 else ("CROSSES" if crosses else "ok")
            mark += " (allowed, for now)" if listed else ""
            print(f"{name}: {len(files)} files [{mark}]")
            for f in files:
                print(f"    {f}")
                if show_edges and wrong:
                    inside = sorted(
                        str(t.relative_to(ROOT)) for t in edges[ROOT / f] if t in set(comp)
                    )
                    print(f"        -> {', '.join(inside)}")
    print(f"{total} cycles, {bad} over 3 files or across a folder and not allowed")
    if check and bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
