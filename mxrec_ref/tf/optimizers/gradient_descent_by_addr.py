"""mxRec's ``gradient_descent_by_addr``: no device addresses on a CPU, so the
store-side SGD (with weight decay) under mxRec's name and defaults; no slots."""
from .gradient_descent import CustomizedGradientDescentByAddr, create_hash_optimizer_by_addr  # noqa: F401
