"""bench/allreduce, several nodes: libddp's TCP ring between node leaders
against Open MPI over TCP (`--mca btl self,tcp`) and gloo, one rank per
node, 2 to 4 "nodes" that are network namespaces on one bridge (made here
and removed, whatever happens). Beside them, what the link carries: one TCP
stream between two of the namespaces, iperf-style, measured in the same run.

  ring.py NODES SIZES ITERS REPEAT    (as root; NODES like "2 4")
Prints one line per measurement:
  "link bytes_per_s=X", "ring side=ddp|mpi|gloo nodes=N bytes=B mean_us=T".
Every wait is bounded; a side that fails prints "ring side=S nodes=N failed"."""
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
B = os.environ.get("B", "build")
BIN = os.path.join(ROOT, B, "bench", "allreduce")
DDPRUN = os.path.join(ROOT, B, "bin", "ddprun")
PY = "/usr/bin/python3"
LIMIT = 300  # seconds any one run may take


def sh(*cmd, ns=None, check=True, **kw):
    pre = ["nsenter", f"--net=/run/netns/{ns}"] if ns else []
    r = subprocess.run(pre + list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=60, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r


class Hosts:
    """N namespaces ddprb<tag>n<k> with 10.X.Y.k+1/24 on veths to a bridge
    in a hub namespace: private addresses that exist only here."""

    def __init__(self, n):
        self.tag = f"{os.getpid() % 1000}{random.randrange(100)}"
        self.hub = f"ddprb{self.tag}h"
        self.ns = [f"ddprb{self.tag}n{k}" for k in range(n)]
        net = f"10.{random.randrange(100, 250)}.{random.randrange(1, 250)}"
        self.addr = [f"{net}.{k + 1}" for k in range(n)]
        self.subnet = f"{net}.0/24"
        self.made = []

    def __enter__(self):
        try:
            for name in [self.hub] + self.ns:
                sh("ip", "netns", "add", name)
                self.made.append(name)
            sh("ip", "link", "add", "br0", "type", "bridge", ns=self.hub)
            sh("ip", "link", "set", "br0", "up", ns=self.hub)
            for k, name in enumerate(self.ns):
                v = f"vr{self.tag}{k}"
                sh("ip", "link", "add", v, "netns", self.hub, "type", "veth", "peer", "name",
                   "eth0", "netns", name)
                sh("ip", "link", "set", v, "master", "br0", ns=self.hub)
                sh("ip", "link", "set", v, "up", ns=self.hub)
                sh("ip", "link", "set", "lo", "up", ns=name)
                sh("ip", "addr", "add", f"{self.addr[k]}/24", "dev", "eth0", ns=name)
                sh("ip", "link", "set", "eth0", "up", ns=name)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *a):
        for name in reversed(self.made):
            sh("ip", "netns", "del", name, check=False)


def run_nodes(hosts, cmds, env_of):
    """Start cmds[k] in namespace k; returns node 0's stdout, or None when any
    node failed or ran past LIMIT (then every node is killed, by pid)."""
    procs = []
    for k, cmd in enumerate(cmds):
        env = dict(os.environ, **env_of(k))
        procs.append(subprocess.Popen(["nsenter", f"--net=/run/netns/{hosts.ns[k]}"] + cmd,
                                      env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True,
                                      start_new_session=True))
    outs = [None] * len(procs)

    def reader(k):
        outs[k] = procs[k].communicate()

    ts = [threading.Thread(target=reader, args=(k,)) for k in range(len(procs))]
    for t in ts:
        t.start()
    deadline = time.time() + LIMIT
    for t in ts:
        t.join(max(0.0, deadline - time.time()))
    ok = all(not t.is_alive() for t in ts)
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, 9)
    for t in ts:
        t.join(10)
    if not ok or any(p.returncode != 0 for p in procs):
        for k, p in enumerate(procs):
            if outs[k] and p.returncode != 0:
                sys.stderr.write(f"node {k} exited {p.returncode}: {outs[k][1][-2000:]}\n")
        return None
    return outs[0][0]


def free_port():
    return random.randrange(20000, 60000)


