"""tf.data.service servers in an emulated host.

    python -m hosts.agents.tfdata_service dispatcher --port 5050
    python -m hosts.agents.tfdata_service worker --dispatcher 10.11.250.1:5050 --ip 10.11.250.2 --port 5051

A worker must advertise the host's own address (worker_address): the default, localhost, makes clients in
other hosts hang silently. Prints one JSON line when serving, then serves until killed. The launcher
sets the CPU budget (`budget.limit`) on the PID once it serves (importing TensorFlow is not what the budget
is for).
"""
from __future__ import annotations

import json
import os

from hosts.spec.tfdata import ServiceSpec


def main(argv=None) -> None:
    a = ServiceSpec.from_argv(argv)         # a worker without --ip and --dispatcher exits here
    import tensorflow as tf
    svc = tf.data.experimental.service
    if a.role == "dispatcher":
        # Abandoned jobs (a profiling phase's iterator is gone) are collected within a second, so their
        # workers stop producing for nobody; the default waits minutes.
        server = svc.DispatchServer(svc.DispatcherConfig(port=a.port, job_gc_check_interval_ms=500,
                                                         job_gc_timeout_ms=500))
    else:
        server = svc.WorkerServer(svc.WorkerConfig(dispatcher_address=a.dispatcher, worker_address=f"{a.ip}:{a.port}",
                                                   port=a.port))
    print(json.dumps({"role": a.role, "pid": os.getpid(), "port": a.port}), flush=True)
    server.join()


if __name__ == "__main__":
    main()
