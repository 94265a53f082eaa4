"""Reading records back from the SSD tier's files (spec/tiers.md, TIER-6, TIER-9): the reference's
reader, ``pread`` and numpy.  Its fast twin ``FastRecordReader`` (mxrec_ref/fast/disk.py) copies the
records out of a mapping of the file and checks them in one C loop; both return the same records
and raise the same errors, with the same statistics.
"""
from __future__ import annotations

import os

import numpy as np

from .disk_records import RecordFormat, corruption

# Records of one file closer than this are fetched by one pread, gap and all:
# fewer system calls for a few wasted bytes (a page: a step's cold rows are
# scattered, and a wider gap read up to 80x the bytes it needed).
SPAN_GAP_BYTES = 4 << 10


class RecordReader:
    """Reads a file's records at given offsets by one ``os.pread`` per span of nearby records, then
    checks them (``RecordFormat.check``).  ``capacity``: a file's bytes at most (the fast twin maps it
    whole; unused here)."""

    def __init__(self, form: RecordFormat, capacity: int):
        self.form = form

    def read(self, file, fd: int, offsets: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, int]:
        """(the checked records at ``offsets`` (sorted) of ``file``, open as ``fd``, expected to
        hold ``keys``; the bytes of those records)."""
        size = self.form.size
        parts = []
        for span in np.split(offsets, np.flatnonzero(np.diff(offsets) - size > SPAN_GAP_BYTES) + 1):
            start, stop = int(span[0]), int(span[-1]) + size
            try:
                data = os.pread(fd, stop - start, start)
            except OSError as error:
                raise corruption(self.form.table, file.path, start, f"cannot be read ({error})") from error
            if len(data) < stop - start:
                cut = int(span[np.searchsorted(span + size, start + len(data), side="right")])
                raise corruption(self.form.table, file.path, cut, "is cut short: the file ends before the record does")
            rows = np.frombuffer(data, np.uint8).reshape(-1, size)  # as bytes: whole records move at once
            parts.append(rows if len(rows) == len(span) else rows[(span - start) // size])
        # The records' bytes count as read (TIER-10), not the gaps between them, as the fast twin counts.
        records = (parts[0] if len(parts) == 1 else np.concatenate(parts)).view(self.form.dtype).reshape(-1)
        self.form.check(file.path, offsets, keys, records)
        return records, len(offsets) * size

    def forget(self, fid: int) -> None:
        """The file is gone or its descriptor closed: nothing is kept per file here."""

    def clear(self) -> None:
        """Every descriptor was closed: nothing is kept per file here."""
