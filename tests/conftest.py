"""Shared fixtures: root-only integration tests skip with a printed reason where they cannot run."""
import os
import shutil
from collections import Counter

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


@pytest.fixture(autouse=True)
def _results_follow_their_schema(request):
    """Every results.json a test's run writes under its tmp_path follows the results schema and its time base."""
    tmp = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if tmp is not None:
        from tests.results_schema_check import check_tree
        found = check_tree(str(tmp))
        if found:
            pytest.fail("results.json off its schema:\n" + "\n".join(found[:20]), pytrace=False)


def pytest_configure(config):
    """The fabric tests two at a time (TESTBED_TAG_PER_WORKER=1 under pytest-xdist, docs/testing.md): each worker
    brings its fabrics up under its own fabric tag (testbed.fabric.links.fabric_tag), so that two fabrics run
    side by side on the machine; the CLI commands a test starts inherit it."""
    worker = getattr(config, "workerinput", {}).get("workerid", "")      # gw0, gw1, ... under xdist
    if worker and os.environ.get("TESTBED_TAG_PER_WORKER"):
        from testbed.fabric.links import TAG_CHARS
        os.environ["TESTBED_FABRIC_TAG"] = sorted(TAG_CHARS)[int(worker.removeprefix("gw"))]


def pytest_collection_modifyitems(config, items):
    if getattr(config.option, "numprocesses", None):
        # under pytest-xdist, the longest files first (a file's slow tests stand for its length), so that the
        # workers, which take tests (or whole files) in this order, end together; stable: a file's tests keep
        # their order
        weight = Counter(item.path for item in items if "slow" in item.keywords)
        items.sort(key=lambda item: -weight[item.path])
    problem = None
    for item in items:
        if "root" in item.keywords:
            problem = problem or root_problem()
            if problem:
                item.add_marker(pytest.mark.skip(reason=problem))


@pytest.fixture(scope="session")
def docker_engine():
    """A client of the Docker engine; the test skips, with the reason printed, where there is none."""
    from testbed.fabric.backends.engine import DockerUnavailable, engine
    try:
        return engine()
    except DockerUnavailable as exc:
        print(f"SKIP: no Docker engine can run here: {exc}")
        pytest.skip(f"no Docker engine can run here: {exc}")
