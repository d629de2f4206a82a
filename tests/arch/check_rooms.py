#!/usr/bin/env python3
"""The rooms of src/ and the arrows between them cannot rot (issue #28).

Reads the rooms and their allowed arrows from the one table in
docs/architecture.md (between <!-- rooms:begin --> and <!-- rooms:end -->)
and checks the sources against it.  Fails (TAP "not ok") when:

  1. a file under src/ belongs to no room;
  2. an #include "room/..." crosses an arrow the table does not allow
     (a room may always include its own headers);
  3. the table's arrows, or the includes actually written, form a circle
     between rooms;
  4. headers include each other in a circle;
  5. an import circle joins source files of one room.  File A imports file B
     when A names a function or variable with external linkage that B
     defines (what the linker would resolve from B's object).  Names are
     read from the source as written (comments, strings and preprocessor
     lines removed; what an X-macro expands to is not seen).  Only names
     defined once in the room count, and only within a room: across rooms
     rule 2 already makes every dependency one-way;
  6. a .c or .h file under src/ is longer than 1,000 lines.

A self-test first proves each rule can fail on a small planted tree.

Usage: check_rooms.py [--self-test-only] [ROOT]      (TAP on stdout)
"""
import os
import re
import shutil
import sys
import tempfile

MAX_LINES = 1000
BEGIN, END = "<!-- rooms:begin -->", "<!-- rooms:end -->"
INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"', re.M)
IDENT_RE = re.compile(r"[A-Za-z_]\w*")

# The TAP printer the docs check uses (one copy for both).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs"))
from check_docs import Tap  # noqa: E402


# ---- the table ----------------------------------------------------------------

def read_rooms(doc_text):
    """{room: (folder, set(may include))} from the doc's rooms table."""
    if BEGIN not in doc_text or END not in doc_text:
        raise ValueError("no %s ... %s table" % (BEGIN, END))
    body = doc_text.split(BEGIN, 1)[1].split(END, 1)[0]
    rooms = {}
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue  # header, separator, prose
        room = cells[0].strip("`")
        folder = cells[1].strip("`")
        arrows = set(a.strip().strip("`") for a in cells[2].split(",")) - {"", "-", "—"}
        rooms[room] = (folder.rstrip("/") + "/", arrows)
    if not rooms:
        raise ValueError("the rooms table is empty")
    return rooms


def room_of(rooms, path):
    """The room whose folder is the longest prefix of path (a repo path)."""
    best = None
    for room, (folder, _) in rooms.items():
        if path.startswith(folder) and (best is None or len(folder) > len(rooms[best][0])):
            best = room
    return best


# ---- reading C ------------------------------------------------------------------

def strip_c(text):
    """Source without comments, string/char literals and preprocessor lines."""
    text = re.sub(r"\\\n", " ", text)
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            out.append(" ")
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            out.append(' "" ')
        else:
            out.append(c)
            i += 1
    lines = [l for l in "".join(out).split("\n") if not l.lstrip().startswith("#")]
    return "\n".join(lines)


TOKEN_RE = re.compile(r"[A-Za-z_]\w*|->|<<=|>>=|<=|>=|==|!=|&&|\|\||<<|>>|\+\+|--|[-+*/%&|^]=|\S")


def definitions(text, local=False):
    """Names of the functions and variables defined here with external
    linkage (local=True: with internal linkage, `static`)."""
    toks = TOKEN_RE.findall(strip_c(text))
    defs, stmt, i = set(), [], 0
    while i < len(toks):
        t = toks[i]
        if t in ";{":
            d = _defined_name(stmt, t)
            if d and d[1] == local:
                defs.add(d[0])
            if t == "{":
                depth, i = 1, i + 1
                while i < len(toks) and depth:
                    depth += {"{": 1, "}": -1}.get(toks[i], 0)
                    i += 1
                # an initialiser or a struct body runs on to its ';'
                if "=" in stmt or (stmt and stmt[0] in ("struct", "union", "enum", "typedef")):
                    stmt = ["<after-braces>"] + stmt
                    continue
                stmt = []
                continue
            stmt = []
        else:
            stmt.append(t)
        i += 1
    return defs


def _drop_attributes(stmt):
    out, i = [], 0
    while i < len(stmt):
        if stmt[i] in ("__attribute__", "__typeof__", "_Alignas") and i + 1 < len(stmt) and stmt[i + 1] == "(":
            depth, i = 0, i + 1
            while i < len(stmt):
                depth += {"(": 1, ")": -1}.get(stmt[i], 0)
                i += 1
                if depth == 0:
                    break
            continue
        out.append(stmt[i])
        i += 1
    return out


