"""``mx_rec.util`` re-exports what mxRec's does (scripts write ``mx_rec.util.init`` or
``mxrec_util.communication.hccl_ops.get_rank_id()`` after ``import mx_rec.util as mxrec_util``)."""
from . import communication  # noqa: F401
from .communication import hccl_ops  # noqa: F401
from .initialize import ConfigInitializer, init, terminate_config_initializer  # noqa: F401
from .ops import import_host_pipeline_ops  # noqa: F401
from .tf_version_adapter import NPUCheckpointSaverHook, npu_ops  # noqa: F401
from .variable import get_dense_and_sparse_variable  # noqa: F401
