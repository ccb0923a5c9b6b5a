"""`testbed cli` (and `testbed up --cli`): an interactive console on the fabric that is up, like Mininet's.

    testbed> pingall
    testbed> link s1g0 rail0 down
    testbed> s0g0 ping -c1 s1g0          (a host's name first: a command in it; other hosts' names become addresses)
    testbed> iperf s0g0 s1g1

Built on Python's cmd module, with readline history (~/.testbed_history) and tab completion of commands and
node names. It works from any process, as `testbed exec` and `testbed fault` do: through the run's state file.
"""
from __future__ import annotations

import cmd
import json
import os
import re
import time

from testbed.cli.errors import UsageError
from testbed.cli.live import LiveFabric, attach, names, require_root
from testbed.fabric.links import sysname

HISTORY = os.path.expanduser("~/.testbed_history")
IPERF_PORT = 5399       # away from iperf3's default, which workloads may use


def register(subparsers) -> None:
    p = subparsers.add_parser("cli", help="an interactive console on the running fabric (pingall, iperf, link, ...)")
    p.set_defaults(func=lambda args: run_console())


def run_console() -> int:
    live = attach()
    require_root("cli")
    Console(live).loop()
    return 0


class Console(cmd.Cmd):
    prompt = "testbed> "

    def __init__(self, live: LiveFabric, stdin=None, stdout=None):
        super().__init__(stdin=stdin, stdout=stdout)
        self.live, self.fabric = live, live.fabric
        c = self.fabric.counts()
        self.intro = (f"{self.fabric.kind}: {c['servers']} servers x {c['gpus_per_server']} GPUs, {c['hosts']} hosts, "
                      f"{c['switches']} switches. Type help or ?; exit (or Ctrl-D) leaves.")

    # -- the loop -----------------------------------------------------------------------------
    def loop(self) -> None:
        readline = _readline()
        if readline:
            readline.set_history_length(1000)
            try:
                readline.read_history_file(HISTORY)
            except OSError:
                pass
        try:
            while True:
                try:
                    self.cmdloop()
                    break
                except KeyboardInterrupt:       # Ctrl-C drops the line (or the command), not the console
                    self.say("^C")
                    self.intro = ""
        finally:
            if readline:
                try:
                    readline.write_history_file(HISTORY)
                except OSError:
                    pass

    def say(self, text: str = "") -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def onecmd(self, line: str) -> bool:
        try:
            return super().onecmd(line)
        except UsageError as exc:
            self.say(f"error: {exc}")
        except Exception as exc:    # a failed command leaves the console running
            self.say(f"error: {type(exc).__name__}: {exc}")
        return False

    def emptyline(self) -> bool:
        return False                # not cmd's default (repeat the last command)

    def default(self, line: str) -> bool:
        host, _, rest = line.partition(" ")
        if host in self.fabric.hosts and rest.strip():
            return self.do_exec(line)
        self.say(f"unknown command {host!r}; commands: {', '.join(self.commands())}; "
                 f"or HOST COMMAND with a host of: {names(self.fabric.hosts)}")
        return False

    def get_names(self) -> list[str]:
        return [n for n in super().get_names() if n != "do_EOF"]      # Ctrl-D, not a command to list

    def commands(self) -> list[str]:
        return sorted(n[3:] for n in self.get_names() if n.startswith("do_"))

    # -- commands -----------------------------------------------------------------------------
    def do_pingall(self, arg: str) -> bool:
        """pingall: one ping between every pair of hosts the fabric connects (not idle spares; not across rails
        on a rail-only fabric), all sources at once."""
        hosts = list(self.fabric.hosts.values())
        targets = {h.name: [d for d in hosts if self.fabric.nic_reachable(h, d)] for h in hosts}
        procs = {src: self.live.popen(src, " ".join(
            f"ping -c1 -W1 -q {d.ip} >/dev/null 2>&1 && echo ok || echo X;" for d in dsts))
            for src, dsts in targets.items() if dsts}
        self.say(f"*** Ping: testing reachability of {sum(len(d) for d in targets.values())} pairs")
        sent = received = 0
        for src, proc in procs.items():
            out = proc.communicate()[0].split()
            marks = [d.name if mark == "ok" else "X" for d, mark in zip(targets[src], out)]
            marks += ["X"] * (len(targets[src]) - len(marks))
            self.say(f"{src} -> {' '.join(marks)}")
            sent, received = sent + len(marks), received + sum(m != "X" for m in marks)
        dropped = 100 * (sent - received) / sent if sent else 0
        self.say(f"*** Results: {dropped:.0f}% dropped ({received}/{sent} received)")
        return False

    def do_iperf(self, arg: str) -> bool:
        """iperf CLIENT SERVER [SECONDS]: TCP throughput from CLIENT to SERVER with iperf3 (default 2 s)."""
        args = arg.split()
        if len(args) not in (2, 3):
            raise UsageError("usage: iperf CLIENT SERVER [SECONDS]")
        client, server = (self.live.check_host(h) for h in args[:2])
        seconds = _positive(args[2] if len(args) == 3 else "2", "SECONDS")
        ip = self.fabric.hosts[server].ip
        srv = self.live.popen(server, f"exec timeout {seconds + 30:g} iperf3 -s -1 -p {IPERF_PORT}")
        try:
            result = self._iperf_client(client, ip, seconds)
        finally:
            if srv.poll() is None:
                srv.terminate()
            srv.wait()
        end = result["end"]
        got = end["sum_received"]["bits_per_second"] / 1e6
        self.say(f"*** iperf {client} -> {server} ({ip}): {got:.2f} Mbit/s received, "
                 f"{end['sum_sent']['bits_per_second'] / 1e6:.2f} Mbit/s sent, {seconds:g} s")
        return False

    def _iperf_client(self, client: str, ip: str, seconds: float) -> dict:
        """The client's JSON report; it retries while the server is not listening yet."""
        deadline = time.monotonic() + 10
        while True:
            out = self.live.run(client, f"iperf3 -c {ip} -p {IPERF_PORT} -t {seconds:g} -J --connect-timeout 2000",
                                timeout=seconds + 30).stdout
            try:
                result = json.loads(out)
            except ValueError:
                raise UsageError(f"iperf3 in {client}: {out.strip()[:200] or 'no output'}") from None
            if "error" not in result:
                return result
            if time.monotonic() > deadline or "refused" not in result["error"]:
                raise UsageError(f"iperf3 {client} -> {ip}: {result['error']}")
            time.sleep(0.3)

    def do_link(self, arg: str) -> bool:
        """link A B down|up: cut or mend the cable between nodes A and B (as `testbed fault` does)."""
        from testbed.faults import FaultError, cut
        args = arg.split()
        if len(args) != 3 or args[2] not in ("down", "up"):
            raise UsageError("usage: link A B down|up")
        target = link_target(self.fabric, args[0], args[1])
        try:
            rec = cut.inject(self.live.net, target, up=args[2] == "up")
        except FaultError as exc:
            raise UsageError(str(exc)) from None
        self.say(f"{args[0]} - {args[1]}: {args[2]} ({rec['links']} link{'s' if rec['links'] != 1 else ''})")
        return False

    def do_hosts(self, arg: str) -> bool:
        """hosts: every host with its NIC (eth0) and HB (eth1) addresses."""
        for h in self.fabric.hosts.values():
            self.say(f"{h.name:<12} {h.kind:<6} eth0 {h.ip}" + (f"  eth1 {h.hb_ip}" if h.hb_ip else ""))
        return False

    def do_links(self, arg: str) -> bool:
        """links: every cable, its kind, rate and state now."""
        for l in self.live.links():
            self.say(f"{l['ends'][0]:<16} {l['ends'][1]:<16} {l['kind']:<9} {l['mbps']:>8g} Mb/s  {l['state']}"
                     + (" (standby)" if l["standby"] else ""))
        return False

    def do_dump(self, arg: str) -> bool:
        """dump: every node: hosts with addresses and PIDs, switches with their bridges, the controller."""
        pids, state = self.live.state.get("host_pids", {}), self.live.state
        for h in self.fabric.hosts.values():
            hb = f",eth1:{h.hb_ip}" if h.hb_ip else ""
            self.say(f"<Host {h.name}: eth0:{h.ip}{hb} pid={pids.get(h.name)}>")
        for s in self.fabric.switches.values():
            ports = sum(1 for l in self.fabric.links if s.name in (l.a, l.b))
            self.say(f"<OVSSwitch {s.name} ({sysname(s.name)}): {ports} ports dpid={s.dpid:016x}>" if s.sdn
                     else f"<LinuxBridge {s.name} ({sysname(s.name)}): {ports} ports>")
        self.say(f"<Controller pid={state.get('controller_pid')} routing={state.get('live', {}).get('routing', '?')}>")
        return False

    def do_exec(self, arg: str) -> bool:
        """exec HOST CMD (or HOST CMD): run a shell command in a host; other hosts' names become their addresses."""
        host, _, command = arg.strip().partition(" ")
        if not command.strip():
            raise UsageError("usage: exec HOST COMMAND")
        self.live.check_host(host)
        command = re.sub(r"\b[\w-]+\b", lambda m: self.fabric.hosts[m.group()].ip
                         if m.group() in self.fabric.hosts else m.group(), command)
        proc = self.live.run(host, command)
        self.stdout.write(proc.stdout)
        if proc.returncode:
            self.say(f"(exit status {proc.returncode})")
        return False

    def do_exit(self, arg: str) -> bool:
        """exit: leave the console."""
        return True

    do_quit = do_exit

    def do_EOF(self, arg: str) -> bool:
        self.say()
        return True

    # -- completion ---------------------------------------------------------------------------
    def _nodes(self, text: str) -> list[str]:
        return [n for n in [*self.fabric.hosts, *self.fabric.switches] if n.startswith(text)]

    def completedefault(self, text, line, begidx, endidx) -> list[str]:
        return self._nodes(text)

    def complete_link(self, text, line, begidx, endidx) -> list[str]:
        if len(line[:begidx].split()) == 3:
            return [w for w in ("down", "up") if w.startswith(text)]
        return self._nodes(text)

    def complete_iperf(self, text, line, begidx, endidx) -> list[str]:
        return [n for n in self.fabric.hosts if n.startswith(text)]

    complete_exec = complete_iperf

    def completenames(self, text, *ignored) -> list[str]:
        return super().completenames(text, *ignored) + [h for h in self.fabric.hosts if h.startswith(text)]


def link_target(fabric, a: str, b: str) -> str:
    """The `testbed fault` target of the cable between nodes a and b (HOST/nic, HOST/hb or SWITCH-SWITCH)."""
    for node in (a, b):
        if node not in fabric.hosts and node not in fabric.switches:
            raise UsageError(f"no node {node!r}; hosts: {names(fabric.hosts)}; switches: {names(fabric.switches)}")
    found = [l for l in fabric.links if {l.a, l.b} == {a, b}]
    if not found:
        peers = [l.b if l.a == a else l.a for l in fabric.links if a in (l.a, l.b)]
        raise UsageError(f"no cable between {a} and {b}; {a} is cabled to {names(peers)}")
    host = a if a in fabric.hosts else b if b in fabric.hosts else None
    if host:
        return f"{host}/{'hb' if found[0].kind == 'hb' else 'nic'}"
    return f"{a}-{b}"


def _positive(raw: str, what: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = -1
    if not 0 < value <= 600:
        raise UsageError(f"{what}: {raw!r} is not a number of seconds between 0 and 600")
    return value


def _readline():
    try:
        import readline
        return readline
    except ImportError:     # no line editing on this Python: the console still works
        return None
