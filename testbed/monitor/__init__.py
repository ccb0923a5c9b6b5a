"""Watching a run: packet captures, the timeline of events, the fidelity guard (CPU headroom)."""
