"""fleet.node.params reads a call step's parameters as inspect.signature does."""

import functools
import inspect

from fleet.node.params import parameters


def _signature(func):
    return {n: (p.kind, p.default is not p.empty) for n, p in inspect.signature(func).parameters.items()}


def every_kind(x, y=1, /, z=2, *args, k, m=3, **kw):
    local = x
    return local


def only_ctx(ctx):
    pass


def keyword_only(*, ctx, n=1):
    pass


def test_parameters_of_plain_and_other_callables_match_inspect_signature():
    wrapped = functools.wraps(every_kind)(lambda *a, **k: None)
    for func in (every_kind, only_ctx, keyword_only, lambda: None, lambda *a: a, lambda **k: k,
                 wrapped, functools.partial(every_kind, 1), print, dict.get):
        try:
            expected = _signature(func)
        except (TypeError, ValueError):
            continue
        assert parameters(func) == expected, func
