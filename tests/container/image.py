#!/usr/bin/python3
"""The dscache image for the `container` suite, made without any image registry: a Debian 12
base from debootstrap (`podman import` of its tar), then the repository's Containerfile built on
it with podman (buildah inside).

Everything podman depends on is given on its command line, not taken from the host's
containers.conf or storage.conf: its own storage under the cache dir (CACHE/storage, overlay;
vfs where the cache dir itself is on overlayfs), cgroupfs, runc where installed (crun refuses a
hybrid cgroup v1/v2 host: "cgroups in hybrid mode not supported"), the file events backend, and
ulimits no higher than this process's hard limits (podman's defaults of 1048576 open files and
processes need CAP_SYS_RESOURCE to set: "setrlimit RLIMIT_NOFILE: Operation not permitted").

Reuse between runs, all keyed by what they are made of: the base image stays in the storage
(made once); podman's layer cache redoes the setup-deps layer only when scripts/setup-deps or the
base changes and the compile layer only when the source tree does; the host's apt archive
(/var/cache/apt/archives) is the build's and debootstrap's download cache; the host's ccache
directory is mounted into the compile (the Containerfile's CCACHE_DIR), so objects the host's own
build made are reused where the toolchain and headers are the same packages.

The cache dir: $DSCACHE_CONTAINER_CACHE, else /var/tmp/dscache-container (root) or
~/.cache/dscache-container. Delete it to start over (a new base from today's Debian)."""

import fcntl
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # testrunner.py

from testrunner import Failure, Skip  # noqa: E402

BASE_TAG = "localhost/dscache-base:bookworm"
IMAGE_TAG = "localhost/dscache:container-test"
APT_ARCHIVES = Path("/var/cache/apt/archives")
DEFAULT_MIRROR = "http://deb.debian.org/debian"


def log(msg):
    print(f"container: {msg}", flush=True)


def cache_dir():
    env = os.environ.get("DSCACHE_CONTAINER_CACHE")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/tmp/dscache-container")
    return Path.home() / ".cache" / "dscache-container"


def tail(text, lines=60):
    return "\n".join(text.splitlines()[-lines:])


def host_mirror():
    """The Debian mirror the host's apt uses (the first URI of its debian.sources or a
    `deb ... bookworm` line of sources.list), so the base comes from the same archive the host's
    packages did; $DSCACHE_DEBIAN_MIRROR overrides it."""
    if os.environ.get("DSCACHE_DEBIAN_MIRROR"):
        return os.environ["DSCACHE_DEBIAN_MIRROR"]
    deb822 = Path("/etc/apt/sources.list.d/debian.sources")
    if deb822.exists():
        for line in deb822.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    listfile = Path("/etc/apt/sources.list")
    if listfile.exists():
        for line in listfile.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb" and parts[2] == "bookworm":
                return parts[1]
    return DEFAULT_MIRROR


