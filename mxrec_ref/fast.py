"""The fast store: the reference's rules over the Cython core in cext/_fast.pyx.

``FastStore`` must agree bit for bit with ``mxrec_ref.ref.RefStore`` after
every call (the comparison machines of mxrec_ref/conformance/machines.py, run
by mxrec_ref/conformance/test_differential.py).  The split:

* here, in Python: everything that raises, the calls of the rules both
  backends share (mxrec_ref/contract.py: the capacity and growth rule, the
  table clock, the statistics counters, the hot schedule), the initializer call and the
  optimizer's scalar hyper-parameters (rounded to float32 exactly as
  ``ref/optimizers.py`` rounds them);
* in ``mxrec_ref._fast.FastCore``: the key history (hash map), row placement,
  row storage, batch dedup, gathers and the optimizer loops, each without the
  GIL; and the hot block (spec/hot.md): a small map of the hot keys, their
  rows and a compact copy of their values.  Lookups probe each unique key's
  hot index, hot keys skip the main map and are gathered from the block, and
  every optimizer kernel writes through to it.  When and which keys become
  hot is ``mxrec_ref.hot``'s policy, applied here as in the reference.

A training lookup is planned (nothing changes), checked, then committed, so
an error leaves the store as it was (CON-4).  Every message comes from the
contract, so both backends fail identically.
"""
from __future__ import annotations

import numpy as np

from . import hot
from ._fast import FastCore, mix_bits, uniform_rows
from .config import TableConfig
from .contract import InMemoryStore, TierMoves
from .initializers import counter_base, initial_rows
from .optimizers import SGD, Adagrad, Ftrl, LazyAdam, SparseOptimizer
from .state import PADDING_KEY, LookupResult, TableState
from .tiers.placement import FastDevicePlacement

F32 = np.float32


