"""The on-disk table format, shared by every backend (spec/checkpoint.md).

mxRec's sparse layout (reference section 3), one folder per table::

    <dir>/<table>/key/slice.data              int64 [n] ascending keys
    <dir>/<table>/key/slice.attribute         int64 [n, 8]
    <dir>/<table>/embedding/slice.data        float32 [n, dim], row i belongs to key i
    <dir>/<table>/embedding/slice.attribute   int64 [n, dim, 4]
    <dir>/<table>/<Kind>_<slot>/slice.*       optimizer slots, same shape as embedding
    <dir>/<table>/feat_info/slice.data        int64 [n + m, 3]: (key, count, last_seen),
                                              the n admitted keys then the m pending ones
    <dir>/<table>/meta.json                   table name, dim, key dtype, optimizer,
                                              clock, format version
    <dir>/<table>/manifest.json               every file's size and CRC-32, written last

One module per job:

- ``format``: the layout above -- file names, dtypes, attributes, ``meta.json``, ``manifest.json``.
- ``files``: a file written or read in pieces, each CRC-32 taken in the same pass (CKPT-12); only
  regular files are read (CKPT-13).
- ``folder``: the folder protocol -- temporary folder, fsyncs, the atomic switch, stale-folder cleanup,
  finding one complete version to read (CKPT-4, CKPT-8, CKPT-10, CKPT-11, CKPT-14).
- ``faults``: the fault points the crash tests kill a save at (CKPT-8).
- ``checks``: CKPT-5's checks, written once, applied to a whole table or a chunk at a time.
- ``writer``: ``write_table`` and the streaming ``TableWriter``; ``reader``: ``read_table``;
  ``stream``: the streaming ``TableReader`` and ``read_owned`` (a rank's keys, SHARD-11).
- ``delta``: incremental checkpoints (CKPT-9).

``fault_hook`` and ``use_exchange`` are settings of the package: assigning them here sets them where
the protocol reads them (``faults``, ``folder``).
"""
from __future__ import annotations

import sys
import types

from . import faults, folder
from .checks import KeyChecks, check_meta, corrupt, read_meta
from .delta import check_delta_target, delta_bases, delta_between, saved_optimizer
from .faults import fault_point
from .files import (FileReader, FileWriter, NotRegularFile, fsync_directory, open_regular, read_at, read_regular,
                    write_file, write_in_parallel)
from .folder import (Vanished, checked_directory, io_errors, list_tables, logger, prepare_save, read_one_version,
                     remove_stale_temporaries, switch, table_target, temporary_folder, write_file_atomically)
from .format import (CHUNK_BYTES, FORMAT_VERSION, IO_THREADS, MANIFEST, MAX_DELTA_CHAIN, META, READ_ATTEMPTS,
                     TABLE_THREADS, Slice, manifest_bytes, meta_bytes, table_meta, table_slices)
from .reader import read_chain, read_table, read_verified_files, read_version
from .stream import Keep, TableReader, VersionTally, read_owned
from .writer import TableWriter, save_state, write_state_files, write_table

_SETTINGS = {"fault_hook": faults, "use_exchange": folder}     # package settings and the module that reads each


class _Package(types.ModuleType):
    """Forwards an assignment of a setting (``checkpoint.fault_hook = ...``) to the module that reads it,
    and keeps the value here too, so reading it (or pytest's monkeypatch undoing it) sees the same."""

    def __setattr__(self, name, value):
        if name in _SETTINGS:
            setattr(_SETTINGS[name], name, value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
fault_hook = faults.fault_hook
use_exchange = folder.use_exchange
