"""TFRA's ``dynamic_embedding`` as an mxrec-ref store, for ``mxrec-ref conformance`` (issue 20, item 3).

``open_tfra_store(config, optimizer)`` is a ``module:factory`` backend
(``--backend mxrec_ref.peers.tfra:open_tfra_store``).  The store is a client: it validates every call
through the contract's base class like any backend, then forwards the state-changing work over two pipes
to ``tfra_server.py`` running under TFRA's Python (``MXREC_TFRA_PYTHON``, default the checkout's
``.venv-peers/bin/python``; TFRA 0.8.1 needs TF 2.16.2 and numpy 1.26, which cannot share this process).
One server process serves every store of this process; it starts with the first store.

What TFRA does: the key -> row map, its growth, each row's values (lookup, insert, export, import),
optimizer slots and updates (TFRA's ``DynamicEmbeddingOptimizer`` over tf_keras's SGD, Adagrad, Adam,
Ftrl).  What the client does, as every backend does through the contract: argument checks, the
batch's dedup and inverse index, padding, the table clock and the statistics counters.  What TFRA cannot
express raises ``NotSupported`` (CON-11), listed in ``NOT_EXPRESSIBLE``; the bridges this adapter
builds over TFRA's different semantics are ``KNOWN_DIFFERENCES``; both go into the conformance report.
"""
from __future__ import annotations

import atexit
import itertools
import os
import subprocess
import tempfile
import threading
import weakref
from pathlib import Path

import numpy as np

from ..contract import InMemoryStore
from ..errors import BackendFailure, NotSupported
from ..initializers import initial_rows
from ..optimizers import SGD, SparseOptimizer
from ..state import PADDING_KEY, LookupResult, TableState
from . import protocol

SERVER_SCRIPT = Path(__file__).resolve().parent / "tfra_server.py"
REPO_PEERS_PYTHON = Path(__file__).resolve().parents[2] / ".venv-peers" / "bin" / "python"

# What TFRA cannot express: the reason each NotSupported gives (CON-11).
NOT_EXPRESSIBLE = {
    "learning_rate": "TFRA's optimizer is built with its learning rate when the table opens; a learning rate for "
                     "one apply (OPT-10) would need a variable learning rate there",
    "admission": "ADM: TFRA stores every key it is given; it has no count-based admission (access_threshold)",
    "eviction": "EVI: TFRA's restrict policies trim a table to a target size by frequency or wall-clock "
                "timestamp; it has no eviction by eviction_threshold steps since last seen",
    "row_handles": "EXP-4/EXP-5: TFRA's cuckoo hash table exposes no row indices",
    "pending": "ADM-4: TFRA keeps no history of keys without a row (a checkpoint with pending keys)",
    "hot": "HOT: TFRA has no hot block",
    "weight_decay": "OPT-4: tf_keras's legacy SGD, which TFRA wraps, has no weight decay",
    "tiers": "TIER: TFRA's CPU tables live in memory only; it has no DDR/SSD tiers behind a device budget",
}
# Where TFRA's semantics differ and this adapter bridges them (printed with the conformance report).
KNOWN_DIFFERENCES = {
    "EXP-2, EXP-3": "TFRA's hash tables have no row capacity and rehash as they fill; capacity(), the "
                    "CapacityError of a full fixed table and the growths counter are the contract's capacity "
                    "bookkeeping (mxrec_ref.contract), applied by the adapter",
    "INIT-1": "TFRA's variable initializer sees only a shape, so a new row is no function of its key; the "
              "adapter passes the contract's per-key initial rows as the hash table's dynamic_default_values "
              "(a constant initializer is TFRA's own)",
    "LKP-1": "TFRA inserts a key only when an optimizer updates it; a training lookup upserts the keys it "
             "sees, as mxrec's lookup creates their rows",
    "CON-6": "TFRA keeps no access counts or last-seen times; a second dynamic_embedding variable of int64 "
             "pairs holds them (TFRA's restrict policies keep their status the same way)",
    "OPT-5": "tf_keras's Adam reads the step from optimizer.iterations; the adapter sets it to `step` "
             "before each apply",
}


def peers_python() -> str:
    return os.environ.get("MXREC_TFRA_PYTHON") or str(REPO_PEERS_PYTHON)


