"""Docker hosts: the host image built without a registry, fabrics whose hosts are containers (bring-up,
connectivity, a collective checked against numpy, a killed container), the same results as on
namespaces, `testbed clean`, and the provisioning path the Vagrant VM shares with CI.

Integration tests need root, Open vSwitch and a Docker engine (`make test` starts one with
scripts/dockerd-start); they skip with the reason where there is none.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from testbed import runner, scenario
from testbed.fabric.backends import image
from testbed.fabric.backends.dockerhost import container_name, holder_name
from testbed.fabric.network import Network
from testbed.fabric.topo import build
from testbed.scenario import validate
from testbed.workloads import collective, connectivity
from tests.paths import ROOT

pytestmark = [pytest.mark.docker, pytest.mark.alone]     # testbed clean, fixed container names
root = pytest.mark.root


@pytest.fixture(scope="module")
def client(docker_engine):
    return docker_engine


@pytest.fixture(scope="module")
def host_image(client):
    return image.ensure(client)


def our_containers(client) -> list:
    return [c for c in client.containers.list(all=True, filters={"label": "testbed"}) if c.name.startswith("tb-")]


@root
@pytest.mark.slow
def test_image_builds_without_a_registry(client):
    """debootstrap + docker import as the base, then the Dockerfile: no registry involved. Built under
    test tags so that the image runs use is not touched; the base is made afresh."""
    tag, base = "tb-host:test", "tb-base:test"
    for name in (tag, base, image.deps_tag(tag)):
        try:
            client.images.remove(name, force=True)
        except Exception:
            pass
    t0 = time.monotonic()
    try:
        built = image.build(client, base="debootstrap", tag=tag, base_tag=base)
        seconds = time.monotonic() - t0
        img = client.images.get(built)
        assert img.labels["testbed.base"] == base and img.labels["testbed.inputs"] == image.inputs_digest()
        root_layer = client.images.get(base)
        assert root_layer.attrs["Parent"] == "" and len(root_layer.history()) == 1     # imported, not pulled
        out = client.containers.run(tag, ["python3", "-c", "import numpy, pyverbs, hosts.rdma, hosts.agents.collective_rank,"
                                          " hosts.agents.flows, hosts.agents.probe; print(numpy.__version__)"],
                                    network_mode="none", remove=True).decode().strip()
        assert re.fullmatch(r"\d+\.\d+\.\d+", out), out
        # the first stage is the same image without the hosts package (what derived images install onto)
        assert client.containers.run(image.deps_tag(tag), ["ls", "/opt/testbed"], network_mode="none",
                                     remove=True).decode().split() == []
        # incremental: unchanged inputs, nothing rebuilt
        assert image.up_to_date(client, tag)
        p = subprocess.run([os.path.join(ROOT, "scripts", "docker-image"), "--tag", tag], capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0 and "is up to date" in p.stdout, p.stdout + p.stderr
        print(f"host image without a registry: {img.attrs['Size'] / 1e6:.0f} MB, built in {seconds:.1f} s "
              f"(debootstrap base included)")
    finally:
        for name in (tag, image.deps_tag(tag), base):
            try:
                client.images.remove(name, force=True)
            except Exception:
                pass


def test_image_inputs_digest_follows_the_hosts_code(tmp_path, monkeypatch):
    before = image.inputs_digest()
    shutil.copytree(os.path.join(ROOT, "hosts"), tmp_path / "hosts", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(os.path.join(ROOT, "docker"), tmp_path / "docker")
    monkeypatch.setattr(image, "PROJECT_ROOT", str(tmp_path))
    monkeypatch.setattr(image, "DOCKER_DIR", str(tmp_path / "docker"))
    assert image.inputs_digest() == before
    probe = tmp_path / "hosts" / "agents" / "probe.py"
    probe.write_text(probe.read_text() + "\n# changed\n")
    assert image.inputs_digest() != before
    names = {m.name for m in __import__("tarfile").open(fileobj=image.context()).getmembers()}
    assert {"Dockerfile", "packages", "hosts/agents/probe.py"} <= names and not any("__pycache__" in n for n in names)


def test_a_change_to_hosts_reaches_derived_images_without_installing_their_packages_again(client, tmp_path,
                                                                                           monkeypatch):
    """A derived image (docker/NAME/) installs its packages on the host image's first stage: after a change to
    hosts/, it is rebuilt with the new package, but its installing step comes from Docker's cache (its output,
    a time stamp, is the same), and the image it replaced is gone. Under test tags, on a copy of the sources."""
    shutil.copytree(os.path.join(ROOT, "hosts"), tmp_path / "hosts", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(os.path.join(ROOT, "docker"), tmp_path / "docker",
                    ignore=shutil.ignore_patterns("torch", "machine"))
    (tmp_path / "docker" / "stamp").mkdir()
    (tmp_path / "docker" / "stamp" / "Dockerfile").write_text(       # the shape of docker/torch/Dockerfile
        "ARG HOST\nARG DEPS\nFROM ${HOST} AS host\nFROM ${DEPS}\nRUN date +%s%N > /stamp\n"
        "COPY --from=host /opt/testbed/hosts /opt/testbed/hosts\n")
    monkeypatch.setattr(image, "PROJECT_ROOT", str(tmp_path))
    monkeypatch.setattr(image, "DOCKER_DIR", str(tmp_path / "docker"))
    monkeypatch.setattr(image, "IMAGE", "tb-host:test-derived")
    monkeypatch.setattr(image, "PREFIX", "tb-test-")
    made = ["tb-test-stamp:latest", "tb-host:test-derived", image.deps_tag("tb-host:test-derived")]

    def stamp_and_probe() -> list[str]:
        tag = image.derived(client, "stamp", echo=print)
        probe = "cat /stamp; [ -e /opt/testbed/hosts/agents/probe2.py ] && echo 1 || echo 0"
        return client.containers.run(tag, ["sh", "-c", probe], network_mode="none", remove=True).decode().split()
    try:
        first, had_probe = stamp_and_probe()
        replaced = client.images.get(made[0]).id
        (tmp_path / "hosts" / "agents" / "probe2.py").write_text("# new\n")
        second, has_probe = stamp_and_probe()
        assert (had_probe, has_probe) == ("0", "1")              # the new hosts package is in
        assert second == first                                    # the installing step was not run again
        assert client.images.get(made[0]).id != replaced
        with pytest.raises(Exception):
            client.images.get(replaced)                           # and the image it replaced is removed
    finally:
        for name in made:
            try:
                client.images.remove(name, force=True)
            except Exception:
                pass


@root
@pytest.mark.slow
def test_bring_up_connectivity_limits_and_processes_inside_containers(client, host_image):
    fabric = build("rail-optimized", 2, 2, spines=2, nic_mbps=10)
    with Network(fabric, hosts="docker", host_limits={"cpus": 0.5, "memory": 256 << 20}) as net:
        names = sorted(c.name for c in our_containers(client) if c.labels.get("testbed.run") == net.run_dir)
        assert names == sorted(n for h in fabric.hosts for n in (container_name(h), holder_name(h)))
        c, holder = client.containers.get(container_name("s1g0")), client.containers.get(holder_name("s1g0"))
        assert holder.attrs["HostConfig"]["NetworkMode"] == "none"
        assert c.attrs["HostConfig"]["NetworkMode"] == f"container:{holder.id}"
        assert c.attrs["HostConfig"]["NanoCpus"] == 500_000_000 and c.attrs["HostConfig"]["Memory"] == 256 << 20
        result = connectivity.run(net, {})
        assert result["ok"], result["checks"]
        # a process of the host runs in the container: its hostname, cgroup, interpreter and NIC
        probe = ("import json, os, socket, sys\n"
                 "print(json.dumps({'host': socket.gethostname(), 'python': sys.executable,\n"
                 "  'cgroup': open('/proc/self/cgroup').read(), 'mac': open('/sys/class/net/eth0/address').read().strip()}))")
        node = net.host("s1g0")
        out = json.loads(node.popen([node.python, "-c", probe], text=True).communicate()[0])
        assert out["host"] == "s1g0" and out["python"] == "/usr/bin/python3"
        assert c.id in out["cgroup"] and out["mac"] == fabric.hosts["s1g0"].mac
        # the CPU limit holds for it: a busy loop of 1.5 s wall time gets at most ~0.5 core
        busy = "import os, time\nt = time.time()\nwhile time.time() - t < 1.5: pass\nprint(sum(os.times()[:2]))"
        cpu_s = float(node.popen([node.python, "-c", busy], text=True).communicate()[0])
        assert cpu_s < 0.5 * 1.5 * 1.3, cpu_s
        print(f"docker hosts 2x2: bring-up {net.timings['bring_up_s']:.2f} s (image check {net.timings['image_s']:.2f} s),"
              f" busy loop got {cpu_s / 1.5:.2f} core under a 0.5 limit")
    assert not [c for c in our_containers(client) if c.labels.get("testbed.run") == net.run_dir]


@root
def test_collective_is_correct_and_a_killed_container_is_detected(client, host_image):
    fabric = build("rail-optimized", 2, 2, spines=2, nic_mbps=10)
    with Network(fabric, hosts="docker") as net:
        ok = collective.run(net, {"op": "allreduce", "algo": "ring", "sizes": ["256KiB"], "iterations": 2})
        assert ok["ok"], ok["checks"]
        assert ok["rows"][0]["correct"] and ok["rows"][0]["ranks"] == 4

        from testbed.faults.signals import signal_gpus
        hit = []
        killer = threading.Timer(2.5, lambda: hit.append(signal_gpus(net, ["s1g1"], signal.SIGKILL)))
        killer.start()
        t0 = time.monotonic()
        failed = collective.run(net, {"op": "allreduce", "algo": "ring", "sizes": ["4MiB"], "iterations": 3,
                                      "timeout_s": 8})
        took = time.monotonic() - t0
        killer.join()
        victim = client.containers.get(container_name("s1g1"))
        assert victim.status == "exited" and victim.attrs["State"]["ExitCode"] == 137    # docker kill
        assert hit == [1]                                    # its rank process was the one hit
        assert not failed["ok"]
        detail = failed["checks"][0]["detail"]
        # the survivors name the operation and the dead peer (by missed heartbeats or lack of progress)
        assert re.search(r"rank \d \(s[01]g[01]\): allreduce/ring: .*s1g1", detail), detail
        assert took < 60
        # the next workload finds the host again, as on namespaces: its container restarts in the same cabling
        again = collective.run(net, {"op": "allreduce", "algo": "ring", "sizes": ["256KiB"], "iterations": 1})
        assert again["ok"], again["checks"]
        assert client.containers.get(container_name("s1g1")).status == "running"
        print(f"killed container detected by its peers; collective failed after {took:.1f} s: {detail[:160]}")
        # by hand, from another process (`testbed fault`): the run's backend attaches the container, and the
        # crash is the container's, as in a scenario
        by_hand = subprocess.run([sys.executable, "-m", "testbed.cli", "fault", "s0g1", "crash"], cwd=ROOT,
                                 capture_output=True, text=True, timeout=60)
        assert by_hand.returncode == 0 and "s0g1: crash" in by_hand.stdout, by_hand.stdout + by_hand.stderr
        crashed = client.containers.get(container_name("s0g1"))
        assert crashed.status == "exited" and crashed.attrs["State"]["ExitCode"] == 137


SCENARIO = {"name": "docker-vs-netns",
            "fabric": {"kind": "rail-optimized", "servers": 2, "gpus_per_server": 2, "spines": 2, "nic_mbps": 10},
            "workloads": [{"type": "connectivity"},
                          {"type": "collective", "op": "allreduce", "algo": "hierarchical", "sizes": ["256KiB"],
                           "iterations": 1},
                          {"type": "collective", "op": "alltoall", "algo": "direct", "sizes": ["128KiB"],
                           "iterations": 1}]}


@root
@pytest.mark.slow
def test_a_scenario_gives_the_same_results_on_docker_hosts_as_on_namespaces(client, host_image, tmp_path):
    results = {}
    for backend in ("netns", "docker"):
        results[backend] = runner.run({**SCENARIO, "hosts": backend}, str(tmp_path / backend), echo=lambda *a: None)
    for backend, r in results.items():
        assert r["ok"], (backend, [c for c in r["checks"] if not c["ok"]])
        assert r["fabric"]["host_backend"] == backend
    same = lambda r: [(w["type"], w.get("reachable_ok"), w.get("leaked"),
                       [(x["op"], x["ranks"], x["bytes"], x["count"], x["correct"]) for x in w.get("rows", [])])
                      for w in r["workloads"]]
    assert same(results["docker"]) == same(results["netns"])
    print("bring-up netns {:.2f} s, docker {:.2f} s".format(results["netns"]["timings"]["bring_up_s"],
                                                          results["docker"]["timings"]["bring_up_s"]))


@root
def test_clean_removes_the_containers_a_killed_run_left(client, host_image):
    script = ("from testbed.fabric.topo import build; from testbed.fabric.network import Network; import os, signal\n"
              "net = Network(build('rail-only', 2, 2), hosts='docker'); net.start()\n"
              "print(net.run_dir, flush=True)\n"
              "os.kill(os.getpid(), signal.SIGKILL)\n")
    env = dict(os.environ, TESTBED_WAIT_FOR_FABRIC=os.environ.get("TESTBED_WAIT_FOR_FABRIC", "900"))
    p = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    run_dir = p.stdout.strip()
    left = [c.name for c in our_containers(client) if c.labels.get("testbed.run") == run_dir]
    assert sorted(left) == sorted(n for h in ("s0g0", "s0g1", "s1g0", "s1g1") for n in (container_name(h), holder_name(h))), \
        p.stderr
    cli = subprocess.run([sys.executable, "-m", "testbed.cli", "clean"], cwd=ROOT, capture_output=True, text=True)
    assert cli.returncode == 0 and re.search(r"[1-9]\d* containers", cli.stdout), cli.stdout + cli.stderr
    assert not [c for c in our_containers(client) if c.labels.get("testbed.run") == run_dir]


@root
def test_docker_hosts_without_an_engine_is_a_clear_error(tmp_path):
    env = dict(os.environ, DOCKER_HOST=f"unix://{tmp_path}/no-such.sock")
    p = subprocess.run([sys.executable, "-m", "testbed.cli", "run", "tests/fixtures/scenarios/hosts.yaml"],
                       cwd=ROOT, capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.count("\n") == 1 and "hosts: docker needs a running Docker engine" in p.stderr, p.stderr


def test_vagrant_and_ci_provision_with_the_same_script():
    with open(os.path.join(ROOT, "Vagrantfile")) as f:
        vagrantfile = f.read()
    provisioned = re.findall(r'inline:\s*"cd /vagrant && (scripts/[\w-]+)"', vagrantfile)
    assert provisioned == ["scripts/setup", "scripts/provision-kernel"]
    with open(os.path.join(ROOT, "Makefile")) as f:
        makefile = f.read()
    assert re.search(r"^setup:\n\t@scripts/setup( |$)", makefile, re.M)      # with the extras asked for
    assert re.search(r"^test: setup$", makefile, re.M) and "scripts/dockerd-start" in makefile
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        assert "make test" in f.read()
    for script in ("setup", "provision-kernel", "dockerd-start", "dockerd-stop", "docker-image"):
        path = os.path.join(ROOT, "scripts", script)
        assert os.access(path, os.X_OK), script
        assert subprocess.run(["bash", "-n", path]).returncode == 0, script
    if shutil.which("ruby") is None:
        print("ruby not installed: Vagrantfile syntax not checked")
    else:
        p = subprocess.run(["ruby", "-c", os.path.join(ROOT, "Vagrantfile")], capture_output=True, text=True)
        assert p.returncode == 0 and "Syntax OK" in p.stdout, p.stderr


@root
def test_a_users_own_image_runs_the_hosts_and_a_missing_one_is_named(client, tmp_path):
    """host_image: NAME:TAG, an image the user built FROM the host image (with TensorFlow, say): the hosts run
    it, and a program sees what it added; an image that is not here fails the run in one line naming it."""
    import io

    from testbed.fabric.backends import image
    base = image.ensure(client)
    tag = "tb-usertest:latest"
    dockerfile = f"FROM {base}\nRUN echo added-by-the-user > /etc/tb-user-image\n".encode()
    client.images.build(fileobj=io.BytesIO(dockerfile), tag=tag, rm=True, labels={"testbed": "1"})
    try:
        doc = validate({"name": "user-image", "hosts": "docker", "host_image": tag,
                        "fabric": {"kind": "rail-only", "servers": 2, "gpus_per_server": 1, "nic_mbps": 50},
                        "workloads": [{"type": "program", "name": "marker", "timeout_s": 60, "command": [
                            "{python}", "-c", "import json; print(json.dumps({'marker': "
                            "open('/etc/tb-user-image').read().strip()}))"]}]})
        out = str(tmp_path / "user")
        r = runner.run(doc, out, echo=lambda *a: None)
        assert r["ok"], [c for c in r["checks"] if not c["ok"]]
        w = r["workloads"][0]
        for rank in w["ranks"]:
            with open(os.path.join(out, w["logs"], rank["stdout"])) as f:
                assert json.loads(f.read().strip().splitlines()[-1]) == {"marker": "added-by-the-user"}
        missing = runner.run({**doc, "host_image": "tb-no-such-image:latest"}, str(tmp_path / "missing"),
                             echo=lambda *a: None)
        assert not missing["ok"]
        assert any("host_image tb-no-such-image:latest: no such image on this machine" in c.get("detail", "")
                   for c in missing["checks"])
    finally:
        client.images.remove(tag, force=True)


@root
@pytest.mark.slow
def test_concurrent_jobs_run_on_docker_hosts_exact_with_bytes_by_job(client, host_image, tmp_path):
    """Two rings tiled on rail-aligned blocks of rail-only, each in its own containers: every job exact alone and
    together, and the bytes by job add up to the port counters as on namespaces."""
    doc = scenario.load(os.path.join(ROOT, "scenarios", "concurrent_tiling.yaml"), ["hosts=docker"])
    r = runner.run(doc, str(tmp_path), echo=lambda *a: None)
    assert r["ok"], [c for c in r["checks"] if not c["ok"]]
    assert r["fabric"]["host_backend"] == "docker"
    w, = r["workloads"]
    assert sorted(j["job"] for j in w["jobs"]) == ["job-a", "job-b"] and all(j["ok"] for j in w["jobs"]), w["jobs"]
    checks = [c["name"] for c in r["checks"]]
    assert sum(c.endswith(": correct") for c in checks) == 4 and any(c.endswith("job bytes") for c in checks), checks
    assert w["job_bytes_deviation"] <= 0.02, w["job_bytes_deviation"]


@pytest.mark.slow
def test_diloco_runs_on_docker_hosts_with_every_replica_exact(client, host_image, tmp_path):
    """Low-communication training across two sites, each rank in its own container: every variant's replicas
    bit-equal to the numpy reference, and DiLoCo's WAN bytes 1/H of DDP's, as on namespaces."""
    doc = scenario.load(os.path.join(ROOT, "scenarios", "diloco.yaml"), ["hosts=docker"])
    r = runner.run(doc, str(tmp_path), echo=lambda *a: None)
    assert r["ok"], [c for c in r["checks"] if not c["ok"]]
    assert r["fabric"]["host_backend"] == "docker"
    w, = r["workloads"]
    assert w["variants"] and all(not v["replicas"]["wrong"] and v["replicas"]["outer_agree"] for v in w["variants"])
    mine = {c["name"].split(": ", 1)[1] for c in r["checks"] if c["name"].startswith(w["name"] + ": ")}
    assert {"replicas exact", "diloco wan bytes"} <= mine
