"""A job's recovery machinery, beside the collectives it keeps going: heartbeats over the network (heartbeat.py,
beats.py), the progress watchdog (watchdog.py), who failed and who joins, in the job's store (membership.py),
and the state every rank must hold bit for bit (shared_state.py). See docs/faults.md."""
