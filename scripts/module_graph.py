#!/usr/bin/env python3
"""Checks that the crate's top-level modules import each other without a cycle.

A module is a file `src/<name>.rs` or a directory `src/<name>/`; an edge A -> B is any
`crate::B` path (in `use` or inline) in a file of A. Tests (`#[cfg(test)] mod tests { .. }`
blocks and `tests.rs` files) and comments are skipped: only the shipped code counts.

Usage: module_graph.py [SRC_DIR]      prints the cycles and exits 1 if there are any
       module_graph.py --layers [SRC] prints each use of a higher layer (LAYERS) and exits 1
       module_graph.py --dot [SRC]    prints the graph in Graphviz form
       module_graph.py --check-doc ARCHITECTURE.md [SRC]
                                      compares the doc's `module-graph` block with the graph
                                      and exits 1, saying where they differ, if they do

The `module-graph` block is a fenced block (```module-graph) with one line per module,
`name: every module it uses`, bottom-up (a module uses only modules on lines above it);
a line that starts with whitespace continues the one before.
"""
import os
import re
import sys

CRATE_PATH = re.compile(r"\bcrate::(\w+)(?:::(\w+))?")
GROUP_ITEM = re.compile(r"(?:^|,)\s*(\w+)(?:::(\w+))?")
SUPER_PATH = re.compile(r"\bsuper::(\w+)")
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


# The layers, lowest first: a directory of `src/` whose modules are one layer (`base`,
# `protocol`, `config`, `persist`'s files, `agent`, `server`, `app`), or a module that is a layer
# of its own (`kernel`, `tools`, `provider`, `mcp`). A module may use modules of its own layer
# and of the layers below it, never above (`--layers` checks it; tests/structure.rs runs it).
LAYERS = ["base", "protocol", "config", "kernel", "tools", "provider", "mcp", "persist",
          "agent", "server", "app"]
# Directories whose children are the modules (the rest are modules themselves).
LAYER_DIRS = {"base", "protocol", "config", "agent", "server", "app"}


def modules_of(src):
    """Module -> its layer. A layer directory's modules are its files and subdirectories."""
    layer = {}
    for entry in os.listdir(src):
        path = os.path.join(src, entry)
        if entry in LAYER_DIRS and os.path.isdir(path):
            for inner in os.listdir(path):
                if inner == "mod.rs":
                    continue
                name = inner[:-3] if inner.endswith(".rs") else inner
                if inner.endswith(".rs") or os.path.isdir(os.path.join(path, inner)):
                    layer[name] = entry
        elif entry.endswith(".rs") and entry not in ("lib.rs", "main.rs"):
            layer[entry[:-3]] = entry[:-3]
        elif os.path.isdir(path):
            layer[entry] = entry
    return layer


def graph(src, origins=None):
    """Module -> the modules it uses; `origins` (if given) gets the first file of each edge."""
    layer = modules_of(src)
    modules = set(layer)
    edges = {m: set() for m in modules}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs") or f == "tests.rs":
                continue
            rel = os.path.relpath(os.path.join(root, f), src)
            parts = rel.split(os.sep)
            if parts[0] in LAYER_DIRS:
                if len(parts) < 2 or parts[1] == "mod.rs":
                    continue
                parts = parts[1:]
            top = parts[0][:-3] if parts[0].endswith(".rs") else parts[0]
            if top not in modules:
                continue
            text = strip(open(os.path.join(root, f), encoding="utf-8").read())
            paths = CRATE_PATH.findall(text)
            for group in USE_GROUP.findall(text):
                paths += [(a, b) for a, b in GROUP_ITEM.findall(group)]
            targets = set()
            for first, second in paths:
                targets.add(second if first in LAYER_DIRS and second else first)
            # `super::x` from a module directly in a layer directory names a sibling.
            if len(parts) == 1 and layer.get(top) in LAYER_DIRS:
                targets.update(SUPER_PATH.findall(text))
            for t in sorted(targets):
                if t in modules and t != top:
                    edges[top].add(t)
                    if origins is not None:
                        origins.setdefault((top, t), os.path.join("src", rel))
    return edges


