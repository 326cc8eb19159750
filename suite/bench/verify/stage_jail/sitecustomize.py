"""Every Python process of a re-run imports this first (the verifier puts this folder first on the
re-run's ``PYTHONPATH``): before any plugin code runs, the process restricts itself with Landlock.

Standalone on purpose: it runs inside code trees of any version and imports nothing of mpcbench.
Active only when ``VERIFY_STAGE_JAIL`` holds its JSON settings (``read``: folders to read,
``work``: the re-run's writable folder); otherwise it does nothing.

- any process of the re-run: reads only ``read`` (the code tree, the interpreter, the data, system
  libraries and a few files of /etc) and writes only ``work``;
- a torchrun worker (a pipeline stage, ``RANK`` set) further: writes only its own new folder (its
  ``TMPDIR`` and ``HOME``), the run folder's error files and, local rank 0, the run folder's result;
  it reads the run's config file but nothing another stage wrote. Separate Landlock domains also
  keep stages from ptrace-ing each other (and, ABI 6+, from signals and abstract unix sockets);
  a seccomp filter refuses System V IPC, POSIX message queues and unix sockets (Landlock scopes only
  abstract ones; a socket file in another stage's folder could still be connected to).

A process that cannot apply what it was asked to exits (status 70) rather than run unconfined.
"""

import ctypes
import json
import os
import struct
import sys

_SYS_CREATE, _SYS_ADD, _SYS_RESTRICT = 444, 445, 446
_READ = (1 << 0) | (1 << 2) | (1 << 3)  # EXECUTE, READ_FILE, READ_DIR
_WRITE_ALL = (
    (1 << 1) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12)
)
_FILE_ONLY = (1 << 0) | (1 << 1) | (1 << 2)  # what a rule on a regular file may grant (+ TRUNCATE, IOCTL_DEV)
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "passwd", "group", "hosts", "nsswitch.conf",
        "resolv.conf", "host.conf", "gai.conf", "protocols", "services", "mime.types", "os-release")  # fmt: skip


def _fail(why):
    sys.stderr.write("stage jail: " + why + "\n")
    sys.stderr.flush()
    os._exit(70)


