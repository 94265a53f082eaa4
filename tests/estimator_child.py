"""tests/test_estimator.py's second process: evaluate and predict from MODEL_DIR, printed as JSON."""
import json
import sys

import numpy as np

import mxrec_ref.tf as mx
import estimator_model
from mxrec_ref.tf import estimator

model_dir, mode, backend = sys.argv[1:4]
mx.init(backend=backend)
est = estimator.Estimator(estimator_model.model_fn, model_dir=model_dir, params={"mode": mode})
metrics = est.evaluate(estimator_model.input_fn_for(mode))
predictions = [p["probability"] for p in est.predict(estimator_model.input_fn_for(mode))]
table = mx.ConfigInitializer.get_instance().tables["user_table"]
state = table.store.export()
print(json.dumps({"metrics": {k: float(v) for k, v in metrics.items()},
                  "predictions": np.asarray(predictions, np.float64).tolist(),
                  "keys": np.asarray(state.keys).tolist(), "values": np.asarray(state.values, np.float64).tolist()}))