def link(hosts):
    """Bytes/s of one TCP stream from node 0 to node 1 (1 GiB, 4 MiB writes)."""
    port = free_port()
    total = 1 << 30
    recv = ("import socket,sys,time\n"
            "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            f"s.bind(('{hosts.addr[1]}', {port})); s.listen(1); print('up', flush=True)\n"
            "c,_=s.accept(); n=0; buf=bytearray(1<<22); t0=None\n"
            "while True:\n"
            "    k=c.recv_into(buf)\n"
            "    if not k: break\n"
            "    if t0 is None: t0=time.perf_counter()\n"
            "    n+=k\n"
            "print(n/(time.perf_counter()-t0))\n")
    send = ("import socket\n"
            f"c=socket.create_connection(('{hosts.addr[1]}', {port}), timeout=30)\n"
            f"b=bytes(1<<22)\n"
            f"for _ in range({total >> 22}): c.sendall(b)\n"
            "c.close()\n")
    r = subprocess.Popen(["nsenter", f"--net=/run/netns/{hosts.ns[1]}", PY, "-c", recv],
                         stdout=subprocess.PIPE, text=True)
    try:
        r.stdout.readline()
        sh(PY, "-c", send, ns=hosts.ns[0])
        out, _ = r.communicate(timeout=60)
        return float(out.strip())
    finally:
        if r.poll() is None:
            r.kill()
            r.wait()


def ddp(hosts, n, sizes, iters):
    port = free_port()
    cmds = [[DDPRUN, "--nnodes", str(n), "--node-rank", str(k), "--master-addr", hosts.addr[0],
             "--master-port", str(port), "--nproc-per-node", "1",
             os.path.join(BIN, "bench_allreduce"), "launched", sizes, iters]
            for k in range(n)]
    return run_nodes(hosts, cmds, lambda k: {"DDP_QUIET": "1"})


def gloo(hosts, n, sizes, iters):
    port = free_port()
    cmds = [[PY, os.path.join(HERE, "gloo_allreduce.py"), "launched", sizes, iters]
            for k in range(n)]
    return run_nodes(hosts, cmds, lambda k: {
        "RANK": str(k), "WORLD_SIZE": str(n), "MASTER_ADDR": hosts.addr[0],
        "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "eth0"})


def mpi(hosts, n, sizes, iters, tmp):
    # mpirun starts its daemons through an "rsh agent": this one enters the
    # namespace named by the host instead of logging in anywhere. routed=direct:
    # every daemon talks to mpirun itself (its tree routing cannot place
    # daemons that share mpirun's host name).
    agent = os.path.join(tmp, "nsagent")
    with open(agent, "w") as f:
        f.write("#!/bin/sh\n# Open MPI's rsh agent: HOST COMMAND... -> the command in HOST's netns\n"
                "while [ \"${1#-}\" != \"$1\" ]; do shift; done\n"
                f"h=$1; shift; exec nsenter --net=/run/netns/ddprb{hosts.tag}$h /bin/sh -c \"$*\"\n")
    os.chmod(agent, 0o755)
    hostlist = ",".join(f"n{k}:1" for k in range(n))
    cmd = ["mpirun", "--allow-run-as-root", "--host", hostlist, "-np", str(n),
           "--mca", "plm_rsh_agent", agent, "--mca", "btl", "self,tcp",
           "--mca", "routed", "direct", "--mca", "btl_tcp_if_include", hosts.subnet, "--mca", "oob_tcp_if_include",
           hosts.subnet, "--bind-to", "none",
           os.path.join(BIN, "mpi_coll"), "all_reduce", sizes, iters]
    return run_nodes(hosts, [cmd], lambda k: {})


def main():
    nodes = [int(x) for x in sys.argv[1].split()]
    sizes, iters, repeat = sys.argv[2], sys.argv[3], int(sys.argv[4])
    with tempfile.TemporaryDirectory() as tmp, Hosts(max(nodes)) as hosts:
        for _ in range(repeat):
            print(f"link bytes_per_s={link(hosts):.0f}", flush=True)
            for n in nodes:
                for side, fn in (("ddp", ddp), ("mpi", lambda h, n_, s, i: mpi(h, n_, s, i, tmp)),
                                 ("gloo", gloo)):
                    out = fn(hosts, n, sizes, iters)
                    if out is None:
                        # Open MPI's daemons now and then crash while starting
                        # (orted, SIGSEGV, before any rank runs): once more.
                        sys.stderr.write(f"ring.py: {side} x{n} failed, once more\n")
                        out = fn(hosts, n, sizes, iters)
                    if out is None:
                        print(f"ring side={side} nodes={n} failed", flush=True)
                        continue
                    for line in out.splitlines():
                        parts = dict(w.split("=", 1) for w in line.split()[1:] if "=" in w)
                        if "bytes" in parts and "mean_us" in parts:
                            print(f"ring side={side} nodes={n} bytes={parts['bytes']} "
                                  f"mean_us={parts['mean_us']}", flush=True)


if __name__ == "__main__":
    main()
