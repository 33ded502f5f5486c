#!/usr/bin/python3
"""A private single-node Slurm cluster in a temporary directory, for the `slurm` test suite.

Nothing global is touched: the cluster has its own slurm.conf, munge key, munged socket, state
and spool directories, pid and log files, all under one directory, and ports that were free when
it started. Every client command finds it through SLURM_CONF (Cluster.env), and the jobs inherit
that variable (sbatch's default --export=ALL), so `sbatch` inside a job reaches the same cluster.
The daemons run in the foreground as children of the test, in its process group, and are stopped
by their pids (Cluster.stop, also when a test fails: use `with Cluster(dir) as c:`); a test that
meson times out loses them with its process group.

Plugins are the ones that need no root-owned host setup: proctrack/linuxproc (no cgroups),
task/none, select/cons_tres with CR_CPU, no accounting. The daemons run as the test's user
(SlurmUser = SlurmdUser = it; root in CI), and so do the jobs.

Start failures that mean "this machine cannot run Slurm" (a daemon missing, a daemon exiting at
start, the node never coming up) raise testrunner.Skip with the reason and the daemon's log tail.
"""

import os
import pwd
import random
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import testrunner
from testrunner import Failure, Skip

DAEMONS = ["munged", "slurmctld", "slurmd"]
CLIENTS = ["sbatch", "srun", "scancel", "scontrol", "squeue", "sinfo"]
START_TIMEOUT_S = 60


