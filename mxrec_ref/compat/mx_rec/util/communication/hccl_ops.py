"""mxRec's ``hccl_ops``: the rank queries and collectives, on MPI when a launcher started the job
(spec/sharding.md, SHARD-13, SHARD-14); rank 0 of 1 otherwise."""
from mxrec_ref.tf.distributed import allgather, allreduce, broadcast  # noqa: F401
from mxrec_ref.tf.distributed import device_id as get_device_id  # noqa: F401
from mxrec_ref.tf.distributed import local_rank_size as get_local_rank_size  # noqa: F401
from mxrec_ref.tf.distributed import rank_id as get_rank_id  # noqa: F401
from mxrec_ref.tf.distributed import rank_size as get_rank_size  # noqa: F401