class FastStore(InMemoryStore, TierMoves):
    backend_name = "fast"
    device_placement = FastDevicePlacement       # CON-10, TIER-4

    def __init__(self, config: TableConfig, optimizer: SparseOptimizer | None = None,
                 hot_rows: int | None = None, hot_update_step: int | None = None):
        super().__init__(config, optimizer, hot_rows, hot_update_step)
        self._default_row = np.ascontiguousarray(config.default_row(), dtype=np.float32)
        initial = self.optimizer.slot_initial_values()
        # A slot without an initial value keeps what its row held, as in the
        # reference's _place (only possible for a custom optimizer).
        self._core = FastCore(config.dim, [initial.get(name) for name in self.optimizer.slot_names])
        self._slot_index = {name: i for i, name in enumerate(self.optimizer.slot_names)}

    # -------------------------------------------------------------- lookup
    def _lookup(self, keys, shape, train, step, timestamp, pad_to, counts):
        core = self._core
        unique, inverse, occurrences = core.dedup(keys, counts)          # LKP-2, LKP-6
        n_unique = len(unique)
        self._check_send_count(n_unique, pad_to)
        total = n_unique if pad_to is None else max(pad_to, n_unique)
        # hot_index: each unique key's index in the hot block, probed on the
        # way, as the set is before this lookup's refresh (None: no hot set)
        if train:
            rows, admitted, hot_index = self._train_lookup(unique, occurrences, step, timestamp, total)
        else:
            rows, admitted, hot_index = core.lookup_eval_hot(unique, total, self._default_row)
        if hot_index is None:
            padding, with_row = core.position_stats(keys, inverse, admitted)
        else:
            padding, with_row, hot_hits = core.position_stats_hot(keys, inverse, admitted, hot_index)
            self._counters["hot_hit_positions"] += hot_hits
        self._count_positions(train, keys.size, padding, with_row)
        self._refresh_hot_if_due(train)
        if total > n_unique:
            unique = np.concatenate([unique, np.full(total - n_unique, PADDING_KEY, dtype=np.int64)])
        return LookupResult(self.name, unique, rows, inverse.reshape(shape), admitted, train,
                            n_unique, id(self))

    def _train_lookup(self, unique, occurrences, step, timestamp, total):
        """Count (saturating, ADM-7; padding never counted, ADM-6), admit and place rows
        (ADM-1..ADM-4, EXP-1..EXP-4; admitted keys keep counting, ADM-3; a reused row starts
        again from the initializer and the slots' initial values, EVI-4, INIT-5); returns the lookup's
        (rows, admitted, hot index of each unique key or None).  All checks
        happen before the commit."""
        clock, source = self._training_clock(step, timestamp)
        core = self._core
        tags, new_counts, admit, n_new, hot_index = core.plan_train_hot(
            unique, occurrences, self.effective_coefficient(), self.config.admit_threshold)
        self._reserve(len(admit))
        init = None
        if len(admit):
            # The shared initializer, in first-occurrence order (INIT-1).
            init = _initial_rows(self.config, unique[admit])
        # rows: stored values, or the default row for keys without one (LKP-3, ADM-5)
        rows, admitted = core.commit_train(unique, tags, new_counts, admit, n_new, clock, init,
                                           self._capacity_rows, total, self._default_row, hot_index)
        self.clock, self.clock_source = clock, source
        self._counters["admitted"] += len(admit)
        self._counters["train_lookups"] += 1
        return rows, admitted, hot_index

    def _refresh_hot(self) -> None:
        """HOT-2: the hot set becomes the hot_rows keys holding a row with the
        highest counts (hot.choose_hot_keys) and their rows are copied."""
        core, n = self._core, self._hot_capacity
        chosen = np.zeros(0, dtype=np.int64)
        if n > 0 and core.size:
            keys, counts = _hot_candidates(*core.hot_candidates(n), n)
            chosen = hot.choose_hot_keys(keys, counts, n)
        core.set_hot(chosen)

    # ----------------------------------------------------------- gradients
    def _apply(self, keys, grads, mask, step) -> int:
        core = self._core
        positions, rows = core.resolve_rows(keys, mask)
        # The kernels update in place: keep the rows to put back if the update overflows (OPT-3).
        saved = self._backup_buffer(len(rows))
        core.save_rows(rows, saved)
        self._update(rows, positions, grads, step)
        bad = core.first_nonfinite(rows)
        if bad >= 0:
            core.restore_rows(rows, saved)
            raise self._overflow_error(int(keys[positions[bad]]))
        self._count_applied(len(keys), len(rows))
        return len(rows)

    def _backup_buffer(self, n: int) -> np.ndarray:
        """A reused [1 + slots, >= n, dim] buffer for _apply's copy of the rows
        it updates (a fresh one per call costs page faults)."""
        buffer = getattr(self, "_backup", None)
        if buffer is None or buffer.shape[1] < n:
            capacity = max(n, 2 * (0 if buffer is None else buffer.shape[1]), 1024)
            buffer = self._backup = np.empty((1 + len(self._slot_index), capacity, self.config.dim), np.float32)
        return buffer

    def _update(self, rows, positions, grads, step) -> None:
        """One optimizer step on ``rows``; scalars rounded to float32 exactly
        as ref/optimizers.py rounds them (OPT-7)."""
        opt, core, slot = self.optimizer, self._core, self._slot_index
        if isinstance(opt, SGD):                                  # OPT-4
            decay = opt.weight_decay is not None
            core.sgd(rows, positions, grads, F32(opt.learning_rate), decay,
                     F32(opt.weight_decay) if decay else F32(0.0))
        elif isinstance(opt, Adagrad):
            core.adagrad(rows, positions, grads, F32(opt.learning_rate), slot["accumulator"])
        elif isinstance(opt, LazyAdam):
            b1, b2, one = F32(opt.beta1), F32(opt.beta2), F32(1.0)
            core.lazy_adam(rows, positions, grads, b1, one - b1, b2, one - b2,
                           opt.step_learning_rate(step), F32(opt.epsilon), slot["momentum"], slot["velocity"])
        elif isinstance(opt, Ftrl):
            self._ftrl(opt, rows, positions, grads)
        else:  # the reference raises the same, from apply_update
            raise TypeError(f"unknown optimizer {opt!r}")

    def _ftrl(self, opt: Ftrl, rows, positions, grads) -> None:
        """OPT-6."""
        core, slot = self._core, self._slot_index
        scalars = (F32(opt.learning_rate), F32(opt.l1_regularization_strength),
                   F32(opt.l2_regularization_strength), F32(opt.l2_shrinkage_regularization_strength))
        if opt.uses_sqrt:
            core.ftrl_sqrt(rows, positions, grads, *scalars, slot["accum"], slot["linear"])
            return
        # acc^-power comes from numpy, the function the reference calls: its
        # SIMD power differs from libm's powf in the last bit (see _fast.pyx).
        acc, acc_new = core.ftrl_accumulate(rows, positions, grads, slot["accum"])
        power = F32(-opt.learning_rate_power)
        core.ftrl_power(rows, positions, grads, acc_new, np.power(acc_new, power), np.power(acc, power),
                        *scalars, slot["accum"], slot["linear"])

    # ------------------------------------------------------------ eviction
    def _evict(self, now):
        cutoff = self._eviction_cutoff(now, self.clock)
        if cutoff is None:
            return np.zeros(0, dtype=np.int64)
        expired = self._core.expired_keys(cutoff)                # last_seen <= cutoff (EVI-1)
        admitted, pending = self._core.remove_keys(expired)   # ascending key order (EVI-2, EVI-3)
        self._counters["evicted"] += admitted                   # STAT-4
        self._counters["evicted_pending"] += pending
        return expired

    # ------------------------------------------------------------- queries
    def _size(self) -> int:
        return self._core.size

    def _stats(self):
        core = self._core
        return self._counter_stats(size=core.size, history=core.history_size, hot_rows=core.hot_size)

    def _row_handles(self, keys):
        return self._core.row_handles(keys)     # EXP-5

    def bytes_per_key(self) -> float:
        """Bytes of the hash map, key entries (key, count, last seen), free
        list and row values -- optimizer slots excluded -- per key holding a
        row; nan for an empty table.  Counts memory written so far (what is
        resident); ``memory_breakdown(allocated=True)`` gives reserved bytes."""
        with self._lock:
            size = self._core.size
            return sum(self._core.memory_bytes().values()) / size if size else float("nan")

    def memory_breakdown(self, allocated: bool = False) -> dict[str, int]:
        """The bytes behind ``bytes_per_key``, by structure."""
        with self._lock:
            return self._core.memory_bytes(allocated)

    # ---------------------------------------------------------- tier moves
    def _rows_of(self, keys):
        """Copies of what ``keys`` (all holding a row) carry to another tier:
        (values, {slot: values}, counts, last_seen)."""
        core = self._core
        rows = core.row_handles(keys)
        counts, last_seen = core.entries_of(keys)
        return (core.copy_rows(rows, -1), {name: core.copy_rows(rows, i) for name, i in self._slot_index.items()},
                counts, last_seen)

    def _distinct(self, keys):
        """The distinct keys of a batch in order of first occurrence (LKP-2)."""
        return self._core.dedup(keys, None)[0]

    def _drop_rows(self, keys) -> None:
        """Forget ``keys`` (their rows moved to another tier); no counter
        moves.  Hot ones leave the hot set (HOT-2)."""
        self._core.remove_keys(keys)

    def _put_rows(self, keys, values, slots, counts, last_seen) -> None:
        """Take back ``keys`` with the state they carry; no counter moves."""
        self._hold_at_least(self._core.size + len(keys))
        self._core.put_rows(_int64(keys), _int64(counts), _int64(last_seen), values,
                            [slots[name] for name in self._slot_index], self._capacity_rows)

    def _admitted_entries(self):
        """(keys ascending, counts, last_seen) of every key holding a row."""
        keys, counts, last_seen, _ = self._core.export_entries(True)
        return keys, counts, last_seen

    def _export(self) -> TableState:
        core = self._core
        keys, counts, last_seen, rows = core.export_entries(True)
        pending, pending_counts, pending_seen, _ = core.export_entries(False)
        return TableState(
            keys=keys,
            values=core.copy_rows(rows, -1),
            slots={name: core.copy_rows(rows, i) for name, i in self._slot_index.items()},
            counts=counts,
            last_seen=last_seen,
            pending_keys=pending,
            pending_counts=pending_counts,
            pending_last_seen=pending_seen,
            clock=self.clock,
            clock_source=self.clock_source,
        )

    def _import_state(self, state: TableState) -> None:
        """Loaded keys take rows 0..n-1 in ascending key order (CKPT-6), pending keys keep theirs (CKPT-2);
        counters are kept; the hot set is emptied (clear)."""
        core = self._core
        slot_arrays = [state.slots[name] for name in self._slot_index]
        core.clear()
        self.clock = self.clock_source = None
        core.load_rows(self._capacity_after_import(len(state.keys)), state.values, slot_arrays)
        core.load_entries(_int64(state.keys), _int64(state.counts), _int64(state.last_seen), True)
        core.load_entries(_int64(state.pending_keys), _int64(state.pending_counts),
                          _int64(state.pending_last_seen), False)
        self.clock, self.clock_source = state.clock, state.clock_source


