"""One run per device at a time: a claim file in the device's work dir, checked atomically.

``<workdir>/ngb-device.claim`` holds ``<run_id> <unix time>``. It lives on the device, so it
covers every workstation and every front end (CLI, console) that reaches the device. A claim
holds while the named run's agent lives (its ``runs/<run_id>/agent.pid`` names a live process),
or for ``grace`` seconds after it was taken while that agent is being started, unless the run's
last event is its agent's ``run_done`` (it ended; nobody has collected it yet). So a crashed
workstation or a dead agent never leaves the device blocked for good: a claim whose agent is
gone, or that never got one within the grace, is free for the next run. A finished or cancelled
run releases its claim at once.

Check-and-take happens under a ``mkdir`` lock (atomic on every POSIX file system), so two runs
starting at the same moment cannot both win; a lock left by a claimer killed in that instant is
broken after about five seconds. The check rides in the same remote command as the agent's start
(``gated``), and the release in the same command as the run dir's removal, so the lock costs no
round trip. As elsewhere, device-specific values travel as positional parameters of constant
scripts, never as shell code.

A Slurm slot is the exception (``share``): a second run there is not refused, because the node
is not the device, the scheduler's queue is. Its job waits in that queue (``PENDING
(Resources)`` while the first run's job holds the node) and it starts when Slurm says so, as a
Slurm user expects; the start says so in one line (``queued_line``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ngb.core.base.errors import NgbError
from ngb.devices.protocol import IS_AGENT

CLAIM_FILE = "ngb-device.claim"
DEFAULT_GRACE_S = 120.0
EXIT_BUSY = 6  # a gated command that found the device held by another run

# Shell functions, with names and variables of their own (ngbc_*): they are prepended to other
# constant scripts. ngbc_cd enters the work dir (creating it when asked); ngbc_holder prints
# "held RUN PID|starting" when another run than $ngbc_run holds the device.
_FUNCTIONS = (
    IS_AGENT
    + r"""
ngbc_cd() {
  case $ngbc_work in "~") ngbc_work=$HOME;; "~/"*) ngbc_work=$HOME/${ngbc_work#"~/"};; esac
  if [ "$1" = create ]; then mkdir -p "$ngbc_work" || return 1; fi
  cd "$ngbc_work" 2>/dev/null
}
ngbc_holder() {
  [ -s ngb-device.claim ] || return 0
  ngbc_other= ngbc_since=
  read -r ngbc_other ngbc_since < ngb-device.claim || [ -n "$ngbc_other" ] || return 0
  [ -n "$ngbc_other" ] && [ "$ngbc_other" != "$ngbc_run" ] || return 0
  ngbc_pidf="runs/$ngbc_other/agent.pid"
  if [ -s "$ngbc_pidf" ]; then
    ngbc_pid=$(cat "$ngbc_pidf")
    ngb_is_agent "$ngbc_pid" "$PWD/runs/$ngbc_other" || return 0
    echo "held $ngbc_other $ngbc_pid"
    return 0
  fi
  # no agent now, and the last one finished the run: free, collected or not (a detached run's
  # device read "busy, its agent is starting" for the rest of the grace after it ended)
  ngbc_ev="runs/$ngbc_other/events.jsonl"
  if [ -s "$ngbc_ev" ] && tail -n 1 "$ngbc_ev" | grep -q '"type":"run_done"'; then
    return 0
  fi
  case $ngbc_since in ''|*[!0-9]*) ngbc_since=0;; esac
  if [ $(( $(date +%s) - ngbc_since )) -lt "$ngbc_grace" ]; then
    echo "held $ngbc_other starting"
  fi
}
ngbc_lock() {
  ngbc_i=0
  until mkdir .ngb-device.claim.lock 2>/dev/null; do
    ngbc_i=$((ngbc_i + 1))
    if [ "$ngbc_i" -ge 50 ]; then rm -rf .ngb-device.claim.lock; ngbc_i=0; fi
    sleep 0.1
  done
}
ngbc_unlock() { rmdir .ngb-device.claim.lock 2>/dev/null || true; }
"""
)

# Prepended to a start command: take the device for this run or stop with EXIT_BUSY, in the same
# round trip as the start. Its four parameters are shifted away before the start script runs.
# Shared (a device a batch scheduler hands out, whose jobs queue there): a held device is not
# refused; the start goes on without the claim and says "behind RUN PID" first.
_GATE = (
    _FUNCTIONS
    + r"""
ngbc_work=$1 ngbc_run=$2 ngbc_grace=$3 ngbc_share=$4
shift 4
ngbc_here=$PWD
ngbc_cd create || { echo "cannot create the work directory" >&2; exit 4; }
ngbc_lock
ngbc_h=$(ngbc_holder)
if [ -z "$ngbc_h" ]; then
  printf '%s %s\n' "$ngbc_run" "$(date +%s)" > "ngb-device.claim.$$"
  mv -f "ngb-device.claim.$$" ngb-device.claim
