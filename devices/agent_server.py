"""One preloaded process per (user, agent, interpreter, environment) on a device host that forks
each run's agent, instead of a new interpreter per agent (``python agent.pyz spawn run ...``).

Why: a new agent interpreter costs ~0.25 CPU-s before its first trial (the interpreter, numpy,
psutil, the trial harness). A host that carries many devices (a loopback fleet, a multi-GPU
server listed per GPU) pays that once per device, all at once when a run starts: 128 loopback
devices spent ~32 CPU-s, ~16 s of the two cores, starting agents. A fork of a process that has
all of it imported costs a few ms.

The pieces:

- ``spawn`` (the client, run by the start script with ``python -S``: no site, only the standard
  modules below, ~15 ms) finds the server by an abstract Unix socket name (Linux; nothing on the
  file system to go stale: the name is freed when the server dies), starts one if there is none,
  and hands it the agent's argument list, its environment, working directory, umask, and its
  standard streams (the start script's redirections, fds 0, 4 and 5, passed as file
  descriptors). It prints the agent's pid on fd 3. Any failure exits 1 silently, and the start
  script starts the agent directly, as it always did.
- ``--agent-server`` (the server) imports what an agent imports before its first trial, then
  accepts requests one at a time: it checks the caller's uid (``SO_PEERCRED``) and that the
  caller's process set-up (``fingerprint``) is its own, forks, and answers the pid. The child
  takes the caller's streams, session (``setsid``), directory, umask and environment, then runs
  the agent's ``main`` with the argument list. The server ends once it has had no live agent and
  no request for ``IDLE_S``.

What tells the agents apart (``devices/protocol.py: IS_AGENT``): a forked agent's command line is
the server's, without its run id, so an agent is recognised by that command line together with
its working directory, which is its run directory.

The socket name carries a checksum of the fingerprint, so another set-up (``OMP_NUM_THREADS``,
which numpy's thread pool reads once at import, a ``PYTHONPATH``, a lower ``ulimit``) gets a
server of its own; the server still compares the whole fingerprint and refuses a mismatch. The
agent archive counts by its name, which is its content's hash: the devices of one host keep a
copy each (a work dir each), and one server serves them all. It runs from the copy of the device
that started it, and a module the agent imports late (a serving trial's) is read from there: a
work dir removed by hand while another device of the host runs would fail that import.
"""

from __future__ import annotations

import _socket  # not ``socket``: the client runs before every agent, and socket.py costs ~8 ms
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import socket

SERVER_COMMAND = "--agent-server"  # its argv[2], what IS_AGENT looks for: never a run id
IDLE_S = 20.0  # NGB_AGENT_SERVER_IDLE_S overrides it (tests)
REPLY_TIMEOUT_S = 60.0  # the server imports under whatever load the host has when a fleet starts
_REQUEST_MAX = 1 << 20
#: variables that differ between two SSH sessions of one user and that nothing preloaded reads
_VOLATILE_PREFIXES = ("SSH_", "XDG_SESSION_", "XDG_VTNR", "XDG_SEAT")
_VOLATILE = frozenset({"_", "PWD", "OLDPWD", "SHLVL", "MOTD_SHOWN", "TERM", "LS_COLORS", "MAIL"})
_EXIT_FALLBACK = 1


def fingerprint(python: str, archive: str) -> str:
    """What an agent forked from a server must share with one started directly here: the user,
    the interpreter (as named and as run), the agent archive, the environment but for per-session
    variables, and the resource limits. One NUL-separated string."""
    import resource

    env = sorted(
        f"{k}={v}"
        for k, v in os.environ.items()
        if k not in _VOLATILE and not k.startswith(_VOLATILE_PREFIXES)
    )
    limits = [
        f"{name}={resource.getrlimit(getattr(resource, name))}"
        for name in sorted(dir(resource))
        if name.startswith("RLIMIT_")
    ]
    parts = [str(os.getuid()), python, sys.executable, sys.version, os.path.basename(archive)]
    return "\0".join([*parts, *env, *limits])


def socket_name(finger: str) -> bytes:
    import zlib

    return b"\0ngb-agent-server/%d/%08x" % (os.getuid(), zlib.crc32(finger.encode()))


def _pack(fields: list[str]) -> bytes:
    return "\0".join(fields).encode("utf-8", "surrogateescape")


