"""The SSD tier's row store (mxrec_ref/tiers/disk.py and its disk_*.py modules; spec/tiers.md
TIER-6, TIER-7, TIER-9): bit-exact records, superseding, compaction, folder limits, atomic failed
writes and corruption detection, on both backends' kernels (RefDiskKernels, FastDiskKernels),
and the two compared call by call."""
import errno
import os
import struct
import tempfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mxrec_ref.errors import ConfigError, MxrecError
from mxrec_ref.tiers.disk import DiskCorruptionError, DiskFullError, DiskTier, RefDiskKernels, record_dtype

try:    # the tests' kernels: the fast path's where it is built (the fast store's tier), else the reference's
    from mxrec_ref.fast.disk import FastDiskKernels
except ImportError:
    FastDiskKernels = None
KERNELS = FastDiskKernels or RefDiskKernels

DIM, SLOTS = 4, 2
RECORD = record_dtype(DIM, SLOTS).itemsize  # 36 bytes of header and crc + 48 of payload


def rows(keys, salt=0):
    """Distinct, reproducible rows for ``keys``: (keys, values, slots, counts, last_seen)."""
    keys = np.asarray(keys, dtype=np.int64)
    base = (keys[:, None] * 7 + salt + np.arange(DIM)).astype(np.float32)
    slots = np.stack([base * (s + 2) for s in range(SLOTS)])
    return keys, base / 3, slots, keys * 10 + salt, keys + 100 * salt


def pick(data, positions):
    """The rows at ``positions`` of a ``rows`` tuple."""
    return tuple(a[positions] if a.ndim == 1 else a[..., positions, :] for a in data)


def tier_in(folders, **kwargs):
    return DiskTier("t", [str(f) for f in folders], DIM, SLOTS, **{"kernels": KERNELS, **kwargs})


def ssd_sizes(*folders):
    """{path: bytes} of every .ssd file in the folders."""
    return {os.path.join(f, name): os.path.getsize(os.path.join(f, name))
            for f in map(str, folders) for name in sorted(os.listdir(f)) if name.endswith(".ssd")}


def assert_rows(tier, keys, values, slots, counts, last_seen):
    got = tier.read(keys)
    assert got[0].dtype == np.float32 and got[1].dtype == np.float32
    assert got[1].shape == (SLOTS, len(keys), DIM)
    np.testing.assert_array_equal(got[0].view(np.uint32), np.asarray(values, np.float32).view(np.uint32))
    np.testing.assert_array_equal(got[1].view(np.uint32), np.asarray(slots, np.float32).view(np.uint32))
    np.testing.assert_array_equal(got[2], counts)
    np.testing.assert_array_equal(got[3], last_seen)


# ---------------------------------------------------------------- records
def test_tier_9_roundtrip_is_bit_exact(tmp_path):
    tier = tier_in([tmp_path])
    keys, values, slots, counts, last_seen = rows([2**40, -3, 5])
    values[0] = [np.nan, -0.0, np.inf, 1e-45]
    values.view(np.uint32)[1, 0] = 0x7FC01234  # a NaN with a payload
    tier.write(keys, values, slots, counts, last_seen)
    assert len(tier) == 3
    np.testing.assert_array_equal(tier.keys(), [-3, 5, 2**40])
    np.testing.assert_array_equal(tier.contains([5, 6, -3]), [True, False, True])
    assert_rows(tier, *pick((keys, values, slots, counts, last_seen), [2, 0, 2, 1]))  # any order, repeats
    np.testing.assert_array_equal(tier.expired(2**62), [-3, 5, 2**40])
    tier.verify()
    assert ssd_sizes(tmp_path) == {str(tmp_path / "t.000000.ssd"): 3 * RECORD}


def test_tier_9_record_layout_matches_the_documented_format(tmp_path):
    tier = tier_in([tmp_path])
    tier.write(*rows([9]))
    data = (tmp_path / "t.000000.ssd").read_bytes()
    magic, key, count, seen, payload_len = struct.unpack_from("<IqqqI", data)
    assert (magic, key, count, seen, payload_len) == (int.from_bytes(b"MXSD", "little"), 9, 90, 9, 4 * 3 * DIM)
    _, values, slots, _, _ = rows([9])
    payload = np.frombuffer(data, "<f4", 3 * DIM, 32)
    np.testing.assert_array_equal(payload, np.concatenate([values[0], slots[0, 0], slots[1, 0]]))
    assert struct.unpack_from("<I", data, 32 + payload_len)[0] == zlib.crc32(data[:32 + payload_len])


