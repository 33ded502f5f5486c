"""The machine a benchmark ran on, for its --json output: core count, Python, CPU model, memory
and Debian version, read from /proc and /etc (whatever of them can be read)."""
import os
import platform


def host_info(**extra):
    info = {"nproc": os.cpu_count(), "python": platform.python_version()}
    info.update(extra)
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            info["mem_gib"] = round(int(f.readline().split()[1]) / 1024 / 1024, 1)
        with open("/etc/debian_version") as f:
            info["debian"] = f.read().strip()
    except OSError:
        pass
    return info
