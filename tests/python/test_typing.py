"""The package as typed tools and IDEs see it (issue 29 item 2):
inspect.signature answers for every public callable of xfer (the C
extension's methods carry text signatures), the type stubs
(xfer/__init__.pyi) name every public name and give each callable the
parameters the real one takes, py.typed is installed beside them, and
Engine closes like Server and Consumer (close(), with, async with)."""
import ast
import asyncio
import inspect
import os

import pytest

import xfer

HERE = os.path.dirname(xfer.__file__)
STUB = os.path.join(HERE, "__init__.pyi")


def _stub():
    with open(STUB) as f:
        return ast.parse(f.read())


def _public_callables():
    """(qualified name, object) of every public function and class of the
    package and every public method xfer itself defines (inherited ones of
    the standard library, such as BaseException.with_traceback, are not
    xfer's)."""
    out = []
    for name in xfer.__all__:
        obj = getattr(xfer, name)
        if not callable(obj):
            continue
        out.append((name, obj))
        if not inspect.isclass(obj):
            continue
        for attr in dir(obj):
            if attr.startswith("_") and attr not in ("__enter__", "__exit__"):
                continue
            owner = next((k for k in obj.__mro__ if attr in vars(k)), None)
            if owner is None or not owner.__module__.startswith("xfer"):
                continue
            val = getattr(obj, attr)
            if callable(val) and not inspect.isclass(val):
                out.append((name + "." + attr, val))
    return out


def test_every_public_callable_has_a_signature():
    missing = []
    for name, obj in _public_callables():
        try:
            inspect.signature(obj)
        except (ValueError, TypeError) as e:
            missing.append("%s: %s" % (name, e))
    assert not missing, "no signature: " + "; ".join(missing)
    # The C methods' own text signatures, not a generic (*args, **kw).
    sig = inspect.signature(xfer.Engine.submit)
    assert list(sig.parameters) == ["self", "id", "pool", "slices", "group",
                                    "timeout", "user_data", "crcs"]
    assert sig.parameters["group"].kind is inspect.Parameter.KEYWORD_ONLY
    assert str(inspect.signature(xfer.Consumer.close)) == \
        "(self, /, timeout=5.0)"


def _stub_defs(tree):
    """{name: ast node} of the stub's top level, and {class: {method:
    FunctionDef}} (methods of a class's stub bases merged in)."""
    top, methods = {}, {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef,
                             ast.AsyncFunctionDef)):
            top[node.name] = node
        elif isinstance(node, ast.AnnAssign):
            top[node.target.id] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                top[t.id] = node
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            m = {}
            for base in node.bases:
                if isinstance(base, ast.Name) and base.id in methods:
                    m.update(methods[base.id])
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    m[item.name] = item
            methods[node.name] = m
    return top, methods


def test_stub_names_every_public_name():
    top, _ = _stub_defs(_stub())
    missing = [n for n in xfer.__all__ if n not in top]
    assert not missing, ("python/xfer/__init__.pyi lacks %s"
                         % ", ".join(missing))
    assert os.path.exists(os.path.join(HERE, "py.typed"))


def _stub_params(fn):
    """[(name, kind)] of a stub def, self dropped, as inspect names kinds."""
    P = inspect.Parameter
    a = fn.args
    out = [(x.arg, P.POSITIONAL_ONLY) for x in a.posonlyargs]
    out += [(x.arg, P.POSITIONAL_OR_KEYWORD) for x in a.args]
    if a.vararg:
        out.append((a.vararg.arg, P.VAR_POSITIONAL))
    out += [(x.arg, P.KEYWORD_ONLY) for x in a.kwonlyargs]
    if a.kwarg:
        out.append((a.kwarg.arg, P.VAR_KEYWORD))
    return [p for p in out if p[0] not in ("self", "cls")]


def _real_params(obj):
    P = inspect.Parameter
    return [(p.name, p.kind) for p in inspect.signature(obj).parameters.values()
            if p.name not in ("self", "cls")]


def test_stub_parameters_match_the_real_callables():
    top, methods = _stub_defs(_stub())
    wrong = []
    for name, obj in _public_callables():
        cls_name, _, attr = name.partition(".")
        node = top.get(cls_name)
        if attr:
            fn = methods.get(cls_name, {}).get(attr)
            if fn is None:
                if isinstance(inspect.getattr_static(getattr(xfer, cls_name),
                                                     attr), property):
                    continue
                wrong.append("%s: not in the stub" % name)
                continue
        elif isinstance(node, ast.ClassDef):
            fn = methods[cls_name].get("__init__")
            if fn is None:
                continue  # constructed by the package, not by users
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            fn = node
        else:
            continue
        real = _real_params(obj)
        if any(k is inspect.Parameter.VAR_KEYWORD for _, k in real):
            # Engine(transport, notify=, **kw) and Server(buffers, faults=,
            # **kw) pass their keywords to the C type: the names given
            # before **kw must match, and every stub keyword must be one
            # the C type takes (its error names an unknown one).
            real_named = [p for p in real
                          if p[1] is not inspect.Parameter.VAR_KEYWORD]
            stub = _stub_params(fn)
            if stub[:len(real_named)] != real_named:
                wrong.append("%s: stub %s, real %s" % (name, stub, real))
            continue
        if _stub_params(fn) != real:
            wrong.append("%s: stub %s, real %s" % (name, _stub_params(fn),
                                                   real))
    assert not wrong, "; ".join(wrong)


def test_stub_keywords_are_taken_by_the_constructors():
    """Every keyword the stub gives Engine, Server and Consumer (whose
    Python __init__ passes **kw on to the C type) is one the C type takes:
    an unknown keyword raises TypeError naming it, a known one with a
    value of the wrong type raises without calling it unknown."""
    _, methods = _stub_defs(_stub())
    first = {"Engine": object(), "Server": object(),
             "Consumer": "127.0.0.1:1"}
    for cls_name, arg in first.items():
        fn = methods[cls_name]["__init__"]
        for kw in (a.arg for a in fn.args.kwonlyargs):
            with pytest.raises(Exception) as ei:
                getattr(xfer, cls_name)(arg, **{kw: object()})
            assert "keyword" not in str(ei.value), (cls_name, kw, ei.value)
        with pytest.raises(TypeError) as ei:
            getattr(xfer, cls_name)(arg, no_such_keyword=1)
        assert "no_such_keyword" in str(ei.value)


def test_engine_close_and_context_managers():
    e = xfer.Engine(xfer.Loop(2))
    e.close()
    assert e.closed
    e.close()  # idempotent, as Server.close and Consumer.close are
    with xfer.Engine(xfer.Loop(2)) as e:
        staging = bytearray(8192)
        pool = e.register_pool(staging)
        r = e.submit_wait(1, pool, xfer.split(0, len(staging), 2))
        assert r.ok
    assert e.closed

    async def main():
        async with xfer.Engine(xfer.Loop(2)) as e2:
            pool = e2.register_pool(bytearray(4096))
            r = await e2.submit(2, pool, xfer.split(0, 4096, 2))
            assert r.ok
        return e2
    assert asyncio.run(main()).closed
