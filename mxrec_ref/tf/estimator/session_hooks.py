"""The Estimator's own session hooks: stopping evaluation after ``steps`` batches (EST-5)."""
from __future__ import annotations

import tensorflow as tf


class StopAfterNEvalsHook(tf.compat.v1.train.SessionRunHook):
    """Requests a stop after ``num_evals`` runs (None: run until the input ends)."""

    def __init__(self, num_evals):
        self._num_evals = num_evals
        self.evals_completed = 0

    def after_run(self, run_context, run_values):
        self.evals_completed += 1
        if self._num_evals is not None and self.evals_completed >= self._num_evals:
            run_context.request_stop()
