#!/usr/bin/env python3
"""Checks the #include graph of the C++ sources against the floor plan of the design (ARCHITECTURE in DESIGN.md).

Floors, lowest first:
    core | ops io dist | text | nn | models eval | decode | train | api (+ include/tfm) | serve | tools python
Rules:
  1. A file includes files of its own folder and of lower floors only (no include goes up or sideways).
  2. tools/ and serve/ include only include/tfm (the public API), core/ and io/ (file formats) besides their own
     folder; tools/ may also include serve/. include/tfm includes only include/tfm.
  3. No cycles between folders and no cycles between files.
Only quoted includes ("...") are read; <...> are system and library headers. A quoted include is resolved against
the including file's folder, then src/, then include/; one that resolves nowhere is an error.

Known violations are listed, one edge a line, in scripts/layers_allowlist.txt (see the comments there); an
allowlisted edge is reported only if it no longer exists (then the entry must go). Usage:
    python3 scripts/check_layers.py [--root DIR] [--allowlist FILE] [--list] [--prune]
Exit status 0 when the graph follows the rules, 1 otherwise (each violation on its own line).
"""
import argparse
import os
import re
import sys

FLOORS = [["core"], ["ops", "io", "dist"], ["text"], ["nn"], ["models", "eval"], ["decode"], ["train"],
          ["api", "include"], ["serve"], ["tools", "python"]]
FLOOR = {folder: i for i, names in enumerate(FLOORS) for folder in names}
# Folders that may include only these (besides their own folder), whatever their floor.
ONLY = {
    "tools": {"include", "core", "io", "serve"},
    "serve": {"include", "core", "io"},
    "include": set(),
}
# src/api implements include/tfm: the one same-floor include that is allowed.
SAME_FLOOR_ALLOWED = {("api", "include")}
# Source trees: (path prefix, folder name or None = first path component below the prefix).
TREES = [("src/", None), ("include/tfm/", "include"), ("tools/tfm/", "tools"), ("python/src/", "python")]
EXTENSIONS = (".h", ".hpp", ".cpp", ".cc")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def folder_of(rel):
    """The floor-plan folder of a repository-relative path, or None for files outside the checked trees."""
    for prefix, name in TREES:
        if rel.startswith(prefix):
            if name:
                return name
            rest = rel[len(prefix):]
            return rest.split("/", 1)[0] if "/" in rest else None
    return None


def scan(root):
    """{file: [(line_no, included file)]} for every checked file; errors for includes that resolve nowhere."""
    files = []
    for prefix, _ in TREES:
        top = os.path.join(root, prefix)
        for dirpath, _, names in os.walk(top):
            for n in sorted(names):
                if n.endswith(EXTENSIONS):
                    files.append(os.path.relpath(os.path.join(dirpath, n), root).replace(os.sep, "/"))
    graph, errors = {}, []
    for rel in sorted(files):
        if folder_of(rel) is None:
            errors.append(f"{rel}: not in a folder of the floor plan")
            continue
        edges = []
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for no, line in enumerate(f, 1):
                m = INCLUDE_RE.match(line)
                if not m:
                    continue
                inc = m.group(1)
                here = os.path.dirname(rel)
                for cand in (os.path.normpath(os.path.join(here, inc)), "src/" + inc, "include/" + inc):
                    cand = cand.replace(os.sep, "/")
                    if os.path.isfile(os.path.join(root, cand)):
                        edges.append((no, cand))
                        break
                else:
                    errors.append(f"{rel}:{no}: #include \"{inc}\" resolves to no file (own folder, src/, include/)")
        graph[rel] = edges
    return graph, errors


