"""Which node ran a Slurm slot's trial: the device name its results are stored under.

A slot (``gpu.1``) is a place in the run, not a machine: each of its jobs may land on another
node, and the reports must compare nodes. So each job, on its node and before the agent starts,
appends one line to ``slurm-nodes.tsv`` in the slot's run dir (``NODE_SCRIPT``, run by
``srun`` in front of the agent): the job id, the node as Slurm names it (``SLURMD_NODENAME``,
else ``SLURM_JOB_NODELIST``), the job's partition, the host name the agent's results carry, the
node's clock then, whether the scheduler lets others share the node (``squeue``'s
OverSubscribe, ``NO`` for a whole node), and whether this slot holds the node's name in the run.

The workstation reads those lines back and names each result by the job that ran it
(``fact_for``: the result's host, then the newest job started before the trial): stored as
``<node>@<partition>`` (``stamp``). Everything it uses is in files on the cluster's shared file
system, so a result read again (from the checkpoint, after ``ngb attach`` or a resume in a new
allocation) gets the same name, and the store's "already stored" check still holds.

Why "holds the node's name": a run's results are keyed by (run, device, trial), and two slots
run every trial, so two slots whose jobs land on one node (a shared node, or one node freed by
the first slot and given to the second) would both be ``node@partition``. The first to get
there holds the name (an atomic ``ln -s`` in the entry's work dir, ``slurm-nodes/<run>/``,
kept as the record of which slot ran where); another slot's results there are
``<node>@<partition>#<slot>``.

A trial measured on a node the scheduler may share is flagged ``disturbed``, as one the
measurement saw others on is (every surface shows that flag), with ``extra.slurm.shared`` and a
note on its verdict's reason saying why; its verdict itself stays the measurement's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

FACTS_FILE = "slurm-nodes.tsv"
SHARED_NOTE = "shared Slurm node: other jobs may have run there"

# Arguments: SLOT CLAIMS COMMAND...; run by srun as the job's task, in the slot's run dir (the
# same path on the node: the shared file system). Values reach the script only as arguments.
NODE_SCRIPT = r"""
slot=$1
claims=$2
shift 2
node=${SLURMD_NODENAME:-${SLURM_JOB_NODELIST:-$(uname -n)}}
part=${SLURM_JOB_PARTITION:-}
mine=1
if mkdir -p "$claims" 2>/dev/null; then
  ln -s "$slot" "$claims/$node@$part" 2>/dev/null ||
    [ "$(readlink "$claims/$node@$part")" = "$slot" ] || mine=0
fi
over=$(timeout 5 squeue -h -j "${SLURM_JOB_ID:-0}" -o %h 2>/dev/null | head -n 1)
printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "${SLURM_JOB_ID:-0}" "$node" "$part" "$(uname -n)" \
  "$(date +%s)" "${over:-?}" "$mine" >> slurm-nodes.tsv
exec "$@"
"""


@dataclass(frozen=True)
class NodeFact:
    """One job of a slot, as its node saw it at the start."""

    job_id: int
    node: str
    partition: str
    host: str  # uname -n: what the agent's results carry as ``host``
    started: float  # the node's clock, whole seconds
    oversubscribe: str  # squeue's %h: NO (the node is the job's alone), OK, YES, USER; ? unknown
    mine: bool  # this slot holds the node's name in the run

    def device(self, slot: str) -> str:
        base = f"{self.node}@{self.partition}" if self.partition else self.node
        return base if self.mine else f"{base}#{slot}"

    def shared(self, exclusive: bool) -> bool:
        """Whether others may have run on the node (the inventory's setting when unknown)."""
        if self.oversubscribe in ("", "?"):
            return not exclusive
        return self.oversubscribe != "NO"


def parse_facts(text: str) -> list[NodeFact]:
    """The lines of ``FACTS_FILE`` (a torn or foreign line is skipped)."""
    out = []
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) != 7 or not parts[0].isdigit() or not parts[1]:
            continue
        try:
            started = float(parts[4])
        except ValueError:
            continue
        out.append(NodeFact(int(parts[0]), parts[1], parts[2], parts[3], started, parts[5],
                            parts[6] == "1"))  # fmt: skip
    return out


