"""tests/python/test_example.py - the Python examples of docs/python.md run end to
end: examples/python/encoder.py against 4 real xferd processes, and
examples/python/connector.py (an encoder process, 4 worker processes
serving their own memory, the consumer's scheduler); and docs/python.md's
copies of them, which must be the files."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "python", "encoder.py")
CONNECTOR = os.path.join(ROOT, "examples", "python", "connector.py")


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


def test_example_connector_runs_end_to_end():
    p = subprocess.run([sys.executable, CONNECTOR], capture_output=True,
                       text=True, timeout=120)
    print(p.stdout, p.stderr)
    assert p.returncode == 0
    assert p.stdout.splitlines() == [
        "request 1: encoder ok, scheduler ok",
        "request 2: encoder ok, scheduler ok",
        "request 3: encoder PEER_CANCELLED in reserving, scheduler CANCELLED",
        "request 4: encoder NO_SPACE in reserving, scheduler TIMEOUT"]


def readme_copy(name):
    with open(os.path.join(ROOT, "docs", "python.md")) as f:
        page = f.read()
    m = re.search(r"<!-- examples/python/%s, verbatim -->\n"
                  r"```python\n(.*?)```\n" % re.escape(name), page, re.S)
    assert m, "docs/python.md has no verbatim copy of examples/python/" + name
    return m.group(1)


def test_example_readme_shows_the_file():
    with open(EXAMPLE) as f:
        assert readme_copy("encoder.py") == f.read()


def test_example_readme_shows_the_connector():
    with open(CONNECTOR) as f:
        assert readme_copy("connector.py") == f.read()
