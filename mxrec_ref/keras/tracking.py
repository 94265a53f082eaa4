"""An ``Embedding``'s table in TF and Keras checkpoints (KERAS-7, KERAS-8).

The table is saved in the project's checkpoint format (CKPT-*): the store
writes its folder (``store.save``) into a private temporary folder, and the
folder's files -- manifest with checksums included -- travel inside the TF
checkpoint (``tf.train.Checkpoint``: two string tensors) or the Keras weights
file (``save_weights``, ``model.save``, ``ModelCheckpoint``: one uint8 array per
file).  Restoring writes the files back into a temporary folder and calls
``store.load``, which verifies them in full before anything changes (CKPT-5),
so values, optimizer slots, counts, last-seen times, pending history and the
clock come back bit for bit.  The TF checkpoint itself is written atomically by
TF (its ``checkpoint`` state file names a save only once it is complete).
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import tensorflow as tf
from tensorflow.python.saved_model import save_context   # no public API tells a SavedModel save from a checkpoint

from ..checksum import crc32
from ..errors import CheckpointError, UsageError

PATHS = "table_files"          # tensor / entry names
CONTENTS = "table_contents"
LOOKUPS = "train_lookups_run"
LOOKUPS_CRC = "train_lookups_run_crc32"     # Keras weights files only: TF checkpoints checksum every tensor


class TableCheckpoint(tf.__internal__.tracking.Trackable):
    """The checkpointable state of one ``Embedding``'s table."""

    def __init__(self, layer):
        self._layer = layer

    # ---------------------------------------------------------- the files
    def files(self) -> tuple[list[str], list[bytes]]:
        """(relative paths, contents) of the table's checkpoint folder, sorted."""
        store = self._layer.store
        with tempfile.TemporaryDirectory(prefix="mxrec-keras-") as folder:
            table_folder = Path(store.save(folder))
            paths = sorted(str(p.relative_to(folder)) for p in table_folder.rglob("*") if p.is_file())
            return paths, [(Path(folder) / p).read_bytes() for p in paths]

    def load_files(self, paths, contents, train_lookups_run) -> None:
        """Load the table from its folder's files (validated by ``store.load`` first)."""
        with tempfile.TemporaryDirectory(prefix="mxrec-keras-") as folder:
            root = Path(folder).resolve()
            for path, content in zip(paths, contents):
                target = (root / path).resolve()
                if root not in target.parents:
                    raise ValueError(f"table {self._layer.table_name!r}: checkpoint: file path {path!r} leaves "
                                     f"the table folder")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
            self._layer.store.load(folder)
        self._layer.train_lookups_run = int(train_lookups_run)

    # ------------------------------------------------- tf.train.Checkpoint
    def _serialize_to_tensors(self):
        if save_context.in_save_context():
            raise UsageError(f"table {self._layer.table_name!r}: tf.saved_model.save: a SavedModel of an Embedding "
                             f"would call back into this Python process (a PyFunc) and fail to load elsewhere; "
                             f"export it with mxrec_ref.keras.export_saved_model(model, path) (KERAS-9), and "
                             f"checkpoint it with tf.train.Checkpoint or model.save('m.keras')")
        def files():
            paths, contents = self.files()
            return (tf.constant(paths, tf.string), tf.constant(contents, tf.string),
                    tf.constant(self._layer.train_lookups_run, tf.int64))

        if tf.executing_eagerly():
            paths, contents, lookups = files()
        else:      # traced (e.g. a checkpoint saved inside tf.function): read the table when the graph runs
            paths, contents, lookups = tf.py_function(files, [], [tf.string, tf.string, tf.int64])
        return {PATHS: paths, CONTENTS: contents, LOOKUPS: lookups}

    def _restore_from_tensors(self, restored_tensors):
        def load(paths, contents, lookups):
            self.load_files([p.decode() for p in paths.numpy()], list(contents.numpy()), int(lookups.numpy()))
            return tf.constant(True)

        if tf.executing_eagerly():
            load(restored_tensors[PATHS], restored_tensors[CONTENTS], restored_tensors[LOOKUPS])
            return tf.no_op()
        return tf.py_function(load, [restored_tensors[PATHS], restored_tensors[CONTENTS],
                                     restored_tensors[LOOKUPS]], tf.bool)

    # ------------------------------------------------------ Keras weights
    def save_to_keras_store(self, store) -> None:
        paths, contents = self.files()
        lookups = self._layer.train_lookups_run
        store[PATHS] = np.frombuffer(json.dumps(paths).encode(), dtype=np.uint8)
        store[LOOKUPS] = np.asarray([lookups], dtype=np.int64)
        store[LOOKUPS_CRC] = np.asarray([_lookups_crc(lookups, paths, contents)], dtype=np.int64)
        for index, content in enumerate(contents):
            store[f"file{index}"] = np.frombuffer(content, dtype=np.uint8)

    def load_from_keras_store(self, store) -> None:
        paths = json.loads(bytes(np.asarray(store[PATHS], dtype=np.uint8)).decode())
        contents = [bytes(np.asarray(store[f"file{index}"], dtype=np.uint8)) for index in range(len(paths))]
        self.load_files(paths, contents, self._checked_lookups(store, paths, contents))

    def _checked_lookups(self, store, paths, contents) -> int:
        """The count of training lookups of a Keras weights file, refused unless it is one non-negative
        int64 whose CRC-32 (bound to the table's manifest) matches: the file format has no checksums of
        its own, and the count becomes the table's step (KERAS-8)."""
        where = f"table {self._layer.table_name!r}: checkpoint: Keras weights entry {LOOKUPS!r}"
        saved = np.asarray(store[LOOKUPS])
        if saved.shape != (1,) or saved.dtype != np.int64 or int(saved[0]) < 0:
            raise CheckpointError(f"{where}: must be one non-negative int64, got {saved.dtype} {saved.tolist()}")
        lookups = int(saved[0])
        if LOOKUPS_CRC not in store:
            raise CheckpointError(f"{where}: its checksum {LOOKUPS_CRC!r} is missing (written by an mxrec-ref "
                                  f"version that did not check it; restore the model from a tf.train.Checkpoint, "
                                  f"whose tensors TF checksums)")
        crc = np.asarray(store[LOOKUPS_CRC])
        if crc.shape != (1,) or int(crc[0]) != _lookups_crc(lookups, paths, contents):
            raise CheckpointError(f"{where}: {lookups} does not match its checksum {LOOKUPS_CRC!r}: the file is "
                                  f"corrupted")
        return lookups


def _lookups_crc(lookups: int, paths: list[str], contents: list[bytes]) -> int:
    """CRC-32 of the count's 8 little-endian bytes, chained over the table's manifest (which holds
    every file's checksum), so the count checks out only beside the table it was saved with."""
    manifest = next((content for path, content in zip(paths, contents) if path.endswith("manifest.json")), b"")
    return crc32(manifest, crc32(int(lookups).to_bytes(8, "little", signed=True)))


