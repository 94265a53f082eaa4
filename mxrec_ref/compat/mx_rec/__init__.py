"""``mx_rec``: mxRec's import paths over mxrec-ref, so scripts written for
mxRec run unchanged (``from mx_rec.core.embedding import create_table`` ...).

Every module here only re-exports names of ``mxrec_ref.tf``."""
from mxrec_ref import __version__

from .util import log as _log  # noqa: F401  (the console handler, as mxRec logs)


def version() -> str:
    return __version__
