"""RC reliability of uroce: requester and responder.

The rules follow the InfiniBand rules as Linux rxe implements them: 24-bit PSNs, AckReq on
the last packet of a message (and every `ack_every` packets), coalesced ACKs, a NAK (PSN sequence
error) on a gap, retransmission after `timeout` seconds without progress, at most `retry_cnt` times,
go-back-N by default or selective retransmission of the NAKed packet. A responder reorder window
buffers up to `reorder_window` packets ahead of the expected PSN for `reorder_timeout` seconds before
it NAKs, so per-packet spraying over unequal paths does not cause spurious retransmissions.
Internally PSNs are unbounded sequence numbers; the wire PSN is (initial PSN + seq) mod 2^24.
"""
from . import headers as H
from .rc_requester import Requester
from .rc_responder import Responder

_RESP_OPS = {H.READ_RESP_FIRST, H.READ_RESP_MIDDLE, H.READ_RESP_LAST, H.READ_RESP_ONLY, H.ACKNOWLEDGE}


class ReliableConnection(Requester, Responder):
    """Mixin of uroce.Device: RC transmit, timers, completions and receive (run under the device lock); the
    requester's side in rc_requester.py, the responder's in rc_responder.py."""
