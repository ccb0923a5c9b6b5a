"""A fabric's bridges go one transaction each, with a pause between: one transaction for them all holds the
userspace datapath's forwarding, other fabrics' too, for as long as it takes (docs/ecn.md)."""
from testbed.fabric import ovs


def test_bridges_are_deleted_one_transaction_each_with_a_pause_between(monkeypatch):
    calls, pauses = [], []
    monkeypatch.setattr(ovs, "vsctl", lambda *args, **kw: calls.append(args) or "")
    monkeypatch.setattr(ovs.time, "sleep", pauses.append)
    ovs.delete_bridges(["tb-rail0", "tb-rail1", "tb-spine0"])
    assert calls == [("--if-exists", "del-br", br) for br in ("tb-rail0", "tb-rail1", "tb-spine0")]
    assert len(pauses) == 3 and all(p > 0 for p in pauses)
