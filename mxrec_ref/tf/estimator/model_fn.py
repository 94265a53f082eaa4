"""Calling a model function with the arguments it names (tf.estimator's rule, EST-1): ``features``
is required; ``labels``, ``mode``, ``params`` and ``config`` are passed when the function takes them."""
from __future__ import annotations

import functools
import inspect

from .spec import EstimatorSpec

OPTIONAL_ARGS = ("labels", "mode", "params", "config")


def model_fn_args(model_fn) -> tuple[str, ...]:
    """The argument names of ``model_fn`` (a function, a bound method, a partial or a callable object)."""
    if isinstance(model_fn, functools.partial):
        bound = set(model_fn.keywords or {})
        return tuple(a for a in model_fn_args(model_fn.func)[len(model_fn.args):] if a not in bound)
    target = model_fn if inspect.isfunction(model_fn) or inspect.ismethod(model_fn) else \
        getattr(model_fn, "__call__", model_fn)
    return tuple(inspect.signature(target).parameters)


def check_model_fn(model_fn, params) -> None:
    """Raise at construction, as TF does, when ``model_fn`` cannot be called."""
    if not callable(model_fn):
        raise ValueError(f"Estimator: model_fn: must be callable, got {model_fn!r}")
    args = model_fn_args(model_fn)
    if "features" not in args:
        raise ValueError(f"Estimator: model_fn: must take an argument named 'features' (it takes {list(args)})")
    if params and "params" not in args:
        raise ValueError("Estimator: params: model_fn takes no 'params' argument, but params is not empty")


def call_model_fn(model_fn, features, labels, mode, params, config) -> EstimatorSpec:
    args = model_fn_args(model_fn)
    kwargs = {}
    if "labels" in args:
        kwargs["labels"] = labels
    elif labels is not None:
        raise ValueError("Estimator: model_fn takes no 'labels' argument, but input_fn returns labels")
    for name, value in (("mode", mode), ("params", params), ("config", config)):
        if name in args:
            kwargs[name] = value
    spec = model_fn(features=features, **kwargs)
    if not isinstance(spec, EstimatorSpec):
        raise ValueError(f"Estimator: model_fn: must return an EstimatorSpec, got {type(spec).__name__}")
    if spec.mode != mode:
        raise ValueError(f"Estimator: model_fn: returned an EstimatorSpec for mode {spec.mode!r} when called "
                         f"with mode {mode!r}")
    return spec
