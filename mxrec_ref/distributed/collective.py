"""How one table's calls stay collective on several ranks (spec/sharding.md, SHARD-8, SHARD-22).

Every public call of a sharded or replicated table is collective: every rank makes it, in the same order,
and a call that fails on one rank fails on every rank.  ``TableCollective`` is that rule written once, for
any store that spans ranks (it holds no rows):

* ``call(name)`` counts the table's calls, so every header names the call and its number;
* ``agree(error, what, **fields)`` is the header exchange: every rank's header, or on every rank the same
  error -- the ranks make different calls or configure the table differently (SHARD-22), or a rank failed
  (SHARD-8: that rank re-raises its own error, the others a UsageError naming it);
* ``guarded(name, what)`` is the guard around a call that goes through the contract's checks: an error
  raised before the call's first collective (``begin``) joins the exchange the other ranks are waiting in,
  so they raise too instead of waiting for the watchdog (SHARD-15);
* ``attempt(work)`` runs this rank's part of a step and keeps its error for the next ``agree``.

The order of the collectives is the caller's; nothing here adds one (SHARD-12).
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Callable, TypeVar

from ..errors import MxrecError, UsageError
from .comm import Communicator

T = TypeVar("T")


@dataclasses.dataclass
class Call:
    """One collective call of a table, in flight."""

    name: str               # what the headers call it: "training lookup", "save", ...
    counter: int            # the table's collective calls begun, this one included (SHARD-22)
    started: bool = False   # it reached its first collective: an error from now on is every rank's already


class TableCollective:
    """One table's collective calls on ``comm``'s ranks (module docstring)."""

    def __init__(self, comm: Communicator, table: str, config_fields: Callable[[], dict]):
        self.comm = comm
        self.rank, self.size = comm.rank, comm.size
        self.table = table
        self.config_fields = config_fields   # what every rank must configure alike, compared at the first call
        self.calls = 0                       # collective calls begun (SHARD-22's call counter)
        self.current: Call | None = None     # the call running now
        self.config_agreed = False           # the ranks compared the table's config (SHARD-22)

    @contextlib.contextmanager
    def call(self, name: str):
        """One collective call of the table (SHARD-22): it is counted, and every header it exchanges names
        it.  A call made inside another (a replica's load imports a state) is part of the outer one."""
        if self.current is not None:
            yield self.current
            return
        self.calls += 1
        self.current = Call(name, self.calls)
        try:
            yield self.current
        finally:
            self.current = None

    @contextlib.contextmanager
    def guarded(self, name: str, what: str):
        """``call(name)`` around a public call whose arguments the contract checks before the store's hook
        runs: if the call raises an MxrecError before it ``begin``s, the other ranks are waiting in its first
        exchange, so this rank joins it with the error and every rank raises (SHARD-8).  ``what`` names the
        call in the error messages.  Afterwards the watchdog no longer names this call."""
        try:
            with self.call(name) as call:
                try:
                    yield call
                except MxrecError as error:
                    if not call.started:
                        self.begin(f"table {self.table!r}'s {what}")
                        self.agree(error, what)       # raises on every rank
                    raise
        finally:
            self.comm.context = Communicator.context      # later collectives are not this call's

    def begin(self, context: str) -> None:
        """The running call reaches its first collective: from now on every rank knows of its errors.
        ``context`` is what the watchdog says this rank waits in (SHARD-15)."""
        if self.current is not None:
            self.current.started = True
        self.comm.context = context

    def agree(self, error: Exception | None, what: str, **fields) -> list[dict]:
        """Every rank's header for this call; raises on every rank if the ranks make different calls or
        configure the table differently (SHARD-22), or if any rank failed (SHARD-8): the failed rank
        re-raises its own error, the others a UsageError naming it."""
        call = self.current.name if self.current is not None else what
        header = dict(fields, error=error, table=self.table, call=call, counter=self.calls)
        if not self.config_agreed:
            header["config"] = self.config_fields()
        headers = self.comm.allgather(header)
        check_same_call(headers)
        self.config_agreed = True
        for source, header in enumerate(headers):
            if header["error"] is not None:
                if source == self.rank:
                    raise header["error"]
                raise UsageError(f"table {self.table!r}: {what}: rank {source} of {self.size} failed this "
                                 f"call ({header['error']}); every rank raised") from None
        return headers

    def open(self, check: Callable[[], T] | None = None) -> T | None:
        """The opening exchange of a call whose first step would change something (SHARD-22): the ranks
        agree on the call before it.  ``check()`` (the call's argument checks) runs first; its error fails
        every rank (SHARD-8).  Returns what ``check`` returns."""
        value, error = attempt(check) if check is not None else (None, None)
        self.agree(error, self.current.name if self.current is not None else "call")
        return value


def attempt(work: Callable[[], T], default=None) -> tuple[T, MxrecError | None]:
    """(``work()``, None), or (``default``, the MxrecError it raised): this rank's part of a step, whose
    error every rank raises at the step's next ``agree`` (SHARD-8) instead of this rank alone now."""
    try:
        return work(), None
    except MxrecError as error:
        return default, error


def check_same_call(headers: list[dict]) -> None:
    """SHARD-22 on the headers of one exchange (the same list on every rank, so every rank raises the same
    error, before the call changes anything): the ranks configure the table alike -- compared at its first
    call -- and make the same call of the same table, counted alike."""
    configs = [h.get("config") for h in headers]
    if all(c is not None for c in configs):
        for field in configs[0]:
            values = [c.get(field) for c in configs]
            if any(v != values[0] for v in values[1:]):
                seen = ", ".join(f"rank {r}: {v!r}" for r, v in enumerate(values))
                raise UsageError(f"table {headers[0]['table']!r}: {field}: the ranks configure this table differently "
                                 f"({seen}); every rank must create a sharded table with the same name, dim, key "
                                 f"dtype, optimizer, thresholds and storage (SHARD-22)")
    calls = [(h["table"], h["call"], h["counter"]) for h in headers]
    if any(call != calls[0] for call in calls[1:]):
        seen = "; ".join(f"rank {r}: {call} of table {table!r} (its call {counter})"
                         for r, (table, call, counter) in enumerate(calls))
        raise UsageError(f"table {headers[0]['table']!r}: the ranks make different collective calls ({seen}); every "
                         f"rank must make the same calls of every sharded table in the same order (SHARD-8, SHARD-22); "
                         f"nothing was changed")
