"""mxRec's collection names and limits (mx_rec.constants.constants)."""
from enum import Enum

ASCEND_GLOBAL_HASHTABLE_COLLECTION = "ASCEND_GLOBAL_HASHTABLE_COLLECTION"
ASCEND_SPARSE_LOOKUP_ENTRANCE = "ASCEND_SPARSE_LOOKUP_ENTRANCE"
ASCEND_SPARSE_LOOKUP_LOCAL_EMB = "ASCEND_SPARSE_LOOKUP_LOCAL_EMB"
ASCEND_SPARSE_LOOKUP_ID_OFFSET = "ASCEND_SPARSE_LOOKUP_ID_OFFSET"
ASCEND_TIMESTAMP = "ASCEND_TIMESTAMP"
ASCEND_CUTTING_POINT_INITIALIZER = "ASCEND_CUTTING_POINT_INITIALIZER"
MULTI_LOOKUP_TIMES = 128
MAX_VOCABULARY_SIZE = 10**9
MAX_INT32 = 2**31 - 1
DEFAULT_EVICT_TIME_INTERVAL = 86400
TRAIN_CHANNEL_ID = 0
EVAL_CHANNEL_ID = 1
BACKEND_ENV = "MXREC_REF_BACKEND"  # the backend when init() is given none

# Environment variables mxRec reads that have no meaning on one CPU process (NPU
# channels, host thread pools, shared memory): accepted and logged once.
IGNORED_ENV = {
    "KEY_PROCESS_THREAD_NUM": "host key-processing threads: the store is one call per table and step",
    "FAST_UNIQUE": "NPU unique kernel: the store deduplicates keys itself",
    "MAX_UNIQUE_THREAD_NUM": "host unique thread pool: the store deduplicates keys itself",
    "HD_CHANNEL_SIZE": "host-to-device channel depth: no device channel on a CPU",
    "SSD_SAVE_COMPACT_LEVEL": "SSD save compaction level: the SSD tier compacts by its own rule (spec/tiers.md)",
    "USE_SHM_SWAP": "shared-memory DDR swap: the host tier lives in this process",
    "RECORD_KEY_COUNT": "key-count recording for delta checkpoints: not implemented",
    "AclTimeout": "Ascend ACL timeout: no Ascend runtime",
    "USE_COMBINE_FAAE": "pools every table's admission history into one in mxRec; mxrec-ref keeps one history per "
                        "table (ADM rules), so each table admits on its own counts",
}


class BaseEnum(Enum):
    """mxRec's enum base: ``mapping(value)`` returns the member with that value."""

    @classmethod
    def mapping(cls, key):
        for member in cls:
            if member.value == key:
                return member
        raise KeyError(f"Cannot find a corresponding mode in current Enum class {cls.__name__}, "
                       f"given parameter '{key}'.")


class All2allGradientsOp(BaseEnum):
    SUM_GRADIENTS = "sum_gradients"
    SUM_GRADIENTS_AND_DIV_BY_RANKSIZE = "sum_gradients_and_div_by_ranksize"

# mxRec's custom-op libraries (``import_host_pipeline_ops(so_name)`` takes these names); no
# library is loaded here: the names only let scripts pass them (TF-32).
LIBASC_OPS_SO = "libasc_ops.so"
LIBREC_TF_NPU_OPS_SO = "librecsdk_tf_npu_ops.so"
LIBREC_TF_REC_V1_CPU_SO = "librecsdk_tf_rec_v1_cpu_ops.so"
LIBREC_EOS_OPS_SO = "librec_eos_ops.so"
GET_CONFIG_INSTANCE_ERR_MSG = "Please init the environment for mx_rec at first."
MAX_DEVICE_VOCABULARY_SIZE = 10**9
