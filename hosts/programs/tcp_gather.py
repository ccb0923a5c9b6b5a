"""The smallest distributed program: every rank connects to rank 0 at MASTER_ADDR:MASTER_PORT (the torchrun
variables the `program` workload sets) and sends what it was told; rank 0 prints all of it as one JSON line. It
needs nothing beyond Python, so it runs in any host, the Docker host image's included.

    python hosts/programs/tcp_gather.py
"""
import json
import os
import socket
import sys
import time

KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "TB_HOST")


def main() -> int:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    mine = {k: os.environ[k] for k in KEYS}
    if rank == 0:
        with socket.create_server((addr, port)) as server:
            got = [mine]
            while len(got) < world:
                conn, _ = server.accept()
                with conn, conn.makefile() as f:
                    got.append(json.loads(f.readline()))
        print(json.dumps({"ranks": sorted(got, key=lambda g: int(g["RANK"])), "world": len(got)}))
        return 0
    deadline = time.monotonic() + 30
    while True:            # rank 0 may not listen yet
        try:
            with socket.create_connection((addr, port), timeout=5) as s:
                s.sendall((json.dumps(mine) + "\n").encode())
            return 0
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
