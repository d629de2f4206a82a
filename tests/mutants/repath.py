#!/usr/bin/env python3
"""After code moves (a file split, a folder renamed), rewrites single-hunk
mutant patches against the current tree: finds the one file that holds the
hunk's old lines and writes the diff again with the same header lines.
Usage (repository root): tests/mutants/repath.py tests/mutants/NAME.patch ...
A patch whose old lines are in no file, or in several, is named and left
alone: rewrite it by hand (the code it mutated changed)."""
import difflib, subprocess, sys, os
files = subprocess.run(["git", "ls-files", "src", "tests/docs"], capture_output=True, text=True).stdout.split()
for p in sys.argv[1:]:
    lines = open(p).read().splitlines(True)
    head = [l for l in lines if l.startswith("# mutant:") or l.startswith("# kill:")]
    body = lines[len(head):]
    hunk = [l for l in body if not l.startswith(("---", "+++", "@@"))]
    old = "".join(l[1:] for l in hunk if l[:1] in (" ", "-"))
    new = "".join(l[1:] for l in hunk if l[:1] in (" ", "+"))
    hits = [f for f in files if f.endswith((".c", ".h", ".py")) and open(f, errors="replace").read().count(old) == 1]
    if len(hits) != 1:
        print("%s: %d files match" % (p, len(hits)), hits[:5]); continue
    f = hits[0]
    text = open(f).read()
    mut = text.replace(old, new)
    diff = difflib.unified_diff(text.splitlines(True), mut.splitlines(True), "a/" + f, "b/" + f, n=3)
    with open(p, "w") as out:
        out.writelines(head)
        out.writelines(diff)
    print("%s -> %s" % (p, f))
