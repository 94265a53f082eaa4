"""An error raised in a store call ends the script promptly, as one readable line.

A store call runs inside ``Session.run`` (a ``tf.numpy_function``), so its
error reaches the script as a TensorFlow ``OpError`` whose message buries the
store's one-line message in a Python traceback.  And when such an error ends
the script, the session is still open: it is closed by ``Session.__del__``
during interpreter shutdown, where ``~DirectSession`` waits for the input
pipeline's threads (a ``from_generator`` prefetch thread, the insert
function's ``map``) -- and a thread that needs the GIL to finish its Python
call can no longer take it once the interpreter is finalizing.  The process
then never exits (seen as a 0 % CPU hang in ``TF_CloseSession``); an early
error makes that likely, because the pipeline is still filling its buffers.

So ``init()`` installs (through ``patches.py``) an exception hook that, for an
uncaught error: prints the store error as one line (``MXREC_REF_VERBOSE=1``: the
whole chain),
closes every live session while the interpreter can still run the pipeline's
Python threads, and arms a C-level watchdog (``faulthandler``, which needs no
GIL) that ends the process with status 1 if shutdown still blocks.
``mxrec-ref run`` does the same for the script it runs (``report``).
"""
from __future__ import annotations

import faulthandler
import os
import sys
import traceback
import weakref

from ..distributed.comm import end_job_after_error
from ..errors import MxrecError

SHUTDOWN_GRACE_S = 10       # how long shutdown may take after a fatal error before the watchdog ends it
GRACE_ENV = "MXREC_REF_SHUTDOWN_GRACE_S"   # overrides it
VERBOSE_ENV = "MXREC_REF_VERBOSE"

_sessions: "weakref.WeakSet" = weakref.WeakSet()
_last_error: list = []      # the latest store error, to find it again inside a TensorFlow OpError
_devnull = []


def note(error: BaseException) -> None:
    """Remember a store error on its way out of a store call."""
    if isinstance(error, MxrecError):
        _last_error[:] = [error]


def store_error_of(error: BaseException) -> MxrecError | None:
    """The store error behind ``error``: itself, a cause in its chain, or the
    noted store error whose message a TensorFlow OpError carries."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, MxrecError):
            return error
        if _last_error and str(_last_error[0]) in str(getattr(error, "message", error)):
            return _last_error[0]
        error = error.__cause__ or error.__context__
    return None


def one_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {' '.join(str(error).split())}"


def report(error: BaseException, *, verbose: bool | None = None, stream=None) -> int:
    """Print ``error`` for the user and make sure the process can exit; returns 1.
    A store error is one line; any other error keeps its traceback."""
    stream = sys.stderr if stream is None else stream
    if verbose is None:
        verbose = os.environ.get(VERBOSE_ENV, "") not in ("", "0")
    store_error = store_error_of(error)
    if store_error is not None and not verbose:
        print(f"mxrec-ref: error: {one_line(store_error)}", file=stream)
    else:
        traceback.print_exception(type(error), error, error.__traceback__, file=stream)
    stream.flush()
    shut_down_promptly()
    return 1


def shut_down_promptly(grace_s: float | None = None) -> None:
    """Close the live sessions now (the pipeline's threads can still finish), and
    end the process with status 1 if shutdown blocks past ``grace_s`` anyway."""
    if grace_s is None:
        grace_s = float(os.environ.get(GRACE_ENV) or SHUTDOWN_GRACE_S)
    if not _devnull:
        _devnull.append(open(os.devnull, "w"))
    faulthandler.dump_traceback_later(grace_s, exit=True, file=_devnull[0])
    for session in list(_sessions):
        try:
            session.close()
        except Exception:  # noqa: BLE001 - best effort: the process is ending with the error already shown
            pass


def track_session(session) -> None:
    """Remember a live session, to close it when an error ends the script
    (``patches.py`` calls this from every ``Session.__init__``)."""
    _sessions.add(session)


def excepthook(kind, value, tb, previous) -> None:
    """``sys.excepthook`` once ``init()`` ran (installed by ``patches.py``): an
    uncaught error is reported and the process made able to exit; an interrupt
    or a non-``Exception`` goes to the ``previous`` hook."""
    if isinstance(value, KeyboardInterrupt) or not issubclass(kind, Exception):
        return previous(kind, value, tb)
    report(value)
    end_job_after_error(1)          # SHARD-21: on several MPI ranks the whole job ends now
