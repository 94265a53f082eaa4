"""``mx_rec.saver.sparse.export``: every saved table as ``<dir>/<table>/key-emb.npy``,
a pickled dict {key: embedding row} (reference 1.9)."""
import os

import numpy as np

from mxrec_ref.tf.config_initializer import ConfigInitializer


def export(table_list=None, export_dir="export"):
    """mxRec writes next to the Saver's checkpoint; mxrec-ref writes under
    ``export_dir`` (default ``./export``).  Returns the folder."""
    tables = ConfigInitializer.get_instance().tables
    names = list(tables) if table_list is None else [getattr(t, "table_name", t) for t in table_list]
    unknown = [n for n in names if n not in tables]
    if unknown:
        raise ValueError(f"export: table_list: no tables {unknown} (tables: {sorted(tables)})")
    for name in names:
        state = tables[name].store.export()
        folder = os.path.join(export_dir, name)
        os.makedirs(folder, exist_ok=True)
        np.save(os.path.join(folder, "key-emb.npy"), dict(zip(state.keys.tolist(), state.values)), allow_pickle=True)
    return export_dir
