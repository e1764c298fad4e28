"""Hostile programs that attack the machine's resources rather than the verdicts: each is a correct solution whose
first call first grabs a resource (CPU, memory by every route, processes, disk, output) and holds it a while, so a
neighbour scored at the same time on the other worker meets it. Shared by the sandbox tests and
``benchmarks/bench_sandbox.py --memory``."""

from __future__ import annotations

import os
import re
import threading

# Each body runs once, at the program's first call, with ``MB`` (MiB to grab) and ``HOLD`` (seconds) bound.
GRABS = {
    # as many processes as the limit allows, each spinning
    "cpu": """
for _ in range(8):
    if os.fork() == 0:
        while True:
            pass
end = time.monotonic() + HOLD
while time.monotonic() < end:
    pass
""",
    # anonymous memory up to the address-space limit, touched
    "memory": """
keep = []
try:
    while True:
        keep.append(bytearray(b"x" * (16 << 20)))
except MemoryError:
    pass
time.sleep(HOLD)
""",
    # the same in several processes: each under the per-process limit, together far over it
    "forked-memory": """
for _ in range(6):
    if os.fork() == 0:
        keep = []
        try:
            for _ in range(MB // 16):
                keep.append(bytearray(b"x" * (16 << 20)))
        except MemoryError:
            pass
        time.sleep(HOLD + 5)
        os._exit(0)
time.sleep(HOLD)
""",
    # memfds written, never mapped: no address space used (each under the file-size limit)
    "memfd": """
chunk, fds = b"x" * (32 << 20), []
for _ in range(MB // 32):
    fds.append(os.memfd_create("hog"))
    os.write(fds[-1], chunk)
time.sleep(HOLD)
""",
    # memfds grown by fallocate: fast and unmapped
    "memfd-fallocate": """
fds = []
for _ in range(MB // 32):
    fds.append(os.memfd_create("hog"))
    os.posix_fallocate(fds[-1], 0, 32 << 20)
time.sleep(HOLD)
""",
    # SysV shared memory: segments filled through a mapping, detached, left in the IPC namespace
    "sysv-shm": """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.shmdt.argtypes = [ctypes.c_void_p]
for k in range(MB // 256):
    sid = libc.shmget(0, 256 << 20, 0o1600)
    if sid < 0:
        raise OSError(ctypes.get_errno(), "shmget")
    addr = libc.shmat(sid, None, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "shmat")
    ctypes.memset(addr, 1, 256 << 20)
    libc.shmdt(addr)
time.sleep(HOLD)
""",
    # POSIX shared memory and every writable tmpfs
    "shm-files": """
chunk, left = b"x" * (32 << 20), MB // 32
for folder in ("/dev/shm", "/tmp", "/sandbox", os.path.expanduser("~")):
    try:
        while left:
            with open(os.path.join(folder, f"hog{left}"), "wb") as f:
                f.write(chunk)
            left -= 1
    except OSError:
        pass
time.sleep(HOLD)
""",
    # as many processes as the limit allows
    "fork-bomb": """
try:
    while True:
        if os.fork() == 0:
            time.sleep(HOLD + 30)
            os._exit(0)
except OSError:
    pass
time.sleep(HOLD)
""",
    # gigabytes of output
    "output": """
line = "x" * 65536
end = time.monotonic() + HOLD
while time.monotonic() < end:
    print(line)
""",
}


def hog(kind: str, entry: str, correct: str, mb: int = 2560, hold_s: float = 2.0) -> str:
    """``correct`` (a whole solution defining ``entry``) whose first call first runs ``GRABS[kind]``."""
    renamed = re.sub(rf"\b{entry}\(", "_correct(", correct)
    body = "\n".join("        " + line for line in GRABS[kind].strip("\n").splitlines())
    return (f"{renamed}\n\nimport os, time\nMB, HOLD = {mb}, {hold_s}\n_DONE = []\n\n"
            f"def {entry}(*args, **kwargs):\n    if not _DONE:\n        _DONE.append(1)\n{body}\n"
            f"    return _correct(*args, **kwargs)\n")


def slow(entry: str, correct: str, delay_s: float) -> str:
    """``correct`` whose first call first sleeps ``delay_s``: a correct neighbour that stays running a while."""
    renamed = re.sub(rf"\b{entry}\(", "_correct(", correct)
    return (f"{renamed}\n\nimport time\n_DONE = []\n\ndef {entry}(*args, **kwargs):\n    if not _DONE:\n"
            f"        _DONE.append(1)\n        time.sleep({delay_s})\n    return _correct(*args, **kwargs)\n")


def meminfo(field: str) -> int:
    """A field of /proc/meminfo, in bytes."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) << 10
    return 0


def tree_rss(root: int) -> int:
    """Summed resident memory of ``root`` and its descendants."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(p))
        rss[int(p)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo += children.get(pid, [])
    return total


class Peaks:
    """Peak host Shmem and tree RSS above ``shmem0`` / ``rss0``, sampled every 20 ms in a thread."""

    def __init__(self, shmem0: int, rss0: int) -> None:
        self.shmem0, self.rss0 = shmem0, rss0

    def __enter__(self) -> "Peaks":
        self.shmem = self.rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.shmem = max(self.shmem, meminfo("Shmem") - self.shmem0)
            self.rss = max(self.rss, tree_rss(os.getpid()) - self.rss0)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
