#!/usr/bin/env python3
"""Keeps production functions short: none over LIMIT lines, except the ones listed in
`scripts/long_functions.txt` (each may not grow past the length recorded there; shrink the
record when one gets shorter, delete the line when it fits). Tests (`#[cfg(test)]` items,
`tests.rs` files) do not count. Lines are counted from the `fn` line to its closing brace.

Usage: fn_lengths.py [SRC_DIR]         checks, prints each problem, exits 1 on any
       fn_lengths.py --list [SRC_DIR]  prints every function over LIMIT lines, longest first
"""
import os
import re
import sys

LIMIT = 100
HERE = os.path.dirname(os.path.abspath(__file__))
RECORD = os.path.join(HERE, "long_functions.txt")


def blank(text):
    """Comments, strings and char literals replaced by spaces, newlines kept (same offsets)."""
    out, i, n = list(text), 0, len(text)

    def wipe(a, b):
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            wipe(i, j)
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_") or (text[i - 1] == "b" and (i < 2 or not text[i - 2].isalnum()))):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            j = n if end < 0 else end + 1 + len(hashes)
            wipe(i, j)
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            wipe(i, j + 1)
            i = j + 1
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^'\\])'", text[i:])
            if m:
                wipe(i, i + m.end())
                i += m.end()
            else:
                i += 1  # a lifetime
        else:
            i += 1
    return "".join(out)


def close_of(text, open_at):
    depth = 0
    for k in range(open_at, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(text) - 1


def functions(src):
    """(path, name, first line, lines) of every production function."""
    out = []
    for root, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith(".rs") or f == "tests.rs":
                continue
            path = os.path.join(root, f)
            text = blank(open(path, encoding="utf-8").read())
            skip = []
            for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([\w:]+\))?\s+)?mod\s+\w+\s*\{", text):
                skip.append((m.start(), close_of(text, m.end() - 1)))
            for m in re.finditer(r"\bfn\s+(\w+)[^;{]*\{", text):
                if any(a <= m.start() <= b for a, b in skip):
                    continue
                end = close_of(text, m.end() - 1)
                first = text.count("\n", 0, m.start()) + 1
                last = text.count("\n", 0, end) + 1
                rel = os.path.relpath(path, os.path.dirname(src.rstrip("/")) or ".")
                out.append((rel, m.group(1), first, last - first + 1))
    return out


def record():
    rows = {}
    for line in open(RECORD, encoding="utf-8"):
        line = line.split("#", 1)[0].strip()
        if line:
            path, name, lines = line.split()
            rows[(path, name)] = int(lines)
    return rows


def main():
    args = [a for a in sys.argv[1:] if a != "--list"]
    src = args[0] if args else os.path.join(HERE, "..", "src")
    found = functions(src)
    if "--list" in sys.argv:
        for rel, name, first, n in sorted(found, key=lambda r: -r[3]):
            if n > LIMIT:
                print(f"{rel} {name} {n}")
        return 0
    known, problems, seen = record(), [], set()
    for rel, name, first, n in found:
        key = (rel, name)
        if key in known:
            seen.add(key)
            if n > known[key]:
                problems.append(f"{rel}:{first}: {name} grew to {n} lines (recorded {known[key]}): split it")
            elif n <= LIMIT:
                problems.append(f"{rel}:{first}: {name} is {n} lines now: delete its line in long_functions.txt")
            elif n < known[key]:
                problems.append(f"{rel}:{first}: {name} shrank to {n} lines: record {n} in long_functions.txt")
        elif n > LIMIT:
            problems.append(f"{rel}:{first}: {name} is {n} lines, over {LIMIT}: split it into named steps")
    for key in sorted(set(known) - seen):
        problems.append(f"long_functions.txt lists {key[0]} {key[1]}, which is gone: delete the line")
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"functions: none over {LIMIT} lines but the {len(known)} recorded in long_functions.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