def test_tier_9_no_slots_and_slots_as_a_list(tmp_path):
    plain = DiskTier("p", [str(tmp_path)], 3, 0)
    plain.write([1, 2], np.ones((2, 3), np.float32), [], [1, 1], [0, 0])
    values, slots, _, _ = plain.read([2])
    assert slots.shape == (0, 1, 3) and values.tolist() == [[1, 1, 1]]
    keys, values, slots, counts, last_seen = rows([4, 8])
    tier = tier_in([tmp_path / "b"])
    tier.write(keys, values, list(slots), counts, last_seen)  # the store passes one array per slot
    assert_rows(tier, keys, values, slots, counts, last_seen)


def test_tier_9_write_again_supersedes(tmp_path):
    tier = tier_in([tmp_path], compact_ratio=1.0)
    tier.write(*rows([1, 2]))
    tier.write(*rows([1], salt=5))
    assert len(tier) == 2
    keys, values, slots, counts, last_seen = rows([1], salt=5)
    assert_rows(tier, keys, values, slots, counts, last_seen)
    assert tier.stats["disk_live_bytes"] == 2 * RECORD and tier.stats["disk_dead_bytes"] == RECORD
    tier.write(*rows([2, 2], salt=1))  # a key repeated in a batch keeps its last row
    assert_rows(tier, *rows([2], salt=1))
    assert tier.stats["disk_dead_bytes"] == 3 * RECORD


def test_tier_9_remove_forgets_keys(tmp_path):
    tier = tier_in([tmp_path], compact_ratio=1.0)
    tier.write(*rows([1, 2, 3]))
    tier.remove([2, 99])  # absent keys are ignored
    np.testing.assert_array_equal(tier.keys(), [1, 3])
    assert not tier.contains([2])[0]
    with pytest.raises(KeyError, match="'t'.*2"):
        tier.read([2])
    assert_rows(tier, *rows([1, 3]))


def test_tier_9_stats_count_records_and_bytes(tmp_path):
    tier = tier_in([tmp_path])
    tier.write(*rows([1, 2, 3]))
    tier.read([2, 3, 3])
    stats = tier.stats
    assert (stats["disk_writes"], stats["disk_bytes_written"]) == (3, 3 * RECORD)
    assert (stats["disk_reads"], stats["disk_bytes_read"]) == (2, 2 * RECORD)
    assert (stats["disk_files"], stats["disk_live_bytes"], stats["disk_dead_bytes"]) == (1, 3 * RECORD, 0)
    assert stats["compactions"] == 0
    values, slots, counts, _ = tier.read([])
    assert values.shape == (0, DIM) and slots.shape == (SLOTS, 0, DIM) and counts.shape == (0,)


def test_tier_9_large_batch_roundtrip(tmp_path):
    tier = tier_in([tmp_path], file_bytes=40_000 * RECORD)
    keys = np.arange(100_000, dtype=np.int64)[::-1] * 3
    data = rows(keys)
    tier.write(*data)
    assert tier.stats["disk_files"] == 3
    assert_rows(tier, *pick(data, np.arange(0, 100_000, 7)))


# ---------------------------------------------------------------- model check
OPS = st.lists(st.tuples(st.sampled_from(["write", "remove", "read"]),
                         st.lists(st.integers(0, 15), min_size=1, max_size=8)), max_size=12)


@settings(max_examples=50, deadline=None)
@given(ops=OPS)
def test_tier_9_random_operations_match_a_dict(tmp_path, ops):
    with tempfile.TemporaryDirectory(dir=tmp_path) as folder:
        tier = tier_in([folder], file_bytes=3 * RECORD)
        model = {}
        for step, (op, keys) in enumerate(ops):
            if op == "write":
                batch = rows(keys, salt=step)
                tier.write(*batch)
                for i, key in enumerate(keys):
                    model[key] = pick(batch, i)[1:]
            elif op == "remove":
                tier.remove(keys)
                for key in keys:
                    model.pop(key, None)
            else:
                present = [key for key in keys if key in model]
                if present:
                    got = tier.read(present)
                    for i, key in enumerate(present):
                        np.testing.assert_array_equal(got[0][i], model[key][0])
                        np.testing.assert_array_equal(got[1][:, i], model[key][1])
                        assert (got[2][i], got[3][i]) == (model[key][2], model[key][3])
            assert tier.keys().tolist() == sorted(model)
            stats = tier.stats
            assert stats["disk_live_bytes"] == len(model) * RECORD
            assert stats["disk_live_bytes"] + stats["disk_dead_bytes"] == sum(ssd_sizes(folder).values())
            assert stats["disk_files"] == len(ssd_sizes(folder))
            assert stats["disk_dead_bytes"] <= 0.5 * (stats["disk_live_bytes"] + stats["disk_dead_bytes"])
        tier.verify()
        tier.clear()


