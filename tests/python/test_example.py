"""tests/python/test_example.py - examples/python/encoder.py, the README's
Python example, run end to end against 4 real xferd processes; and the
README's copy of it, which must be the file."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "python", "encoder.py")


def test_example_encoder_runs_end_to_end():
    p = subprocess.run([sys.executable, EXAMPLE], capture_output=True,
                       text=True, timeout=60)
    print(p.stdout, p.stderr)
    assert p.returncode == 0
    lines = p.stdout.splitlines()
    assert [ln.split(":")[0] for ln in lines] == \
        ["request %d" % i for i in (1, 2, 3, 4)]
    assert lines[0] == "request 1: ok" and lines[1] == "request 2: ok"
    assert lines[3] == "request 4: NO_SPACE in reserving"


def test_example_readme_shows_the_file():
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    m = re.search(r"<!-- examples/python/encoder\.py, verbatim -->\n"
                  r"```python\n(.*?)```\n", readme, re.S)
    assert m, "README.md has no verbatim copy of examples/python/encoder.py"
    with open(EXAMPLE) as f:
        assert m.group(1) == f.read()
