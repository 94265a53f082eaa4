"""Single process: rank 0 of 1."""


def get_rank_id() -> int:
    return 0


def get_rank_size() -> int:
    return 1


def get_device_id() -> int:
    return 0