# ---------------------------------------------------------------- compaction
def test_tier_9_compaction_past_the_threshold(tmp_path):
    tier = tier_in([tmp_path])
    data = rows(range(10))
    tier.write(*data)
    tier.remove(range(5))  # dead is exactly half: not past it
    assert tier.stats["compactions"] == 0 and ssd_sizes(tmp_path) == {str(tmp_path / "t.000000.ssd"): 10 * RECORD}
    tier.remove([5])
    assert tier.stats["compactions"] == 1
    assert ssd_sizes(tmp_path) == {str(tmp_path / "t.000001.ssd"): 4 * RECORD}
    assert tier.stats["disk_dead_bytes"] == 0
    assert_rows(tier, *pick(data, slice(6, None)))
    tier.write(*rows([20]))  # appends go on after the compacted copy
    assert ssd_sizes(tmp_path) == {str(tmp_path / "t.000001.ssd"): 5 * RECORD}
    assert tier.compact() == 0
    tier.remove(tier.keys())  # a file with nothing live is deleted
    assert ssd_sizes(tmp_path) == {} and tier.stats["compactions"] == 2


def test_tier_9_compaction_is_spread_over_calls_with_bounded_work(tmp_path):
    tier = tier_in([tmp_path])
    tier.compact_budget = 3                 # records a call's compaction may look at
    data = rows(range(10))
    tier.write(*data)
    tier.remove(range(6))                   # due: 4 live records, more than one call's budget
    first = str(tmp_path / "t.000000.ssd")
    assert tier.stats["compactions"] == 0 and first in ssd_sizes(tmp_path)
    assert ssd_sizes(tmp_path)[str(tmp_path / "t.000001.ssd")] == 3 * RECORD   # 6, 7, 8 moved
    assert_rows(tier, *pick(data, slice(6, None)))                           # readable mid-way
    tier.write(*rows([9], salt=1))          # 9 superseded before it moved, in the current file, not
    assert ssd_sizes(tmp_path) == {str(tmp_path / "t.000001.ssd"): 4 * RECORD}  # the one being compacted;
    assert tier.stats["compactions"] == 1   # this call's step found nothing left to move and finished it
    assert_rows(tier, *pick(rows(range(6, 9)), slice(None)))
    assert tier.read([9])[3].tolist() == [109] and tier.stats["disk_dead_bytes"] == 0


def test_tier_9_the_index_costs_16_bytes_a_row(tmp_path):
    tier = tier_in([tmp_path])
    for start in range(0, 20_000, 5_000):   # batches merge into the main level
        tier.write(*rows(range(start, start + 5_000)))
    assert len(tier) == 20_000 and tier.index_bytes() / len(tier) == 16
    tier.remove(np.arange(0, 20_000, 2))    # tombstones until the next merge, never more than the rows were
    assert tier.index_bytes() == 16 * 20_000 and len(tier) == 10_000


def test_tier_9_eviction_reads_only_files_that_straddle_its_cutoff(tmp_path):
    """The index keeps no last-seen times: a file all older than the cutoff gives its keys
    unread, a file all newer is skipped, only a mixed file is read (its live records)."""
    tier = tier_in([tmp_path], file_bytes=RECORD * 4)
    keys = np.arange(12, dtype=np.int64)
    data = rows(keys)
    seen = np.array([1, 2, 3, 4, 10, 11, 12, 13, 5, 20, 6, 30], dtype=np.int64)   # files of 4 records
    tier.write(data[0], data[1], data[2], data[3], seen)
    tier.remove([8])                                   # a dead record of the mixed file is not read
    before = tier.stats["disk_reads"]
    np.testing.assert_array_equal(tier.expired(6), [0, 1, 2, 3, 10])
    assert tier.stats["disk_reads"] - before == 3      # the third file's live records only
    np.testing.assert_array_equal(tier.expired(0), [])
    np.testing.assert_array_equal(tier.expired(100), np.delete(keys, 8))


def test_tier_9_compact_ratio_sets_the_threshold(tmp_path):
    tier = tier_in([tmp_path], compact_ratio=0.9)
    tier.write(*rows(range(20)))
    tier.remove(range(17))  # 85% dead
    assert tier.stats["compactions"] == 0
    tier.remove([17, 18])  # 95% dead
    assert tier.stats["compactions"] == 1 and tier.keys().tolist() == [19]
    assert tier.stats["disk_dead_bytes"] == 0


