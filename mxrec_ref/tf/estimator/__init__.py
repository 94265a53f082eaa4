"""An Estimator for TensorFlow 2.21 with ``tf.estimator``'s API (spec/estimator.md).

TensorFlow removed ``tf.estimator`` in 2.16 and the last ``tensorflow-estimator`` release (2.15.0)
does not import on 2.21, so mxRec's Estimator scripts need one written for this project.  It is
built on TF's own ``tf.compat.v1`` pieces: ``MonitoredTrainingSession``/``MonitoredSession``,
``Scaffold``, the session hooks and ``tf.compat.v1.metrics``.  ``install_into_tensorflow()`` makes
it ``tf.estimator`` for a process (``mxrec-ref run`` does it).
"""
import sys

import tensorflow as tf

from . import export, install
from .estimator import Estimator
from .install import installed, uninstall_from_tensorflow
from .mode_keys import ModeKeys
from .run_config import RunConfig
from .spec import EstimatorSpec
from .training import EvalSpec, TrainSpec, train_and_evaluate
from ..warm_start import WarmStartSettings

# the session-hook names tf.estimator exported (TF's own classes, from tf.compat.v1.train)
_train = tf.compat.v1.train
SessionRunHook = _train.SessionRunHook
SessionRunArgs = _train.SessionRunArgs
SessionRunContext = _train.SessionRunContext
SessionRunValues = _train.SessionRunValues
CheckpointSaverHook = _train.CheckpointSaverHook
CheckpointSaverListener = _train.CheckpointSaverListener
FeedFnHook = _train.FeedFnHook
FinalOpsHook = _train.FinalOpsHook
GlobalStepWaiterHook = _train.GlobalStepWaiterHook
LoggingTensorHook = _train.LoggingTensorHook
NanLossDuringTrainingError = _train.NanLossDuringTrainingError
NanTensorHook = _train.NanTensorHook
ProfilerHook = _train.ProfilerHook
SecondOrStepTimer = _train.SecondOrStepTimer
StepCounterHook = _train.StepCounterHook
StopAtStepHook = _train.StopAtStepHook
SummarySaverHook = _train.SummarySaverHook
VocabInfo = _train.VocabInfo
del _train


def install_into_tensorflow() -> None:
    """``tf.estimator``, ``tf.compat.v1.estimator`` and ``import tensorflow.estimator`` resolve to this
    package for the rest of the process (EST-9); idempotent.  ``mxrec-ref run`` calls it."""
    install.install_into_tensorflow(sys.modules[__name__])

__all__ = ["Estimator", "EstimatorSpec", "EvalSpec", "ModeKeys", "RunConfig", "TrainSpec", "WarmStartSettings",
           "VocabInfo", "train_and_evaluate", "export", "install_into_tensorflow", "uninstall_from_tensorflow",
           "installed", "SessionRunHook", "SessionRunArgs", "SessionRunContext", "SessionRunValues",
           "CheckpointSaverHook", "CheckpointSaverListener", "FeedFnHook", "FinalOpsHook", "GlobalStepWaiterHook",
           "LoggingTensorHook", "NanLossDuringTrainingError", "NanTensorHook", "ProfilerHook", "SecondOrStepTimer",
           "StepCounterHook", "StopAtStepHook", "SummarySaverHook"]
