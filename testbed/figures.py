"""matplotlib for the run's figures, drawn off screen (a testbed machine has no display). Imported only where a
figure is drawn: matplotlib takes a moment to load, which a CLI start should not pay."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402,F401