def rule_violation(src, dst):
    """Why the include src -> dst breaks rule 1 or 2, or None."""
    a, b = folder_of(src), folder_of(dst)
    if b is None:
        return f"includes {dst}, outside the floor plan"
    if a == b or (a, b) in SAME_FLOOR_ALLOWED:
        return None
    if a in ONLY:
        if b not in ONLY[a]:
            allowed = ", ".join(sorted(ONLY[a])) or "nothing"
            return f"{a}/ may include only its own folder and {allowed}; {dst} is in {b}/"
        return None
    if FLOOR[b] >= FLOOR[a]:
        side = "sideways (same floor)" if FLOOR[b] == FLOOR[a] else "up"
        return f"goes {side}: {a}/ (floor {FLOOR[a]}) includes {b}/ (floor {FLOOR[b]}) file {dst}"
    return None


def cycles(nodes, succ):
    """Strongly connected components with more than one node (Tarjan, iterative), each sorted."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(succ.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(succ.get(w, ())))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def read_allowlist(path):
    """{(src, dst): line_no} from lines 'src/models/seq2seq.h -> src/train/params.h  # why'."""
    allowed = {}
    if not path or not os.path.exists(path):
        return allowed
    with open(path, encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = [p.strip() for p in line.split("->")]
            if len(parts) != 2 or not all(parts):
                raise SystemExit(f"{path}:{no}: expected 'FILE -> INCLUDED_FILE', got '{line}'")
            allowed[(parts[0], parts[1])] = no
    return allowed


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(here), help="repository root (default: this script's ../)")
    ap.add_argument("--allowlist", default=None, help="default: ROOT/scripts/layers_allowlist.txt")
    ap.add_argument("--list", action="store_true", help="print every violation as an allowlist line, then exit 0")
    ap.add_argument("--prune", action="store_true", help="delete the allowlist lines that are no longer violations")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    allow_path = a.allowlist or os.path.join(root, "scripts", "layers_allowlist.txt")
    allowed = read_allowlist(allow_path)
    graph, problems = scan(root)

    used, kept = set(), {}
    found = []
    for src, edges in graph.items():
        for no, dst in edges:
            why = rule_violation(src, dst)
            if why and (src, dst) in allowed:
                used.add((src, dst))
                continue
            if why:
                found.append((src, dst))
                problems.append(f"{src}:{no}: {why}")
            kept.setdefault(src, set()).add(dst)
    # Cycles over the edges that are not allowlisted (an allowlisted upward edge is the cycle's known cause).
    folder_succ = {}
    for src, dsts in kept.items():
        for dst in dsts:
            fa, fb = folder_of(src), folder_of(dst)
            if fa != fb and fb is not None:
                folder_succ.setdefault(fa, set()).add(fb)
    for comp in cycles(set(folder_succ) | {f for s in folder_succ.values() for f in s}, folder_succ):
        problems.append("folder cycle: " + " <-> ".join(c + "/" for c in comp))
    for comp in cycles(set(graph), kept):
        problems.append("file cycle: " + " <-> ".join(comp))
    stale = {no for key, no in allowed.items() if key not in used}
    if a.prune and stale:
        with open(allow_path, encoding="utf-8") as f:
            lines = f.readlines()
        with open(allow_path, "w", encoding="utf-8") as f:
            f.writelines(line for no, line in enumerate(lines, 1) if no not in stale)
        print(f"check_layers: removed {len(stale)} stale line(s) from {allow_path}")
        allowed = {key: no for key, no in allowed.items() if no not in stale}
        stale = set()
    for (src, dst), no in sorted(allowed.items(), key=lambda kv: kv[1]):
        if no in stale:
            problems.append(f"{allow_path}:{no}: '{src} -> {dst}' is no longer a violation (the include is gone or "
                            "allowed); remove the entry")

    if a.list:
        for src, dst in found:
            print(f"{src} -> {dst}")
        return 0
    for p in problems:
        print(p)
    n_edges = sum(len(e) for e in graph.values())
    if problems:
        print(f"check_layers: {len(problems)} problem(s) in {len(graph)} files, {n_edges} includes "
              f"({len(allowed)} allowlisted)")
        return 1
    print(f"check_layers: {len(graph)} files, {n_edges} includes follow the floor plan "
          f"({len(allowed)} allowlisted edge(s) in {os.path.relpath(allow_path, root)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
