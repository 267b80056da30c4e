#!/usr/bin/env python3
"""scripts/check-circles.py [SRC_DIR [FOLDER...]] - fails on a circle of
includes and calls among the files of one folder of src/ (default: control, api and
cli; docs/architecture.md, "No circle inside a folder").

Within a folder, a file pair x.c/x.h is one node, and x depends on y when
x.c or x.h includes "FOLDER/y.h" (quoted or in angle brackets) other than
its own header, or calls a function that a header of the folder it
includes declares and y.c defines (a header may declare what several
files define, as api/handlers.h and cli/cli.h do). The check finds the strongly connected components of that
graph and prints, for each one of more than one node, a line naming one of
its circles and the include that makes each step of it:

  src/control: circle: a -> b -> a (a.c:3 includes control/b.h; b.h:9 includes control/a.h)

and, when more files reach each other than that circle holds, a second
line naming them all and every include among them; then a summary line.
So the graph is the include graph and the call graph
between the files of the folder (calls found by name, outside comments).

Exit status: 0 when no folder has a circle, 1 when one has, 2 on a usage
error (a folder that does not exist). `make layers` runs it, and so do
`make test` and `make unit`; tests/layers/test_check_circles.sh shows it
catches a planted circle.
"""
import os
import re
import sys

DEFAULT_FOLDERS = ["control", "api", "cli"]


COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
DECL = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\([^;{()]*(?:\([^;{()]*\)[^;{()]*)*\)\s*"
                  r"(?:__attribute__\s*\(\(.*?\)\)\s*)?;", re.S)
DEF = re.compile(r"^(?!static\b)[A-Za-z_][^;{}=]*?\b([A-Za-z_][A-Za-z0-9_]*)\s*\(", re.M)


def graph(src, folder):
    """{node: {dep: why}} for one folder: x depends on y when x.c or x.h
    includes "folder/y.h", or calls a function that a header of the folder
    it includes declares and y.c defines (a header may declare what
    several files define: api/handlers.h, cli/cli.h)."""
    d = os.path.join(src, folder)
    inc = re.compile(r'\s*#\s*include\s*["<]' + re.escape(folder) + r'/([A-Za-z0-9_]+)\.h[">]')
    files = sorted(f for f in os.listdir(d)
                   if os.path.splitext(f)[1] in (".c", ".h") and os.path.isfile(os.path.join(d, f)))
    text, code = {}, {}
    for f in files:
        with open(os.path.join(d, f), encoding="utf-8", errors="replace") as fh:
            text[f] = fh.read()
        code[f] = COMMENT.sub(" ", text[f])
    defined = {}  # function -> the node whose .c defines it
    for f in files:
        if f.endswith(".c"):
            for m in DEF.finditer(code[f]):
                brace = code[f].find("{", m.start())
                if brace >= 0 and ";" not in code[f][m.start():brace]:  # a definition
                    defined.setdefault(m.group(1), os.path.splitext(f)[0])
    declared = {}  # header node -> the functions it declares
    for f in files:
        if f.endswith(".h"):
            declared[os.path.splitext(f)[0]] = [m.group(1) for m in DECL.finditer(code[f])]
    g = {}
    for f in files:
        node = os.path.splitext(f)[0]
        g.setdefault(node, {})
        for ln, line in enumerate(text[f].split("\n"), 1):
            m = inc.match(line)
            if not m or m.group(1) == node:
                continue
            h = m.group(1)
            if h not in g[node]:
                g[node][h] = "%s:%d includes %s/%s.h" % (f, ln, folder, h)
            for fn in declared.get(h, []):
                y = defined.get(fn)
                if y and y not in (node, h) and y not in g[node] and \
                        re.search(r"\b" + re.escape(fn) + r"\b", code[f]):
                    g[node][y] = "%s calls %s (%s.c), declared in %s/%s.h" % (f, fn, y, folder, h)
    nodes = {os.path.splitext(f)[0] for f in files}
    for node in g:  # an include of a header that is not there is not ours
        g[node] = {k: v for k, v in g[node].items() if k in nodes}
    return g


def components(g):
    """The strongly connected components of g (Tarjan's, without recursion)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in sorted(g):
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


def circle(g, comp):
    """One shortest circle through the first node of comp, inside comp."""
    inside = set(comp)
    start = comp[0]
    prev = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(g[v]):
            if w not in inside:
                continue
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return [start, start]


def main(argv):
    src = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    folders = argv[2:] or DEFAULT_FOLDERS
    bad = 0
    for folder in folders:
        if not os.path.isdir(os.path.join(src, folder)):
            print("check-circles: no folder %s in %s" % (folder, src), file=sys.stderr)
            return 2
        g = graph(src, folder)
        for comp in components(g):
            if len(comp) < 2:
                continue
            bad += 1
            c = circle(g, comp)
            steps = "; ".join(g[a][b] for a, b in zip(c, c[1:]))
            print("src/%s: circle: %s (%s)" % (folder, " -> ".join(c), steps))
            if len(comp) > len(c) - 1:
                inside = "; ".join(g[a][b] for a in comp for b in sorted(g[a]) if b in comp)
                print("src/%s:   the same knot holds %s (%s)" % (folder, ", ".join(comp), inside))
    if bad:
        print("check-circles: %d circle(s) of includes and calls in %s" % (bad, ", ".join("src/" + f for f in folders)))
        return 1
    print("check-circles: no circle of includes and calls in %s" % ", ".join("src/" + f for f in folders))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
