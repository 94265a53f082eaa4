"""``resolve_keys_ahead``: the key pipeline for ``model.fit`` on a tf.data dataset (spec/pipeline.md, PIPE-9).

A Keras user hands ``fit`` their own dataset, so there is no insert function to put the key work in;
``resolve_keys_ahead(dataset, {feature: layer})`` maps the dataset so that each batch's keys for each
``Embedding`` -- the same flat int64 keys the layer's lookup will pass its store (``ids.flatten``: ragged
and sparse values, hashed strings, uint64 checked) -- are resolved ahead in tf.data's map
(``Store.resolve_ahead``) and queued at the layer, whose training lookup takes the batch of exactly
those keys and gathers it (``Store.gather``), as a ``SparseTable`` does (tf/key_pipeline.py).  A
lookup whose keys match no queued batch (ids changed after the map, another dataset) is the plain
lookup, so the mapping can only change the speed, never a result.
"""
from __future__ import annotations

import tensorflow as tf

from ..errors import UsageError
from ..pipeline import enabled_by_default
from ..tf.key_pipeline import in_input_pipeline
from . import ids as ids_module
from .layer import Embedding


def _layers_of(feature, value) -> list[Embedding]:
    layers = list(value) if isinstance(value, (list, tuple)) else [value]
    for layer in layers:
        if not isinstance(layer, Embedding):
            raise UsageError(f"resolve_keys_ahead: layers: feature {feature!r} maps to {type(layer).__name__}; "
                             f"expected mxrec_ref.keras.Embedding layers")
    return layers


def _feature(x, feature, table: str):
    """The ids of ``feature`` in a batch's inputs ``x`` (None: ``x`` is the one input tensor)."""
    if feature is None:
        return x
    try:
        return x[feature]
    except (KeyError, IndexError, TypeError):
        names = sorted(map(str, x)) if isinstance(x, dict) else (f"positions 0..{len(x) - 1}"
                                                                 if isinstance(x, (list, tuple)) else "one tensor")
        raise UsageError(f"table {table!r}: resolve_keys_ahead: layers: the dataset's inputs have no feature "
                         f"{feature!r} (they have {names})") from None


def resolve_keys_ahead(dataset: tf.data.Dataset, layers) -> tf.data.Dataset:
    """``dataset`` (the training data for ``model.fit``: elements ``x``, ``(x, y)`` or ``(x, y, sample_weight)``)
    mapped so that each batch's ids for the given ``Embedding`` layers are resolved ahead while the previous
    step trains (PIPE-9).  ``layers``: ``{feature: layer}`` (or a list of layers looking the feature up),
    ``feature`` the key of ``x``'s dict, a position in its tuple, or None when ``x`` is one tensor; list a
    layer called on several features in the order the model calls it.  The elements come out unchanged.

    With the key pipeline off (``MXREC_KEY_PIPELINE``, PIPE-7) when this is called the dataset is returned
    as it is; on, the switch is read again for every batch.  Map only the training data: evaluation and
    prediction lookups take nothing."""
    if not isinstance(dataset, tf.data.Dataset):
        raise UsageError(f"resolve_keys_ahead: dataset: must be a tf.data.Dataset, got {type(dataset).__name__}")
    if not isinstance(layers, dict) or not layers:
        raise UsageError("resolve_keys_ahead: layers: must be a non-empty dict {feature: Embedding layer}")
    pairs = [(feature, layer) for feature, value in layers.items() for layer in _layers_of(feature, value)]
    if not enabled_by_default():
        return dataset

    is_tuple = isinstance(dataset.element_spec, tuple)   # tf.data passes a tuple's entries as arguments

    @tf.autograph.experimental.do_not_convert     # plain Python: a UsageError reaches the caller as it is
    def resolve(*element):
        x = element[0]         # keras.utils.unpack_x_y_sample_weight: a tuple's first entry, else the element
        done = []
        for feature, layer in pairs:
            keys, _ = ids_module.flatten(layer.table_name, _feature(x, feature, layer.table_name),
                                         layer.config.key_dtype, layer.combiner)
            done.append(in_input_pipeline(layer, keys))
        with tf.control_dependencies(done):       # the resolves run before the batch leaves the map
            element = tf.nest.map_structure(tf.identity, element, expand_composites=True)
        return tuple(element) if is_tuple else element[0]

    return dataset.map(resolve).prefetch(1)       # the next batch is resolved while the current step trains
