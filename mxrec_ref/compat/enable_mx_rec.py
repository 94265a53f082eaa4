"""``import mxrec_ref.compat.enable_mx_rec`` -- one line that makes ``import mx_rec`` work."""
from .alias import enable

enable()
