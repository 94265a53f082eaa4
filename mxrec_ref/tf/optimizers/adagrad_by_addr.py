"""mxRec's ``adagrad_by_addr``: no device addresses on a CPU, so the store-side
Adagrad under mxRec's name, defaults and slot (``Adagrad_accumulator``)."""
from .adagrad import CustomizedAdagradByAddress, create_hash_optimizer_by_address  # noqa: F401
