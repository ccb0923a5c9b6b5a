"""Programs of the `program` workload that run inside emulated hosts: mpirun's launch agent and the example
distributed programs (MPI, tf.distribute, torch.distributed) the scenarios run."""