def free_ports(n):
    """n TCP ports that were free a moment ago (bound to port 0, then released together so that
    no two are the same)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def first_job_id():
    """A FirstJobId whose first jobs' trainer ports are free: dscache-train under srun listens on
    20000 + job id % 10000, and another cluster on this machine (a concurrent test run) starts
    its ids elsewhere, so two runs do not race for one port."""
    rng = random.Random()
    for _ in range(100):
        first = rng.randrange(10000, 1000000)
        ports = [20000 + (first + k) % 10000 for k in range(20)]
        if all(port_free(p) for p in ports):
            return first
    return first


def port_free(port):
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def real_memory_mb():
    """A RealMemory a little under MemTotal: slurmd drains a node that claims more than it has."""
    text = Path("/proc/meminfo").read_text()
    kib = int(re.search(r"^MemTotal:\s+(\d+) kB", text, re.M).group(1))
    return max(1, kib // 1024 * 9 // 10)


def node_cpus():
    """The CPUs this process may use (what `nproc` prints)."""
    return len(os.sched_getaffinity(0))


def tail(path, lines=25):
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"({path}: {e.strerror})"


class Cluster:
    """One slurmctld, one slurmd and one munged serving jobs on this machine.

    Owns the daemons it starts (stop() ends them by pid) and everything under `root`. Not
    thread-safe; one Cluster per test."""

    def __init__(self, root):
        self.root = Path(root)
        self.procs = {}  # daemon name -> Popen
        self.user = pwd.getpwuid(os.getuid()).pw_name
        self.node = socket.gethostname().split(".")[0]
        self.cpus = node_cpus()
        self.conf = self.root / "etc" / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.socket"
        self.log_dir = self.root / "log"

    # ----------------------------------------------------------------------------------------
    # Lifecycle.

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self):
        missing = [p for p in DAEMONS + CLIENTS if shutil.which(p, path=self._sbin_path()) is None]
        if missing:
            raise Skip(f"not installed: {' '.join(missing)} (scripts/setup-deps --slurm installs "
                       "Slurm and munge)")
        for d in ("etc", "munge", "log", "state", "spool", "run"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root / "munge", 0o700)
        self._start_munged()
        self._write_conf()
        self._start("slurmctld", ["slurmctld", "-D", "-f", self.conf],
                    self.log_dir / "slurmctld.log")
        self._wait(lambda: self._ctl_up(), "slurmctld to answer `scontrol ping`", "slurmctld")
        self._start("slurmd", ["slurmd", "-D", "-f", self.conf, "-N", self.node],
                    self.log_dir / "slurmd.log")
        self._wait(self._node_idle, f"node {self.node} to be idle", "slurmd")

    def stop(self):
        """Cancels what is still queued or running, then ends the daemons by pid (SIGTERM, then
        SIGKILL after 10 s), slurmd first so that its job steps are gone before slurmctld."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            subprocess.run(["scancel", "--full", "--user", self.user], env=self.env(),
                           capture_output=True, timeout=30)
            self._wait_quiet(15)
        for name in ("slurmd", "slurmctld", "munged"):
            p = self.procs.pop(name, None)
            if p is None or p.poll() is not None:
                continue
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        self._kill_stepds()

    # ----------------------------------------------------------------------------------------
    # Running commands against the cluster.

    def env(self, extra=None):
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.conf)
        env["PATH"] = self._sbin_path()
        for k in list(env):
            # An outer Slurm job's variables would leak into ours (sbatch reads SBATCH_*).
            if k.startswith(("SBATCH_", "SLURM_", "SALLOC_", "SRUN_")) and k != "SLURM_CONF":
                env.pop(k)
        env.update(extra or {})
        return env

    def run(self, args, expect_rc=0, env=None, cwd=None, timeout=60):
        return testrunner.run_cmd(args, expect_rc, env=self.env(env), cwd=cwd, timeout=timeout)

    def sbatch(self, args, env=None, cwd=None):
        """Submits with `sbatch --parsable ARGS`; returns the job id (str)."""
        p = self.run(["sbatch", "--parsable"] + list(args), env=env, cwd=cwd)
        return p.stdout.strip().split(";")[0]

    def job_states(self, job_id):
        """{job id (array tasks as 12_3): state} of the job and its array tasks, as
        `scontrol show job` has them (jobs stay listed for MinJobAge seconds after they end)."""
        p = self.run(["scontrol", "--oneliner", "show", "job", str(job_id)], expect_rc=None)
        states = {}
        for line in p.stdout.splitlines():
            f = dict(re.findall(r"(\w+)=(\S*)", line))
            if "JobId" not in f:
                continue
            key = f["JobId"]
            if f.get("ArrayTaskId") and f.get("ArrayJobId"):
                key = f"{f['ArrayJobId']}_{f['ArrayTaskId']}"
            states[key] = f.get("JobState", "?")
        return states

    def job_field(self, job_id, field):
        p = self.run(["scontrol", "--oneliner", "show", "job", str(job_id)])
        m = re.search(r"\b" + field + r"=(\S*)", p.stdout)
        return m.group(1) if m else None

    def wait_jobs(self, job_id, done, what, timeout=300):
        """Waits until done(states) is true, where states = job_states(job_id); returns them.
        Fails with the job's states and the daemons' log tails after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        states = {}
        while time.monotonic() < deadline:
            states = self.job_states(job_id)
            if states and done(states):
                return states
            self._check_daemons()
            time.sleep(0.5)
        raise Failure(f"timed out after {timeout}s waiting for {what}: job {job_id} states "
                      f"{states}\n{self.logs()}")

    def wait_finished(self, job_id, what, timeout=300):
        final = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                 "PREEMPTED", "BOOT_FAIL", "DEADLINE"}
        return self.wait_jobs(job_id, lambda s: all(v in final for v in s.values()), what,
                              timeout)

    def logs(self):
        return "\n".join(f"--- {n}.log ---\n{tail(self.log_dir / (n + '.log'))}"
                         for n in DAEMONS)

    # ----------------------------------------------------------------------------------------
    # Internals.

    @staticmethod
    def _sbin_path():
        path = os.environ.get("PATH", "/usr/bin:/bin")
        for d in ("/usr/sbin", "/sbin"):
            if d not in path.split(":"):
                path += ":" + d
        return path

    def _start(self, name, args, log):
        out = open(self.log_dir / f"{name}.out", "wb")
        try:
            self.procs[name] = subprocess.Popen([str(a) for a in args], env=self.env(),
                                                stdout=out, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, cwd=self.root)
        except OSError as e:
            raise Skip(f"{name} cannot start: {e}") from e
        finally:
            out.close()

    def _start_munged(self):
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o600)
        self._start("munged", [
            "munged", "--foreground", "--force", "--socket", self.munge_socket, "--key-file", key,
            "--pid-file", self.root / "run" / "munged.pid",
            "--log-file", self.log_dir / "munged.log",
            "--seed-file", self.root / "munge" / "munged.seed",
        ], self.log_dir / "munged.log")
        self._wait(lambda: self.munge_socket.exists(), "munged's socket", "munged")
        p = subprocess.run(["munge", "--socket", str(self.munge_socket), "--string", "ping"],
                           capture_output=True, timeout=10)
        if p.returncode != 0:
            raise Skip(f"munge cannot encode a credential through {self.munge_socket}: "
                       f"{p.stderr.decode(errors='replace').strip()}")

    def _write_conf(self):
        ctl_port, d_port = free_ports(2)
        r = self.root
        conf = f"""# Written by tests/slurm/cluster.py: a private single-node cluster.