def test_tier_9_closed_files_are_compacted_into_the_current_one(tmp_path):
    tier = tier_in([tmp_path], file_bytes=4 * RECORD)
    tier.write(*rows(range(6)))  # file 0: keys 0-3, file 1: keys 4-5
    tier.remove([0, 1, 2])
    assert tier.stats["compactions"] == 1
    assert ssd_sizes(tmp_path) == {str(tmp_path / "t.000001.ssd"): 3 * RECORD}
    assert_rows(tier, *rows([3, 4, 5]))


def test_tier_7_compaction_that_cannot_copy_leaves_the_file(tmp_path):
    armed = []

    def hook(path, n_bytes):
        if armed:
            raise OSError(errno.ENOSPC, "No space left on device", path)

    tier = tier_in([tmp_path], fault_hook=hook)
    tier.write(*rows(range(4)))
    armed.append(True)
    tier.remove([0, 1, 2])  # due, but the copy fails: no error, nothing moves
    assert tier.stats["compactions"] == 0
    assert ssd_sizes(tmp_path) == {str(tmp_path / "t.000000.ssd"): 4 * RECORD}
    assert_rows(tier, *rows([3]))
    armed.clear()
    assert tier.compact() == 1
    assert ssd_sizes(tmp_path) == {str(tmp_path / "t.000001.ssd"): RECORD}
    assert_rows(tier, *rows([3]))


