"""The machine's pace: real CPUs, or CPUs emulated in software, and the liveness defaults that suit it.

Under QEMU's TCG (a VM without KVM) a guest runs its processes many times slower than real hardware, and the
demo keeps its 2 vCPUs 97% busy: a live rank's heartbeat then arrives more than a second late (1.02-1.27 s
measured in the VM against the 1.0 s timeout, on a quiet host), and the run fails on a false alarm. The
heartbeat defaults are sized for real machines, so under software emulation they are multiplied by
LIVENESS_SCALE; a value the scenario sets is kept as given. 10, because at 4 a live rank of the demo still went
unheard for 4.1-4.3 s on both its paths while a link flapped, and scenarios/vm_smoke.yaml passes with 10 s. TESTBED_LIVENESS_SCALE overrides the detection.
"""
from __future__ import annotations

import functools
import os
import subprocess

from hosts.spec import HeartbeatSpec

LIVENESS_SCALE = 10
DEFAULT_BEAT = HeartbeatSpec()


class PaceError(ValueError):
    pass


def software_emulation() -> bool:
    """True inside a VM whose CPUs QEMU emulates (TCG): systemd-detect-virt says `qemu` there, `kvm` under KVM."""
    try:
        out = subprocess.run(["systemd-detect-virt", "--vm"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.strip() == "qemu"


@functools.cache
def liveness_scale() -> float:
    given = os.environ.get("TESTBED_LIVENESS_SCALE")
    if given is None:
        return LIVENESS_SCALE if software_emulation() else 1
    try:
        scale = float(given)
    except ValueError:
        scale = 0
    if not 1 <= scale <= 100:
        raise PaceError(f"TESTBED_LIVENESS_SCALE={given!r}: give a number from 1 to 100")
    return scale


def heartbeat(given: dict) -> HeartbeatSpec:
    """The heartbeat a rank is told: the scenario's values, and for the rest the defaults at this machine's pace.
    The period is scaled only with the timeout: a timeout the scenario set keeps the default period under it."""
    scale = liveness_scale()
    timeout = given.get("timeout_s", DEFAULT_BEAT.timeout_s * scale)
    period = given.get("period_s", DEFAULT_BEAT.period_s * (scale if "timeout_s" not in given else 1))
    return HeartbeatSpec(period_s=period, timeout_s=timeout, stall_s=given.get("stall_s", DEFAULT_BEAT.stall_s * scale))


def warning() -> str | None:
    """One line for the run's warnings when the defaults are not those of a real machine."""
    scale = liveness_scale()
    if scale == 1:
        return None
    beat = heartbeat({})
    why = "this machine's CPUs are emulated in software (QEMU TCG)" if "TESTBED_LIVENESS_SCALE" not in os.environ \
        else "TESTBED_LIVENESS_SCALE"
    return (f"{why}: heartbeat defaults are {scale:g}x a real machine's (period {beat.period_s:g} s, timeout "
            f"{beat.timeout_s:g} s, watchdog {beat.stall_s:g} s); a scenario's own values are kept")
