"""Closing a communicator does not wait out its completion forwarders' poll timeout (0.5 s): their queues stop
waiting first, so a rank's teardown after the job costs no fixed half second. Forwarders serve devices whose
completion queues cannot deliver to the communicator themselves (kernel rxe); here a uroce device's CQ is made
to look like one."""
import time

from hosts.collectives import Communicator, FileStore, Peer
from hosts.rdma import WC, WCOpcode, WCStatus, open_device
from hosts.rdma.transport import MemoryFabric


def test_close_returns_without_waiting_out_the_forwarders_poll(tmp_path):
    fabric = MemoryFabric()
    peers = [Peer(rank=r, name=f"s0g{r}", ip=f"10.11.0.{r + 1}", hb_ip="", server=0, local_rank=r) for r in range(2)]

    def polled_only(ip):
        dev = open_device(ip, backend="uroce", transport=fabric.attach(ip))
        create_cq = dev.create_cq

        def cq_without_delivery(*args, **kw):
            cq = create_cq(*args, **kw)
            cq.deliver_to = None
            return cq
        dev.create_cq = cq_without_delivery
        return dev

    comm = Communicator(peers[0], peers, FileStore(str(tmp_path), timeout=5), polled_only, timeout=5)
    comm.device("nic")
    forwarders = list(comm._forwarders)
    assert forwarders
    time.sleep(0.05)                         # the forwarder is inside its wait
    t0 = time.monotonic()
    comm.close(linger=0)
    took = time.monotonic() - t0
    assert not any(f.is_alive() for f in forwarders)
    assert took < 0.3, f"close took {took:.2f} s"


def test_uroce_completions_go_straight_to_the_progress_engine(tmp_path):
    """A uroce CQ hands its completions to the communicator's queue itself: no forwarding thread, one wake-up."""
    fabric = MemoryFabric()
    peers = [Peer(rank=r, name=f"s0g{r}", ip=f"10.11.0.{r + 1}", hb_ip="", server=0, local_rank=r) for r in range(2)]
    comm = Communicator(peers[0], peers, FileStore(str(tmp_path), timeout=5),
                        lambda ip: open_device(ip, backend="uroce", transport=fabric.attach(ip)), timeout=5)
    try:
        _, _, cq = comm.device("nic")
        assert comm._forwarders == []
        wc = WC(wr_id=3, status=WCStatus.SUCCESS, opcode=WCOpcode.RECV, byte_len=0, qp_num=1)
        cq._push(wc)
        assert comm.completions.get(timeout=1) == ("nic", wc)
    finally:
        comm.close(linger=0)
