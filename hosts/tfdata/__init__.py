"""Input-pipeline offloading with tf.data.service, run inside emulated hosts (never imports `testbed`).

- `policy`    FastFlow's smart offloading policy (Algorithm 1), pure arithmetic
- `mix`       ApplyOffRatio: a quota-bounded, non-deterministic interleave of a local and a remote source
- `gpu`       an emulated GPU that consumes batches at a fixed step rate (sleep-based)
- `budget`    per-process CPU budgets (CFS quota, cgroup v1 or v2, optional affinity) and /proc CPU times
- `pipelines` the two synthetic pipelines (compute-intensive, data-intensive), made in-graph
The programs using them are hosts/agents/tfdata_service.py (`python -m hosts.agents.tfdata_service dispatcher|worker
...`) and hosts/agents/tfdata_trainer.py (`python -m hosts.agents.tfdata_trainer SPEC_JSON`: profile, decide,
train; one JSON line out).
"""
