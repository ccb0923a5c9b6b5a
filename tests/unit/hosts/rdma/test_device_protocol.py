"""Both backends satisfy the Device protocol of hosts.rdma (what open_device returns): the user-space engine
for real (an instance on the in-memory fabric), the kernel rxe backend by its class (an instance needs a kernel
RDMA device; the integration test test_rdma_rxe.py opens one)."""
import ast
import inspect

import pytest

from hosts.rdma import Device, open_device
from hosts.rdma.rxe import RxeDevice
from hosts.rdma.transport import MemoryFabric
from hosts.rdma.uroce import Device as UroceDevice

METHODS = ["alloc_pd", "create_cq", "create_qp", "close", "__enter__", "__exit__"]
ATTRIBUTES = ["backend", "ip", "mtu", "name", "counters"]


def _accepts(impl, proto) -> list[str]:
    """What of the protocol method's call forms `impl` would refuse."""
    have = inspect.signature(impl).parameters
    problems = []
    for name, p in inspect.signature(proto).parameters.items():
        if p.kind is p.VAR_KEYWORD or p.kind is p.VAR_POSITIONAL:
            continue
        if name not in have and not any(q.kind is q.VAR_KEYWORD for q in have.values()):
            problems.append(f"no parameter {name}")
        elif name in have and p.default is not p.empty and have[name].default is have[name].empty:
            problems.append(f"{name} is required, the protocol's is optional")
    required = [n for n, q in have.items() if q.default is q.empty and q.kind in (q.POSITIONAL_ONLY, q.POSITIONAL_OR_KEYWORD,
                                                                                   q.KEYWORD_ONLY)]
    problems += [f"requires {n}" for n in required if n not in inspect.signature(proto).parameters]
    return problems


def _init_assigns(cls) -> set[str]:
    """self.X assigned in cls.__init__, and properties or class attributes of cls."""
    tree = ast.parse(inspect.getsource(cls.__init__).strip().replace("\n    ", "\n"))
    names = {t.attr for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets
             for t in ([t] if not isinstance(t, ast.Tuple) else t.elts)
             if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
    return names | {n for n in dir(cls) if not n.startswith("_")}


@pytest.mark.parametrize("cls", [UroceDevice, RxeDevice], ids=["uroce", "rxe"])
def test_backend_classes_provide_the_protocol(cls):
    for name in METHODS:
        assert callable(getattr(cls, name, None)), name
        assert _accepts(getattr(cls, name), getattr(Device, name)) == [], name
    assert set(ATTRIBUTES) <= _init_assigns(cls)
    assert cls.backend in ("uroce", "rxe")


def test_create_qp_takes_the_same_options_on_both_backends():
    def options(cls):
        return {n for n, p in inspect.signature(cls.create_qp).parameters.items() if p.kind is p.KEYWORD_ONLY}
    assert options(UroceDevice) == options(RxeDevice)


def test_an_open_uroce_device_is_a_device():
    dev = open_device("10.0.0.1", backend="uroce", transport=MemoryFabric().attach("10.0.0.1"))
    try:
        assert isinstance(dev, Device) and dev.backend == "uroce" and dev.ip == "10.0.0.1" and dev.mtu == 1024
    finally:
        dev.close(linger=0)


@pytest.mark.parametrize("method", ["poll", "wait", "stop_waiting"])
def test_both_completion_queues_offer_the_same_methods(method):
    from hosts.rdma import CompletionQueue
    from hosts.rdma.rxe import RxeCQ
    assert callable(getattr(RxeCQ, method, None)) and callable(getattr(CompletionQueue, method, None))
    assert list(inspect.signature(getattr(RxeCQ, method)).parameters) == \
        list(inspect.signature(getattr(CompletionQueue, method)).parameters)
