"""The programs that run inside an emulated host, one `python -m hosts.agents.<name>` each; the libraries they
use are hosts.collectives, hosts.rdma and hosts.tfdata.

- `collective_rank`  one rank of a collective benchmark (with GPU-failure recovery)
- `training_rank`    one rank of a training iteration (TP/PP/DP groups, a pipeline schedule)
- `probe`            reachability: answers and sends UDP probes until a shared deadline
- `flows`            concurrent UDP and TCP flows, measured per flow
- `tfdata_service`   a tf.data.service dispatcher or worker
- `tfdata_trainer`   the trainer: local and/or remote input, FastFlow's offloading policy, an emulated GPU
"""
import faulthandler
import signal
import sys

# Run as a program (`python -m hosts.agents.<name>`: argv[0] is "-m" while the package loads), a host program
# prints every thread's stack to stderr on SIGQUIT and goes on: the launcher asks for them before it kills one
# that outlived its timeout, so its log says where it waited.
if sys.argv[:1] == ["-m"]:
    faulthandler.register(signal.SIGQUIT, all_threads=True)
