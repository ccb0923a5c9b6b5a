import os
import random

import pytest

from hosts.rdma import Access, QPType, open_device
from hosts.rdma.transport import MemoryFabric


class Pair:
    """Two uroce devices on one in-process fabric, with an RC QP connected between them."""

    def __init__(self, fabric=None, size=1 << 20, **qp_opts):
        self.fabric = fabric or MemoryFabric()
        self.a = open_device("10.9.0.1", backend="uroce", transport=self.fabric.attach("10.9.0.1"))
        self.b = open_device("10.9.0.2", backend="uroce", transport=self.fabric.attach("10.9.0.2"))
        self.pa, self.pb = self.a.alloc_pd(), self.b.alloc_pd()
        self.ca, self.cb = self.a.create_cq(), self.b.create_cq()
        self.src = bytearray(os.urandom(size))
        self.dst = bytearray(size)
        self.ma = self.pa.reg_mr(self.src, Access.ALL)
        self.mb = self.pb.reg_mr(self.dst, Access.ALL)
        self.qa = self.a.create_qp(self.pa, QPType.RC, self.ca, **qp_opts)
        self.qb = self.b.create_qp(self.pb, QPType.RC, self.cb, **qp_opts)
        self.qa.connect(self.qb.info())
        self.qb.connect(self.qa.info())

    def close(self):
        errs = (self.a.last_error, self.b.last_error)
        self.a.close()
        self.b.close()
        assert errs == (None, None), f"engine errors: {errs}"


@pytest.fixture
def make_pair():
    made = []

    def make(**kw):
        p = Pair(**kw)
        made.append(p)
        return p
    yield make
    for p in made:
        p.close()


@pytest.fixture
def rng():
    return random.Random(1234)
