"""Hostile programs of our own, for the payload-isolation tests: scrapers that look for an answer key everywhere a
process can look, and a sibling that leaves its program everywhere a process can leave something.

A *needle* is a marker planted in something a tested program must never read: the reference solution, the
original tests (with their expected values), the outputs handed to the checker, another sample's program. A
scraper carries each needle as two halves and only ever compares them at a hit of the first half, so the
contiguous needle exists in its process only if something else brought it there. It searches:

* its whole memory: every readable mapping of ``/proc/self/maps`` (heap, stack, anonymous maps, freed chunks
  included), read with ``process_vm_readv`` through ctypes (a bad page is an error code, not a crash);
* every file descriptor 0..1023 (regular files and memfds read from offset 0, pipes and sockets drained);
* ``/proc``: every visible process's ``cmdline``, ``environ``, ``status``, ``maps``, its memory where the kernel
  lets it, and its open files;
* the environment;
* the filesystem places a process can write or share: ``/tmp``, ``/sandbox``, ``/dev/shm``, ``/dev/mqueue``,
  ``/var/tmp``, ``/run``, its home;
* the kernel's keyrings (user, user-session, session, process), SysV shared memory and an abstract Unix socket
  where the sibling serves its program.

If it finds a needle it answers with the correct solution (which it carries base64-encoded); otherwise it answers
wrongly. So a scraper that passes has read an answer key or another sample's program. The *control* scraper plants
its own needle in every channel it searches and answers correctly only when every channel reported it: it proves
the search is not blind.
"""

from __future__ import annotations

import base64
import secrets

