"""The full-scale fabric planner behind `testbed plan`: one concept per module.

counts       switch, link and transceiver counts (the method, and Table II of the Rail-only paper)
costs        network cost and power from per-port and per-transceiver assumptions
miniature    the emulated miniature, built with testbed.fabric.topo and counted against the plan
prediction   the analytical iteration-time model (Titer = Tcomp + Ttp + Tpp + Tdp + Ta2a + Tbubble)
calibration  per-operation efficiency factors, from a factors file or a testbed results.json
plots        PNG plots of predicted iteration time
report       the text tables
"""