def fact_for(facts: Sequence[NodeFact], record: Mapping[str, object]) -> NodeFact | None:
    """The job that produced ``record`` (a result as the agent sent it), or None.

    By the job id where the record names it (a trial failed for its job's end); else among the
    jobs on the record's host, the newest one started before the trial (a slot's jobs follow one
    another, and both clocks are that node's)."""
    extra = record.get("extra")
    job = (extra.get("slurm") or {}).get("job") if isinstance(extra, Mapping) else None
    if isinstance(job, int):
        by_id = [f for f in facts if f.job_id == job]
        if by_id:
            return by_id[-1]
    on_host = [f for f in facts if f.host == record.get("host")]
    if not on_host:
        return None
    started = record.get("started_at")
    when = float(started) if isinstance(started, int | float) else 0.0
    before = [f for f in on_host if f.started <= when]
    return max(before, key=lambda f: (f.started, f.job_id)) if before else on_host[0]


def stamp(
    record: Mapping[str, object], fact: NodeFact, slot: str, exclusive: bool
) -> dict[str, object]:
    """``record`` named by its node: ``extra.stored_device`` (the name it is stored under; not
    ``extra.device``, which compilers use for their own target, OpenVINO's "CPU"),
    ``extra.run_device`` (the slot, whose ``run_devices`` row it counts for) and ``extra.slurm``
    (job, node, partition, shared). A measured trial on a shared node is flagged disturbed."""
    shared = fact.shared(exclusive)
    extra = record.get("extra")
    facts = {"job": fact.job_id, "node": fact.node, "partition": fact.partition, "shared": shared}
    out = dict(record)
    out["extra"] = {**(extra if isinstance(extra, Mapping) else {}), "slurm": facts,
                    "stored_device": fact.device(slot), "run_device": slot}  # fmt: skip
    if shared and record.get("status") == "ok":
        out["disturbed"] = True
        reason = str(record.get("verdict_reason") or "")
        if SHARED_NOTE not in reason:  # why, where the verdict is shown (advise's caution)
            out["verdict_reason"] = f"{reason}; {SHARED_NOTE}" if reason else SHARED_NOTE
    return out


def claims_dir(name: str, workdir: str, run_id: str) -> str:
    """Where the slots of a run hold node names: ``slurm-nodes/<run>`` in the inventory entry's
    work dir, relative to the slot's run dir (``<slot workdir>/runs/<run>``, the job's working
    directory). A slot of several (``gpu.2``) works in ``<entry workdir>/gpu.2``
    (``ngb.devices.slurm.slots``), one more level down than a single one."""
    several = "." in name and workdir.rstrip("/").rpartition("/")[2] == name
    return f"{'../' * (3 if several else 2)}slurm-nodes/{run_id}"


def inventory_names(device: str, extra: Mapping[str, object] | None) -> list[str]:
    """The inventory names a stored result may be priced and grouped under, most specific first.

    A result is stored under its device's name -- or, from a Slurm slot, under the node that ran
    it (``gpu07@a100``, ``stamp``), a name the inventory never holds. Such a result records the
    slot it ran in (``extra.run_device``: ``gpu``, or ``gpu.2`` for one of several) beside
    ``extra.slurm``, and a slot is its Slurm entry under another name (``ngb.devices.slurm.
    slots``: ``<entry>.<n>``, a copy of the entry). So the names are: the stored one, then the
    slot, then the entry a numbered slot belongs to. A result without a Slurm stamp has its
    stored name only (a compiler's own ``extra.device`` never renames it)."""
    names = [device]
    extra = extra if isinstance(extra, Mapping) else {}
    slot = extra.get("run_device")
    if not isinstance(extra.get("slurm"), Mapping) or not isinstance(slot, str) or not slot:
        return names
    entry, dot, number = slot.rpartition(".")
    for name in (slot, entry if dot and number.isdigit() else ""):
        if name and name not in names:
            names.append(name)
    return names
