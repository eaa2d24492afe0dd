"""Worker processes forked from a server that has imported torch and the heavy modules of the backends they will
run, once: what bench.engine.decide starts a fresh worker for each round with.

A fresh interpreter pays its imports again: on a 2-core Xeon, torch and attnbench take 1.5 s, the compiler stack
FlexAttention's first call needs 3 s more, and transformers 4 s, more than a round's blocks take. A worker forked
from the server starts in a few milliseconds. What makes a worker one draw among the rounds' is still its own: every
tensor a case allocates lands on pages first touched after the fork, and its kernels are compiled or loaded there
(the server imports modules, and on a CPU runs the compiler's ISA probes, CPU_COMPILER, but never a kernel, so it
has no thread pool to fork).

The server (`python -m bench.engine.forked MODULE[:FUNCTION]...`: each module imported, each function called) takes
requests on a Unix socket: the worker's argv and environment, with its stdin, stdout and stderr pipes and a status
pipe passed as file descriptors; it forks, answers the child's pid, and writes the child's exit code (negative: the
signal) to its status pipe when it ends. It exits when the socket closes, so it never outlives the run.
`ForkedProcess` gives the parent the calls of a `subprocess.Popen` of `python -m bench.engine.worker` (stdin, stdout,
stderr; poll, wait, kill): bench.engine.isolate takes either. Python's own forkserver is not used: it runs the
parent's __main__ again in every child.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Iterable
from typing import IO

# what every worker imports before its first case: the protocol, the runner (torch) and the case kinds
BASE = ("bench.engine.worker", "bench.engine.runner", "bench.kinds", "bench.measure.modes")
# what a backend that compiles (Backend.compiles) imports at its first call: dynamo, inductor, FlexAttention
COMPILER = ("torch._dynamo", "torch._inductor.compile_fx", "torch.nn.attention.flex_attention")
# ... and on a CPU, what its first compile runs: inductor's probes of the CPU's vector ISAs (per ISA a build, then a
# Python process that loads it). Run once in the server ("module:function": imported, then called), every forked
# worker inherits the answers: a flex first call in a forked worker took 0.9-1.0 s with them, 2.1-2.6 s without,
# the compile cache warm (2-core AMD EPYC)
CPU_COMPILER = ("torch._inductor.cpu_vec_isa:valid_vec_isa_list",)
MESSAGE_BYTES = 1 << 16  # a request (argv and environment) or an answer at most
STATUS = struct.Struct("i")  # an exit code on the status pipe


def preload(backends: Iterable[str], device: str = "cpu") -> tuple[str, ...]:
    """The modules the server imports (and the probes it runs) for workers that run these backends on this device
    (Backend.compiles, Backend.imports); an unknown name adds nothing (its cases fail in the worker, with their own
    error)."""
    from bench.backends import BACKENDS

    modules = list(BASE)
    for name in sorted(set(backends)):
        backend = BACKENDS.get(name)
        if backend is not None:
            compiler = (*COMPILER, *(CPU_COMPILER if device == "cpu" else ())) if backend.compiles else ()
            modules += [*compiler, *backend.imports]
    return tuple(dict.fromkeys(modules))


class Server:
    """The parent's end of one server process: `spawn` forks a worker from it."""

    def __init__(self, modules: tuple[str, ...]) -> None:
        self.modules = modules
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.engine.forked", str(theirs.fileno()), *modules],
                                     pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL)
        theirs.close()

    def spawn(self, argv: list[str], env: dict[str, str], fds: list[int]) -> int:
        """A forked worker's pid; argv: bench.engine.worker's flags; fds: its stdin, stdout, stderr and status pipe
        ends (the caller closes its own)."""
        try:
            socket.send_fds(self.sock, [json.dumps({"argv": argv, "env": env}).encode()], fds)
            answer = self.sock.recv(MESSAGE_BYTES)
        except OSError as err:
            raise RuntimeError(f"the worker server is gone ({err}); its exit code {self.proc.poll()}") from None
        if not answer:
            raise RuntimeError(f"the worker server ended (exit code {self.proc.wait()}); its stderr says why")
        return int(json.loads(answer)["pid"])

    def end(self) -> None:
        self.sock.close()  # the server exits at the socket's end
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_server: Server | None = None  # one at a time: a run's deciding phase forks all its workers from one
_failed: dict[tuple[str, ...], str] = {}  # modules whose server could not serve, and why: not started again


