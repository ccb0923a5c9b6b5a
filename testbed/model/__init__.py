"""The analytical model: what a measurement is compared against, computed without running anything.

- bounds.py             collective times and busbw bounds (ring, hierarchical, pipelined) from link rates
- multicast_minimum.py  the fewest bytes a multicast collective can put on the fabric's links

Workloads and results both read it; it reads only `hosts` constants and the fabric objects it is given.
"""