class Server:
    """One server process and its two pipes; calls are serialised (one request, one reply)."""

    def __init__(self, command: list[str]):
        to_server_r, to_server_w = os.pipe()
        from_server_r, from_server_w = os.pipe()
        self.log = tempfile.TemporaryFile()      # the server's stderr, quoted when it dies
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH="")
        self.process = subprocess.Popen([*command, str(to_server_r), str(from_server_w)],
                                        pass_fds=(to_server_r, from_server_w), stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=self.log, env=env, close_fds=True)
        os.close(to_server_r)
        os.close(from_server_w)
        self.writer = os.fdopen(to_server_w, "wb")
        self.reader = os.fdopen(from_server_r, "rb")
        self.lock = threading.Lock()
        self.failure: str | None = None
        # Tables of stores garbage-collected since the last call, closed by the next call: a finalizer
        # runs wherever GC strikes, possibly inside a call holding the lock, so it only appends here.
        self.closed_tables: list[int] = []
        self.versions = self.call("hello")[0]

    def call(self, op: str, arrays: dict | None = None, **fields) -> tuple[dict, dict]:
        with self.lock:
            if self.failure is not None:
                raise BackendFailure(self.failure)
            while self.closed_tables:
                self._exchange("close", None, {"table": self.closed_tables.pop()})
            header, result = self._exchange(op, arrays, fields)
        if not header["ok"]:
            error = header["fields"]
            raise RuntimeError(f"TFRA server: {op}: {error['error']}: {error['message']}")
        return header["fields"], result

    def _exchange(self, op: str, arrays: dict | None, fields: dict) -> tuple[dict, dict]:
        """One request and its reply; the caller holds the lock."""
        try:
            protocol.write_message(self.writer, {"op": op, "fields": fields}, arrays)
            return protocol.read_message(self.reader)
        except (OSError, EOFError, ValueError) as error:
            self.failure = self._death_note(op, error)
            raise BackendFailure(self.failure) from None

    def _death_note(self, op: str, error: Exception) -> str:
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = "still running"
        self.log.seek(0)
        tail = self.log.read().decode("utf-8", "replace").strip().splitlines()[-5:]
        return (f"the TFRA server (pid {self.process.pid}, {' '.join(self.process.args[:2])}) failed during "
                f"{op!r}: {type(error).__name__}: {error}; exit code {code}" + (f"; stderr: {' | '.join(tail)}"
                                                                                if tail else ""))

    def close(self) -> None:
        for stream in (self.writer, self.reader):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


_servers: dict[tuple[str, ...], Server] = {}
_servers_lock = threading.Lock()


def shared_server(command: list[str]) -> Server:
    """The process's server for ``command``, started on first use; ended at exit."""
    key = tuple(command)
    with _servers_lock:
        if key not in _servers:
            _servers[key] = Server(command)
        return _servers[key]


@atexit.register
def _close_servers() -> None:
    for server in _servers.values():
        server.close()


_table_ids = itertools.count(1)


