"""``import_host_pipeline_ops()`` returns an object with mxRec's CPU ops that mxrec-ref provides."""
from types import SimpleNamespace

from mxrec_ref.tf import set_threshold


def import_host_pipeline_ops(so_name=None):
    return SimpleNamespace(set_threshold=set_threshold)