def _hot_candidates(above: np.ndarray, above_counts: np.ndarray, tied: np.ndarray, threshold: int, n: int):
    """The keys (and counts) hot.choose_hot_keys can pick for ``n`` hot rows,
    from FastCore.hot_candidates: every key with a count above the n-th
    highest count, then the smallest keys with exactly that count (HOT-2
    breaks ties by the smaller key).  choose_hot_keys orders by count, then
    key, whatever the input order, so its result on these is its result on
    all keys -- but a refresh of a table of millions of keys sorts n keys."""
    need = n - len(above)
    if len(tied) > need:
        tied = np.partition(tied, need - 1)[:need] if need > 0 else tied[:0]
    return (np.concatenate([above, tied]),
            np.concatenate([above_counts, np.full(len(tied), threshold, dtype=np.int64)]))


def _initial_rows(config: TableConfig, keys: np.ndarray) -> np.ndarray:
    """initializers.initial_rows with the integer kernel in C, and uniform
    rows entirely in C (same float operations in the same order)."""
    init = config.initializer
    if init.kind == "uniform":
        return uniform_rows(counter_base(init.seed, 0, 0), np.ascontiguousarray(keys, dtype=np.int64), config.dim,
                            float(init.minval), float(init.maxval) - float(init.minval), float(config.init_param))
    return np.ascontiguousarray(initial_rows(config, keys, mix=_mix_bits), dtype=np.float32)


def _mix_bits(base: int, keys: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """The initializer's integer kernel in C (INIT-2): same bits as numpy's."""
    return mix_bits(base, np.ascontiguousarray(keys, dtype=np.int64), np.ascontiguousarray(cols, dtype=np.int64))


def _int64(array) -> np.ndarray:
    return np.ascontiguousarray(array, dtype=np.int64).reshape(-1)
