"""Closing a communicator does not wait out its completion forwarders' poll timeout (0.5 s): their queues stop
waiting first, so a rank's teardown after the job costs no fixed half second."""
import time

from hosts.collectives import Communicator, FileStore, Peer
from hosts.rdma import open_device
from hosts.rdma.transport import MemoryFabric


def test_close_returns_without_waiting_out_the_forwarders_poll(tmp_path):
    fabric = MemoryFabric()
    peers = [Peer(rank=r, name=f"s0g{r}", ip=f"10.11.0.{r + 1}", hb_ip="", server=0, local_rank=r) for r in range(2)]
    comm = Communicator(peers[0], peers, FileStore(str(tmp_path), timeout=5),
                        lambda ip: open_device(ip, backend="uroce", transport=fabric.attach(ip)), timeout=5)
    comm.device("nic")
    forwarders = list(comm._forwarders)
    time.sleep(0.05)                         # the forwarder is inside its wait
    t0 = time.monotonic()
    comm.close(linger=0)
    took = time.monotonic() - t0
    assert not any(f.is_alive() for f in forwarders)
    assert took < 0.3, f"close took {took:.2f} s"
