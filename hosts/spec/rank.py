"""The specs of the rank programs (hosts/agents/collective_rank.py, hosts/agents/training_rank.py): what every
rank of a job is told, written by the testbed into a file per rank.

RankSpec holds what every rank program needs (its number, its peers, the job's store, the transport); the
collective benchmark and the training iteration add their own fields. These defaults are the hosts' only ones.
"""
from __future__ import annotations

import dataclasses
from typing import Literal

from hosts.rdma.mtu import DEFAULT_ROCE_MTU
from hosts.spec.base import Spec
from hosts.spec.peers import Member, Peer

Op = Literal["allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall", "fsdp"]
Recovery = Literal["abort", "shrink", "spare", "migrate"]


@dataclasses.dataclass(frozen=True)
class PortRates(Spec):
    """Bits/s to pace each queue pair below, per port (the NIC's rail link, the HB link)."""
    nic: float
    hb: float


@dataclasses.dataclass(frozen=True)
class PortMtus(Spec):
    """The RoCE MTU of each port (the testbed derives it from the link MTUs, as rxe from its netdev's); by
    default what the default links carry (hosts/rdma/mtu.py)."""
    nic: int = DEFAULT_ROCE_MTU["nic"]
    hb: int = DEFAULT_ROCE_MTU["hb"]


@dataclasses.dataclass(frozen=True)
class HeartbeatSpec(Spec):
    """Heartbeats over the network (hosts/collectives/heartbeat.py) and the progress watchdog's bound."""
    period_s: float = 0.15
    timeout_s: float = 1.0
    stall_s: float = 2.0


@dataclasses.dataclass(frozen=True)
class Join(Spec):
    """A spare taking over a failed rank from epoch `epoch` (written by the testbed's job manager)."""
    epoch: int
    me: Member


@dataclasses.dataclass(frozen=True)
class Rejoin(Spec):
    """A rank that came back (a restarted GPU, a mended NIC) and asks to be admitted."""
    me: Member


@dataclasses.dataclass(frozen=True, kw_only=True)
class RankSpec(Spec):
    """What every rank program is told: who it is, its peers, the store, and its transport."""
    rank: int
    peers: tuple[Peer, ...]
    store: str
    timeout_s: float = 60                     # seconds a rank waits on its peers before the job fails
    chunk: int = 64 * 1024
    rate_limit_bps: PortRates | None = None
    sport_mode: Literal["qp", "packet"] = "qp"     # packet: a source port per packet (spraying)
    split: int = 1                            # split:K lanes per peer
    ring: Literal["rail", "rank"] = "rail"
    rc_timeout: float = 0.05                  # the retransmission timeout: fixed, or the adaptive one's ceiling
    rc_rto: Literal["adaptive", "fixed"] = "adaptive"   # hosts/rdma/rto.py
    roce_mtu: PortMtus = PortMtus()
    multicast_scope: Literal["fabric", "rail"] = "fabric"
    multicast_trees_confirmed: bool = False   # the testbed reports installed trees (multicast_ready.py)
    multicast_hold_s: float = 0               # how long to stay in multicast groups after the job
    congestion: Literal["delay", "dcqcn"] | None = None   # opt-in congestion control (hosts/rdma/cc.py, dcqcn.py)
    time_scale: float = 1.0                   # the fabric's time scale: DCQCN's timers x it, its rates / it
    pieces: int | None = None                 # hierarchical-pipelined: how many pieces (pipeline.py)

    @property
    def backend(self) -> str:
        """Which RoCE implementation the rank opens (hosts.rdma.open_device)."""
        return "auto"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CollectiveRankSpec(RankSpec):
    """One rank of the collective benchmark (hosts/agents/collective_rank.py)."""
    op: Op
    algo: str
    bytes: int
    dtype: str = "float32"
    reduce: Literal["sum", "max"] = "sum"
    root: int = 0
    iterations: int = 5
    warmup: int = 1
    check: bool = True
    recovery: Recovery = "abort"
    heartbeat: HeartbeatSpec | Literal[False] = HeartbeatSpec()      # false: transport timeouts only
    admit: bool = False                       # ranks that come back rejoin at a step boundary
    state: bool = False                       # allreduce: keep the shared state (shared_state.py)
    join: Join | None = None
    rejoin: Rejoin | None = None
    rejoin_wait_s: float | None = None        # None: timeout_s + 30
    until: float | None = None                # run steps until this wall time instead of `iterations`

    @property
    def backend(self) -> str:
        # multicast needs uroce (pyverbs does not expose multicast attach); everything else takes rxe where it is
        return "uroce" if self.algo == "multicast" else "auto"


@dataclasses.dataclass(frozen=True)
class Parallelism(Spec):
    tp: int
    pp: int
    dp: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingRankSpec(RankSpec):
    """One rank of a training iteration (hosts/agents/training_rank.py, hosts/collectives/training.py)."""
    plan: Parallelism
    micro_batches: int
    schedule: Literal["1f1b", "gpipe"] = "1f1b"
    layers: int                               # layers of this rank's stage
    recompute: bool = True
    activation_count: int                     # elements of one micro-batch's activations (b s h, scaled)
    gradient_count: int                       # elements of this rank's gradients (params / (p t), scaled)
    dtype: str = "float16"
    compute_s: float                          # emulated GPU time of one micro-batch (fwd, recompute, bwd)
    tp_algo: str = "ring"
    dp_algo: str = "ring"
    iterations: int = 1
    check: bool = True


@dataclasses.dataclass(frozen=True, kw_only=True)
class DilocoRankSpec(RankSpec):
    """One rank of a DiLoCo run (hosts/agents/diloco_rank.py, hosts/collectives/diloco_rank.py)."""
    sites: tuple[tuple[int, ...], ...]        # the ranks of each site; a site's first rank crosses sites
    variant: Literal["ddp", "diloco", "streaming"]
    steps: int                                # inner steps
    sync_every: int = 1                       # H: inner steps between two synchronisations of a parameter
    fragments: int = 1                        # P (streaming)
    count: int                                # float32 parameters
    seed: int = 0
    inner_lr: float = 0.05
    outer_lr: float = 0.7
    momentum: float = 0.9
    mix: float = 0.5                          # streaming: the local share of a synchronised fragment
    quantize: Literal[0, 4, 8] = 0            # bits of the exchanged pseudo-gradients (0: float32)
    compute_s: float = 0.0                    # emulated compute time of one inner step
    rejoin: bool = False                      # diloco: a site cut off past the retries leaves and rejoins


@dataclasses.dataclass(frozen=True)
class RoceFlow(Spec):
    """One flow of background RoCE traffic, as one end sees it: the other end's rank and the bytes."""
    flow: int
    peer: int
    bytes: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class RoceFlowsRankSpec(RankSpec):
    """One host of RoCE background traffic (hosts/agents/roce_flows.py): RC SENDs to its destinations and from
    its sources, all starting at `start_at`; the queue pairs are paced at rate_limit_bps, shared by the peers
    it sends to."""
    start_at: float
    sends: tuple[RoceFlow, ...] = ()
    recvs: tuple[RoceFlow, ...] = ()

    @property
    def backend(self) -> str:
        return "uroce"                        # the project's RoCEv2 transport (DCQCN, per-QP pacing)
