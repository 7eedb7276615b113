#!/usr/bin/env python3
"""examples/docs_blocks.py ROOT - every code block of the documentation is
a tested file.

It reads ROOT/README.md and every ROOT/docs/*.md, listed when it runs (so a
page added later is checked without a change to any meson.build), and
holds every fenced block (``` or ~~~ at the start of a line) to one rule:

  ```text      not code: a program's output, a terminal session, a picture.
               Exempt.
  after a line <!-- examples/PATH, verbatim -->
               the block is the whole of examples/PATH, byte for byte.
  after a line <!-- examples/PATH -->
               the block is a run of consecutive lines of examples/PATH.
  ```sh whose every line is `tools/run SUBCOMMAND ...` (a # comment may
               follow, or fill a line): each SUBCOMMAND is one that tools/run's usage names.
               These install packages and build; CI runs `tools/run test`
               itself, and the suite cannot run them.
  any other block
               is a run of consecutive lines of some file under examples/.

(The marker line may be followed by blank lines before the fence.)  The
file a block is found in must be one the suite builds or runs: its name
appears in a meson.build under examples/ or tests/, in a test script
under tests/ (a .py or .sh), or in an examples/ script that one of those
runs.  docs/README.md says the same for the writers of pages.

Exit 0 when every block holds; otherwise one line per block that does not
(FILE:LINE and why, with the difference where a file is named), exit 1.
"""
import difflib
import os
import re
import sys

FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)\s*$")
MARKER = re.compile(r"^<!-- examples/(\S+?)(, verbatim)? -->$")
RUN_LINE = re.compile(r"^tools/run (\w+)(?: [^#]*)?(?:\s*#.*)?$")


def blocks(path):
    """(line of the fence, info string, marker or None, body lines)."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out, i, marker = [], 0, None
    while i < len(lines):
        m = MARKER.match(lines[i])
        if m:
            marker = (m.group(1), bool(m.group(2)))
            i += 1
            continue
        m = FENCE.match(lines[i])
        if not m:
            if lines[i].strip():
                marker = None
            i += 1
            continue
        fence, info, start = m.group(1), m.group(2), i
        j = i + 1
        while j < len(lines) and not (lines[j].startswith(fence[0] * 3)
                                      and lines[j].strip() == fence):
            j += 1
        if j == len(lines):
            out.append((start + 1, info, marker, None))
            break
        out.append((start + 1, info, marker, lines[i + 1:j]))
        marker, i = None, j + 1
    return out


def read_lines(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().split("\n")


def contained(body, lines):
    """The index where body is a run of lines, or -1."""
    n = len(body)
    for k in range(len(lines) - n + 1):
        if lines[k:k + n] == body:
            return k
    return -1


def example_files(root):
    out = []
    for d, dirs, files in os.walk(os.path.join(root, "examples")):
        dirs[:] = sorted(x for x in dirs if not x.startswith((".", "__")))
        out += [os.path.join(d, f) for f in sorted(files)
                if not f.endswith((".pyc", ".o"))]
    return out


def suite_text(root):
    """What the suite runs, as text: meson.build files under examples/ and
    tests/, test scripts under tests/, and the scripts under examples/."""
    parts = []
    for top in ("examples", "tests"):
        for d, dirs, files in os.walk(os.path.join(root, top)):
            for f in files:
                if f == "meson.build" or f.endswith((".py", ".sh")):
                    parts.append((os.path.join(d, f),
                                  "\n".join(read_lines(os.path.join(d, f)))))
    return parts


def used_by_suite(path, parts):
    name = os.path.basename(path)
    return any(name in text for p, text in parts if p != path)


def run_subcommands(root):
    usage = [ln for ln in read_lines(os.path.join(root, "tools", "run"))
             if ln.startswith("#")]
    return set(re.findall(r"^#\s+tools/run (\w+)", "\n".join(usage), re.M))


def diff(expected, got, name):
    return "".join(difflib.unified_diff(
        [x + "\n" for x in expected], [x + "\n" for x in got],
        "examples/" + name, "the block"))


def check_block(root, doc, line, info, marker, body, files, parts, subs):
    where = "%s:%d" % (doc, line)
    if body is None:
        return ["%s: a fence that is never closed" % where]
    if info == "text":
        return []
    if marker:
        name, whole = marker
        path = os.path.join(root, "examples", name)
        if not os.path.isfile(path):
            return ["%s: examples/%s, which the marker names, does not exist"
                    % (where, name)]
        lines = read_lines(path)
        if whole:
            if lines != body + [""]:
                return ["%s: the block is not examples/%s, verbatim\n%s"
                        % (where, name, diff(lines[:-1], body, name))]
        elif contained(body, lines) < 0:
            k = next((i for i, x in enumerate(lines) if body and x == body[0]),
                     0)
            return ["%s: the block is not a part of examples/%s\n%s"
                    % (where, name, diff(lines[k:k + len(body)], body, name))]
        if not used_by_suite(path, parts):
            return ["%s: examples/%s is run by no test" % (where, name)]
        return []
    if info in ("sh", "shell", "bash") and body and all(
            RUN_LINE.match(x) or not x.strip() or x.lstrip().startswith("#")
            for x in body):
        bad = [x for x in body if RUN_LINE.match(x)
               and RUN_LINE.match(x).group(1) not in subs]
        return ["%s: tools/run has no subcommand %r" % (where, x.split()[1])
                for x in bad]
    found = [p for p in files if contained(body, read_lines(p)) >= 0]
    if not found:
        return ["%s: the ```%s block is in no file under examples/ (mark "
                "output ```text; name its file with <!-- examples/PATH -->)"
                % (where, info)]
    if not any(used_by_suite(p, parts) for p in found):
        return ["%s: the block is in %s, which no test runs"
                % (where, ", ".join(os.path.relpath(p, root) for p in found))]
    return []


def main():
    if len(sys.argv) != 2:
        print("usage: docs_blocks.py ROOT", file=sys.stderr)
        return 2
    root = sys.argv[1]
    docs = ["README.md"] + sorted(
        os.path.join("docs", f) for f in os.listdir(os.path.join(root, "docs"))
        if f.endswith(".md"))
    files, parts, subs = example_files(root), suite_text(root), \
        run_subcommands(root)
    errors, count = [], 0
    for doc in docs:
        for line, info, marker, body in blocks(os.path.join(root, doc)):
            count += 1
            errors += check_block(root, doc, line, info, marker, body, files,
                                  parts, subs)
    for e in errors:
        print("docs_blocks: " + e)
    print("docs_blocks: %d pages, %d blocks, %d not tested"
          % (len(docs), count, len(errors)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