def _abi(libc):
    v = libc.syscall(_SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return v if v > 0 else 0


def _handled(abi):
    fs = _READ | _WRITE_ALL
    if abi >= 2:
        fs |= 1 << 13  # REFER
    if abi >= 3:
        fs |= 1 << 14  # TRUNCATE
    if abi >= 5:
        fs |= 1 << 15  # IOCTL_DEV
    return fs


def _restrict(read, write, files, stage):
    libc = ctypes.CDLL(None, use_errno=True)
    abi = _abi(libc)
    if abi < 1:
        _fail("no Landlock in this kernel")
    fs = _handled(abi)
    scoped = 0x3 if (stage and abi >= 6) else 0  # ABSTRACT_UNIX_SOCKET | SIGNAL
    attr = (
        struct.pack("QQQ", fs, 0, scoped)
        if abi >= 6
        else struct.pack("QQ", fs, 0)
        if abi >= 4
        else struct.pack("Q", fs)
    )
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = libc.syscall(_SYS_CREATE, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if fd < 0:
        _fail("landlock_create_ruleset: " + os.strerror(ctypes.get_errno()))
    extra = (1 << 14 if abi >= 3 else 0) | (1 << 15 if abi >= 5 else 0)

    def rule(path, access):
        try:
            pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return  # not here: nothing to allow
        try:
            if not os.path.isdir(path):
                access &= _FILE_ONLY | extra
            beneath = struct.pack("=Qi", access & fs, pfd)
            b = ctypes.create_string_buffer(beneath, len(beneath))
            if libc.syscall(_SYS_ADD, ctypes.c_int(fd), ctypes.c_int(1), b, ctypes.c_uint32(0)) != 0:
                _fail("landlock_add_rule " + path + ": " + os.strerror(ctypes.get_errno()))
        finally:
            os.close(pfd)

    for p in read:
        rule(p, _READ)
    for p, access in files:
        rule(p, access)
    for p in write:
        rule(p, fs)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        _fail("no_new_privs: " + os.strerror(ctypes.get_errno()))
    if libc.syscall(_SYS_RESTRICT, ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
        _fail("landlock_restrict_self: " + os.strerror(ctypes.get_errno()))
    os.close(fd)


def _seccomp():
    """A seccomp filter (x86-64 only): System V IPC, POSIX message queues and AF_UNIX sockets fail with
    EPERM. Unix sockets because Landlock (up to ABI 6) scopes only abstract ones: a stage could connect
    to a socket file in another stage's folder (it cannot read the folder, but connect() is not a read)
    and pass an activation past both the byte counter and the loopback audit. socketpair() stays (a
    pair never leaves the process that made it); gloo and torchrun's store speak TCP."""
    if os.uname().machine != "x86_64":
        return
    banned = (29, 30, 31, 64, 65, 66, 67, 68, 69, 70, 71, 220, 240, 241, 242, 243, 244, 245)
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, eperm = (ret, "", "", 0x7FFF0000), (ret, "", "", 0x00050000 | 1)  # RET_ALLOW, RET_ERRNO | EPERM
    # another architecture (int 0x80) or the x32 numbers (nr | 0x40000000): refused too
    prog = [(ld, "", "", 4), (jeq, "nr", "EPERM", 0xC000003E), ("nr", ld, "", "", 0)]
    prog.append((jge, "EPERM", "", 0x40000000))
    prog += [(jeq, "EPERM", "", nr) for nr in banned]
    prog += [(jeq, "", "ALLOW", 41), (ld, "", "", 16), (jeq, "EPERM", "", 1)]  # socket(AF_UNIX, ...)
    prog += [("ALLOW", *allow), ("EPERM", *eperm)]
    labels = {}
    flat = []
    for f in prog:
        if isinstance(f[0], str):
            labels[f[0]] = len(flat)
            f = f[1:]
        flat.append(f)

    def to(target, at):
        return 0 if target == "" else labels[target] - at - 1

    raw = b"".join(struct.pack("HBBI", c, to(jt, i), to(jf, i), k) for i, (c, jt, jf, k) in enumerate(flat))
    filt = ctypes.create_string_buffer(raw, len(raw))
    fprog = struct.pack("HxxxxxxQ", len(flat), ctypes.addressof(filt))
    fp = ctypes.create_string_buffer(fprog, len(fprog))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(22, 2, fp, 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        _fail("seccomp: " + os.strerror(ctypes.get_errno()))


def _config_path():
    """The worker's config file (``... <run dir>/config.json``) from the command line."""
    try:
        with open("/proc/self/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return ""
    for a in reversed(args):
        if a.endswith(b".json"):
            return a.decode(errors="replace")
    return ""


def _main():
    raw = os.environ.get("VERIFY_STAGE_JAIL")
    if not raw:
        return
    try:
        cfg = json.loads(raw)
        read, work = [str(p) for p in cfg["read"]], str(cfg["work"])
    except (ValueError, KeyError, TypeError):
        _fail("bad settings")
        return
    read = read + ["/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/proc", "/sys"]
    read += ["/etc/" + e for e in _ETC]
    devs = [
        ("/dev/null", _FILE_ONLY),
        ("/dev/zero", _FILE_ONLY),
        ("/dev/urandom", _FILE_ONLY),
        ("/dev/random", _FILE_ONLY),
    ]
    rank = os.environ.get("RANK")
    if rank is None or os.environ.get("LOCAL_RANK") is None:
        _restrict(read, [work], devs, stage=False)
        return
    # a pipeline stage: a folder of its own, made before the restriction, becomes its HOME and TMPDIR
    own = os.path.join(work, f"stage-{rank}-{os.getpid()}")
    os.makedirs(own, mode=0o700)
    os.environ["TMPDIR"] = os.environ["HOME"] = own
    write = [own]
    files = list(devs)
    config = _config_path()
    if config:
        run = os.path.dirname(config)
        files.append((config, 1 << 2))  # read its config, nothing else of the run folder
        os.makedirs(os.path.join(run, "errors"), exist_ok=True)
        # shared with the other stages: write-only (what one stage writes there, no other can read)
        files.append((os.path.join(run, "errors"), _WRITE_ALL))
        if os.environ.get("LOCAL_RANK") == "0":
            files.append((run, _WRITE_ALL))  # result.json (written, renamed; read by the launcher)
    err = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if err:
        os.makedirs(os.path.dirname(err), exist_ok=True)
        write.append(os.path.dirname(err))
    _restrict(read, write, files, stage=True)
    _seccomp()


_main()
