"""Opening the SSD tier's folders (spec/tiers.md, TIER-9): every parameter checked and every
folder made usable before the tier writes a byte, so a wrong option fails when the store opens
(a ConfigError naming the table and the parameter), not at the first spill.
"""
from __future__ import annotations

import errno
import os
import re

import numpy as np

from ..config import check_table_name
from ..errors import ConfigError


def config_error(table, parameter: str, message: str) -> ConfigError:
    return ConfigError(f"table {table!r}: {parameter}: {message}")


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_config(table, folders, dim, n_slots, folder_limit_bytes, compact_ratio, fault_hook, file_bytes):
    """Every parameter, before anything touches the disk; returns the folders as a tuple of str."""
    check_table_name(table)
    if isinstance(folders, (str, os.PathLike)):
        folders = (folders,)
    folders = tuple(os.fspath(folder) for folder in folders)
    if not folders or any(not folder for folder in folders):
        raise config_error(table, "ssd_data_path", f"must name at least one folder, got {folders!r}")
    if len({os.path.realpath(folder) for folder in folders}) != len(folders):
        raise config_error(table, "ssd_data_path", f"names a folder twice: {folders!r}")
    for folder in folders:
        if os.path.exists(folder) and not os.path.isdir(folder):
            raise config_error(table, "ssd_data_path", f"{folder!r} is not a folder")
    if not _is_int(dim) or dim < 1:
        raise config_error(table, "dim", f"must be an integer >= 1, got {dim!r}")
    if not _is_int(n_slots) or n_slots < 0:
        raise config_error(table, "n_slots", f"must be an integer >= 0, got {n_slots!r}")
    if folder_limit_bytes is not None and (not _is_int(folder_limit_bytes) or folder_limit_bytes <= 0):
        raise config_error(table, "folder_limit_bytes",
                           f"must be None or an integer > 0, got {folder_limit_bytes!r}")
    if isinstance(compact_ratio, bool) or not isinstance(compact_ratio, (int, float)) or not 0 < compact_ratio <= 1:
        raise config_error(table, "compact_ratio", f"must be a number in (0, 1], got {compact_ratio!r}")
    if fault_hook is not None and not callable(fault_hook):
        raise config_error(table, "fault_hook", f"must be None or callable, got {fault_hook!r}")
    if not _is_int(file_bytes) or file_bytes <= 0:
        raise config_error(table, "file_bytes", f"must be an integer > 0, got {file_bytes!r}")
    return folders


def check_no_files(table: str, folders: tuple) -> None:
    """mxRec refuses SSD files that exist before the table opens: they would
    be another run's rows, and this tier deletes the files it owns."""
    pattern = re.compile(re.escape(table) + r"\.\d+\.ssd")
    for folder in folders:
        if not os.path.isdir(folder):
            continue
        found = sorted(name for name in os.listdir(folder) if pattern.fullmatch(name))
        if found:
            raise config_error(table, "ssd_data_path",
                               f"SSD file {os.path.join(folder, found[0])!r} already exists; the table's SSD files "
                               "must not exist when it opens: remove them or choose another folder")


def make_folders(table: str, folders: tuple) -> None:
    """Create the folders and check that the tier may write there (a read-only folder, one under
    ``/proc``, ...): the ConfigError names ``ssd_data_path`` and the folder."""
    for folder in folders:
        try:
            os.makedirs(folder, exist_ok=True)
            if not os.access(folder, os.W_OK | os.X_OK):
                raise PermissionError(errno.EACCES, "not writable", folder)
        except OSError as error:
            raise config_error(table, "ssd_data_path", f"cannot use folder {folder!r}: "
                                                       f"{error.strerror or error}") from error