def _defined_name(stmt, end):
    if not stmt:
        return None
    after_braces = stmt[0] == "<after-braces>"
    if after_braces:
        stmt = stmt[1:]
    stmt = _drop_attributes(stmt)
    if not stmt or stmt[0] == "_Static_assert" or "extern" in stmt or "typedef" in stmt:
        return None
    local = "static" in stmt
    head = stmt[:stmt.index("=")] if "=" in stmt else stmt
    if end == "{" and "=" not in stmt:
        if "(" not in head:
            return None  # struct/union/enum body
        k = head.index("(")
        # int (*name(args))(...) is rare here; take the identifier before the first '('
        return (head[k - 1], local) if k > 0 and IDENT_RE.fullmatch(head[k - 1]) else None
    if end == ";" and "=" not in stmt and not after_braces and "(" in head:
        return None  # a prototype
    if after_braces and "=" not in stmt:
        return None  # struct x { ... } declared as a type
    names = [t for t in head if IDENT_RE.fullmatch(t)]
    if "[" in head:
        names = [t for t in head[:head.index("[")] if IDENT_RE.fullmatch(t)]
    if len(names) < 2:
        return None  # a type alone
    return names[-1], local


def uses(text):
    """Identifiers named in the file, less struct members (after '.' or '->')
    and tags (after struct, union, enum): those name no object or function."""
    toks = TOKEN_RE.findall(strip_c(text))
    return set(t for i, t in enumerate(toks)
               if IDENT_RE.fullmatch(t)
               and (i == 0 or toks[i - 1] not in (".", "->", "struct", "union", "enum")))


# ---- graphs -----------------------------------------------------------------------

