"""Shared fixtures: root-only integration tests skip with a printed reason where they cannot run."""
import os
import shutil

import pytest


def root_problem() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces, Open vSwitch)"
    for tool in ("ovs-vsctl", "mnexec", "tc"):
        if shutil.which(tool) is None:
            return f"needs {tool} (run scripts/setup)"
    from testbed.fabric import ovs
    if not ovs.running():
        return "Open vSwitch is not running (scripts/ovs-start; `make test` starts it)"
    return None


def pytest_collection_modifyitems(config, items):
    problem = None
    for item in items:
        if "root" in item.keywords:
            problem = problem or root_problem()
            if problem:
                item.add_marker(pytest.mark.skip(reason=problem))
