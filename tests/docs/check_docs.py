#!/usr/bin/env python3
"""Docs that cannot drift: checks README.md and docs/*.md against the code.

Rules (documented in docs/contributing.md, "Docs that cannot drift"):

1. Flags.  Every `--flag` in a doc must appear in the `--help` of the program
   it belongs to.  The program is the last gpuvisor program named before the
   flag in the same code span, the same line of a code block (a block line
   that starts with whitespace or "[" continues the previous line) or the
   same paragraph of prose: `gpuvisor-scheduler`, `gpuvisor-node`, or
   `gpuvisor <command>` (help: `gpuvisor <command> --help`).  A code span or
   block line that starts with another program (`kubectl ...`, `make ...`)
   is not ours and is skipped.  A flag with no program before it belongs to
   the doc's program (DOC_PROGRAMS below) or, for a doc not listed there,
   must exist in at least one gpuvisor program's help.
2. Config keys.  Every key in the first column of a table whose header cell
   starts with "key", and every key of a ```json block under a heading that
   contains "Configuration", must be a string literal in the sources of the
   doc's component (DOC_SOURCES; case-insensitive where the parser is).
   `a.{b,c}` means `a.b` and `a.c`; each dotted part is checked.  In other
   docs such keys are contract keys (annotations, labels, environment): the
   key, up to a `<placeholder>` or `=value`, must occur in a string literal
   of src/, or (a label the code builds, nvidia.com/cuda.driver + .major)
   its part before the last "." must be a whole literal; paths starting with
   "/" and "..." are not keys.
3. Metric names.  Every `gpuvisor_<name>` in a doc must be the start of a
   string literal in src/ (so `x` matches the code's `x_bucket` too).
4. Measured figures.  A figure is a number with a unit (ns, µs, ms, s, KiB,
   MiB, GiB, kB, MB, %, or anything per second such as binds/s).  A figure
   in a paragraph, list item or table row that cites `bench/results/F.txt`
   (in itself, or in its section heading) must be a number in F, at the
   figure's precision (2.4 ms matches 2.41; a range a–b checks a and b; a
   thousands separator is ignored).  A figure after ≤ ≥ < > (a target, a
   limit) is not a measurement and is not checked.  A paragraph, list item
   or table row that quotes a measurement (a rate per second, or a figure
   next to p50/p90/p99/p999/median/RSS, or within 40 characters after
   "measured" in the same clause) must cite its
   bench/results file.  A paragraph, list item or table row that says
   "latest" or "last" run (or round, lease, measurement) quotes the latest
   block of F only: from the last comment header ("# " lines after data) to
   the end, since results files keep every run and an old figure would pass.

Usage: check_docs.py [--self-test-only] [ROOT]    (TAP on stdout; $BUILD/bin)
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from decimal import ROUND_HALF_UP, Decimal

# Docs about one program: a bare `--flag` in them is that program's.
DOC_PROGRAMS = {
    "docs/node-agent.md": "gpuvisor-node",
    "docs/scheduler.md": "gpuvisor-scheduler",
    "docs/simulate.md": "gpuvisor simulate",
    "docs/interposer.md": "gpuvisor run",
}
# Where a doc's configuration keys are parsed, and whether case matters.
DOC_SOURCES = {
    "docs/node-agent.md": (["src/node/config/config.c"], False),
    "docs/scheduler.md": (["src/scheduler/config.c"], True),
}
PROGRAM_RE = re.compile(r"(?<![\w./-])(?:build/bin/)?(gpuvisor(?:-node|-scheduler)?)(?![\w.-])"
                        r"(?:[ \t]+([a-z]+))?")
FLAG_RE = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
METRIC_RE = re.compile(r"(?<![\w.])gpuvisor_[a-z0-9_]*[a-z0-9]")
RESULTS_RE = re.compile(r"bench/results/([\w.-]+\.txt)")
NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
UNIT = r"(?:ns|µs|us|ms|s|KiB|MiB|GiB|kB|KB|MB|GB|%|[A-Za-z]*/s)"
FIGURE_RE = re.compile(
    r"(?P<pre>[≤≥<>]\s*|[~≈+]?)(?P<a>" + NUM + r")(?:\s*[–-]\s*(?P<b>" + NUM + r"))?"
    r"\s?(?P<unit>" + UNIT + r")(?![\w/])")
MEASURE_RE = re.compile(r"\b(p50|p90|p99|p999|median|RSS)\b|\d\s?[A-Za-z]*/s\b"
                        r"|(?<!not )\bmeasured\b[^.;:]{0,40}?\d")


class Tap:
    def __init__(self):
        self.n = 0
        self.failed = 0

    def ok(self, cond, name, diag=()):
        self.n += 1
        print("%s %d - %s" % ("ok" if cond else "not ok", self.n, name))
        if not cond:
            self.failed += 1
            for d in list(diag)[:40]:
                print("# " + d)
        sys.stdout.flush()
        return cond


# ---- splitting a markdown doc into units -----------------------------------

def units(text):
    """Yields (kind, lineno, text, heading) for every paragraph, list item,
    table row and code-block line, outside and inside ``` fences."""
    heading = ""
    buf, start, fence = [], 0, None
    cur_kind = "para"

    def flush():
        nonlocal buf
        if buf:
            out = (cur_kind, start, "\n".join(buf), heading)
            buf = []
            return [out]
        return []

    for i, line in enumerate(text.split("\n"), 1):
        if fence is not None:
            if line.strip().startswith("```"):
                fence = None
                continue
            yield ("code:" + fence, i, line, heading)
            continue
        if line.strip().startswith("```"):
            yield from flush()
            fence = line.strip()[3:].strip() or "text"
            continue
        if line.startswith("#"):
            yield from flush()
            heading = line
            continue
        if not line.strip():
            yield from flush()
            continue
        if line.lstrip().startswith("|"):
            yield from flush()
            yield ("row", i, line, heading)
            continue
        if re.match(r"\s*(?:[-*]|\d+\.)\s", line):
            yield from flush()
            cur_kind, start, buf = "item", i, [line]
            continue
        if not buf:
            cur_kind, start = "para", i
        buf.append(line)
    yield from flush()