def layer_violations(src, edges, origins):
    """Each use of a module in a higher layer, one sentence each."""
    layer = modules_of(src)
    out = []
    for a in sorted(edges):
        for b in sorted(edges[a]):
            la, lb = layer[a], layer[b]
            if la not in LAYERS or lb not in LAYERS:
                out.append(f"{a} or {b} is in no layer: add its directory to LAYERS")
            elif LAYERS.index(lb) > LAYERS.index(la):
                out.append(
                    f"{origins[(a, b)]}: {a} ({la}) uses {b} ({lb}), a higher layer; "
                    f"the layers, lowest first: {', '.join(LAYERS)}"
                )
    return out


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


def doc_block(path):
    """The `module-graph` block of `path`: [(line number, module, [modules it uses])]."""
    rows, inside = [], False
    for n, line in enumerate(open(path, encoding="utf-8").read().splitlines(), 1):
        if not inside:
            inside = line.strip() == "```module-graph"
            continue
        if line.strip().startswith("```"):
            return rows
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0].isspace() and rows:
            rows[-1][2].extend(line.split())
            continue
        name, sep, deps = line.partition(":")
        if not sep or not name.strip().isidentifier():
            rows.append((n, None, line))
            continue
        rows.append((n, name.strip(), deps.split()))
    return rows if inside else None


def check_doc(doc, edges, origins):
    """How the doc's block and the graph disagree, one sentence each (empty: they agree)."""
    rows = doc_block(doc)
    name = os.path.basename(doc)
    if rows is None:
        return [f"{name} has no ```module-graph block"]
    out, listed, above = [], {}, set()
    for n, module, deps in rows:
        where = f"{name}:{n}"
        if module is None:
            out.append(f"{where}: not `module: modules it uses`: {deps!r}")
            continue
        if module in listed:
            out.append(f"{where}: {module} is listed twice")
        listed[module] = set(deps)
        if module not in edges:
            out.append(f"{where}: the block lists {module}, which is not a module of src/")
        for d in deps:
            if d not in above:
                out.append(
                    f"{where}: {module} uses {d}, which is not listed above it "
                    "(the block lists modules bottom-up)"
                )
        above.add(module)
    for module in sorted(edges):
        if module not in listed:
            uses = " ".join(sorted(edges[module]))
            out.append(f"module {module} is not in {name}'s block: add `{module}: {uses}`")
            continue
        for d in sorted(edges[module] - listed[module]):
            out.append(
                f"{origins[(module, d)]} uses crate::{d}, but {name} does not list {d} "
                f"for {module}: add it to that line (an architecture change), or drop the use"
            )
        for d in sorted(listed[module] - edges[module]):
            out.append(
                f"{name} says {module} uses {d}, but no file of module {module} names "
                f"crate::{d}: remove {d} from that line"
            )
    return out


def main():
    args = sys.argv[1:]
    doc = None
    if "--check-doc" in args:
        i = args.index("--check-doc")
        if i + 1 >= len(args):
            print("--check-doc needs the path of ARCHITECTURE.md")
            return 2
        doc = args[i + 1]
        del args[i : i + 2]
    args = [a for a in args if a not in ("--dot", "--layers")]
    src = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "src")
    origins = {}
    edges = graph(src, origins)
    if doc is not None:
        problems = check_doc(doc, edges, origins)
        for p in problems:
            print(p)
        if problems:
            return 1
        n = sum(len(b) for b in edges.values())
        print(f"{doc}: its module graph matches src/ ({len(edges)} modules, {n} edges)")
        return 0
    if "--dot" in sys.argv:
        print("digraph modules {")
        for a in sorted(edges):
            for b in sorted(edges[a]):
                print(f'  "{a}" -> "{b}";')
        print("}")
        return 0
    if "--layers" in sys.argv:
        problems = layer_violations(src, edges, origins)
        for p in problems:
            print(p)
        if problems:
            return 1
        print(f"module layers: every use points down ({', '.join(LAYERS)})")
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
