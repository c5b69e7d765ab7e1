"""The device protocol: every command the workstation sends a device, the run-dir layout on the
device, the sha256-checked agent installer, and the event-log offset bookkeeping.

The orchestrator (runs) and ``ngb.devices.agent_remote`` (probe) both speak it, so the quoting, the
install check and the file layout live in one place. Every command is an argv list; transports
quote each element (``shlex.join``) before a remote shell sees it. Where a shell is needed
(redirections, ``&``), the script is a *constant* passed to ``sh -c`` and every device-specific
value (work directory, interpreter, run id) travels as a positional parameter (``"$1"``...), so
an inventory field such as ``x; touch /tmp/pwned`` is only ever a (strange) file name, never
shell code.

Layout of a device's work dir (``workdir`` from the inventory, ``~/.ngb`` by default)::

    agent-<hash>.pyz  the agent bundle, installed only after its sha256 checked out
    agent-<hash>.pyz.ready-<n>  marker: the python named <n> (a cksum) started this agent
    cache/            long-lived: TVM tuning databases, ``cache/artifacts/`` (model files)
    runs/<run_id>/    one run (below)

Layout of a run on a device (``<workdir>/runs/<run_id>/``)::

    trials.jsonl      the trials to run (TrialSpec dicts), uploaded once
    checkpoint.jsonl  one TrialResult per finished trial, appended + fsynced by the agent
    events.jsonl      the agent's JSON-lines event stream (stdout), appended across restarts
    agent.err         the agent's stderr
    agent.pid         written by the agent
    pause             exists while the operator pauses the run

The event log is append-only across agent restarts, so a byte offset into it identifies exactly
what the workstation has consumed; a re-attach continues from there without duplicates.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ngb.core.base.errors import ConfigError
from ngb.core.records.events import decode

# \A...\Z, not ^...$: "$" also matches before a final newline (a run id "x\n" passed)
RUN_ID_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")

# Whether a pid is a run's agent: alive, not a zombie (dead, not yet reaped: e.g. a container whose
# PID 1 does not reap answers kill -0), and -- where /proc tells -- a process whose arguments hold
# the run id (the agent's ``--run-id``; srun's, for a Slurm job) or, for an agent forked by the
# host's agent server (devices/agent_server.py), whose command line is the server's and whose
# working directory is the run dir. The second argument is the run dir (or, where the caller only
# knows the run id, the id alone: then a forked agent is not recognised). Why any of it: a pid
# file outlives its process, and pids come round again (pid_max is 32768 on many kernels; the
# test suite forks ~100 processes a second): a reused pid must neither keep a dead run's device
# busy nor receive its cancel. The stat line is read with a shell builtin, the directory compared
# with test -ef (dash has it); the argument check costs one grep. A grep without -z (exit 2)
# leaves kill -0 as the answer, as on systems without /proc (told by the shell's own /proc/$$).
# Where /proc is there, a pid that answered kill -0 but has no /proc entry a moment later has
# ended and been reaped in between: dead. (The old check took a missing entry for "no /proc
# here", hence alive: a zombie reaped in that instant -- this VM's PID 1 reaps late -- kept a
# killed run's device busy once in a suite run.) A pid of 0 (or 0-led) is refused: ``kill 0``
# would signal the shell's own process group.
IS_AGENT = r"""
ngb_is_agent() {
  case "$1" in ''|*[!0-9]*|0*) return 1;; esac
  kill -0 "$1" 2>/dev/null || return 1
  [ -r "/proc/$$/stat" ] || return 0
  ngb_st=
  read -r ngb_st 2>/dev/null < "/proc/$1/stat" || return 1
  case "$ngb_st" in *") Z "*) return 1;; esac
  [ -n "$2" ] || return 0
  ngb_id=${2##*/} ngb_or=${2##*/}
  if [ "$ngb_id" != "$2" ] && [ "/proc/$1/cwd" -ef "$2" ]; then ngb_or=--agent-server; fi
  ngb_ok=0
  grep -qzxF -e "$ngb_id" -e "$ngb_or" "/proc/$1/cmdline" 2>/dev/null || ngb_ok=$?
  case $ngb_ok in 0) return 0;; 1) return 1;; esac
  [ -r "/proc/$1/cmdline" ]
}
"""

# The agent's start, the last lines of _START_SCRIPT (a Slurm slot replaces them with its srun).
# First through the host's agent server (devices/agent_server.py: a fork of a preloaded process
# instead of a new interpreter, ~0.25 CPU-s less per agent). Its client hands the server the
# agent's streams (fds 4 and 5 here: its own stdout and stderr go nowhere, so a program that is
# not an agent writes nothing into the run's files), prints the pid on fd 3, and fails silently
# where there is no server to be had; then the agent starts detached as below.
# Started detached: `setsid` gives the agent its own session (no SIGHUP when the SSH session or the
# workstation's terminal goes away), `nohup` guards the exec window before setsid. Appending (>>)
# keeps earlier events of a restarted agent, so consumed offsets stay valid. A torn last line (the
# previous agent was killed mid-write) is closed with a newline first so it does not swallow the
# new agent's first event. `$!` is the agent's pid: nohup and setsid exec in place (a background
# job of a non-interactive shell is not a process-group leader, so setsid does not fork).
# Starting is idempotent: if this run's agent is alive (its pid file names it: IS_AGENT), the
# script only prints that pid, so a start whose answer was lost with the link never doubles it.
# In "upload" mode the trials arrive on stdin, so the first start is one round trip.
AGENT_START_DIRECT = r"""
nohup setsid "$py" "$agent" "$@" >> events.jsonl 2>> agent.err < /dev/null &
ngb_pid=$!
"""
AGENT_START = (
    r"""
