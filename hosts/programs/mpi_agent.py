"""mpirun's remote-shell agent for emulated hosts (`--mca plm_rsh_agent "python mpi_agent.py"`).

mpirun calls it as it would call ssh: `agent [ssh options] HOST WORD...`, the words being one shell command
(orted and its quoted arguments). HOST is a host's fabric address; the JSON file named by TB_MPI_HOSTS maps it
to the command prefix that enters that host (`nsenter --target PID --net -- env TMPDIR=...` for a namespace host:
its network and its own temporary folder), and the command runs there under `sh -c`, as a remote shell would
run it.
"""
import json
import os
import sys


def main(argv: list[str]) -> int:
    words = list(argv)
    while words and words[0].startswith("-"):       # ssh-style options mpirun may pass (-x, -T): none apply
        words.pop(0)
    if len(words) < 2:
        print("mpi_agent: usage: mpi_agent HOST COMMAND...", file=sys.stderr)
        return 255
    host, command = words[0], " ".join(words[1:])
    with open(os.environ["TB_MPI_HOSTS"]) as f:
        enter = json.load(f).get(host)
    if enter is None:
        print(f"mpi_agent: {host} is not a host of this job", file=sys.stderr)
        return 255
    os.execvp(enter[0], [*enter, "sh", "-c", command])
    return 255


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
