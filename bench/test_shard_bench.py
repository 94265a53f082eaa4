"""Sharded tables (spec/sharding.md) on 2 virtual ranks (VirtualWorld: one thread per rank, the exchange a
memory copy), fast backend, dim 16, Zipf 1.05 batches of KEYS keys per rank:

* ``sharded step / local step``: lookup + apply_gradients of both ranks' batches through ShardedStore vs the
  same global batch on one rank-unaware store (the cost of routing, the exchange and the owners' work);
* ``all-to-all / sharded step``: the step's exchanges alone (keys + counts out, rows back, gradient rows out);
* ``hot replicas``: the same sharded step and an evaluation lookup with the hottest rows replicated on every
  rank (SHARD-20) vs without; bytes sent to other ranks per step (deterministic, in extra_info and printed).

Real MPI ranks: bench/mpi_exchange.py under mpirun (bench/README.md).
"""
from __future__ import annotations

import numpy as np
import pytest

from mxrec_ref import Adagrad, TableConfig, hot, open_store
from mxrec_ref.distributed import VirtualWorld

from sharding_workload import CountingCommunicator, batches, hit_ratios, sharded_table, train_step
from workloads import DIM, PROFILE, UNIVERSE

RANKS = 2
KEYS = 16_384 if PROFILE == "quick" else 65_536
WARM, ROUNDS = 4, 6
BATCHES = [batches(rank, WARM + ROUNDS + 1, KEYS) for rank in range(RANKS)]


class Ranks:
    """RANKS virtual ranks, each with a byte-counting communicator and a sharded table, warmed up (the
    hot set, if any, is chosen after the warm-up)."""

    def __init__(self, hot_rows: int):
        self.world = VirtualWorld(RANKS)
        self.comms = [CountingCommunicator(c) for c in self.world.communicators()]
        self.stores = [sharded_table(c, hot_rows, WARM) for c in self.comms]
        self.step = 0
        for _ in range(WARM):
            self.train()
        for store in self.stores:           # refreshed once, after the warm-up; then at HOT-1's default interval
            if store._hot is not None:
                store._hot.update_step = hot.DEFAULT_UPDATE_STEP

    def run(self, body):
        return self.world.run(lambda rank, _: body(rank, self.stores[rank]))

    def train(self):
        step, self.step = self.step, self.step + 1
        return self.run(lambda rank, store: train_step(store, BATCHES[rank][step % len(BATCHES[rank])], step))

    def evaluate(self):
        return self.run(lambda rank, store: store.lookup(BATCHES[rank][-1], train=False).embeddings())

    def bytes_per_call(self, call) -> int:
        """Bytes the busiest rank sent to the others in one ``call``."""
        before = [sum(c.sent.values()) for c in self.comms]
        call()
        return max(sum(c.sent.values()) - b for c, b in zip(self.comms, before))


@pytest.fixture(scope="module")
def plain():
    return Ranks(hot_rows=0)


@pytest.fixture(scope="module")
def replicated():
    ranks = Ranks(hot_rows=hot.hot_rows("item", DIM, None))
    assert ranks.stores[0].stats()["hot_rows"] > 0
    return ranks


def test_sharded_step_vs_local(benchmark, plain):
    benchmark.extra_info.update(ratio_group=f"sharded step, {RANKS} virtual ranks / local step on the global batch",
                                role="sharded", better="lower", keys_per_rank=KEYS)
    benchmark.pedantic(plain.train, rounds=ROUNDS, warmup_rounds=0)


def test_local_step(benchmark):
    config = TableConfig("item", dim=DIM, device_vocabulary_size=UNIVERSE, dynamic_expansion=True)
    store = open_store(config, Adagrad(0.05), backend="fast", hot_rows=0)
    glued = [np.concatenate([BATCHES[r][i] for r in range(RANKS)]) for i in range(WARM + ROUNDS + 1)]
    for step in range(WARM):
        train_step(store, glued[step], step)
    steps = iter(range(WARM, WARM + ROUNDS + 1))
    benchmark.extra_info.update(ratio_group=f"sharded step, {RANKS} virtual ranks / local step on the global batch",
                                role="candidate", better="lower")
    benchmark.pedantic(lambda: train_step(store, glued[(step := next(steps))], step), rounds=ROUNDS, warmup_rounds=0)


def test_alltoall_share_of_the_step(benchmark, plain):
    """The step's all-to-alls alone, with the counts and byte sizes of a real step."""
    keys = [np.unique(b[0]) for b in BATCHES]
    counts = [np.bincount(np.mod(k, RANKS), minlength=RANKS) for k in keys]
    recv = [np.array([counts[s][r] for s in range(RANKS)]) for r in range(RANKS)]
    out = [np.stack([k, k], axis=1) for k in keys]          # keys and occurrence counts: 16 bytes a key
    rows = [np.zeros((int(recv[r].sum()), DIM), np.float32) for r in range(RANKS)]
    grads = [np.zeros((len(k), DIM), np.float32) for k in keys]

    def exchange(rank, comm):
        comm.alltoallv(out[rank], counts[rank], recv[rank])
        comm.alltoallv(rows[rank], recv[rank], counts[rank])
        comm.alltoallv(grads[rank], counts[rank], recv[rank])

    world = VirtualWorld(RANKS)
    benchmark.extra_info.update(ratio_group=f"all-to-alls of a step / sharded step, {RANKS} virtual ranks",
                                role="alltoall", better="lower")
    benchmark.pedantic(lambda: world.run(exchange), rounds=ROUNDS, warmup_rounds=1)


def test_sharded_step_for_the_alltoall_share(benchmark, plain):
    benchmark.extra_info.update(ratio_group=f"all-to-alls of a step / sharded step, {RANKS} virtual ranks",
                                role="candidate", better="lower")
    benchmark.pedantic(plain.train, rounds=ROUNDS, warmup_rounds=0)


@pytest.mark.parametrize("kind", ["training step", "evaluation lookup"])
@pytest.mark.parametrize("replicas", ["on", "off"])
def test_hot_replicas(benchmark, plain, replicated, kind, replicas):
    ranks = replicated if replicas == "on" else plain
    call = ranks.train if kind == "training step" else ranks.evaluate
    info = {"ratio_group": f"hot replicas, {kind}, Zipf 1.05, {RANKS} virtual ranks: off / on",
            "role": "candidate" if replicas == "on" else "off"}
    if replicas == "on":
        on_bytes, off_bytes = replicated.bytes_per_call(call), plain.bytes_per_call(
            plain.train if kind == "training step" else plain.evaluate)
        positions, distinct = hit_ratios(replicated.stores[0], BATCHES[0][-1])
        info.update(bytes_on=on_bytes, bytes_off=off_bytes, bytes_cut=1 - on_bytes / off_bytes,
                    hit_ratio_positions=positions, hit_ratio_distinct_keys=distinct,
                    hot_rows=replicated.stores[0].stats()["hot_rows"])
        print(f"\n{info['ratio_group']}: bytes sent per rank on/off {on_bytes}/{off_bytes} "
              f"(cut {info['bytes_cut']:.2f}); hot hit ratio {positions:.2f} of positions, "
              f"{distinct:.2f} of distinct keys")
    benchmark.extra_info.update(info)
    benchmark.pedantic(call, rounds=ROUNDS, warmup_rounds=0)