def ulimit_args():
    """--ulimit values a container may have here: this process's hard limits (RLIMIT_NPROC also
    no more than kernel.pid_max, which podman lowers its own limit to)."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    try:
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    except OSError:
        pid_max = 32768
    nofile = 1048576 if nofile == resource.RLIM_INFINITY else nofile
    nproc = min(pid_max if nproc == resource.RLIM_INFINITY else nproc, pid_max)
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]


def fs_type(path):
    p = subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True)
    return p.stdout.strip()


class Podman:
    """podman with this suite's storage and settings; see the module's docstring."""

    def __init__(self, cache):
        self.cache = cache
        cache.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            runroot = Path("/run/dscache-container")
        else:
            runtime_dir = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/dscache-run-{os.getuid()}"
            runroot = Path(runtime_dir) / "dscache-container"
        driver = "vfs" if fs_type(cache) == "overlayfs" else "overlay"
        self.globals = ["podman", "--root", str(cache / "storage"), "--runroot", str(runroot),
                        "--storage-driver", driver, "--cgroup-manager", "cgroupfs",
                        "--events-backend", "file"]
        if shutil.which("runc"):
            self.globals += ["--runtime", "runc"]
        self.limits = ulimit_args()

    def cmd(self, args, timeout=300, check=True, stdin=None):
        p = subprocess.run(self.globals + [str(a) for a in args], capture_output=True,
                           text=True, errors="replace", timeout=timeout, stdin=stdin)
        if check and p.returncode != 0:
            raise Failure(f"podman {' '.join(map(str, args))}: exit {p.returncode}\n"
                          f"{tail(p.stdout)}\n{tail(p.stderr)}")
        return p

    def exists(self, image):
        return self.cmd(["image", "exists", image], check=False).returncode == 0

    def run(self, image, argv, volumes=(), check=True, timeout=300):
        """`podman run --rm` of argv in image, with no network; volumes: (host, container)."""
        args = ["run", "--rm", "--network", "none", *self.limits]
        for host, inside in volumes:
            args += ["--volume", f"{host}:{inside}"]
        return self.cmd(args + [image] + list(argv), timeout=timeout, check=check)


def make_base(podman):
    """BASE_TAG: debootstrap --variant=minbase bookworm, the host's Debian apt sources (so the
    image's packages are the versions the host's are), imported. Made once per cache dir, under a
    lock (suites in several build dirs may share the cache)."""
    if podman.exists(BASE_TAG):
        return 0.0
    if not shutil.which("debootstrap"):
        raise Skip("debootstrap is not installed (scripts/setup-deps --container installs it)")
    with open(podman.cache / "base.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if podman.exists(BASE_TAG):
            return 0.0
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(dir=podman.cache, prefix="rootfs-") as d:
            root = Path(d) / "root"
            cmd = ["debootstrap", "--variant=minbase"]
            if os.geteuid() == 0 and os.access(APT_ARCHIVES, os.W_OK):
                cmd.append(f"--cache-dir={APT_ARCHIVES}")
            cmd += ["bookworm", str(root), host_mirror()]
            if os.geteuid() != 0:  # rootless: root in podman's user namespace
                cmd = podman.globals + ["unshare"] + cmd
            p = subprocess.run(cmd, capture_output=True, text=True, errors="replace",
                               timeout=1200)
            if p.returncode != 0:
                raise Failure(f"{' '.join(cmd)}: exit {p.returncode}\n{tail(p.stdout)}\n"
                              f"{tail(p.stderr)}")
            # As Debian's official images do (docker-apt-speedup): dpkg does not fsync every
            # file it unpacks; an interrupted build is redone anyway.
            (root / "etc/dpkg/dpkg.cfg.d/dscache-unsafe-io").write_text("force-unsafe-io\n")
            sources = Path("/etc/apt/sources.list.d/debian.sources")
            if sources.exists():
                shutil.copy(sources, root / "etc/apt/sources.list.d/debian.sources")
                (root / "etc/apt/sources.list").unlink(missing_ok=True)
            tar = ["tar", "-C", str(root), "-c", "."]
            if os.geteuid() != 0:
                tar = podman.globals + ["unshare"] + tar
            with subprocess.Popen(tar, stdout=subprocess.PIPE) as t:
                podman.cmd(["import", "-", BASE_TAG], stdin=t.stdout, timeout=600)
            if os.geteuid() != 0:  # files owned by mapped ids: remove them in the namespace
                subprocess.run(podman.globals + ["unshare", "rm", "-rf", str(root)])
        return time.monotonic() - t0


def ccache_dir(podman):
    """The host's ccache directory (`ccache -k cache_dir`), else one in the cache dir."""
    if shutil.which("ccache"):
        p = subprocess.run(["ccache", "-k", "cache_dir"], capture_output=True, text=True)
        if p.returncode == 0 and p.stdout.strip():
            d = Path(p.stdout.strip())
            d.mkdir(parents=True, exist_ok=True)
            return d
    d = podman.cache / "ccache"
    d.mkdir(exist_ok=True)
    return d


def build_image(podman, source_root, logfile):
    """podman build of source_root/Containerfile on BASE_TAG into IMAGE_TAG; the build's output
    goes to logfile. Returns the seconds it took."""
    args = ["build", "--network", "host", *podman.limits,
            "--volume", f"{ccache_dir(podman)}:/ccache",
            "--build-arg", f"BASE={BASE_TAG}", "--build-arg", "CCACHE_DIR=/ccache",
            "--build-arg", f"JOBS={os.environ.get('DSCACHE_CONTAINER_JOBS', os.cpu_count() or 1)}"]
    if os.geteuid() == 0 and os.access(APT_ARCHIVES, os.W_OK):
        args += ["--volume", f"{APT_ARCHIVES}:{APT_ARCHIVES}"]
    # ccache hashes these: the host's values give the host build's keys.
    for var in ("LANG", "LC_ALL", "LC_CTYPE", "LC_MESSAGES"):
        if var in os.environ:
            args += ["--build-arg", f"{var}={os.environ[var]}"]
    args += ["-t", IMAGE_TAG, "-f", str(source_root / "Containerfile"), str(source_root)]
    t0 = time.monotonic()
    # Each line of the build's output with the seconds since the build began.
    with open(logfile, "w") as out, subprocess.Popen(
            podman.globals + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, errors="replace") as p:
        for line in p.stdout:
            out.write(f"[{time.monotonic() - t0:6.0f}s] {line}")
    seconds = time.monotonic() - t0
    if p.returncode != 0:
        raise Failure(f"podman build: exit {p.returncode}; its last lines:\n"
                      f"{tail(Path(logfile).read_text(errors='replace'), 80)}")
    # What no tag needs any more: the image the tag named before, the layers of failed or
    # killed builds (the layers of the tagged image stay, podman's cache for the next build).
    podman.cmd(["image", "prune", "--force"], check=False, timeout=600)
    return seconds