ClusterName=dscachetest
FirstJobId={first_job_id()}
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={ctl_port}
SlurmdPort={d_port}
SlurmUser={self.user}
SlurmdUser={self.user}
AuthType=auth/munge
CredType=cred/munge
# cred_expire: also the wait before a requeued job may start again (default 120 s).
AuthInfo=socket={self.munge_socket},cred_expire=10
StateSaveLocation={r / 'state'}
SlurmdSpoolDir={r / 'spool'}
SlurmctldPidFile={r / 'run' / 'slurmctld.pid'}
SlurmdPidFile={r / 'run' / 'slurmd.pid'}
SlurmctldLogFile={self.log_dir / 'slurmctld.log'}
SlurmdLogFile={self.log_dir / 'slurmd.log'}
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1
MpiDefault=none
ReturnToService=2
JobRequeue=1
MinJobAge=600
KillWait=30
MailProg=/bin/true
SlurmdParameters=config_overrides
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={real_memory_mb()} State=UNKNOWN
PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
"""
        self.conf.write_text(conf)

    def _ctl_up(self):
        p = subprocess.run(["scontrol", "ping"], env=self.env(), capture_output=True, timeout=10)
        return p.returncode == 0 and b"UP" in p.stdout

    def _node_idle(self):
        p = subprocess.run(["sinfo", "--noheader", "--node", self.node, "--format", "%T"],
                           env=self.env(), capture_output=True, timeout=10)
        return p.returncode == 0 and p.stdout.strip() == b"idle"

    def _check_daemons(self, names=DAEMONS):
        for name in names:
            p = self.procs.get(name)
            if p is not None and p.poll() is not None:
                raise Failure(f"{name} exited ({p.returncode})\n{self.logs()}\n"
                              f"--- {name}.out ---\n{tail(self.log_dir / (name + '.out'))}")

    def _wait(self, ready, what, daemon):
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            p = self.procs[daemon]
            if p.poll() is not None:
                raise Skip(f"{daemon} exited ({p.returncode}) at start:\n"
                           f"{tail(self.log_dir / (daemon + '.out'))}\n"
                           f"{tail(self.log_dir / (daemon + '.log'))}")
            if ready():
                return
            time.sleep(0.2)
        raise Skip(f"{daemon} did not come up in {START_TIMEOUT_S}s (waiting for {what}):\n"
                   f"{self.logs()}")

    def _wait_quiet(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            p = subprocess.run(["squeue", "--noheader", "--format", "%i"], env=self.env(),
                               capture_output=True, timeout=10)
            if p.returncode != 0 or not p.stdout.strip():
                return
            time.sleep(0.5)

    def _kill_stepds(self):
        """slurmstepd outlives a killed slurmd; ours are the ones whose environment names our
        slurm.conf (it is passed to every step). Matched by that, never by name alone."""
        mark = f"SLURM_CONF={self.conf}".encode()
        for pid_dir in Path("/proc").iterdir():
            if not pid_dir.name.isdigit():
                continue
            try:
                cmd = (pid_dir / "cmdline").read_bytes()
                if not cmd.startswith(b"slurmstepd"):
                    continue
                if mark not in (pid_dir / "environ").read_bytes().split(b"\0"):
                    continue
                os.kill(int(pid_dir.name), signal.SIGKILL)
            except (OSError, ProcessLookupError):
                continue
