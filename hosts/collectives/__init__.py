"""Collectives over the software RDMA transport, on numpy arrays (see algorithms.py and comm.py).

    comm = Communicator(me, peers, FileStore(dir), open_device)
    allreduce(comm, x, "sum", "ring"); allgather(comm, shard, "hierarchical"); alltoall(comm, x, "two-step")
"""
from .algorithms import ALGOS, OPS, allgather, allreduce, alltoall, broadcast, reduce_scatter
from .comm import CollectiveError, Communicator, Peer
from .store import FileStore, StoreTimeout

__all__ = ["ALGOS", "OPS", "allgather", "allreduce", "alltoall", "broadcast", "reduce_scatter",
           "CollectiveError", "Communicator", "Peer", "FileStore", "StoreTimeout"]
