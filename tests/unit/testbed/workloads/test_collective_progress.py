"""The collective's size sweep reports each size as it starts and its nccl-tests row as soon as it is measured:
the same row the final table prints, with an ETA weighted by the analytical model."""
from testbed.fabric import topo
from testbed.runtime import progress
from testbed.workloads import collective, collective_rows

SPEC = {"type": "collective", "op": "allreduce", "algo": "ring", "sweep": {"min": "1MiB", "max": "4MiB"},
        "iterations": 2}


def measured(size, requested=None):
    return {"bytes": size, "requested_bytes": requested or size, "count": size // 4, "dtype": "float32",
            "seconds": 0.5, "algbw_MBps": 2.0, "busbw_MBps": 3.0, "bound_busbw_MBps": 3.5, "bus_ratio": 0.857,
            "correct": True}


def test_each_size_is_reported_as_it_starts_and_its_row_as_it_is_measured():
    fabric = topo.build("rail-optimized", servers=2, gpus_per_server=2, spines=2)
    lines = []
    report = progress.Progress(progress.NORMAL, echo=lambda line: lines.append(line.split("] ", 1)[1]))
    with progress.active(report):
        sweep = collective._Sweep(fabric, SPEC, 4)
        assert sweep.sizes == [1 << 20, 2 << 20, 4 << 20]
        sweep.starting(1 << 20)
        assert report.sweep[:3] == (0, 3, "size 1/3 (1048576 B)") and report.sweep[3] == 0
        sweep.measured(measured(1 << 20))
        done, total, what, frac = report.sweep
        assert (done, total, what) == (1, 3, "1/3 sizes done")
        assert 1 / 7 < frac < 1 / 3         # the model weights the larger sizes more (2 s start-up each)
        sweep.starting(2 << 20)
        sweep.measured(measured(2 << 20, requested=(2 << 20) + 1))
    rows = [measured(1 << 20), measured(2 << 20, requested=(2 << 20) + 1)]
    final = collective_rows.table({"op": "allreduce", "algo": "ring", "ranks": 4, "rows": rows})
    assert lines == final.splitlines()          # header once, each row as measured, the rounding note too
    assert lines[3].startswith("# note: 2097153 B asked")
