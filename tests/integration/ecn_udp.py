"""UDP flows with a chosen IP TOS, for the ECN fabric test (run inside an emulated host).

    ecn_udp.py send DEST PORT TOS MBPS SECONDS      paced datagrams of SIZE bytes, TOS's ECN bits as given; prints
                                                    JSON: how many it sent and how late it fell behind its pace
    ecn_udp.py receive PORT SECONDS                 prints JSON: per TOS value, how many datagrams came
"""
import json
import socket
import sys
import time

SIZE = 1400


def send(dest: str, port: int, tos: int, mbps: float, seconds: float) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
    gap, payload, start = SIZE * 8 / (mbps * 1e6), bytes(SIZE), time.monotonic()
    k, late = 0, 0.0
    while time.monotonic() - start < seconds:
        due = start + k * gap
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        late = max(late, now - due)
        s.sendto(payload, (dest, port))
        k += 1
    print(json.dumps({"sent": k, "late_s": round(late, 3)}), flush=True)


def receive(port: int, seconds: float) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    s.bind(("0.0.0.0", port))
    s.settimeout(0.2)
    counts: dict[str, int] = {}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            _, anc, _, _ = s.recvmsg(SIZE, socket.CMSG_SPACE(4))
        except socket.timeout:
            continue
        tos = next((data[0] for level, kind, data in anc if level == socket.IPPROTO_IP and kind == socket.IP_TOS), -1)
        counts[str(tos)] = counts.get(str(tos), 0) + 1
    print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "send":
        send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6]))
    else:
        receive(int(sys.argv[2]), float(sys.argv[3]))