def cycles(graph):
    """Strongly connected components with more than one node, or a self-loop."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(100000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def cycle_path(graph, comp):
    """One circle through comp, as 'a -> b -> a'."""
    comp = set(comp)
    start = min(comp)
    path, seen, v = [start], {start}, start
    while True:
        nxt = sorted(w for w in graph.get(v, ()) if w in comp)
        back = [w for w in nxt if w in seen]
        if back:
            w = back[0]
            return " -> ".join(path[path.index(w):] + [w])
        v = nxt[0]
        path.append(v)
        seen.add(v)


# ---- the checks --------------------------------------------------------------------

def src_files(root):
    out = []
    for d, _, fs in os.walk(os.path.join(root, "src")):
        for f in fs:
            if f.endswith((".c", ".h")):
                out.append(os.path.relpath(os.path.join(d, f), root))
    return sorted(out)


def check(root, doc="docs/architecture.md"):
    """Returns [(rule, ok, diagnostics)]."""
    with open(os.path.join(root, doc)) as f:
        rooms = read_rooms(f.read())
    files = src_files(root)
    text = {}
    for p in files:
        with open(os.path.join(root, p), errors="replace") as f:
            text[p] = f.read()
    results = []

    homeless = [p for p in files if room_of(rooms, p) is None]
    results.append(("every src/ file is in a room of the table (%d files, %d rooms)"
                    % (len(files), len(rooms)), not homeless, homeless))

    unknown = ["%s may include unknown room %s" % (r, a)
               for r, (_, arrows) in sorted(rooms.items()) for a in sorted(arrows) if a not in rooms]
    bad, room_graph, hdr_graph = [], {}, {}
    for p in files:
        a = room_of(rooms, p)
        for m in INCLUDE_RE.finditer(text[p]):
            inc = m.group(1)
            target = "src/" + inc
            if target not in text:
                continue  # generated (deviceplugin.pb-c.h) or a sibling without a room path
            if p.endswith(".h"):
                hdr_graph.setdefault(p, set()).add(target)
            b = room_of(rooms, target)
            if a is None or b is None or a == b:
                continue
            room_graph.setdefault(a, set()).add(b)
            if b not in rooms[a][1]:
                line = text[p][:m.start()].count("\n") + 1
                bad.append("%s:%d: %s includes %s (room %s); %s may include only: %s"
                           % (p, line, a, inc, b, a, ", ".join(sorted(rooms[a][1])) or "nothing"))
    results.append(("every include stays in its room or follows an allowed arrow",
                    not bad and not unknown, unknown + bad))

    table_graph = {r: set(a for a in arrows if a in rooms) for r, (_, arrows) in rooms.items()}
    circles = ["allowed arrows: " + cycle_path(table_graph, c) for c in cycles(table_graph)]
    circles += ["includes: " + cycle_path(room_graph, c) for c in cycles(room_graph)]
    results.append(("no circle between rooms (in the table or in the includes)", not circles, circles))

    hc = [cycle_path(hdr_graph, c) for c in cycles(hdr_graph)]
    results.append(("no circle of headers including each other", not hc, hc))

    by_room = {}
    for p in files:
        if p.endswith(".c"):
            by_room.setdefault(room_of(rooms, p), []).append(p)
    fc = []
    n_edges = 0
    for room, cs in sorted(by_room.items(), key=lambda kv: str(kv[0])):
        defs = {p: definitions(text[p]) for p in cs}
        owner, dup = {}, set()
        for p, ds in defs.items():
            for d in ds:
                if d in owner:
                    dup.add(d)
                owner[d] = p
        g = {}
        for p in cs:
            for name in uses(text[p]) - defs[p] - definitions(text[p], local=True):
                q = owner.get(name)
                if q is not None and name not in dup and q != p:
                    g.setdefault(p, set()).add(q)
                    n_edges += 1
        for c in cycles(g):
            fc.append("%s: %s" % (room, cycle_path(g, c)))
    results.append(("no import circle between the source files of a room (%d imports read)"
                    % n_edges, not fc, fc))

    long_files = ["%s: %d lines" % (p, text[p].count("\n")) for p in files
                  if text[p].count("\n") > MAX_LINES]
    results.append(("no src/ file over %d lines" % MAX_LINES, not long_files, long_files))
    return results


# ---- self-test ------------------------------------------------------------------------

SELF_DOC = """# rooms
%s
| room | folder | may include |
|---|---|---|
| `low` | `src/low/` | — |
| `high` | `src/high/` | `low` |
%s
""" % (BEGIN, END)

CLEAN = {
    "src/low/low.h": "#ifndef L\n#define L\nint low_get(void);\n#endif\n",
    "src/low/low.c": '#include "low/low.h"\nint low_count = 0;\nint low_get(void) { return low_count; }\n',
    "src/low/more.c": '#include "low/low.h"\nstatic int hidden(void) { return 1; }\n'
                      'int more(void) { return low_get() + hidden(); }\n',
    "src/high/high.c": '#include "low/low.h"\nint high(void) { return low_get(); }\n',
}


def plant(files):
    root = tempfile.mkdtemp(prefix="check-rooms-")
    for p, t in list(files.items()) + [("docs/architecture.md", SELF_DOC)]:
        os.makedirs(os.path.dirname(os.path.join(root, p)), exist_ok=True)
        with open(os.path.join(root, p), "w") as f:
            f.write(t)
    return root


def failing(files):
    root = plant(files)
    try:
        return [name for name, ok, _ in check(root) if not ok]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def self_test(tap):
    tap.ok(failing(CLEAN) == [], "self-test: a clean planted tree passes", failing(CLEAN))
    up = dict(CLEAN)
    up["src/high/high.h"] = "int high(void);\n"
    up["src/low/low.c"] += '#include "high/high.h"\n'
    f = failing(up)
    tap.ok(any("allowed arrow" in n for n in f) and any("between rooms" in n for n in f),
           "self-test: an include against the arrows (and the circle it makes) fails", f)
    homeless = dict(CLEAN, **{"src/stray/x.c": "int x;\n"})
    tap.ok(any("in a room" in n for n in failing(homeless)), "self-test: a file in no room fails")
    circ = dict(CLEAN)
    circ["src/low/low.c"] = ('#include "low/low.h"\nint low_count = 0;\nint more(void);\n'
                             'int low_get(void) { return low_count + more(); }\n')
    f = failing(circ)
    tap.ok(any("import circle" in n for n in f), "self-test: two files calling each other fail", f)
    var = dict(CLEAN)
    var["src/low/low.c"] = ('#include "low/low.h"\nstatic int st = 1;\nconst char *const names[] = {"a"};\n'
                            'int low_get(void) { return st; }\n')
    var["src/low/more.c"] = ('#include "low/low.h"\nextern const char *const names[];\n'
                             'int more(void) { return names[0] != 0; }\n')
    var["src/low/third.c"] = 'int more(void);\nint low_count = 2;\nint t(void) { return more(); }\n'
    var["src/low/low.c"] += "int u(void) { return low_count; }\n"
    f = failing(var)
    tap.ok(any("import circle" in n for n in f),
           "self-test: a circle through a variable (array with initialiser) fails", f)
    hdr = dict(CLEAN)
    hdr["src/low/a.h"] = '#include "low/b.h"\n'
    hdr["src/low/b.h"] = '#include "low/a.h"\n'
    f = failing(hdr)
    tap.ok(any("headers" in n for n in f), "self-test: headers including each other fail", f)
    big = dict(CLEAN, **{"src/low/big.c": "int big;\n" + "\n" * (MAX_LINES + 1)})
    f = failing(big)
    tap.ok(any("lines" in n for n in f), "self-test: a file over %d lines fails" % MAX_LINES, f)
    return tap.failed == 0


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    tap = Tap()
    if not self_test(tap) or "--self-test-only" in argv:
        print("1..%d" % tap.n)
        return 1 if tap.failed else 0
    for name, ok, diag in check(root):
        tap.ok(ok, name, diag)
    print("1..%d" % tap.n)
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
