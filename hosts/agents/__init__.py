"""The programs that run inside an emulated host, one `python -m hosts.agents.<name>` each; the libraries they
use are hosts.collectives, hosts.rdma and hosts.tfdata.

- `collective_rank`  one rank of a collective benchmark (with GPU-failure recovery)
- `training_rank`    one rank of a training iteration (TP/PP/DP groups, a pipeline schedule)
- `probe`            reachability: answers and sends UDP probes until a shared deadline
- `flows`            concurrent UDP and TCP flows, measured per flow
- `tfdata_service`   a tf.data.service dispatcher or worker
- `tfdata_trainer`   the trainer: local and/or remote input, FastFlow's offloading policy, an emulated GPU
"""