ngb_pid=
if [ "${ngb_direct:-}" != 1 ] && [ -r "/proc/$$/stat" ]; then
  ngb_pid=$("$py" -S "$agent" spawn "$py" "$@" 3>&1 4>> events.jsonl 5>> agent.err \
    > /dev/null 2>&1 < /dev/null) || ngb_pid=
fi
if [ -z "$ngb_pid" ]; then"""
    + AGENT_START_DIRECT.replace("\n", "\n  ").rstrip(" ")
    + """fi
echo "$ngb_pid"
"""
)
_START_SCRIPT = (
    IS_AGENT
    + r"""
set -e
mode=$1
shift
mkdir -p "$1"
cd "$1"
if [ -s agent.pid ] && ngb_is_agent "$(cat agent.pid)" "$PWD"; then cat agent.pid; exit 0; fi
if [ "$mode" = upload ]; then cat > trials.jsonl.part; mv trials.jsonl.part trials.jsonl; fi
py=$2
agent=$3
shift 3
if [ -s events.jsonl ] && [ -n "$(tail -c 1 events.jsonl)" ]; then echo >> events.jsonl; fi
ngb_events=0
if [ -n "${ngb_ready:-}" ] && [ -f events.jsonl ]; then ngb_events=$(wc -c < events.jsonl); fi
"""
    + AGENT_START
)

# The agent installer, shared by deploy/probe and by a run's first start. Arguments: WORK NAME SHA
# PART PY. It resolves the work dir (``~`` too: a quoted argument never gets the shell's tilde
# expansion), installs an uploaded agent (PART) after its sha256 checks out, and checks the agent
# that is there. Output: ``workdir <abs path>`` first, then ``need-agent`` (upload it to a
# temporary name, call again with PART) and exit 0, or fall through with the agent in place.
# PART may also be ``copy:<abs path>``: the same agent installed in another device's work dir on
# this machine, copied and checked unless the work dir has it already (a copy that fails or does
# not check out is no error: the answer is need-agent, and the workstation uploads). A file just
# checked is not hashed again.
# sha256sum (coreutils, like tail) is preferred; the device's python hashes where it is missing.
# Last, the interpreter must be able to start the agent (``agent ready`` imports it and exits):
# a wrong ``python`` path or an old Python then fails here, once, with its own words (exit 5),
# instead of as an agent that dies on every restart. A marker per (agent, python) remembers a
# pass, so later starts skip the check (it costs an interpreter start and the agent's imports).
# A run's first start may check with the agent it starts instead (``_READY_BY_START``): one
# Python start less per device (~0.09 s of CPU: 12 s of the two cores when 128 loopback devices
# deploy at once).
_RESOLVE_WORK = r"""
case $work in "~") work=$HOME;; "~/"*) work=$HOME/${work#"~/"};; esac
mkdir -p "$work"
cd "$work"
work=$PWD
printf 'workdir %s\n' "$work"
"""
_SUM = r"""
hashpy='import hashlib as h,sys;print(h.sha256(open(sys.argv[1],"rb").read()).hexdigest())'
sum() {
  if command -v sha256sum >/dev/null 2>&1; then sha256sum < "$1" | cut -c1-64
  else "$py" -c "$hashpy" "$1"
  fi
}
"""
_INSTALL_SCRIPT = (
    r"""
set -e
work=$1 name=$2 sha=$3 part=$4 py=$5
shift 5
"""
    + _RESOLVE_WORK
    + _SUM
    + r"""
fresh=
case $part in
copy:/*)
  if [ -f "$name" ] && [ "$(sum "$name")" = "$sha" ]; then fresh=1
  elif cp -f "${part#copy:}" "$name.$$.part" 2>/dev/null && [ "$(sum "$name.$$.part")" = "$sha" ]
  then mv -f "$name.$$.part" "$name"; fresh=1
  else rm -f "$name.$$.part"
  fi;;
?*)
  if [ -f "$part" ]; then
    if [ "$(sum "$part")" = "$sha" ]; then mv -f "$part" "$name"; fresh=1
    else rm -f "$part"; echo "uploaded agent is corrupt (sha256 mismatch)" >&2; exit 4
    fi
  fi;;
esac
if [ -z "$fresh" ] && { [ ! -f "$name" ] || [ "$(sum "$name")" != "$sha" ]; }; then
  echo need-agent
  exit 0
fi
ok=$name.ready-$(printf '%s' "$py" | cksum | cut -d ' ' -f 1)
if [ -n "${ngb_first:-}" ] && [ ! -f "$ok" ]; then
  ngb_ready=$work/$ok
elif [ ! -f "$ok" ]; then
  status=0
  why=$("$py" "$work/$name" ready 2>&1 >/dev/null) || status=$?
  if [ "$status" -ne 0 ]; then
    why=$(printf '%s\n' "$why" | grep -v '^[[:space:]]*$' | tail -n 1)
    printf "python '%s' cannot run on the device (%s)\n" "$py" "${why:-exit status $status}" >&2
    exit 5
  fi
  : > "$ok"
fi
"""
)
EXIT_AGENT_CORRUPT, EXIT_BAD_PYTHON = 4, 5

# The first start of a run on a device, in one round trip: the installer above, then
# _START_SCRIPT. Arguments: MODE, the installer's five, RUN_DIR, agent args. Arguments whose text
# starts with the WORK placeholder are rebased onto the resolved work dir by string operations on
# variables, never by eval, so a strange work dir stays data. Output: the installer's, then the
# agent's pid.
_REBASE_THEN_START = r"""
n=$#
while [ "$n" -gt 0 ]; do
  a=$1
  shift
  case $a in @WORK@*) a=$work${a#@WORK@};; esac
  set -- "$@" "$a"
  n=$((n - 1))
done
rd=$1
shift
set -- "$mode" "$rd" "$py" "$work/$name" "$@"
"""
_LAUNCH_SCRIPT = "mode=$1\nshift\n" + _INSTALL_SCRIPT + _REBASE_THEN_START + _START_SCRIPT
# The first start that is its own check (``launch_argv(ready_by_start=True)``): the installer
# leaves the check to it (``ngb_first``), and after the start above (whose ``$!`` is the agent:
# nohup and setsid exec in place) it waits until the agent's pid file names it -- the agent got
# past its imports and its arguments -- or the agent is gone. A start that found its agent alive
# has exited already. The wait uses shell builtins and backs off (0.05 s to 0.5 s, at most ~60 s):
# 128 devices polling every 50 ms with cat and grep forked thousands of processes a second while
# their agents imported on the same two cores.
# An agent gone before the pid file named it has still run the run when this run lives on: the
# pid file names another live agent of it (one an earlier start launched, whose answer was lost
# with the link, won the checkpoint's lock: this one exited "another agent is running"), or an
# event line was added since the start (it found every trial done, or its whole life fell between
# two looks). Then the start succeeded, and a live agent's pid is the last line. Otherwise the
# interpreter never ran the agent: its last stderr line is the answer (exit 5), and the run dir
# goes only if this start made it (no events, no checkpoint before it). Under a 128-device start
# on two cores, a second start after a lost answer removed the run dir of an agent that ran or
# had finished, and its follower then failed the device: "the run directory ... vanished from
# the device".
_READY_BY_START = r"""
if [ -n "${ngb_ready:-}" ]; then
  pid=$ngb_pid
  n=0
  wait_s=0.05
  until [ -s agent.pid ] && read -r p < agent.pid && [ "$p" = "$pid" ]; do
    if ! ngb_is_agent "$pid" ""; then  # exited, or a zombie: IS_AGENT (in _START_SCRIPT)
      if [ -s agent.pid ] && read -r p < agent.pid && ngb_is_agent "$p" "$PWD"; then
        echo "$p"
        break
      fi
      if [ -f events.jsonl ] && tail -c "+$((ngb_events + 1))" events.jsonl | grep -q '^{"'; then
        break  # it wrote an event since the start: it ran
      fi
      why=$(grep -v '^[[:space:]]*$' agent.err | tail -n 1)
      printf "python '%s' cannot run on the device (%s)\n" "$py" "${why:-it exited at once}" >&2
      if [ "$ngb_events" -eq 0 ] && [ ! -s checkpoint.jsonl ]; then
        rd=$(pwd)
        cd /
        rm -rf -- "$rd"
      fi
      exit 5
    fi
    n=$((n + 1))
    if [ "$n" -ge 120 ]; then break; fi
    sleep "$wait_s" 2>/dev/null || sleep 1
    case $wait_s in 0.05) wait_s=0.1;; 0.1) wait_s=0.2;; 0.2) wait_s=0.5;; esac
  done
  : > "$ngb_ready"
fi
"""
_LAUNCH_READY_SCRIPT = "ngb_first=1\n" + _LAUNCH_SCRIPT + _READY_BY_START
WORK_PLACEHOLDER = "@WORK@"

# Signal the agent: the pid file the agent wrote wins; the pid the workstation recorded at start
# is the fallback (the agent may be killed before it wrote its file).
_KILL_SCRIPT = (
    IS_AGENT
    + r"""
sig=$1
pidfile=$2
pid=$3
if [ -s "$pidfile" ]; then pid=$(cat "$pidfile"); fi
ngb_is_agent "$pid" "${pidfile%/*}" || exit 3
kill "-$sig" "$pid"
"""
)

# Arguments: PID RUN_DIR (or the run id; empty: any live process).
_ALIVE_SCRIPT = (
    IS_AGENT
    + r"""
if ngb_is_agent "$1" "$2"; then echo alive; else echo dead; fi
"""
)


AGENT_START_ENV = "NGB_AGENT_START"  # "direct": no agent server (AGENT_START)


def _how_agents_start() -> str:
    """``NGB_AGENT_START=direct`` in the workstation's environment starts every agent in an
    interpreter of its own, as before the agent server: to compare the two, or on a host where
    forking agents misbehaves. The choice rides in the script, never in the device's environment."""
    return "ngb_direct=1\n" if os.environ.get(AGENT_START_ENV) == "direct" else ""


def check_run_id(run_id: str) -> str:
    """Run ids become directory names on devices: keep them to a safe alphabet."""
    if not isinstance(run_id, str) or not RUN_ID_RE.match(run_id):
        raise ConfigError(f"bad run id {run_id!r}: use letters, digits, '.', '_' and '-' only")
    return run_id


@dataclass(frozen=True)
class RunPaths:
    """Absolute paths of one run's files on one device (``workdir`` already expanded)."""

    workdir: str
    run_id: str

    def __post_init__(self) -> None:
        check_run_id(self.run_id)
        if not self.workdir:
            raise ConfigError("empty device work directory")

    @property
    def run_dir(self) -> str:
        return f"{self.workdir.rstrip('/') or '/'}/runs/{self.run_id}".replace("//", "/")

    def _in_run(self, name: str) -> str:
        return f"{self.run_dir}/{name}"

    trials = property(lambda self: self._in_run("trials.jsonl"))
    checkpoint = property(lambda self: self._in_run("checkpoint.jsonl"))
    events = property(lambda self: self._in_run("events.jsonl"))
    stderr = property(lambda self: self._in_run("agent.err"))
    pidfile = property(lambda self: self._in_run("agent.pid"))
    pause_file = property(lambda self: self._in_run("pause"))

    @property
    def cache_dir(self) -> str:
        """Long-lived cache (TVM tuning databases) shared by every run on the device."""
        return f"{self.workdir.rstrip('/')}/cache"


def expand_home(workdir: str, home: str) -> str:
    """Expand a leading ``~`` the way a shell would; quoted arguments never get that for free."""
    if workdir == "~":
        return home
    if workdir.startswith("~/"):
        return f"{home.rstrip('/')}/{workdir[2:]}"
    return workdir


def home_argv() -> list[str]:
    return ["sh", "-c", 'printf %s "$HOME"']


def mkdir_argv(path: str) -> list[str]:
    return ["mkdir", "-p", "--", path]


def start_agent_argv(
    python: str,
    agent_path: str,
    paths: RunPaths,
    *,
    isolate: str | None = None,
    upload: bool = False,
) -> list[str]:
    """Start the agent detached in the run dir; prints its pid (one line) and returns at once.

    ``upload``: the command's stdin is ``trials.jsonl`` (written atomically before the start).
    """
    agent_args = [
        "run",
        "--trials", paths.trials,
        "--checkpoint", paths.checkpoint,
        "--run-id", paths.run_id,
        "--pidfile", paths.pidfile,
        "--pause-file", paths.pause_file,
        "--cache-dir", paths.cache_dir,
    ]  # fmt: skip
    if isolate:
        agent_args += ["--isolate", isolate]
    mode = "upload" if upload else "start"
    return ["sh", "-c", _how_agents_start() + _START_SCRIPT, "ngb-start", mode, paths.run_dir,
            python, agent_path, *agent_args]  # fmt: skip


def _check_agent_name(agent_name: str) -> None:
    if "/" in agent_name or agent_name in ("", ".", ".."):
        raise ConfigError(f"bad agent file name {agent_name!r}")


def install_argv(
    python: str, workdir: str, agent_name: str, agent_sha256: str, *, part: str = ""
) -> list[str]:
    """Check (and with ``part``, install) the agent in the work dir; parse with ``parse_install``.

    The same installer ``launch_argv`` starts with, for callers that only need the agent there
    (probe). Exit 4: the upload was corrupt; exit 5: ``python`` cannot start the agent (stderr
    says why, in one line).
    """
    _check_agent_name(agent_name)
    return ["sh", "-c", _INSTALL_SCRIPT + "echo agent-ok\n", "ngb-install", workdir, agent_name,
            agent_sha256, part, python]  # fmt: skip


def parse_install(out: str) -> tuple[str, bool]:
    """``install_argv``'s answer -> (absolute work dir, whether the agent is in place)."""
    workdir, _ = parse_launch(out)
    return workdir, "agent-ok" in out.split()


def launch_argv(
    python: str,
    workdir: str,
    agent_name: str,
    agent_sha256: str,
    run_id: str,
    *,
    part: str = "",
    isolate: str | None = None,
    ready_by_start: bool = False,
) -> list[str]:
    """First start of a run: check/install the agent, write trials.jsonl (stdin), start detached.

    One remote command instead of five (prepare, install, mkdir, upload trials, start): each SSH
    exec pays for the device's login shell. ``part``: an uploaded agent to verify and install
    first, or ``copy:<abs path>`` of one another device's work dir on this machine holds
    (``copy_part``). ``ready_by_start``: the agent started is the interpreter's check
    (``_READY_BY_START``; not where a scheduler starts it elsewhere). Parse the answer with
    ``parse_launch``.
    """
    template = start_agent_argv(python, agent_name, RunPaths(WORK_PLACEHOLDER, run_id),
                                isolate=isolate, upload=True)  # fmt: skip
    agent_args = template[8:]  # after: sh -c SCRIPT $0 mode run_dir python agent
    _check_agent_name(agent_name)
    script = _how_agents_start() + (_LAUNCH_READY_SCRIPT if ready_by_start else _LAUNCH_SCRIPT)
    return ["sh", "-c", script, "ngb-launch", "upload", workdir,
            agent_name, agent_sha256, part, python, template[5], *agent_args]  # fmt: skip


def copy_part(installed_agent: str) -> str:
    """``launch_argv``'s ``part`` that copies an agent installed on the same machine (absolute
    path) instead of one uploaded."""
    if not installed_agent.startswith("/"):
        raise ConfigError(f"not an absolute path: {installed_agent!r}")
    return f"copy:{installed_agent}"


def parse_launch(out: str) -> tuple[str, int | None]:
    """``launch_argv``'s answer -> (absolute work dir, agent pid; None: the agent is missing)."""
    workdir, pid = "", None
    for line in out.splitlines():
        if line.startswith("workdir "):
            workdir = line[len("workdir ") :]
        elif line.strip().isdigit():
            pid = int(line.strip())
    if not workdir:
        raise ConfigError(f"the device did not report its work directory: {out.strip()[:200]!r}")
    return workdir, pid


# Follow the event log (``follow_argv``): tail in the background, and a watcher of the command's
# stdin that ends tail when the follower is gone. Why: tail only notices a closed SSH channel when
# it next writes, and ``--pid`` cannot tell a zombie from a live agent (where PID 1 does not reap,
# as on the 2-core VM): a killed workstation left ~50 ``tail -F`` on its loopback devices. The
# stdin of a background job is /dev/null unless redirected, hence fd 3. The watcher writes to
# /dev/null, so its ``cat`` (left until the channel closes) holds none of the command's output.
# tail polls every POLL seconds ($4) instead of waking on each write (``---disable-inotify``,
# GNU's own option): what the agent wrote in between (a CPU sample and its snapshot, a trial's
# phases) leaves in one write, one SSH packet, instead of one each (``follow_argv``).
_FOLLOW_SCRIPT = r"""
exec 3<&0
tail -c "+$1" -F -s "$4" ---disable-inotify --pid="$2" -- "$3" &
t=$!
(cat <&3 >/dev/null 2>&1; kill "$t" 2>/dev/null) >/dev/null 2>&1 &
w=$!
exec 3<&-
wait "$t"
s=$?
kill "$w" 2>/dev/null
exit "$s"
"""


def follow_argv(paths: RunPaths, offset: int, pid: int, poll_s: float = 0.5) -> list[str]:
    """Stream the event log from byte ``offset`` on; ends by itself once the agent ``pid`` is gone,
    and takes tail down when the follower goes (its stdin closes: ``_FOLLOW_SCRIPT``).

    GNU tail: ``-c +N`` is 1-based, ``-F`` survives the file appearing late, ``--pid`` makes tail
    read what is left and exit after the agent died, so a finished or dead agent ends the stream.
    The command's stdin must stay open while it is followed (SSH channels do; a local pipe).
    tail looks for new lines and for the agent's exit every ``poll_s`` seconds (what is there
    already comes at once): an event reaches the follower up to that much later.
    """
    poll = min(max(poll_s, 0.1), 60.0) if math.isfinite(poll_s) else 0.5  # one tail takes
    return ["sh", "-c", _FOLLOW_SCRIPT, "ngb-follow", str(int(offset) + 1), str(int(pid)),
            paths.events, f"{poll:.3f}"]  # fmt: skip


def alive_argv(pid: int | None, run_dir: str = "") -> list[str]:
    """Prints ``alive`` when ``pid`` lives (and, given ``run_dir``, is that run's agent), else
    ``dead``. ``run_dir`` may be the bare run id, which misses an agent the agent server forked
    (``IS_AGENT``)."""
    return ["sh", "-c", _ALIVE_SCRIPT, "ngb-alive", str(pid or ""), run_dir]


# Wait on the device for the agent to exit after its goodbye: one command that checks every
# 0.1 s (a builtin read, a grep and a sleep each time), where a check from the workstation was an
# SSH exec each (a channel, a session, a login shell): ~5 of them a device at the end of each run.
# Arguments: PID RUN_DIR STEPS. Prints ``dead``, or ``alive`` after STEPS checks.
# After run_done: wait on the device for the agent ($1, of the run in $2) to exit, at most $3
# steps of 0.1 s (not an SSH exec every 0.1 s), say ``dead`` or ``alive``, then print the file $4
# (exit status 3 when it does not exist): what a device's end needs, its agent gone and its
# checkpoint, in one SSH session instead of two.
_WAIT_THEN_CAT_SCRIPT = (
    IS_AGENT
    + r"""
n=0 ngb_w=dead
while ngb_is_agent "$1" "$2"; do
  n=$((n + 1))
  if [ "$n" -gt "$3" ]; then ngb_w=alive; break; fi
  sleep 0.1 2>/dev/null || sleep 1
done
echo "$ngb_w"
test -f "$4" || exit 3
exec cat "$4"
"""
)


def wait_then_read_argv(pid: int | None, run_dir: str, limit_s: float, path: str) -> list[str]:
    """Wait up to ``limit_s`` on the device for ``pid`` (the agent of the run in ``run_dir``) to
    exit, then print ``path``: the first line is ``dead`` or, still running after the limit,
    ``alive``; the file follows; exit status 3 when it does not exist."""
    steps = max(1, round(limit_s / 0.1))
    return ["sh", "-c", _WAIT_THEN_CAT_SCRIPT, "ngb-wait-read", str(pid or ""), run_dir,
            str(steps), path]  # fmt: skip


def agent_alive_argv(paths: RunPaths, pid: int | None) -> list[str]:
    """Like ``alive_argv``, but the agent's own pid file wins over the recorded pid."""
    script = (
        'pid=$2\nif [ -s "$1" ]; then pid=$(cat "$1"); fi\nset -- "$pid" "$3"\n' + _ALIVE_SCRIPT
    )
    return ["sh", "-c", script, "ngb-alive", paths.pidfile, str(pid or ""), paths.run_dir]


def signal_argv(paths: RunPaths, pid: int | None, sig: str = "TERM") -> list[str]:
    if sig not in ("TERM", "KILL", "INT"):
        raise ValueError(f"unexpected signal {sig}")
    return ["sh", "-c", _KILL_SCRIPT, "ngb-kill", sig, paths.pidfile, str(pid or "")]


def pause_argv(paths: RunPaths) -> list[str]:
    return ["touch", "--", paths.pause_file]


def resume_argv(paths: RunPaths) -> list[str]:
    return ["rm", "-f", "--", paths.pause_file]


def teardown_argv(paths: RunPaths) -> list[str]:
    return ["rm", "-rf", "--", paths.run_dir]


def read_file_argv(path: str) -> list[str]:
    """Print a file; exit status 3 when it does not exist."""
    return ["sh", "-c", 'test -f "$1" || exit 3; exec cat "$1"', "ngb-cat", path]


def stderr_tail_argv(paths: RunPaths, lines: int = 5) -> list[str]:
    return ["tail", "-n", str(int(lines)), paths.stderr]


# -- model artifacts (the user's ONNX / .pt2 files and code folders) ---------------------------
#
# Content-addressed under ``<workdir>/cache/artifacts/<sha256>/<name>`` (a file, or a folder for
# code), so any run on the device reuses what an earlier one uploaded. "have" lists which of the
# asked-for hashes are there (one command, no hashing: the agent verifies before use, and removes
# an entry whose content no longer has its hash, so the next run uploads it again). "install"
# checks each upload's sha256 (the payload: the file itself, or the deterministic zip of a code
# folder), unpacks a zip with the device's own Python (``python -m zipfile -e``), and renames a
# finished temporary folder into place, so a reader never sees half an artifact.
ARTIFACTS_DIR = "cache/artifacts"  # under the work dir; = RunPaths.cache_dir + "/artifacts"
_SHA256_RE = re.compile(r"\A[0-9a-f]{64}\Z")
_ARTIFACTS_HAVE_SCRIPT = (
    r"""
set -e
work=$1
shift
"""
    + _RESOLVE_WORK
    + r"""
mkdir -p cache/artifacts
while [ "$#" -ge 2 ]; do
  if [ -e "cache/artifacts/$1/$2" ]; then printf 'have %s %s\n' "$1" "$2"; fi
  shift 2
done
"""
)
_ARTIFACTS_INSTALL_SCRIPT = (
    r"""
set -e
work=$1 py=$2
shift 2
"""
    + _RESOLVE_WORK
    + _SUM
    + r"""
cd cache/artifacts
while [ "$#" -ge 5 ]; do
  sha=$1 name=$2 fmt=$3 psha=$4 part=$5
  shift 5
  if [ "$(sum "$part")" != "$psha" ]; then
    rm -f "$part"
    echo "uploaded artifact $name is corrupt (sha256 mismatch)" >&2
    exit 4
  fi
  tmp=.$sha.$$.tmp
  rm -rf "$tmp"
  mkdir "$tmp"
  if [ "$fmt" = zip ]; then "$py" -m zipfile -e "$part" "$tmp/$name"; rm -f "$part"
  else mv -f "$part" "$tmp/$name"
  fi
  if [ -e "$sha/$name" ]; then rm -rf "$tmp"
  elif [ -d "$sha" ]; then mv "$tmp/$name" "$sha/$name"; rm -rf "$tmp"
  else mv "$tmp" "$sha"
  fi
  printf 'installed %s %s\n' "$sha" "$name"
done
"""
)


def check_artifact(sha256: object, name: object) -> None:
    """Artifact hashes and names become path parts on the device: keep them plain."""
    if not isinstance(sha256, str) or not _SHA256_RE.match(sha256):
        raise ConfigError(f"bad artifact hash {sha256!r}: expected 64 lowercase hex digits")
    if (
        not isinstance(name, str)
        or name in ("", ".", "..")
        or "/" in name
        or any(ord(c) < 32 or ord(c) == 127 for c in name)
    ):
        raise ConfigError(f"bad artifact name {name!r}: a plain file or folder name")


def artifacts_have_argv(workdir: str, items: Iterable[tuple[str, str]]) -> list[str]:
    """Which ``(sha256, name)`` artifacts the device holds; parse with ``parse_artifacts_have``."""
    args: list[str] = []
    for sha, name in items:
        check_artifact(sha, name)
        args += [sha, name]
    return ["sh", "-c", _ARTIFACTS_HAVE_SCRIPT, "ngb-artifacts", workdir, *args]


def parse_artifacts_have(out: str) -> tuple[str, set[tuple[str, str]]]:
    """-> (absolute work dir, the ``(sha256, name)`` artifacts the device already holds)."""
    workdir, _ = parse_launch(out)
    have = set()
    for line in out.splitlines():
        if line.startswith("have "):
            sha, _, name = line[len("have ") :].partition(" ")
            have.add((sha, name))
    return workdir, have


@dataclass(frozen=True)
class ArtifactUpload:
    """One uploaded payload waiting on the device at ``part`` (an absolute path)."""

    sha256: str  # the artifact's content address (models' hash of the file or folder)
    name: str  # its file or folder name under <sha256>/
    zipped: bool  # a code folder, packed as a deterministic zip
    payload_sha256: str  # sha256 of the uploaded bytes (= sha256 for a plain file)
    part: str


def artifacts_install_argv(
    python: str, workdir: str, uploads: Iterable[ArtifactUpload]
) -> list[str]:
    """Verify, unpack and move uploaded artifacts into place; prints ``installed <sha> <name>``.

    Exit 4: an upload's bytes do not have their sha256 (it is deleted; upload again).
    """
    args: list[str] = []
    for up in uploads:
        check_artifact(up.sha256, up.name)
        if not _SHA256_RE.match(up.payload_sha256):
            raise ConfigError(f"bad payload hash {up.payload_sha256!r}")
        args += [up.sha256, up.name, "zip" if up.zipped else "file", up.payload_sha256, up.part]
    return ["sh", "-c", _ARTIFACTS_INSTALL_SCRIPT, "ngb-artifacts-install", workdir, python, *args]


def trials_jsonl(trial_dicts: Iterable[Mapping[str, object]]) -> str:
    return "".join(json.dumps(t, sort_keys=True) + "\n" for t in trial_dicts)


def parse_checkpoint(text: str) -> dict[str, dict[str, object]]:
    """Checkpoint lines by trial key; a torn line (kill -9 mid-write) is ignored."""
    results: dict[str, dict[str, object]] = {}
    for line in text.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("key"), str):
            results[obj["key"]] = obj
    return results


class EventLogReader:
    """Turns streamed event-log lines into events while counting consumed bytes.

    ``offset`` only covers complete lines: an undecodable line is committed once a later line
    shows it was newline-terminated (garbage in the middle of the log); an undecodable *last* line
    may be a fragment still being written (or torn by kill -9) and is re-read on the next follow.
    The agent's snapshots after the first this reader passed on are counted but neither decoded
    nor returned (``is_snapshot_line``): a reader is one follow.
    """

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset
        self._pending = 0  # bytes of an undecodable line not yet known to be complete
        self._snapshot_seen = False

    def feed(self, line: str) -> dict[str, object] | None:
        """The next event (a JSON object, ``ngb.core.records.events.decode``), or None for a line
        that is not one (yet) or a later snapshot."""
        self.offset += self._pending
        self._pending = 0
        size = len(line.encode("utf-8")) + 1  # the newline the transport stripped
        if self._snapshot_seen and is_snapshot_line(line):
            self.offset += size
            return None
        event = decode(line)
        if event is None:
            self._pending = size
            return None
        self.offset += size
        self._snapshot_seen = self._snapshot_seen or event.get("type") == SNAPSHOT
        return event

    def end_of_stream(self) -> None:
        """The stream ended: whatever is pending may be a fragment; leave it to be re-read."""
        self._pending = 0


#: the agent's snapshot type, ``ngb.core.trial.live_state.STATE`` (not imported: that module
#: loads the compiler registry, doubling this one's import; the tests hold the two equal)
SNAPSHOT = "state"
#: how an agent's snapshot event begins, after its ``v`` and ``ts`` (``events.encode``)
_SNAPSHOT_TYPE = f'"type":"{SNAPSHOT}",'


def is_snapshot_line(line: str) -> bool:
    """Whether a whole event line is the agent's periodic snapshot (``live_state.STATE``),
    told without decoding it: its first ``"type":`` key says so, and the line ends its object.
    A follower needs only the first after it starts following (to draw a trial it joined
    mid-way); the later ones say nothing the events between them did not, and were ~30 % of a
    fleet's lines (21 of 71 a device for four 5 s trials), each decoded and passed on."""
    at = line.find('"type":')
    return at > 0 and line.startswith(_SNAPSHOT_TYPE, at) and line.endswith("}")


def parse_jsonl(text: str) -> list[dict[str, object]]:
    """JSON objects of a JSON-lines text; torn or foreign lines are skipped."""
    out: list[dict[str, object]] = []
    for line in text.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out
