"""The specs of the input-pipeline programs: the trainer (hosts/agents/tfdata_trainer.py, JSON on its command
line) and the tf.data.service servers (hosts/agents/tfdata_service.py, command-line flags)."""
from __future__ import annotations

import argparse
import dataclasses
from typing import Any, Literal

from hosts.spec.base import Spec


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainerSpec(Spec):
    """profile: profile and decide (FastFlow's Algorithm 1), no training; fastflow: both in one process;
    fixed: train with `ratio` of the batches from candidate `candidate` (0: all local)."""
    pipeline: str
    policy: Literal["fastflow", "profile", "fixed"]
    gpu_steps_per_s: float
    service: str | None = None                # grpc://IP:PORT of the dispatcher
    pipeline_cfg: dict[str, Any] | None = None     # settings over the pipeline's defaults
    seed: int = 0
    seconds: float = 8.0                      # measured training
    warmup_s: float = 1.5
    profile_s: float = 3.0
    threshold: float = 1.1
    candidates: tuple[str, ...] = ("p'2", "p'3")
    ratio: float = 0.0
    candidate: str = "p'3"
    epoch_batches: int = 1000
    start_signal: bool = False                # print {"ready": true} and wait for a line on stdin first


@dataclasses.dataclass(frozen=True)
class ServiceSpec(Spec):
    """A tf.data.service dispatcher, or a worker that advertises the host's own address `ip`."""
    role: Literal["dispatcher", "worker"]
    port: int
    ip: str | None = None
    dispatcher: str | None = None             # IP:PORT (worker)

    def to_argv(self) -> list[str]:
        argv = [self.role, "--port", str(self.port)]
        if self.dispatcher is not None:
            argv += ["--dispatcher", self.dispatcher]
        if self.ip is not None:
            argv += ["--ip", self.ip]
        return argv

    @classmethod
    def from_argv(cls, argv: list[str] | None = None) -> "ServiceSpec":
        ap = argparse.ArgumentParser()
        ap.add_argument("role", choices=["dispatcher", "worker"])
        ap.add_argument("--port", type=int, required=True)
        ap.add_argument("--ip", help="this host's address (worker)")
        ap.add_argument("--dispatcher", help="IP:PORT (worker)")
        a = ap.parse_args(argv)
        if a.role == "worker" and not (a.ip and a.dispatcher):
            ap.exit(1, "worker needs --ip and --dispatcher\n")
        return cls(role=a.role, port=a.port, ip=a.ip, dispatcher=a.dispatcher)
