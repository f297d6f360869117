#!/usr/bin/env python3
"""Checks that the crate's top-level modules import each other without a cycle.

A module is a file `src/<name>.rs` or a directory `src/<name>/`; an edge A -> B is any
`crate::B` path (in `use` or inline) in a file of A. Tests (`#[cfg(test)] mod tests { .. }`
blocks and `tests.rs` files) and comments are skipped: only the shipped code counts.

Usage: module_graph.py [SRC_DIR]      prints the cycles and exits 1 if there are any
       module_graph.py --dot [SRC]    prints the graph in Graphviz form
"""
import os
import re
import sys

CRATE_PATH = re.compile(r"\bcrate::(\w+)")
USE_GROUP = re.compile(r"\buse\s+crate::\{([^;]*)\}", re.S)
# Comments, string and char literals, in one left-to-right pass (so a `'"'` or a `"//"` is
# not taken for the start of a string or a comment).
LEXEMES = re.compile(
    r"""//[^\n]*|/\*.*?\*/"""
    r"""|(?<!\w)b?r(#*)".*?"\1"""
    r"""|(?<!\w)b?"(?:\\.|[^"\\])*\""""
    r"""|(?<!\w)b?'(?:\\u\{[0-9a-fA-F]+\}|\\.|[^'\\\n])'""",
    re.S,
)




def strip(text):
    """Drops comments, string literals and `#[cfg(test)]` items."""
    text = LEXEMES.sub(lambda m: "" if m.group(0)[0] == "/" else '""', text)
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:mod\s+\w+\s*)?\{?", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        # Skip the item: up to its matching closing brace (or its `;`).
        j = m.end()
        depth = 1 if text[m.end() - 1] == "{" else 0
        if depth == 0:
            while j < len(text) and text[j] not in "{;":
                j += 1
            if j < len(text) and text[j] == ";":
                i = j + 1
                continue
            depth, j = 1, j + 1
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def graph(src):
    modules = set()
    for entry in os.listdir(src):
        path = os.path.join(src, entry)
        if entry.endswith(".rs") and entry not in ("lib.rs", "main.rs"):
            modules.add(entry[:-3])
        elif os.path.isdir(path):
            modules.add(entry)
    edges = {m: set() for m in modules}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs") or f == "tests.rs":
                continue
            rel = os.path.relpath(os.path.join(root, f), src)
            top = rel.split(os.sep)[0]
            top = top[:-3] if top.endswith(".rs") else top
            if top not in modules:
                continue
            text = strip(open(os.path.join(root, f), encoding="utf-8").read())
            targets = set(CRATE_PATH.findall(text))
            for group in USE_GROUP.findall(text):
                targets.update(re.findall(r"(?:^|,)\s*(\w+)", group))
            edges[top].update(t for t in targets if t in modules and t != top)
    return edges


def cycles(edges):
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
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
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main():
    args = [a for a in sys.argv[1:] if a != "--dot"]
    src = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "src")
    edges = graph(src)
    if "--dot" in sys.argv:
        print("digraph modules {")
        for a in sorted(edges):
            for b in sorted(edges[a]):
                print(f'  "{a}" -> "{b}";')
        print("}")
        return 0
    found = cycles(edges)
    for comp in found:
        inner = {a: sorted(b for b in edges[a] if b in comp) for a in comp}
        print("module cycle: " + ", ".join(comp))
        for a in comp:
            print(f"  {a} -> {', '.join(inner[a])}")
    if found:
        return 1
    print(f"module graph: {len(edges)} modules, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
