"""A call step's function run to its end as a Python program is run to its end.

- An ``async def`` function returns a coroutine: it is run with ``asyncio.run``, and
  what it raises is the step's, as for a plain function. A generator function (one
  that yields, sync or async) would run none of its body: it is refused before the
  call (:class:`NotAStepFunction`), as `fleet validate --imports` refuses it; a plain
  function that returns a generator fails the step the same way.
- When the function has returned (or raised), the step waits for the non-daemon
  threads it started and runs the ``atexit`` handlers it registered, as the
  interpreter does at a program's end (threading._shutdown, then the handlers), and
  only then ends. The handlers the zygote's own imports registered (preloaded modules)
  are not the step's: :func:`forget_inherited` drops them in the child before the
  step's module is imported.

Before 2026-12-06 the coroutine was dropped unawaited and the step succeeded without
running its body; a step's threads and handlers were cut off when its function
returned (the child ended with ``os._exit`` at once).
"""

from __future__ import annotations

import atexit
import inspect
import sys
from typing import Callable


class NotAStepFunction(TypeError):
    """The call target cannot be a step's function (the message says why and what to do)."""


def generator_refusal(target: str, asynchronous: bool) -> str:
    """What is said of a generator function named as a call step's function."""
    kind = "an async generator function" if asynchronous else "a generator function"
    return (f"{target} is {kind} (it yields): calling it runs none of its body; a call step's "
            f"function must return (a plain def, or an async def that returns), not yield")


def refuse_generators(func: Callable, target: str) -> None:
    """:class:`NotAStepFunction` if ``func`` is a generator function (sync or async)."""
    if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
        raise NotAStepFunction(generator_refusal(target, inspect.isasyncgenfunction(func)))


def call(func: Callable, positional: tuple, kwargs: dict, target: str) -> None:
    """Call the step's function; run the coroutine it returns to its end (asyncio.run)."""
    result = func(*positional, **kwargs)
    if inspect.iscoroutine(result):
        import asyncio  # (only for such steps: a forked child pays for every import)
        asyncio.run(result)
    elif inspect.isawaitable(result):  # (a Future, an object with __await__)
        import asyncio

        async def wait() -> None:
            await result
        asyncio.run(wait())
    elif inspect.isgenerator(result) or inspect.isasyncgen(result):
        raise NotAStepFunction(f"{target} returned a generator, and none of its body ran: a call step's "
                               f"function must return, not yield")


def forget_inherited() -> None:
    """Drop the atexit handlers the child inherited from the zygote (its preloads'):
    only those the step registers are run at its end."""
    atexit._clear()


def wind_up() -> None:
    """What the interpreter does at a program's end before it exits: wait for every
    non-daemon thread (threading's own exit hooks first, e.g. concurrent.futures'
    shutdown of its workers), run the atexit handlers (each one's exception is printed,
    as Python prints it, and does not change the exit status), flush stdout and stderr."""
    threading = sys.modules.get("threading")  # (not imported: no thread was started)
    if threading is not None:
        try:
            threading._shutdown()
        except BaseException:  # (as the interpreter does: said, and the exit goes on)
            _print_exception()
    try:
        atexit._run_exitfuncs()
    except BaseException:
        _print_exception()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass


def _print_exception() -> None:
    try:
        import traceback
        traceback.print_exc()
    except BaseException:
        pass
