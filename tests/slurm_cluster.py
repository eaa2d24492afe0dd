"""A real single-node Slurm for the tests: Debian's slurm-wlm 22.05 and munge, run as root without systemd
(proctrack/linuxproc, task/none, select/cons_tres), with slurmdbd over a private mariadb for job accounting, or
without accounting at all. Every config, state and log lives in one temporary folder; the daemons run in the
foreground as our children. `.ci/run` installs the packages.

A job's steps are not our children: slurmd starts each slurmstepd detached (reparented to init, in a session of its
own) so that jobs outlive a slurmd restart, and ending slurmd leaves them running. So stop() cancels every job and
waits until squeue is empty before it ends the daemons, then kills whatever still carries this cluster's SLURM_CONF
in its environment (a step slurmd left behind and the job's processes under it), and fails if any outlives a bounded
wait: after a test, `pgrep -a slurmstepd` prints nothing."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

NEEDED = ("slurmctld", "slurmd", "sbatch", "squeue", "scancel", "munged", "munge")
ACCOUNTING = ("slurmdbd", "sacct", "mariadbd", "mariadb-install-db", "mariadb")


def why_not(accounting: bool) -> str | None:
    """The reason a cluster cannot be started here, or None."""
    missing = [b for b in (*NEEDED, *(ACCOUNTING if accounting else ())) if not shutil.which(b)
               and not Path("/usr/sbin", b).exists()]
    if missing:
        return f"Slurm is not installed ({', '.join(missing)} missing; .ci/run installs slurm-wlm munge slurmdbd " \
               "mariadb-server)"
    if os.geteuid() != 0:
        return "the single-node Slurm of the tests runs its daemons as root"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _exe(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


class SlurmCluster:
    """One node named after this host, CPUS slots, a partition 'debug'; `env` holds SLURM_CONF for clients."""

    CPUS = 2

    def __init__(self, root: Path, accounting: bool) -> None:
        self.root, self.accounting = root, accounting
        self.conf = root / "slurm.conf"
        self.env = {"SLURM_CONF": str(self.conf)}
        self.procs: list[subprocess.Popen] = []
        self.node = socket.gethostname().split(".")[0]

    def _spawn(self, name: str, *argv: str) -> subprocess.Popen:
        log = open(self.root / f"{name}.out", "wb")  # noqa: SIM115 - kept open for the daemon's life
        proc = subprocess.Popen([_exe(name), *argv], stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, **self.env}, start_new_session=True)
        self.procs.append(proc)
        return proc

    def _wait(self, what: str, ok, timeout: float = 30.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if ok():
                return
            dead = [p for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{Path(dead[0].args[0]).name} exited ({dead[0].returncode}) while waiting for "
                                   f"{what}; logs in {self.root}")
            time.sleep(0.2)
        raise RuntimeError(f"timed out waiting for {what}; logs in {self.root}")

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([_exe(argv[0]), *argv[1:]], capture_output=True, text=True, check=check,
                              env={**os.environ, **self.env}, timeout=30)

    def _munge(self) -> None:
        probe = "munge -n 2>/dev/null | unmunge >/dev/null 2>&1"
        if subprocess.run(probe, shell=True).returncode == 0:
            return  # a munged is running already: share it
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        self._spawn("munged", "--foreground", "--force", f"--log-file={self.root}/munged.log",
                    f"--seed-file={self.root}/munged.seed", f"--pid-file={self.root}/munged.pid")
        self._wait("munged", lambda: subprocess.run(probe, shell=True).returncode == 0)

    def _mariadb(self) -> int:
        data, sock, port = self.root / "mysql", self.root / "mysql.sock", _free_port()
        self._run("mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root",
                  "--auth-root-authentication-method=socket", "--skip-test-db")
        self._spawn("mariadbd", "--no-defaults", f"--datadir={data}", f"--socket={sock}", f"--port={port}",
                    "--bind-address=127.0.0.1", "--user=root", "--skip-name-resolve",
                    f"--pid-file={self.root}/mysql.pid", "--innodb-buffer-pool-size=16M")
        self._wait("mariadb", sock.exists)
        sql = ("CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm'; "
               "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';")
        self._wait("mariadb's socket", lambda: self._run("mariadb", "--no-defaults", f"--socket={sock}", "-uroot",
                                                         "-e", sql, check=False).returncode == 0)
        return port

    def _write_confs(self, dbd_port: int, db_port: int | None) -> None:
        r = self.root
        for d in ("state", "spool"):
            (r / d).mkdir(exist_ok=True)
        acct = "AccountingStorageType=accounting_storage/none\n"
        if self.accounting:
            acct = ("AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost\n"
                    f"AccountingStoragePort={dbd_port}\n")
        self.conf.write_text(
            f"ClusterName=attnbench\nSlurmctldHost={self.node}(127.0.0.1)\nSlurmUser=root\nSlurmdUser=root\n"
            f"SlurmctldPort={_free_port()}\nSlurmdPort={_free_port()}\nAuthType=auth/munge\n"
            "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nSelectType=select/cons_tres\n"
            "SelectTypeParameters=CR_Core\nSchedulerType=sched/backfill\nMpiDefault=none\nReturnToService=2\n"
            f"StateSaveLocation={r}/state\nSlurmdSpoolDir={r}/spool\nSlurmctldPidFile={r}/slurmctld.pid\n"
            f"SlurmdPidFile={r}/slurmd.pid\nSlurmctldLogFile={r}/slurmctld.log\nSlurmdLogFile={r}/slurmd.log\n"
            "JobAcctGatherType=jobacct_gather/none\nJobCompType=jobcomp/none\n" + acct +
            # short timers: a cancelled job is gone in seconds; a requeued job waits cred_expire (120 s) to start again
            "MailProg=/bin/true\nKillWait=3\nMinJobAge=60\nAuthInfo=cred_expire=10\nMessageTimeout=5\nSchedulerParameters=sched_interval=1\n"
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.CPUS} State=UNKNOWN\n"
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n")
        (r / "cgroup.conf").write_text("CgroupAutomount=no\nConstrainCores=no\nConstrainRAMSpace=no\n")
        if db_port is not None:
            dbd = r / "slurmdbd.conf"
            dbd.write_text(
                f"AuthType=auth/munge\nDbdHost=localhost\nDbdPort={dbd_port}\nSlurmUser=root\n"
                f"PidFile={r}/slurmdbd.pid\nLogFile={r}/slurmdbd.log\nStorageType=accounting_storage/mysql\n"
                f"StorageHost=127.0.0.1\nStoragePort={db_port}\nStorageUser=slurm\nStoragePass=slurm\n"
                "StorageLoc=slurm_acct_db\n")
            dbd.chmod(0o600)  # slurmdbd refuses a config others can read

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self._munge()
            dbd_port, db_port = _free_port(), self._mariadb() if self.accounting else None
            self._write_confs(dbd_port, db_port)
            if self.accounting:
                self._spawn("slurmdbd", "-D")
                self._wait("slurmdbd", lambda: self._run("sacctmgr", "-n", "list", "cluster",
                                                         check=False).returncode == 0)
                self._run("sacctmgr", "-i", "add", "cluster", "attnbench", check=False)
            self._spawn("slurmctld", "-D", "-i", "-f", str(self.conf))
            self._spawn("slurmd", "-D", "-f", str(self.conf), "-N", self.node)
            self._wait("an idle node", lambda: self._run("sinfo", "-h", "-o", "%T",
                                                         check=False).stdout.strip() == "idle")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Ends every job, then the daemons we started, newest first (slurmd before slurmctld before slurmdbd before
        mariadb), then any of the jobs' processes still left."""
        try:
            self._cancel_jobs()
        finally:
            for proc in reversed(self.procs):
                if proc.poll() is None:
                    proc.terminate()
                    try:
                        proc.wait(15)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait(5)
            self.procs.clear()
            self._kill_leftovers()

    def _cancel_jobs(self, timeout: float = 30.0) -> None:
        """scancel every job the cluster holds and wait until squeue lists none: each slurmstepd then ends its job's
        processes and exits while slurmd and slurmctld can still hear it."""
        if not any(Path(p.args[0]).name == "slurmctld" and p.poll() is None for p in self.procs):
            return  # never started, or gone: nothing to ask
        listed = self._run("squeue", "-h", "-o", "%F", check=False)
        jobs = sorted(set(listed.stdout.split()))
        if jobs:
            self._run("scancel", *jobs, check=False)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            left = self._run("squeue", "-h", check=False)
            if left.returncode != 0 or not left.stdout.strip():
                return
            time.sleep(0.5)

    def _ours(self) -> list[int]:
        """The live processes whose environment names this cluster's SLURM_CONF: slurmstepd and a job's processes
        (slurmd passes its environment to the steps, sbatch the client's to the job), never another cluster's."""
        mark = f"SLURM_CONF={self.conf}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                environ = (entry / "environ").read_bytes()  # empty for a zombie: it is gone already
            except OSError:
                continue  # it exited meanwhile
            if mark in environ.split(b"\0"):
                found.append(int(entry.name))
        return found

    def _kill_leftovers(self, timeout: float = 10.0) -> None:
        """SIGKILL what the jobs left (an orphaned slurmstepd does not end on SIGTERM); fails, with their pids, if any
        is still alive after `timeout` seconds."""
        end = time.monotonic() + timeout
        while left := self._ours():
            if time.monotonic() > end:
                raise RuntimeError(f"processes of the test's Slurm outlived its teardown (pids {left}); logs in "
                                   f"{self.root}")
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