def code_spans(text):
    return re.findall(r"`([^`]+)`", text)


# ---- rule 1: flags -----------------------------------------------------------

def program_help(build, prog):
    exe = os.path.join(build, "bin", prog.split()[0])
    cmd = [exe] + prog.split()[1:] + ["--help"]
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    return set(FLAG_RE.findall(p.stdout.decode(errors="replace"))), None


def subcommands(build):
    try:
        out = subprocess.run([os.path.join(build, "bin", "gpuvisor"), "--help"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, timeout=30).stdout.decode()
    except OSError:
        return set()
    m = re.search(r"commands:\n((?:  \S.*\n)+)", out)
    return {l.split()[0] for l in m.group(1).splitlines()} if m else set()


def flag_owners(doc, text, subs):
    """Yields (lineno, flag, program or None for 'the doc's program',
    context) for every flag of ours in text."""
    def scan(ctx, lineno, prog, foreign_ok):
        # prog: program in force at the start of ctx (a continued code line)
        words = ctx.strip().split()
        if foreign_ok and words and not words[0].startswith("--") \
                and not PROGRAM_RE.match(ctx.strip()) and prog is None:
            return None  # another program's command line
        events = []
        for m in PROGRAM_RE.finditer(ctx):
            name = m.group(1)
            if name == "gpuvisor":
                sub = m.group(2)
                name = "gpuvisor " + sub if sub in subs else "gpuvisor"
            events.append((m.start(), name))
        for m in FLAG_RE.finditer(ctx):
            owner = prog
            for pos, name in events:
                if pos < m.start():
                    owner = name
            yield (lineno, m.group(0), owner, ctx.strip())
        return None

    last_prog = None
    for kind, lineno, body, _ in units(text):
        if kind.startswith("code:"):
            cont = body[:1] in (" ", "\t", "[") and last_prog is not None
            starts_ours = PROGRAM_RE.match(body.strip()) is not None
            if not cont:
                last_prog = None
                if starts_ours:
                    m = PROGRAM_RE.match(body.strip())
                    last_prog = m.group(1)
                    if m.group(1) == "gpuvisor" and m.group(2) in subs:
                        last_prog = "gpuvisor " + m.group(2)
                elif body.strip() and not body.strip().startswith("--"):
                    continue  # another program (or not a command at all)
            yield from scan(body, lineno, last_prog, False) or ()
            continue
        last_prog = None
        for span in code_spans(body):
            yield from scan(span, lineno, None, True) or ()
        prose = re.sub(r"`[^`]*`", " ", body)
        yield from scan(prose, lineno, None, False) or ()


def check_flags(tap, root, build, docs):
    subs = subcommands(build)
    helps, bad = {}, []
    for doc in docs:
        with open(os.path.join(root, doc)) as f:
            text = f.read()
        for lineno, flag, owner, ctx in flag_owners(doc, text, subs):
            if flag == "--":
                continue
            owner = owner or DOC_PROGRAMS.get(doc)
            candidates = [owner] if owner else \
                ["gpuvisor-node", "gpuvisor-scheduler", "kubectl-gpuvisor"] + \
                ["gpuvisor " + s for s in sorted(subs)]
            found = False
            for prog in candidates:
                if prog not in helps:
                    helps[prog] = program_help(build, prog)
                flags, err = helps[prog]
                if flags is None:
                    bad.append("%s:%d: cannot run %s --help: %s" % (doc, lineno, prog, err))
                    found = True
                    break
                if flag in flags:
                    found = True
                    break
            if not found:
                bad.append("%s:%d: %s is not in the --help of %s (in: %s)"
                           % (doc, lineno, flag, " / ".join(candidates), ctx[:100]))
    tap.ok(not bad, "every --flag the docs name is in its program's --help", bad)


# ---- rules 2 and 3: config keys and metrics ------------------------------------

def c_literals(paths):
    out = set()
    for p in paths:
        with open(p, errors="replace") as f:
            out.update(re.findall(r'"((?:[^"\\\n]|\\.)*)"', f.read()))
    return out


def doc_config_keys(text):
    keys = []
    header_is_key = False
    for kind, lineno, body, heading in units(text):
        if kind == "row":
            cells = [c.strip() for c in body.strip().strip("|").split("|")]
            if re.fullmatch(r"-+", cells[0].replace(":", "")):
                continue
            if cells[0].lower().startswith("key"):
                header_is_key = True
                continue
            if header_is_key:
                for span in re.findall(r"`([^`]+)`", cells[0]):
                    m = re.fullmatch(r"([\w.]*?)\.?\{([\w,]+)\}", span)
                    names = [m.group(1) + "." + s for s in m.group(2).split(",")] if m else [span]
                    keys += [(lineno, n) for n in names]
            continue
        header_is_key = False
        if kind == "code:json" and "configuration" in heading.lower():
            for k in re.findall(r'"(\w+)"\s*:', body):
                keys.append((lineno, k))
    return keys


def check_config_keys(tap, root, docs):
    bad, n = [], 0
    all_lits = None
    for doc in docs:
        with open(os.path.join(root, doc)) as f:
            text = f.read()
        keys = doc_config_keys(text)
        if not keys:
            continue
        if doc in DOC_SOURCES:
            srcs, case = DOC_SOURCES[doc]
            lits = c_literals([os.path.join(root, s) for s in srcs])
            if not case:
                lits = {l.lower() for l in lits}
            for lineno, key in keys:
                for part in key.split("."):
                    n += 1
                    if (part if case else part.lower()) not in lits:
                        bad.append("%s:%d: config key %s (%s) is not a string in %s"
                                   % (doc, lineno, key, part, " ".join(srcs)))
            continue
        # contract keys (annotations, labels, environment): the name, up to a
        # <placeholder>, is in a string literal somewhere in src/; paths and
        # "..." abbreviations are not keys
        if all_lits is None:
            lits = c_literals(glob.glob(os.path.join(root, "src", "**", "*.[ch]"), recursive=True))
            all_lits = "\n".join(lits)
            all_lits_q = "\n".join('"%s"' % l for l in lits)
        for lineno, key in keys:
            name = key.split("<")[0].split("=")[0]
            if key.startswith("/") or key.startswith("...") or len(name) < 3:
                continue
            n += 1
            stem = name.rsplit(".", 1)[0] if "/" in name and "." in name.split("/")[-1] else name
            if name not in all_lits and '"%s"' % stem not in all_lits_q:
                bad.append("%s:%d: key %s is in no string literal of src/" % (doc, lineno, key))
    tap.ok(not bad and n > 0, "every config key the docs list is parsed by the code (%d keys)" % n, bad)


def check_metrics(tap, root, docs):
    srcs = glob.glob(os.path.join(root, "src", "**", "*.c"), recursive=True)
    lits = c_literals(srcs)
    bad, n = [], 0
    for doc in docs:
        with open(os.path.join(root, doc)) as f:
            for lineno, line in enumerate(f, 1):
                for name in METRIC_RE.findall(line):
                    n += 1
                    if not any(l.startswith(name) and not re.match(r"[a-z0-9]", l[len(name):len(name) + 1])
                               for l in lits):
                        bad.append("%s:%d: metric %s is not written by any src/ code" % (doc, lineno, name))
    tap.ok(not bad and n > 0, "every metric name the docs give is written by the code (%d names)" % n, bad)


# ---- rule 4: measured figures --------------------------------------------------

# Units a figure may be converted between (the file may say 728.1 us where
# the doc says 0.73 ms).
SCALE = {"ns": Decimal(1), "us": Decimal(1000), "µs": Decimal(1000), "ms": Decimal(10) ** 6,
         "s": Decimal(10) ** 9, "KiB": Decimal(1), "MiB": Decimal(1024),
         "GiB": Decimal(1024) ** 2}
FAMILY = {"ns": "t", "us": "t", "µs": "t", "ms": "t", "s": "t",
          "KiB": "b", "MiB": "b", "GiB": "b"}
FILE_NUM_RE = re.compile(r"(" + NUM + r")(?:\s?(ns|us|µs|ms|s|KiB|MiB|GiB)(?![\w/]))?")


LATEST_RE = re.compile(r"\b(latest|last|most recent)\s+(run|round|lease|measurement)s?\b",
                       re.IGNORECASE)


def latest_block(lines):
    """The lines of a results file's latest run: from the last "# " header
    that follows a data line (or the file's start) to the end."""
    start = 0
    for i, line in enumerate(lines):
        if line.startswith("#") and i > 0 and not lines[i - 1].startswith("#"):
            start = i
    return lines[start:]


def numbers_in(path, latest=False):
    """Every number in a results file (its latest block only when latest),
    with its unit when it has one."""
    out = []
    with open(path, errors="replace") as f:
        lines = f.readlines()
    if latest:
        lines = latest_block(lines)
    for line in lines:
        # "idle_rss_kib_start 3764": a key naming its unit gives the line's
        # bare numbers that unit
        key = re.match(r"\s*([a-z0-9_]+)\s", line)
        ku = re.search(r"_(ns|us|ms|s|kib|mib|gib)(?:_|$)", key.group(1)) if key else None
        unit = {"kib": "KiB", "mib": "MiB", "gib": "GiB"}.get(ku.group(1), ku.group(1)) \
            if ku else None
        out += [(Decimal(n.replace(",", "")), u or unit) for n, u in FILE_NUM_RE.findall(line)]
    return out


def figure_matches(fig, unit, nums):
    """fig (as written in the doc, in unit) is one of nums at fig's precision,
    converting between units of one family (time, bytes)."""
    want = Decimal(fig.replace(",", ""))
    step = Decimal(1).scaleb(want.as_tuple().exponent)
    for v, u in nums:
        if u is not None and u != unit and unit in FAMILY and FAMILY.get(u) == FAMILY[unit]:
            v = v * SCALE[u] / SCALE[unit]
        if v.quantize(step, rounding=ROUND_HALF_UP) == want:
            return True
    return False


def check_figures_in(doc, text, root, bad):
    n = 0
    for kind, lineno, body, heading in units(text):
        if kind.startswith("code:"):
            continue
        cited = RESULTS_RE.findall(body) or RESULTS_RE.findall(heading)
        figs = [m for m in FIGURE_RE.finditer(body) if not m.group("pre").strip() or
                m.group("pre").strip() in "~≈+"]
        if not cited:
            if figs and MEASURE_RE.search(body):
                m = figs[0]
                bad.append(("%s: uncited \"%s\"" % (doc, m.group(0).strip()),
                            "%s:%d: measured figure \"%s\" names no bench/results file"
                            % (doc, lineno, m.group(0).strip())))
            continue
        nums = []
        for c in cited:
            p = os.path.join(root, "bench", "results", c)
            if not os.path.exists(p):
                bad.append(("%s: missing %s" % (doc, c),
                            "%s:%d: cites bench/results/%s, which does not exist" % (doc, lineno, c)))
                continue
            nums += numbers_in(p, latest=bool(LATEST_RE.search(body)))
        if not nums:
            continue
        for m in figs:
            for part in (m.group("a"), m.group("b")):
                if part is None:
                    continue
                n += 1
                if not figure_matches(part, m.group("unit"), nums):
                    bad.append(("%s: \"%s\" not in %s" % (doc, m.group(0).strip(), " ".join(cited)),
                                "%s:%d: \"%s\" is not in bench/results/%s"
                                % (doc, lineno, m.group(0).strip(), " or ".join(cited))))
    return n


def check_figures(tap, root, docs):
    """Known drift (tests/docs/known-drift.txt, one key a line as printed
    after "key:") is reported but does not fail; an entry that no longer
    occurs fails, so the list only shrinks."""
    found, n = [], 0
    for doc in docs:
        with open(os.path.join(root, doc)) as f:
            n += check_figures_in(doc, f.read(), root, found)
    known_path = os.path.join(root, "tests", "docs", "known-drift.txt")
    known = set()
    if os.path.exists(known_path):
        with open(known_path) as f:
            known = {l.strip() for l in f if l.strip() and not l.startswith("#")}
    keys = {k for k, _ in found}
    bad = ["%s  (key: %s)" % (msg, k) for k, msg in found if k not in known]
    bad += ["tests/docs/known-drift.txt: \"%s\" no longer occurs: remove the line" % k
            for k in sorted(known - keys)]
    for k, msg in found:
        if k in known:
            print("# known drift, to fix: %s" % msg)
    tap.ok(not bad and n > 0,
           "every measured figure the docs quote is in the bench/results file it names "
           "(%d figures, %d known drift)" % (n, len(known & keys)), bad)


# ---- self-test: each rule fails on a planted drift --------------------------

def self_test(tap, root, build):
    subs = subcommands(build)
    owners = list(flag_owners("x.md", "Admission (`gpuvisor-scheduler --webhook`, v1)\n\n"
                              "```sh\ngpuvisor-node --no-kube\n    [--gc-seconds 5]\nkubectl get --all\n```\n"
                              "Use `kubectl annotate --all` or `--config`.\n", subs))
    got = [(f, o) for _, f, o, _ in owners]
    tap.ok(got == [("--webhook", "gpuvisor-scheduler"), ("--no-kube", "gpuvisor-node"),
                   ("--gc-seconds", "gpuvisor-node"), ("--config", None)],
           "self-test: flags are attributed to the program named before them", [repr(got)])
    flags, err = program_help(build, "gpuvisor-scheduler")
    tap.ok(flags is not None and "--webhook-listen" in flags and "--webhook" not in flags,
           "self-test: gpuvisor-scheduler --help is read (--webhook-listen yes, --webhook no)",
           [str(err or sorted(flags or []))])
    keys = doc_config_keys("## Configuration file\n\n| key | default |\n|---|---|\n"
                           "| `a` | 1 |\n| `defaults.{x,y}` | 2 |\n")
    tap.ok([k for _, k in keys] == ["a", "defaults.x", "defaults.y"],
           "self-test: config keys are read from key tables", [repr(keys)])
    bad = []
    # a results file of its own, so the self-test does not depend on today's figures
    fake_root = tempfile.mkdtemp(prefix="check_docs_")
    os.makedirs(os.path.join(fake_root, "bench", "results"))
    with open(os.path.join(fake_root, "bench", "results", "scheduler.txt"), "w") as f:
        f.write("  binds per second:       982\n  client latency p50 0.46 ms, p99 1.56 ms\n")
    check_figures_in("x.md", "1,000 pods bind at 300–450/s.\n\n"
                     "- 982 binds/s, p99 1.56 ms (bench/results/scheduler.txt)\n"
                     "- 815 binds/s, p99 1.6 ms, target ≤ 5 ms (bench/results/scheduler.txt)\n",
                     fake_root, bad)
    msgs = [m for _, m in bad]
    tap.ok(len(msgs) == 2 and "names no bench/results" in msgs[0] and "815" in msgs[1],
           "self-test: an uncited rate and a figure missing from its file are caught", msgs)
    # two runs kept in one file: "the latest run" may quote the second only
    with open(os.path.join(fake_root, "bench", "results", "gpu.txt"), "w") as f:
        f.write("# first run\nduel total 95.9%\n# second run\n# (same GPU)\nduel total 99.9%\n")
    bad = []
    check_figures_in("x.md", "The latest run (bench/results/gpu.txt): 95.9% in total.\n\n"
                     "The latest run (bench/results/gpu.txt): 99.9% in total.\n\n"
                     "An earlier run (bench/results/gpu.txt): 95.9% in total.\n",
                     fake_root, bad)
    shutil.rmtree(fake_root, ignore_errors=True)
    msgs = [m for _, m in bad]
    tap.ok(len(msgs) == 1 and "95.9%" in msgs[0] and ":1:" in msgs[0],
           "self-test: a \"latest run\" figure from an older run of its file is caught", msgs)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), "..", ".."))
    build = os.environ.get("BUILD", "build")
    if not os.path.isabs(build):
        build = os.path.join(root, build)
    tap = Tap()
    self_test(tap, root, build)
    if "--self-test-only" not in sys.argv:
        docs = ["README.md"] + sorted(os.path.relpath(p, root)
                                      for p in glob.glob(os.path.join(root, "docs", "*.md")))
        check_flags(tap, root, build, docs)
        check_config_keys(tap, root, docs)
        check_metrics(tap, root, docs)
        check_figures(tap, root, docs)
    print("1..%d" % tap.n)
    sys.exit(1 if tap.failed else 0)


if __name__ == "__main__":
    main()
