#!/usr/bin/env python3
"""Line-level mutants of C files, for finding checks no test holds.

`make mutants` replays the bugs tests were written to catch.  This finds
the ones nobody wrote a test for: it plants, one line at a time, the small
slips a reviewer misses (a comparison's boundary, == for !=, && for ||, an
early return's guard made false), each as a patch in the format of
tests/mutants/run.sh, so the runner builds and kills them:

    tests/mutants/sweep.py --kill 'build/tests/test_shm' --out build-sweep/shm \\
        src/shm/gv_shm.c
    MUTANTS_DIR=build-sweep/shm MUTANTS_BUILD_CMD='make -j2 build/tests/test_shm' \\
        tests/mutants/run.sh

A survivor is a candidate, not a verdict: many are equivalent (a < b ? a : b
against <=) or need a fault no test can make (malloc failing); the rest name
a check to test, and the test's bug becomes a mutant of its own in
tests/mutants (docs/contributing.md, "Sweeps").  Patches that do not build
(-Werror catches many) come out BROKEN: the compiler caught those.

--every N keeps every Nth mutant (a first look at a large file).  Comments,
preprocessor lines, for-loop headers and lines with string literals holding
operators are left alone.
"""
import argparse
import difflib
import os
import re
import sys

# (pattern, replacement): one mutant per match, each alone
REL = [
    (r'(?<![<>=!-])<(?![<=])', '<='),
    (r'(?<![<>-])<=', '<'),
    (r'(?<![<>=!-])>(?![>=])', '>='),
    (r'(?<![<>-])>=', '>'),
    (r'==', '!='),
    (r'!=', '=='),
    (r'&&', '||'),
    (r'\|\|', '&&'),
]
COND = re.compile(r'\s*(if|while|\} else if) \(')
EXIT = re.compile(r'(\s*)if \((.*)\) (return|goto)(.*)$')
GUARD = re.compile(r'(\s*)if \((.*)\)\s*$')


def skip_line(line):
    s = line.strip()
    if not s or s.startswith(('#', '/*', '*', '//')) or s.startswith('static '):
        return True
    if 'for (' in line:
        return True
    return bool(re.search(r'"[^"]*[<>=&|!][^"]*"', line))


def mutants_of_line(lines, i):
    line = lines[i]
    out = []
    if COND.match(line) or 'return ' in line or re.search(r'=[^=].*[<>]', line):
        for pat, rep in REL:
            # the look-behinds keep '->', '<<' and '>>' whole
            for m in re.finditer(pat, line):
                out.append(line[:m.start()] + rep + line[m.end():])
    balanced = line.count('(') == line.count(')')
    m = GUARD.match(line)
    nxt = lines[i + 1].strip() if i + 1 < len(lines) else ''
    if m and balanced and nxt.startswith(('return', 'goto')):
        out.append(m.group(1) + 'if (0)')
    m = EXIT.match(line)
    if m and balanced:
        out.append(m.group(1) + 'if (0) ' + m.group(3) + m.group(4))
    return [x for x in dict.fromkeys(out) if x != line]


def sweep(path, kill, outdir, every, start):
    with open(path) as f:
        lines = f.read().split('\n')
    base = os.path.splitext(os.path.basename(path))[0]
    n, kept = start, 0
    in_comment = False
    for i, line in enumerate(lines):
        s = line.strip()
        if in_comment:
            in_comment = '*/' not in s
            continue
        if s.startswith('/*') and '*/' not in s:
            in_comment = True
            continue
        if skip_line(line):
            continue
        for mu in mutants_of_line(lines, i):
            n += 1
            if n % every:
                continue
            new = lines[:i] + [mu] + lines[i + 1:]
            diff = difflib.unified_diff(lines, new, 'a/' + path, 'b/' + path, lineterm='', n=3)
            name = '%s-L%d-%d' % (base, i + 1, n)
            with open(os.path.join(outdir, name + '.patch'), 'w') as f:
                f.write('# mutant: %s:%d %s -> %s\n' % (path, i + 1, s, mu.strip()))
                f.write('# kill: %s\n' % kill)
                f.write('\n'.join(diff) + '\n')
            kept += 1
    return n, kept


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--kill', required=True, help='kill command (run.sh: must fail with the bug)')
    ap.add_argument('--out', required=True, help='directory for the patches')
    ap.add_argument('--every', type=int, default=1, help='keep every Nth mutant')
    ap.add_argument('files', nargs='+', help='C files, relative to the repository root')
    a = ap.parse_args()
    if a.every < 1:
        ap.error('--every must be at least 1')
    os.makedirs(a.out, exist_ok=True)
    n = total = 0
    for path in a.files:
        if not os.path.isfile(path):
            print('sweep: %s: no such file (paths are relative to the root)' % path,
                  file=sys.stderr)
            return 2
        n, kept = sweep(path, a.kill, a.out, a.every, n)
        total += kept
    print('sweep: %d mutants in %s (of %d candidates)' % (total, a.out, n))
    return 0


if __name__ == '__main__':
    sys.exit(main())