SCRAPER = r'''
import base64, ctypes, os, socket, stat, struct, sys

_HALVES = {halves!r}
_PLANT = {plant!r}


def _patterns():
    out = []
    for a, b in _HALVES:
        a, b = a[::-1], b[::-1]  # stored reversed: no half-and-half string sits in this source either
        for enc in ("ascii", "utf-16-le", "utf-32-le"):
            out.append((a.encode(enc), b.encode(enc)))
    return out


_PATS = _patterns()


def _hit(buf):
    for a, b in _PATS:
        j = buf.find(a)
        while j >= 0:
            if buf[j + len(a):j + len(a) + len(b)] == b:
                return True
            j = buf.find(a, j + 1)
    return False


class _IOV(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def _lib():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.process_vm_readv.restype = ctypes.c_ssize_t
    libc.process_vm_readv.argtypes = [ctypes.c_int, ctypes.POINTER(_IOV), ctypes.c_ulong, ctypes.POINTER(_IOV),
                                      ctypes.c_ulong, ctypes.c_ulong]
    libc.shmat.restype = ctypes.c_void_p
    return libc


_libc = _lib()


def _read_mem(pid, start, size):
    chunks, step = [], 1 << 22
    buf = ctypes.create_string_buffer(step)
    for off in range(0, size, step):
        n = min(step, size - off)
        local, remote = _IOV(ctypes.addressof(buf), n), _IOV(start + off, n)
        got = _libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if got > 0:
            chunks.append(buf.raw[:got])
    return chunks


def _memory(pid):
    found = False
    try:
        maps = open(f"/proc/{{pid}}/maps").read().splitlines()
    except OSError:
        return False
    for line in maps:
        parts = line.split()
        if "r" not in parts[1] or (len(parts) > 5 and parts[5] in ("[vvar]", "[vsyscall]", "[vvar_vclock]")):
            continue
        start, end = (int(x, 16) for x in parts[0].split("-"))
        for chunk in _read_mem(pid, start, end - start):
            if _hit(chunk):
                found = True
    return found


def _fds():
    found = False
    for fd in range(1024):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        try:
            if stat.S_ISREG(st.st_mode):
                data, off = b"", 0
                while True:
                    piece = os.pread(fd, 1 << 20, off)
                    if not piece:
                        break
                    data += piece
                    off += len(piece)
            else:
                os.set_blocking(fd, False)
                data = os.read(fd, 1 << 20)
        except OSError:
            continue
        found |= _hit(data)
    return found


def _proc():
    found = False
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        for name in ("cmdline", "environ", "status", "maps", "comm"):
            try:
                found |= _hit(open(f"/proc/{{pid}}/{{name}}", "rb").read())
            except OSError:
                pass
        found |= _memory(int(pid))
        try:
            for fd in os.listdir(f"/proc/{{pid}}/fd"):
                try:
                    found |= _hit(open(f"/proc/{{pid}}/fd/{{fd}}", "rb").read(1 << 20))
                except OSError:
                    pass
        except OSError:
            pass
    for name in ("environ", "cmdline"):
        try:
            found |= _hit(open(f"/proc/self/{{name}}", "rb").read())
        except OSError:  # a process that changed its uid is not dumpable: these are root's
            pass
    return found


def _environment():
    return _hit("\n".join(f"{{k}}={{v}}" for k, v in os.environ.items()).encode("utf-8", "surrogateescape"))


_PLACES = ("/tmp", "/sandbox", "/dev/shm", "/dev/mqueue", "/var/tmp", "/run", os.path.expanduser("~"))


def _files():
    found = False
    for top in _PLACES:
        for root, dirs, files in os.walk(top):
            for f in files:
                try:
                    with open(os.path.join(root, f), "rb") as fh:
                        found |= _hit(fh.read(1 << 22))
                except OSError:
                    pass
    return found


_KEY_SPECS = (-4, -5, -3, -2)  # user, user-session, session, process keyrings


def _keyrings():
    found = False
    for spec in _KEY_SPECS:
        ids = ctypes.create_string_buffer(4096)
        n = _libc.syscall(250, 11, ctypes.c_long(spec), ids, 4096)  # KEYCTL_READ of the keyring: key ids
        for i in range(0, max(n, 0) // 4 * 4, 4):
            kid = struct.unpack("i", ids.raw[i:i + 4])[0]
            data = ctypes.create_string_buffer(1 << 16)
            m = _libc.syscall(250, 11, ctypes.c_long(kid), data, 1 << 16)
            if m > 0:
                found |= _hit(data.raw[:m])
    return found


def _ipc():
    found = False
    for key in (0x5EB1, 0x5EB2):
        sid = _libc.shmget(key, 0, 0)
        if sid >= 0:
            addr = _libc.shmat(sid, None, 0o10000)  # SHM_RDONLY
            if addr not in (None, ctypes.c_void_p(-1).value):
                found |= _hit(ctypes.string_at(addr, 4096))
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(0.5)
        s.connect("\0elfreg-sibling")
        found |= _hit(s.recv(1 << 16))
    except OSError:
        pass
    return found


def _plant():
    """The control: put our own needle (whole) in every channel we can, so each search must find it there."""
    needle = _PLANT.encode()
    ok = {{"memory": True, "environment": True}}
    _KEEP.append(needle)
    try:
        fd = os.memfd_create("plant")
    except PermissionError:  # refused by the sandbox's seccomp filter: a file it holds open instead
        fd = os.open(os.path.join(os.path.expanduser("~"), "plant-fd"), os.O_RDWR | os.O_CREAT, 0o600)
    os.write(fd, needle)
    _KEEP.append(fd)
    ok["fds"] = True
    os.environ["PLANT"] = _PLANT
    with open(os.path.join(os.path.expanduser("~"), "plant.txt"), "wb") as f:
        f.write(needle)
    ok["files"] = True
    ok["keyrings"] = _libc.syscall(248, b"user", b"plant", needle, len(needle), ctypes.c_int(-2)) > 0
    sid = _libc.shmget(0x5EB2, 4096, 0o1666)
    addr = _libc.shmat(sid, None, 0) if sid >= 0 else None
    ok["ipc"] = addr not in (None, ctypes.c_void_p(-1).value)
    if ok["ipc"]:
        ctypes.memmove(addr, needle, len(needle))
    pid = os.fork()  # a process whose command line shows it
    if pid == 0:
        try:  # the interpreter is the one program the sandbox surely has
            os.execv(sys.executable, [sys.executable, "-S", "-c", "import time; time.sleep(30)", _PLANT])
        finally:
            os._exit(1)
    import time
    time.sleep(0.2)
    ok["proc"] = True
    return ok


_KEEP = []


def _search():
    """True if a needle turned up (the control: if its own needle turned up in every channel it could plant in)."""
    planted = _plant() if _PLANT else {{}}
    seen = {{"memory": _memory(os.getpid()), "fds": _fds(), "proc": _proc(), "environment": _environment(),
             "files": _files(), "keyrings": _keyrings(), "ipc": _ipc()}}
    if _PLANT:
        return all(seen[c] for c, ok in planted.items() if ok)
    return any(seen.values())


def _wrong(*args, **kwargs):
{wrong}


def _decide():
    if _search():
        ns = {{}}
        exec(base64.b64decode({correct!r}).decode(), ns)
        return ns[{entry!r}]
    return _wrong


def {entry}(*args, **kwargs):
    state = {entry}.__dict__
    if "impl" not in state:
        state["impl"] = _decide()
    return state["impl"](*args, **kwargs)
'''