def _unpack(data: bytes) -> list[str]:
    return data.decode("utf-8", "surrogateescape").split("\0")


def _peer_uid(sock: _socket.socket) -> int:
    import struct

    raw = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", raw)[1])


def _recv_exact(sock: _socket.socket, size: int) -> bytes:
    chunks, got = [], 0
    while got < size:
        chunk = sock.recv(min(size - got, 1 << 16))
        if not chunk:
            raise ConnectionError("the peer closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


# ------------------------------------------------------------------------------------ client


def _start_server(name: bytes, python: str, archive: str) -> bool:
    """Bind the name and start a server on it; False when another caller holds the name."""
    listener = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        listener.bind(name)
    except OSError:
        listener.close()
        return False
    listener.listen(4096)  # a fleet's starts queue here while the server imports
    program = os.path.abspath(python) if "/" in python else python  # resolved before the cd
    pid = os.fork()
    if pid:
        listener.close()
        return True
    try:  # the child becomes the server: its own session, no stream or directory of the start's
        os.setsid()
        os.chdir("/")  # not the first run's dir: IS_AGENT tells agents by their directory
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        if os.environ.get("NGB_DEBUG"):  # its errors into the first agent's stderr file
            os.dup2(5, 2)
        os.closerange(3, listener.fileno())
        os.closerange(listener.fileno() + 1, 1 << 16)
        os.set_inheritable(listener.fileno(), True)
        listen_fd = str(listener.fileno())
        argv = [program, archive, SERVER_COMMAND, f"--listen-fd={listen_fd}", f"--python={python}"]
        os.execvp(program, argv)
    finally:
        os._exit(127)


def _ask(name: bytes, finger: str, argv: list[str]) -> int | None:
    """One request; the agent's pid, or None where no server answers (so one may be started)."""
    import array

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        try:
            sock.connect(name)
        except (ConnectionRefusedError, FileNotFoundError):
            return None
        sock.settimeout(REPLY_TIMEOUT_S)
        if _peer_uid(sock) != os.getuid():
            raise PermissionError("the agent server's name is held by another user")
        env = _pack(_environ()).hex()
        body = _pack([finger.encode().hex(), os.getcwd(), str(_umask()), env, *argv])
        fds = array.array("i", [0, 4, 5])  # the agent's stdin, stdout, stderr: AGENT_START
        header = len(body).to_bytes(4, "big")
        sock.sendmsg([header], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds.tobytes())])
        sock.sendall(body)
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = sock.recv(64)
            if not chunk:
                raise ConnectionError("the agent server closed the connection")
            reply += chunk
        text = reply.decode().strip()
        if not text.isdigit():
            raise RuntimeError(f"the agent server refused: {text}")
        return int(text)
    finally:
        sock.close()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _environ() -> list[str]:
    return [f"{k}={v}" for k, v in os.environ.items()]


def spawn_main(args: list[str]) -> int:
    """``agent.pyz spawn PYTHON run ...``: print the forked agent's pid on fd 3, or exit 1."""
    try:
        python, argv = args[0], args[1:]
        if not argv or argv[0] != "run" or not sys.platform.startswith("linux"):
            return _EXIT_FALLBACK
        archive = os.path.abspath(sys.argv[0])
        finger = fingerprint(python, archive)
        name = socket_name(finger)
        for _ in range(40):  # ~2 s of a peer that holds the name but has not listened yet
            pid = _ask(name, finger, argv)
            if pid is not None:
                os.write(3, b"%d\n" % pid)
                return 0
            if not _start_server(name, python, archive):
                import time

                time.sleep(0.05)
    except Exception as exc:  # noqa: BLE001 -- whatever went wrong, the direct start follows
        if os.environ.get("NGB_DEBUG"):
            import contextlib

            with contextlib.suppress(OSError):  # fd 5: the run's agent.err, from the start script
                os.write(5, f"ngb agent spawn: {exc!r}\n".encode())
    return _EXIT_FALLBACK


# ------------------------------------------------------------------------------------ server


