"""Tables sharded over MPI ranks (spec/sharding.md): the communicator and the sharded store."""
from .comm import (CollectiveError, Communicator, MpiCommunicator, SingleProcess, VirtualWorld,  # noqa: F401
                   launched_by_mpi, set_world, world)
from .replicated import ReplicatedStore  # noqa: F401
from .schedule import EvictionSchedule  # noqa: F401
from .sharded import ShardedStore, merge_states, owner_of, route, slice_state  # noqa: F401