def server(modules: tuple[str, ...]) -> Server:
    """The running server for these modules, started (and any other ended) when there is none; RuntimeError where
    a server for them has failed before."""
    global _server
    if modules in _failed:
        raise RuntimeError(_failed[modules])
    if _server is not None and (_server.modules != modules or _server.proc.poll() is not None):
        _server.end()
        _server = None
    if _server is None:
        _server = Server(modules)
    return _server


def failed(modules: tuple[str, ...], why: str) -> None:
    """Remember that the server for these modules could not fork a worker (bench.engine.isolate then starts new
    interpreters)."""
    _failed[modules] = why


class ForkedProcess:
    """A worker forked from the server, with a subprocess.Popen's pipes and calls (module docstring)."""

    def __init__(self, argv: list[str], env: dict[str, str], modules: tuple[str, ...]) -> None:
        child_in, self_in = os.pipe()
        self_out, child_out = os.pipe()
        self_err, child_err = os.pipe()
        self._status, child_status = os.pipe()
        theirs = [child_in, child_out, child_err, child_status]
        try:
            self.pid = server(modules).spawn(argv, env, theirs)
        except BaseException:
            for fd in (self_in, self_out, self_err, self._status):
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        self.returncode: int | None = None
        self.stdin: IO[bytes] = os.fdopen(self_in, "wb")
        self.stdout: IO[bytes] = os.fdopen(self_out, "rb")
        self.stderr: IO[bytes] = os.fdopen(self_err, "rb")

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._status], [], [], 0)[0]:
            self._read_status()
        return self.returncode

    def wait(self) -> int | None:
        if self.returncode is None:
            self._read_status()
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:  # not a pid the server has reaped, which another process may have taken since
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def _read_status(self) -> None:
        raw = os.read(self._status, STATUS.size)
        # no code: the server went first (the worker's own pipes still tell the parent it is gone)
        self.returncode = STATUS.unpack(raw)[0] if len(raw) == STATUS.size else -int(signal.SIGKILL)
        os.close(self._status)
        for stream in (self.stdin, self.stdout):
            with contextlib.suppress(OSError):  # a broken pipe's unflushed bytes: the worker is gone
                stream.close()


# the server's side


def _child(request: dict, fds: list[int], closing: list[int]) -> None:
    """In the forked child: its pipes on fds 0, 1 and 2, then bench.engine.worker's loop; never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in closing:
            os.close(fd)
        for fd, target in zip(fds[:3], (0, 1, 2), strict=True):
            os.dup2(fd, target)
        for fd in fds:
            os.close(fd)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - the process's own streams
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115
        os.environ.update(request["env"])
        sys.argv = ["bench.engine.worker", *request["argv"]]
        from bench.engine.worker import main

        main()
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
    except BaseException:  # noqa: BLE001 - said on the worker's stderr, which the parent keeps the tail of
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _serve(sock: socket.socket) -> None:
    """Fork a worker per request; report each one's exit code on its status pipe; stop at the socket's end."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the wakeup fd hears a child's end
    status: dict[int, int] = {}  # child pid -> its status pipe's write end
    while True:
        ready = select.select([sock, wake_r], [], [])[0]
        if wake_r in ready:
            os.read(wake_r, 512)
        _reap(status)
        if sock not in ready:
            continue
        message, fds, _, _ = socket.recv_fds(sock, MESSAGE_BYTES, 4)
        if not message:
            return
        pid = os.fork()
        if pid == 0:
            _child(json.loads(message), fds, [sock.fileno(), wake_r, wake_w, *status.values()])
        for fd in fds[:3]:
            os.close(fd)
        status[pid] = fds[3]
        sock.send(json.dumps({"pid": pid}).encode())


def _reap(status: dict[int, int]) -> None:
    while status:
        try:
            pid, raw = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        fd = status.pop(pid, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.write(fd, STATUS.pack(os.waitstatus_to_exitcode(raw)))
            os.close(fd)


def load(name: str) -> None:
    """Import a module, or with "module:function" import it and call the function: a module not installed (an
    optional extra) or a call that fails leaves the worker to do it, and its cases to say why."""
    module, _, call = name.partition(":")
    with contextlib.suppress(Exception):
        loaded = importlib.import_module(module)
        if call:
            getattr(loaded, call)()


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    sock = socket.socket(fileno=int(sys.argv[1]))
    for name in sys.argv[2:]:
        load(name)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():  # a forked child cannot use CUDA its parent initialised
        print("bench.engine.forked: an import initialised CUDA, so forked workers could not use it", file=sys.stderr)
        sys.exit(3)
    _serve(sock)


if __name__ == "__main__":
    main()