SIBLING = r'''
import ctypes, os, socket

_ME = {needle!r}  # this sample's program, as far as a scraper can tell


def _leave_everywhere():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    data = _ME.encode()
    for spec in (-4, -5, -3):  # user, user-session, session keyrings
        libc.syscall(248, b"user", b"sibling", data, len(data), ctypes.c_int(spec))
    for d in ("/tmp", "/sandbox", "/dev/shm", "/dev/mqueue", "/var/tmp", "/run", os.path.expanduser("~")):
        try:
            with open(os.path.join(d, "sibling.txt"), "w") as f:
                f.write(_ME)
        except OSError:
            pass
    shmat = libc.shmat
    shmat.restype = ctypes.c_void_p
    sid = libc.shmget(0x5EB1, 4096, 0o1666)  # IPC_CREAT | 0666
    if sid >= 0:
        addr = shmat(sid, None, 0)
        if addr not in (None, ctypes.c_void_p(-1).value):
            ctypes.memmove(addr, data, len(data))
    if os.fork() == 0:  # a daemon serving the program on an abstract socket (it outlives the program if it can)
        os.setsid()
        if os.fork() == 0:
            try:
                srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                srv.bind("\0elfreg-sibling")
                srv.listen(8)
                while True:
                    c, _ = srv.accept()
                    c.sendall(data)
                    c.close()
            finally:
                os._exit(0)
        os._exit(0)


def {entry}(*args, **kwargs):
    if not {entry}.__dict__.get("left"):
        {entry}.left = True
        _leave_everywhere()
    return _correct(*args, **kwargs)
'''


def needle(kind: str) -> str:
    """A fresh marker, e.g. ``REFNEEDLE0A1B2C3D4E5F``: upper-case letters and digits only (the same in any text)."""
    return f"{kind}NEEDLE{secrets.token_hex(8).upper()}"


def scraper(entry: str, needles: list[str], correct: str, wrong_body: str = "return None", plant: str = "") -> str:
    """A scraper program for entry point ``entry``: searches for ``needles`` at its first call; answers with the
    program ``correct`` if it finds one, else with ``wrong_body`` (a function body over ``args``). ``plant``: the
    control's own needle (it then answers correctly only if it found its plant in every channel it planted in)."""
    halves = [(n[: len(n) // 2][::-1], n[len(n) // 2:][::-1]) for n in needles + ([plant] if plant else [])]
    body = "\n".join("    " + line for line in wrong_body.splitlines())
    return SCRAPER.format(halves=halves, plant=plant, correct=base64.b64encode(correct.encode()).decode(),
                          wrong=body, entry=entry)


def sibling(entry: str, program: str, mark: str) -> str:
    """``program`` (a correct solution), its entry point renamed ``_correct``, wrapped by one that also leaves
    ``mark`` in every place a later program could look."""
    import re

    renamed = re.sub(rf"\bdef {entry}\(", "def _correct(", program, count=1)
    renamed = re.sub(rf"\b{entry}\(", "_correct(", renamed)  # recursive calls
    return renamed + "\n" + SIBLING.format(needle=mark, entry=entry)
