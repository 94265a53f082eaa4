"""Exceptions raised by stores.

Every error names the table and the parameter at fault, and is raised before
any state changes (spec/contract.md, CON-4).  The classes subclass the
built-in exception a Python user would catch anyway (ValueError, TypeError,
RuntimeError, FileNotFoundError), so mxRec-style ``except ValueError`` code
keeps working.
"""
import unittest


class MxrecError(Exception):
    """Base class of every mxrec-ref error."""


class ConfigError(MxrecError, ValueError):
    """A table or optimizer configuration is invalid (spec/config.md)."""


class KeyInputError(MxrecError, TypeError):
    """Keys of the wrong type, dtype or range (spec/contract.md, CON-2)."""


class GradientError(MxrecError, ValueError):
    """Gradient rows of the wrong shape or with non-finite values (OPT-2)."""


class CapacityError(MxrecError, RuntimeError):
    """A fixed-capacity table would overflow (spec/expansion.md, EXP-3)."""


class CheckpointError(MxrecError, ValueError):
    """A checkpoint is missing, malformed or does not match the table (CKPT-*)."""


class UsageError(MxrecError, ValueError):
    """A call that is valid in form but not in this store's state (e.g. evict on
    a table without eviction, mixing step and timestamp clocks)."""


class DiskFullError(MxrecError, OSError):
    """An SSD-tier write did not fit (every folder at its limit, or the system
    reported the disk full); the files and the index are as they were (TIER-7)."""


class DiskCorruptionError(MxrecError, OSError):
    """An SSD-tier record failed its checksum, holds another key or is cut
    short; the message names the file and the offset (TIER-6)."""


class NotSupported(unittest.SkipTest):
    """A backend cannot express the rule a call needs (spec/contract.md, CON-11): e.g. a third-party
    store without count-based admission asked for an ``access_threshold``.  Deliberately not an
    ``MxrecError``: it is no answer of the store's, and the conformance suite reports the rule as n/a.
    A ``unittest.SkipTest`` so that test runners skip at once: hypothesis re-raises it without
    shrinking, pytest and unittest report a skip."""


class BackendFailure(RuntimeError):
    """A backend in another process died or broke its protocol (spec/backends.md, BE-3); the store
    is unusable from then on.  Not an ``MxrecError`` either: no rule allows it."""