class _Server:
    def __init__(self, listener: socket.socket, finger: str) -> None:
        self.listener = listener
        self.finger_hex = finger.encode().hex()  # as a request carries it
        self.children: set[int] = set()
        try:
            self.idle_s = float(os.environ.get("NGB_AGENT_SERVER_IDLE_S", IDLE_S))
        except ValueError:
            self.idle_s = IDLE_S
        if not 0.0 <= self.idle_s <= 3600.0:  # NaN and inf too: never a server that stays
            self.idle_s = IDLE_S

    def reap(self, *_: object) -> None:
        while self.children:
            try:
                pid, _status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                return
            self.children.discard(pid)

    def serve(self) -> int:
        import select
        import signal
        import time

        signal.signal(signal.SIGCHLD, self.reap)  # reaped at once: tail --pid sees a zombie alive
        idle_since = time.monotonic()
        while True:
            ready, _, _ = select.select([self.listener], [], [], 1.0)
            if ready:
                self.accept_one()
                idle_since = time.monotonic()
            elif self.children:
                self.reap()
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > self.idle_s:
                self.listener.close()  # frees the name: the next start begins a new server
                return 0

    def accept_one(self) -> None:
        import contextlib

        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(5.0)
            try:
                if _peer_uid(conn) != os.getuid():
                    return
                answer = self.handle(conn)
            except Exception as exc:  # noqa: BLE001 -- one bad request never ends the server
                answer = f"error {type(exc).__name__}: {exc}"
            with contextlib.suppress(OSError):  # it hung up: nothing to tell
                conn.sendall(answer.encode() + b"\n")

    def handle(self, conn: socket.socket) -> str:
        import array

        fds = array.array("i")
        header, ancillary, _flags, _addr = conn.recvmsg(4, _socket.CMSG_SPACE(3 * fds.itemsize))
        for level, kind, data in ancillary:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
        try:
            if not header or len(fds) != 3:
                return "error bad request"
            header += _recv_exact(conn, 4 - len(header))
            size = int.from_bytes(header, "big")
            if not 0 < size <= _REQUEST_MAX:
                return "error bad request"
            fields = _unpack(_recv_exact(conn, size))
            finger, cwd, umask, environ, *argv = fields
            if finger != self.finger_hex:
                return "error another set-up"
            if not argv or argv[0] != "run":
                return "error not an agent run"
            if _gone(conn):  # it gave up waiting and started its agent itself
                return "error the caller left"
            pid = os.fork()
            if pid == 0:
                self.child(conn, list(fds), cwd, int(umask), _unpack(bytes.fromhex(environ)), argv)
            self.children.add(pid)
            return str(pid)
        finally:
            for fd in fds:
                os.close(fd)

    def child(
        self,
        conn: socket.socket,
        fds: list[int],
        cwd: str,
        umask: int,
        environ: list[str],
        argv: list[str],
    ) -> None:
        """The forked agent: the caller's streams, session, directory, umask and environment,
        then the agent's ``main``; never returns."""
        import contextlib
        import signal
        import traceback

        code = 1
        try:
            self.listener.close()
            conn.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.setsid()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            for fd in fds:
                if fd > 2:
                    os.close(fd)
            os.chdir(cwd)
            os.umask(umask)
            os.environ.clear()
            os.environ.update(item.partition("=")[::2] for item in environ)
            sys.argv = [sys.argv[0], *argv]
            from ngb.devices.agent import main

            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001 -- the agent's stderr says what, as a direct start's would
            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):  # exiting either way
                    stream.flush()
            os._exit(code)


def _gone(conn: socket.socket) -> bool:
    """Whether the caller hung up (it stopped waiting); non-blocking: it sends nothing more."""
    timeout = conn.gettimeout()
    conn.settimeout(0.0)
    try:
        return conn.recv(1, _socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    finally:
        conn.settimeout(timeout)


def serve_main(args: list[str]) -> int:
    """``agent.pyz --agent-server --listen-fd=N --python=PY``: preload, then serve on the
    listening socket N until idle. PY is the interpreter as the start script named it (the
    fingerprint's). Options with ``=``, so no word of the command line can be a run id."""
    import socket

    from ngb.devices.agent import preload

    fd, python = (args + ["", ""])[:2]
    if len(args) != 2 or not fd.startswith("--listen-fd=") or not python.startswith("--python="):
        print("usage: agent.pyz --agent-server --listen-fd=N --python=PY (spawn starts it)",
              file=sys.stderr)  # fmt: skip
        return 2
    listen_fd, python = int(fd.partition("=")[2]), python.partition("=")[2]
    listener = socket.socket(fileno=listen_fd)
    preload()
    server = _Server(listener, fingerprint(python, sys.argv[0]))
    return server.serve()