fi
ngbc_unlock
if [ -n "$ngbc_h" ]; then
  if [ "$ngbc_share" != 1 ]; then echo "busy ${ngbc_h#held }"; exit 6; fi
  echo "behind ${ngbc_h#held }"
fi
cd "$ngbc_here"
"""
)

_WHO = (
    _FUNCTIONS
    + r"""
ngbc_work=$1 ngbc_run= ngbc_grace=$2
ngbc_cd || { echo free; exit 0; }
ngbc_h=$(ngbc_holder)
echo "${ngbc_h:-free}"
"""
)

_RELEASE = (
    _FUNCTIONS
    + r"""
ngbc_work=$1 ngbc_run=$2 ngbc_rundir=$3
if [ -n "$ngbc_rundir" ]; then rm -rf -- "$ngbc_rundir" || exit 1; fi
ngbc_cd || exit 0
ngbc_lock
ngbc_other=
[ -s ngb-device.claim ] && read -r ngbc_other ngbc_since < ngb-device.claim
if [ "$ngbc_other" = "$ngbc_run" ]; then rm -f ngb-device.claim; fi
ngbc_unlock
"""
)


@dataclass(frozen=True)
class Holder:
    """The run that holds a device, and its agent's pid (None while it is being started)."""

    run_id: str
    pid: int | None

    def describe(self) -> str:
        agent = f"agent pid {self.pid}" if self.pid else "its agent is starting"
        return f"run {self.run_id} ({agent})"


class DeviceBusy(NgbError):
    """Another run holds the device; the message names it."""

    def __init__(self, device: str, holder: Holder) -> None:
        super().__init__(
            f"{device} is busy with {holder.describe()}; one run per device at a time: wait for "
            f"it to end or `ngb cancel {holder.run_id}`"
        )
        self.holder = holder


def gated(
    argv: list[str], workdir: str, run_id: str, grace_s: float | None = None, share: bool = False
) -> list[str]:
    """``argv`` (an ``sh -c SCRIPT NAME ARGS...`` command) run only once this run holds the
    device; otherwise it prints ``busy <run_id> <pid|starting>`` and exits ``EXIT_BUSY``. With
    ``share`` (a scheduler's device: its jobs wait in its queue) it runs anyway, after a line
    ``behind <run_id> <pid|starting>``."""
    if argv[:2] != ["sh", "-c"] or len(argv) < 4:
        raise ValueError("gated() takes an `sh -c SCRIPT NAME ...` command")
    grace = DEFAULT_GRACE_S if grace_s is None else grace_s
    return ["sh", "-c", _GATE + argv[2], argv[3], workdir, run_id, str(int(grace)),
            "1" if share else "0", *argv[4:]]  # fmt: skip


def release_argv(workdir: str, run_id: str, run_dir: str | None = None) -> list[str]:
    """Give the device up if ``run_id`` holds it; first remove ``run_dir`` when given."""
    return ["sh", "-c", _RELEASE, "ngb-release", workdir, run_id, run_dir or ""]


def who_argv(workdir: str, grace_s: float | None = None) -> list[str]:
    """Who holds the device: prints ``free`` or ``held <run_id> <pid|starting>``."""
    grace = DEFAULT_GRACE_S if grace_s is None else grace_s
    return ["sh", "-c", _WHO, "ngb-who", workdir, str(int(grace))]


def parse_answer(device: str, text: str) -> Holder | None:
    """The holder named by a busy/who answer, or None when the device is free."""
    words = (text.strip().splitlines() or [""])[-1].split()
    if words[:1] == ["free"]:
        return None
    if len(words) == 3 and words[0] in ("busy", "held"):
        return Holder(words[1], int(words[2]) if words[2].isdigit() else None)
    raise NgbError(f"{device}: unexpected answer about the device claim: {text.strip()[:200]!r}")


def parse_behind(out: str) -> Holder | None:
    """The run a shared start found holding the device (its ``behind`` line), if any."""
    for line in out.splitlines():
        words = line.split()
        if len(words) == 3 and words[0] == "behind":
            return Holder(words[1], int(words[2]) if words[2].isdigit() else None)
    return None


QUEUED = "queued: "  # how a start on a busy scheduler's device begins its line


def queued_line(device: str, holder: Holder) -> str:
    """What a run started on a busy scheduler's device says, once."""
    return (
        f"{QUEUED}{device} is busy with {holder.describe()}; this run's job waits in the "
        "scheduler's queue and starts when the scheduler gives it a node"
    )
