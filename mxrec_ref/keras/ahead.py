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
from ..tf.key_pipeline import map_resolving_ahead
from . import ids as ids_module
from .layer import Embedding


def _layers_of(feature, value) -> list[Embedding]:
    layers = list(value) if isinstance(value, (list, tuple)) else [value]
    for layer in layers:
        if not isinstance(layer, Embedding):
            raise UsageError(f"resolve_keys_ahead: layers: feature {feature!r} maps to {type(layer).__name__}; "
                             f"expected mxrec_ref.keras.Embedding layers")
    return layers


def _layer_keys(layer: Embedding, ids) -> tf.Tensor:
    """The keys the layer's lookup passes its store (``Embedding.call``)."""
    return ids_module.flatten(layer.table_name, ids, layer.config.key_dtype, layer.combiner)[0]


def resolve_keys_ahead(dataset: tf.data.Dataset, layers) -> tf.data.Dataset:
    """``dataset`` (the training data for ``model.fit``: elements ``x``, ``(x, y)`` or ``(x, y, sample_weight)``)
    mapped so that each batch's ids for the given ``Embedding`` layers are resolved ahead while the previous
    step trains (PIPE-9).  ``layers``: ``{feature: layer}`` (or a list of layers looking the feature up),
    ``feature`` the key of ``x``'s dict, a position in its tuple, or None when ``x`` is one tensor; list a
    layer called on several features in the order the model calls it.  The elements come out unchanged.

    With the key pipeline off (``MXREC_KEY_PIPELINE``, PIPE-7) when this is called the dataset is returned
    as it is; on, the switch is read again for every batch.  Map only the training data: evaluation and
    prediction lookups take nothing."""
    if not isinstance(layers, dict) or not layers:
        raise UsageError("resolve_keys_ahead: layers: must be a non-empty dict {feature: Embedding layer}")
    owners = [(feature, layer) for feature, value in layers.items() for layer in _layers_of(feature, value)]
    return map_resolving_ahead(dataset, owners, _layer_keys, "resolve_keys_ahead: layers")