class TFRAStore(InMemoryStore):
    """One table in a TFRA server (see the module docstring).  ``InMemoryStore`` gives it the
    contract's counters, clock and capacity bookkeeping; its rows live in TFRA."""

    backend_name = "tfra"
    tiers_not_expressible = NOT_EXPRESSIBLE["tiers"]

    def __init__(self, config, optimizer: SparseOptimizer | None = None, hot_rows: int | None = None,
                 hot_update_step: int | None = None, *, command: list[str] | None = None):
        super().__init__(config, optimizer, hot_rows, hot_update_step)   # validates hot_rows (HOT-1)
        self._check_expressible(hot_rows)
        self._server = shared_server(command or [peers_python(), str(SERVER_SCRIPT)])
        self._id = next(_table_ids)
        init = self.config.initializer
        constant = (float(np.float32(np.float64(init.value) * self.config.init_param))
                    if init.kind == "constant" else None)
        self._per_key_init = constant is None
        self._server.call("open", table=self._id, dim=self.config.dim, initializer=constant,
                          optimizer=self.optimizer.describe())
        self._opened_with = self.optimizer      # the server's optimizer: its learning rate is fixed at open
        weakref.finalize(self, self._server.closed_tables.append, self._id)

    def _check_expressible(self, hot_rows) -> None:
        if self.config.admission_enabled:
            raise NotSupported(NOT_EXPRESSIBLE["admission"])
        if self.config.eviction_enabled:
            raise NotSupported(NOT_EXPRESSIBLE["eviction"])
        if hot_rows:            # the default block is kept as a size only: never filled, never refreshed
            raise NotSupported(NOT_EXPRESSIBLE["hot"])
        if isinstance(self.optimizer, SGD) and self.optimizer.weight_decay is not None:
            raise NotSupported(NOT_EXPRESSIBLE["weight_decay"])

    def set_threshold(self, threshold: int) -> None:
        """ADM-9: 0 (stop counting) and 1 (admit at the first access) are what TFRA does anyway; a
        higher threshold would need admission (CON-11), refused before anything changes."""
        if isinstance(threshold, (int, np.integer)) and not isinstance(threshold, bool) and 1 < threshold < 2**31:
            raise NotSupported(NOT_EXPRESSIBLE["admission"])
        super().set_threshold(threshold)

    # -------------------------------------------------------------- lookup
    def _lookup(self, keys, shape, train, step, timestamp, pad_to, counts):
        unique, inverse, occurrences = _dedup(keys, counts)                    # LKP-2
        self._check_send_count(len(unique), pad_to)                            # LKP-4
        real = unique != PADDING_KEY
        real_keys = unique[real]
        defaults = {"defaults": initial_rows(self.config, real_keys)} if self._per_key_init and train else {}
        found, arrays = self._server.call("lookup", {"keys": real_keys, **defaults}, table=self._id)
        rows = np.empty((len(unique), self.config.dim), dtype=np.float32)
        rows[:] = self.config.default_row()
        admitted = np.zeros(len(unique), dtype=bool)
        exists = arrays["exists"]
        if train:
            clock, source = self._training_clock(step, timestamp)              # CON-5
            new = ~exists
            self._reserve(int(new.sum()))                                      # EXP-2, EXP-3
            self._server.call("commit", {"new_keys": real_keys[new], "new_rows": arrays["rows"][new],
                                         "keys": real_keys, "added": occurrences[real] * self.effective_coefficient()},
                              table=self._id, clock=clock)
            self.clock, self.clock_source = clock, source
            self._counters["admitted"] += int(new.sum())
            self._counters["train_lookups"] += 1
            rows[real], admitted[real] = arrays["rows"], True
        else:
            rows[np.flatnonzero(real)[exists]] = arrays["rows"][exists]
            admitted[np.flatnonzero(real)[exists]] = True
        padding = int(np.count_nonzero(keys == PADDING_KEY))
        with_row = int(np.count_nonzero(admitted[inverse])) if keys.size else 0
        self._count_positions(train, keys.size, padding, with_row)             # STAT-3
        n_unique = len(unique)
        if pad_to is not None and pad_to > n_unique:
            extra = pad_to - n_unique
            unique = np.concatenate([unique, np.full(extra, PADDING_KEY, dtype=np.int64)])
            rows = np.concatenate([rows, np.tile(self.config.default_row(), (extra, 1))])
            admitted = np.concatenate([admitted, np.zeros(extra, dtype=bool)])
        return LookupResult(self.name, unique, rows, inverse.reshape(shape), admitted, train, n_unique, id(self))

    # ----------------------------------------------------------- gradients
    def _apply(self, keys, grads, mask, step) -> int:
        if self.optimizer is not self._opened_with:       # OPT-10: a learning rate for this apply only
            raise NotSupported(NOT_EXPRESSIBLE["learning_rate"])
        fields, _ = self._server.call("apply", {"keys": keys[mask], "grads": grads[mask]}, table=self._id,
                                      step=step)
        self._count_applied(len(keys), fields["applied"])                      # STAT-5
        return fields["applied"]

    # ------------------------------------------------------------- the rest
    def _evict(self, now):
        raise NotSupported(NOT_EXPRESSIBLE["eviction"])      # unreachable: such a table is never opened

    def _size(self) -> int:
        return self._server.call("size", table=self._id)[0]["size"]

    def _stats(self):
        size = self._size()
        return self._counter_stats(size=size, history=size, hot_rows=0)

    def _row_handles(self, keys):
        raise NotSupported(NOT_EXPRESSIBLE["row_handles"])

    def _export(self) -> TableState:
        _, arrays = self._server.call("export", table=self._id)
        empty = np.zeros(0, dtype=np.int64)
        return TableState(keys=arrays["keys"], values=arrays["values"],
                          slots={name: arrays["slot:" + name] for name in self.optimizer.slot_names},
                          counts=arrays["counts"], last_seen=arrays["last_seen"], pending_keys=empty,
                          pending_counts=empty, pending_last_seen=empty, clock=self.clock,
                          clock_source=self.clock_source)

    def _import_state(self, state: TableState) -> None:
        if len(state.pending_keys):
            raise NotSupported(NOT_EXPRESSIBLE["pending"])
        arrays = {"keys": state.keys, "values": state.values, "counts": state.counts, "last_seen": state.last_seen}
        arrays.update({"slot:" + name: state.slots[name] for name in self.optimizer.slot_names})
        self._server.call("import_state", arrays, table=self._id)
        self._capacity_after_import(len(state.keys))                           # CKPT-6
        self.clock, self.clock_source = state.clock, state.clock_source

    def _refresh_hot(self) -> None:
        raise NotSupported(NOT_EXPRESSIBLE["hot"])


def _dedup(keys: np.ndarray, counts: np.ndarray | None):
    """Distinct keys in first-occurrence order, the inverse index and each key's accesses (LKP-2)."""
    sorted_unique, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    inverse = rank[inverse.reshape(-1)] if keys.size else np.zeros(0, dtype=np.int64)
    weights = np.ones(keys.size, dtype=np.int64) if counts is None else counts
    occurrences = np.bincount(inverse, weights=weights, minlength=order.size).astype(np.int64) if keys.size \
        else np.zeros(0, dtype=np.int64)
    return sorted_unique[order], inverse.astype(np.int64), occurrences


def open_tfra_store(config, optimizer=None, **options) -> TFRAStore:
    """The ``module:factory`` of ``mxrec-ref conformance --backend mxrec_ref.peers.tfra:open_tfra_store``."""
    return TFRAStore(config, optimizer, **options)


open_tfra_store.not_expressible = NOT_EXPRESSIBLE
open_tfra_store.known_differences = KNOWN_DIFFERENCES