# ---------------------------------------------------------------- folders and full disks
def test_tier_9_folders_in_order_spill_at_the_limit(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    tier = tier_in([a, b], folder_limit_bytes=5 * RECORD + 10)
    assert a.is_dir() and b.is_dir()  # missing folders are created
    tier.write(*rows([1, 2, 3]))
    assert ssd_sizes(a, b) == {str(a / "t.000000.ssd"): 3 * RECORD}
    tier.write(*rows([4, 5, 6, 7]))  # one batch split across folders
    assert ssd_sizes(a, b) == {str(a / "t.000000.ssd"): 5 * RECORD, str(b / "t.000001.ssd"): 2 * RECORD}
    assert_rows(tier, *rows([1, 2, 3, 4, 5, 6, 7]))
    tier.remove([1, 2, 3, 4])  # folder a empties: the next write goes there again
    tier.write(*rows([8]))
    assert str(a / "t.000002.ssd") in ssd_sizes(a)


def test_tier_7_full_disk_changes_nothing(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    tier = tier_in([a, b], folder_limit_bytes=4 * RECORD)
    tier.write(*rows(range(7)))
    before, keys = ssd_sizes(a, b), tier.keys()
    with pytest.raises(DiskFullError) as caught:
        tier.write(*rows([3, 7, 8], salt=9))  # 1 record still fits, 3 do not
    message = str(caught.value)
    assert "'t'" in message and str(a) in message and str(b) in message and str(4 * RECORD) in message
    assert isinstance(caught.value, MxrecError) and isinstance(caught.value, OSError)
    assert caught.value.errno == errno.ENOSPC
    assert ssd_sizes(a, b) == before
    np.testing.assert_array_equal(tier.keys(), keys)
    assert_rows(tier, *rows(range(7)))  # key 3 keeps its old row
    tier.write(*rows([7]))  # what fits still goes in
    assert len(tier) == 8


def test_tier_7_failing_second_file_truncates_the_first(tmp_path):
    calls = []

    def hook(path, n_bytes):
        calls.append((path, n_bytes))
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", path)

    tier = tier_in([tmp_path], file_bytes=4 * RECORD, fault_hook=hook)
    tier.write(*rows([1, 2]))
    calls.clear()
    before = ssd_sizes(tmp_path)
    with pytest.raises(DiskFullError, match="No space left") as caught:
        tier.write(*rows(range(10, 16)))  # 2 records to file 0, 4 to a new file 1
    assert calls == [(str(tmp_path / "t.000000.ssd"), 2 * RECORD), (str(tmp_path / "t.000001.ssd"), 4 * RECORD)]
    assert "'t'" in str(caught.value) and "t.000001.ssd" in str(caught.value)
    assert ssd_sizes(tmp_path) == before
    assert tier.keys().tolist() == [1, 2] and tier.stats["disk_writes"] == 2
    assert_rows(tier, *rows([1, 2]))
    tier.write(*rows(range(10, 16)))  # the same batch goes in once there is room
    assert sorted(ssd_sizes(tmp_path).values()) == [4 * RECORD, 4 * RECORD]
    assert_rows(tier, *rows([1, 2, *range(10, 16)]))
    tier.verify()


def test_tier_7_any_error_in_a_batch_takes_its_bytes_back(tmp_path):
    def hook(path, n_bytes):
        if path.endswith("t.000001.ssd"):
            raise RuntimeError("interrupted")

    tier = tier_in([tmp_path], file_bytes=2 * RECORD, fault_hook=hook)
    tier.write(*rows([1]))
    with pytest.raises(RuntimeError):  # not a full disk: raised as it is, after the rollback
        tier.write(*rows([2, 3, 4]))
    assert ssd_sizes(tmp_path) == {str(tmp_path / "t.000000.ssd"): RECORD} and len(tier) == 1


def test_tier_7_short_system_write_is_truncated_back(tmp_path, monkeypatch):
    tier = tier_in([tmp_path], file_bytes=2 * RECORD)
    tier.write(*rows([1]))
    real_pwrite, calls = os.pwrite, []

    def full_after_half(fd, data, offset):
        """The first file takes its record; the new file half its bytes, then the disk is full."""
        calls.append(len(data))
        if len(calls) == 1:
            return real_pwrite(fd, data, offset)
        if len(calls) == 2:
            return real_pwrite(fd, data[:len(data) // 2], offset)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full_after_half)
    with pytest.raises(DiskFullError, match="t.000001.ssd"):
        tier.write(*rows([2, 3, 4]))
    monkeypatch.undo()
    assert calls == [RECORD, 2 * RECORD, RECORD]
    assert ssd_sizes(tmp_path) == {str(tmp_path / "t.000000.ssd"): RECORD}  # file 0 truncated, file 1 deleted
    assert tier.keys().tolist() == [1]
    tier.write(*rows([2, 3, 4]))
    assert_rows(tier, *rows([1, 2, 3, 4]))
    tier.verify()


# ---------------------------------------------------------------- corruption
def corrupt(path, offset, data):
    with open(path, "r+b") as file:
        file.seek(offset)
        file.write(data)


@pytest.mark.parametrize("offset", [4, 32 + 5, RECORD - 1])  # key, payload, crc
def test_tier_6_flipped_byte_is_detected(tmp_path, offset):
    tier = tier_in([tmp_path])
    tier.write(*rows([1, 2, 3]))
    path = tmp_path / "t.000000.ssd"
    byte = path.read_bytes()[RECORD + offset]
    corrupt(path, RECORD + offset, bytes([byte ^ 0x10]))
    with pytest.raises(DiskCorruptionError) as caught:
        tier.read([3, 2])
    assert isinstance(caught.value, MxrecError) and isinstance(caught.value, OSError)
    message = str(caught.value)
    assert "'t'" in message and str(path) in message and f"offset {RECORD} " in message and "checksum" in message
    assert_rows(tier, *rows([1, 3]))  # the other records still read
    with pytest.raises(DiskCorruptionError, match=f"offset {RECORD} "):
        tier.verify()


def test_tier_6_record_of_another_key_is_detected(tmp_path):
    tier = tier_in([tmp_path])
    tier.write(*rows([1, 2]))
    path = tmp_path / "t.000000.ssd"
    data = path.read_bytes()
    path.write_bytes(data[RECORD:] + data[:RECORD])  # both records valid, each at the other's place
    with pytest.raises(DiskCorruptionError, match="holds key 2, expected 1") as caught:
        tier.read([1])
    assert str(path) in str(caught.value) and "offset 0 " in str(caught.value)


def test_tier_6_truncated_file_is_detected(tmp_path):
    tier = tier_in([tmp_path])
    tier.write(*rows([1, 2, 3]))
    path = tmp_path / "t.000000.ssd"
    os.truncate(path, RECORD + RECORD // 2)
    assert_rows(tier, *rows([1]))
    with pytest.raises(DiskCorruptionError, match="cut short") as caught:
        tier.read([1, 2, 3])
    assert str(path) in str(caught.value) and f"offset {RECORD} " in str(caught.value)
    tier.close()  # a reopened file reads the same
    with pytest.raises(DiskCorruptionError, match=f"offset {RECORD} "):
        tier.verify()


def test_tier_6_compaction_leaves_a_corrupt_file_for_read_to_report(tmp_path):
    tier = tier_in([tmp_path])
    tier.write(*rows(range(4)))
    path = tmp_path / "t.000000.ssd"
    corrupt(path, 3 * RECORD + 40, b"\xff")
    tier.remove([0, 1, 2])  # due, but the live record is corrupt: the file stays
    assert tier.stats["compactions"] == 0 and path.exists()
    with pytest.raises(DiskCorruptionError, match=f"offset {3 * RECORD} "):
        tier.read([3])


# ---------------------------------------------------------------- construction and lifetime
def test_tier_9_existing_files_are_refused(tmp_path):
    (tmp_path / "t.000003.ssd").write_bytes(b"")
    (tmp_path / "tt.000000.ssd").write_bytes(b"")  # other tables' files do not count
    (tmp_path / "t.x.000000.ssd").write_bytes(b"")
    with pytest.raises(ConfigError, match="ssd_data_path") as caught:
        tier_in([tmp_path / "new", tmp_path])
    assert "'t'" in str(caught.value) and str(tmp_path / "t.000003.ssd") in str(caught.value)
    assert not (tmp_path / "new").exists()  # nothing created before the error
    os.unlink(tmp_path / "t.000003.ssd")
    tier = tier_in([tmp_path])
    tier.write(*rows([1]))
    with pytest.raises(ConfigError, match="ssd_data_path"):
        tier_in([tmp_path])


@pytest.mark.parametrize("kwargs, parameter", [
    ({"dim": 0}, "dim"), ({"n_slots": -1}, "n_slots"), ({"folders": []}, "ssd_data_path"),
    ({"compact_ratio": 0}, "compact_ratio"), ({"compact_ratio": 1.5}, "compact_ratio"),
    ({"folder_limit_bytes": 0}, "folder_limit_bytes"), ({"table": "a/b"}, "name"),
    ({"file_bytes": 0}, "file_bytes"), ({"fault_hook": 3}, "fault_hook"),
])
def test_tier_9_configuration_is_checked(tmp_path, kwargs, parameter):
    args = {"table": "emb", "folders": [str(tmp_path / "x")], "dim": 4, "n_slots": 1, **kwargs}
    with pytest.raises(ConfigError, match=parameter) as caught:
        DiskTier(args.pop("table"), args.pop("folders"), args.pop("dim"), args.pop("n_slots"), **args)
    assert repr(kwargs.get("table", "emb")) in str(caught.value)
    assert not (tmp_path / "x").exists()


def test_tier_9_clear_deletes_files_and_the_tier_goes_on(tmp_path):
    tier = tier_in([tmp_path], file_bytes=2 * RECORD)
    tier.write(*rows(range(5)))
    tier.clear()
    assert len(tier) == 0 and ssd_sizes(tmp_path) == {} and tier.stats["disk_files"] == 0
    tier.write(*rows([7]))
    tier.close()
    assert_rows(tier, *rows([7]))  # files reopen after close
    tier.clear()
    assert ssd_sizes(tmp_path) == {}


# ---------------------------------------------------------------- fast paths
def test_crc32_records_matches_zlib():
    """The C batch CRC is bit-identical to zlib.crc32, for every row width
    and covered length around the 8-byte stride, including 0."""
    fast = pytest.importorskip("mxrec_ref._fast")
    rng = np.random.default_rng(7)
    for width in (1, 3, 7, 8, 9, 15, 16, 17, 36, 84, 132, 1000):
        records = rng.integers(0, 256, size=(64, width), dtype=np.uint8)
        for covered in sorted({0, 1, width // 2, width - 4 if width > 4 else 0, width - 1, width}):
            want = np.array([zlib.crc32(row[:covered].tobytes()) for row in records], dtype=np.uint32)
            got = fast.crc32_records(records, covered)
            assert got.dtype == np.uint32
            np.testing.assert_array_equal(got, want)
    assert fast.crc32_records(np.empty((0, 36), np.uint8), 32).shape == (0,)
    np.testing.assert_array_equal(fast.crc32_records(np.empty((3, 0), np.uint8), 0), [0, 0, 0])
    with pytest.raises(ValueError):
        fast.crc32_records(np.zeros((2, 8), np.uint8), 9)


def test_record_crc_fast_and_reference_agree():
    from mxrec_ref.tiers import disk_records
    records = np.zeros(300, record_dtype(DIM, SLOTS))
    records.view(np.uint8)[:] = np.random.default_rng(3).integers(0, 256, records.nbytes, dtype=np.uint8)
    raw = records.view(np.uint8).reshape(len(records), -1)
    np.testing.assert_array_equal(disk_records.crc32s(records),
                                  [zlib.crc32(row[:RECORD - 4].tobytes()) for row in raw])
    fast = pytest.importorskip("mxrec_ref.fast.disk")
    np.testing.assert_array_equal(fast.crc32s(records), disk_records.crc32s(records))


def test_index_against_a_dict_model(tmp_path):
    """Many small and large batches of writes (with repeats) and removes
    across the index's merge points: every query agrees with a dict model,
    keys come back sorted, and live bytes match the model."""
    rng = np.random.default_rng(11)
    tier = tier_in([tmp_path], file_bytes=RECORD * 3000)
    model = {}
    for step in range(60):
        size = int(rng.choice([1, 5, 50, 700, 6000]))
        keys = rng.integers(-20_000, 20_000, size=size)
        if step % 4 == 3:
            tier.remove(keys)
            for key in keys.tolist():
                model.pop(key, None)
        else:
            data = rows(keys, salt=step)
            tier.write(*data)
            for i, key in enumerate(keys.tolist()):
                model[key] = (int(data[3][i]), int(data[4][i]))
        want = np.array(sorted(model), dtype=np.int64)
        np.testing.assert_array_equal(tier.keys(), want)
        assert len(tier) == len(model)
        assert tier.stats["disk_live_bytes"] == len(model) * RECORD
        probe = rng.integers(-20_000, 20_000, size=200)
        np.testing.assert_array_equal(tier.contains(probe), [key in model for key in probe.tolist()])
        if len(want):
            sample = rng.choice(want, size=min(300, len(want)))
            got = tier.read(sample)
            np.testing.assert_array_equal(got[2], [model[k][0] for k in sample.tolist()])
            np.testing.assert_array_equal(got[3], [model[k][1] for k in sample.tolist()])
    tier.verify()
    assert tier.stats["compactions"] > 0
    missing = max(model, default=0) + 1
    with pytest.raises(KeyError, match=f"key {missing} is not on disk"):
        tier.read([min(model), missing, missing + 1])
    keys = tier.keys()
    keys[:] = 0  # the caller's copy, not the index
    assert len(np.unique(tier.keys())) == len(model)


def test_tier_6_take_reads_and_forgets_the_keys_on_disk_in_one_search(tmp_path):
    tier = tier_in([tmp_path], compact_ratio=1.0)
    tier.write(*rows([5, 1, 9, 3]))
    taken, values, slots, counts, last_seen = tier.take(np.array([9, 7, 1, -1]))   # absent keys ignored
    assert taken.tolist() == [1, 9] and tier.keys().tolist() == [3, 5]
    _, want_values, want_slots, want_counts, want_seen = rows([1, 9])
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(slots, want_slots)
    assert counts.tolist() == want_counts.tolist() and last_seen.tolist() == want_seen.tolist()
    assert tier.take(np.array([7]))[0].tolist() == []
    os.truncate(tmp_path / "t.000000.ssd", RECORD)         # key 3's record is cut off: key 5 stays too
    with pytest.raises(DiskCorruptionError, match="cut short"):
        tier.take(np.array([3, 5]))
    assert tier.keys().tolist() == [3, 5]


@pytest.mark.parametrize("case", [
    test_tier_9_roundtrip_is_bit_exact, test_tier_9_stats_count_records_and_bytes,
    test_tier_9_compaction_past_the_threshold, test_index_against_a_dict_model,
    test_tier_6_take_reads_and_forgets_the_keys_on_disk_in_one_search,
    test_tier_6_record_of_another_key_is_detected, test_tier_6_truncated_file_is_detected,
    lambda tmp_path: test_tier_6_flipped_byte_is_detected(tmp_path, 4),
    lambda tmp_path: test_tier_6_flipped_byte_is_detected(tmp_path, RECORD - 1)])
def test_tier_9_on_the_reference_kernels_reads_and_the_index_behave_alike(tmp_path, monkeypatch, case):
    """TIER-9, TIER-6, TIER-10 on the reference's kernels: reads by pread spans checked by numpy,
    the index searched and merged by numpy -- the same rows, errors and statistics as the mapped
    reads and the C index (the other tests' kernels where the fast path is built)."""
    monkeypatch.setitem(globals(), "KERNELS", RefDiskKernels)
    case(tmp_path)


def test_tier_9_a_mapped_file_that_grows_or_is_cut_short_later_reads_right(tmp_path):
    """TIER-9: the read mapping covers the file's capacity, so records appended after it was made
    read back; a file cut short after it was made raises DiskCorruptionError (the size is checked
    before the mapping is touched), not SIGBUS."""
    tier = tier_in([tmp_path])
    tier.write(*rows([1, 2]))
    assert_rows(tier, *rows([1, 2]))         # the mapping is made here
    tier.write(*rows([3, 4], salt=1))
    assert_rows(tier, *rows([3, 4], salt=1))
    os.truncate(tmp_path / "t.000000.ssd", 2 * RECORD + 5)
    assert_rows(tier, *rows([2]))
    with pytest.raises(DiskCorruptionError, match=f"offset {2 * RECORD} is cut short"):
        tier.read([3])


# ------------------------------------------------- the two backends' kernels, call by call
def _small_delta(kernels):
    """``kernels`` with an index whose delta level merges into main past 4 keys (not 4096), so a
    short sequence crosses many merges."""
    index = type("SmallDeltaIndex", (kernels.index,), {"DELTA_MIN": 4})
    return type(f"SmallDelta{kernels.__name__}", (kernels,), {"index": index})


def _outcome(call):
    """What a call returns, or its error's type and message (folders written as <folder>)."""
    try:
        result = call()
    except (MxrecError, KeyError) as error:
        return type(error).__name__, str(error)
    return "ok", [np.asarray(part).tolist() for part in result] if isinstance(result, tuple) else \
        np.asarray(result).tolist()


def _files_of(folder) -> dict:
    return {name: (folder / name).read_bytes() for name in sorted(os.listdir(folder))}


KEY_LISTS = st.lists(st.integers(-12, 12), max_size=14)
DISK_CALLS = st.lists(st.one_of(
    st.tuples(st.just("write"), KEY_LISTS, st.integers(0, 3)),
    st.tuples(st.sampled_from(["remove", "take", "read", "contains"]), KEY_LISTS, st.just(0)),
    st.tuples(st.sampled_from(["expired"]), st.just([]), st.integers(-20, 60)),
    st.tuples(st.sampled_from(["compact", "verify", "close"]), st.just([]), st.just(0)),
    st.tuples(st.just("corrupt"), st.just([]), st.integers(0, 10**6))), max_size=30)


@pytest.mark.skipif(FastDiskKernels is None, reason="the fast path (mxrec_ref._fast) is not built")
@settings(max_examples=60, deadline=None)
@given(calls=DISK_CALLS, limit=st.sampled_from([None, 40 * RECORD]), budget=st.sampled_from([2, 1 << 16]))
def test_tier_11_the_reference_and_fast_disk_kernels_agree_call_by_call(calls, limit, budget):
    """TIER-11 for the disk tier's kernels: a DiskTier on RefDiskKernels and one on FastDiskKernels
    (index search and merge, checksums, reads) driven through the same calls -- writes with
    repeats, removals, takes, reads of absent keys, eviction queries, compaction, a folder limit,
    bytes corrupted or cut off in a file -- return the same results and errors, hold the same
    index and statistics, and leave byte-identical files."""
    with tempfile.TemporaryDirectory() as root:
        folders = [os.path.join(root, name) for name in ("ref", "fast")]
        tiers = [DiskTier("t", [folder], DIM, SLOTS, kernels=_small_delta(kernels), file_bytes=5 * RECORD,
                          folder_limit_bytes=limit)
                 for folder, kernels in zip(folders, (RefDiskKernels, FastDiskKernels))]
        for tier in tiers:
            tier.compact_budget = budget
        for step, (name, keys, arg) in enumerate(calls):
            keys = np.array(keys, dtype=np.int64)
            if name == "corrupt":      # the same byte of the same file flipped, or the file cut short
                files = sorted(os.listdir(folders[0]))
                if not files:
                    continue
                for folder in folders:
                    path = os.path.join(folder, files[arg % len(files)])
                    size = os.path.getsize(path)
                    if arg % 3 == 0:
                        os.truncate(path, (arg // 3) % (size + 1))
                    elif size:
                        with open(path, "r+b") as file:
                            file.seek(arg % size)
                            byte = file.read(1)
                            file.seek(arg % size)
                            file.write(bytes([byte[0] ^ 0x20]))
                continue
            data = rows(keys, salt=arg + step) if name == "write" else None
            outcomes = [_outcome({"write": lambda: tier.write(*data),
                                  "remove": lambda: tier.remove(keys),
                                  "take": lambda: tier.take(np.unique(keys)),
                                  "read": lambda: tier.read(keys),
                                  "contains": lambda: tier.contains(keys),
                                  "expired": lambda: tier.expired(arg),
                                  "compact": tier.compact, "verify": tier.verify, "close": tier.close}[name])
                        for tier in tiers]
            ref, fast = (outcome if outcome[0] == "ok" else (outcome[0], outcome[1].replace(folder, "<folder>"))
                         for outcome, folder in zip(outcomes, folders))
            assert ref == fast, (step, name)
            assert tiers[0].stats == tiers[1].stats, (step, name)
            np.testing.assert_array_equal(tiers[0].keys(), tiers[1].keys())
            assert tiers[0].index_bytes() == tiers[1].index_bytes()
            assert _files_of(Path(folders[0])) == _files_of(Path(folders[1])), (step, name)
        for tier in tiers:
            tier.clear()
