"""What the devices/ and tui/ typing (issue 22) changed at the edges where outside data comes in:
an Ansible port YAML reads as infinity is one error line (it was an OverflowError traceback),
``with_changes`` checks the changed fields like the inventory file does, a probe's compiler list
and a tuning event skip entries that are not objects, and event counts read as ``int()`` reads."""

from __future__ import annotations

from pathlib import Path

import pytest
from ngb.core.base.errors import ConfigError
from ngb.devices.ansible import import_ansible
from ngb.devices.inventory import Device, with_changes
from ngb.sweeps.run.orchestrator import RunEvent
from ngb.tui.live_run import RunModel
from ngb.tui.screens.devices import compilers_of


@pytest.mark.parametrize("port", [".inf", "[22]", "2001-01-01", "~"])
def test_ansible_port_that_is_no_number_is_one_error_line(tmp_path: Path, port: str) -> None:
    src = tmp_path / "hosts.yml"
    src.write_text(f"all:\n  hosts:\n    nano1:\n      ansible_port: {port}\n")
    with pytest.raises(ConfigError, match=r"host 'nano1': bad port"):
        import_ansible(src)


def test_ansible_port_as_text_or_number_still_reads(tmp_path: Path) -> None:
    src = tmp_path / "hosts.yml"
    src.write_text(
        "all:\n  hosts:\n    a:\n      ansible_port: '2200'\n"
        "    b:\n      ansible_port: 2201\n      ansible_user: 7\n"
    )
    devs = {d.name: d for d in import_ansible(src)}
    assert (devs["a"].port, devs["b"].port, devs["b"].user) == (2200, 2201, "7")


def test_with_changes_ignores_none_and_checks_what_changes() -> None:
    old = Device("nano1", "10.0.0.5", user="ubuntu", groups=["edge"])
    new = with_changes(old, host="10.0.0.6", port=None, groups=["edge", "jetsons"])
    assert (new.host, new.port, new.user, new.groups) == (
        "10.0.0.6",
        22,
        "ubuntu",
        ["edge", "jetsons"],
    )
    assert old.host == "10.0.0.5" and old.groups == ["edge"]  # a copy: the original is untouched
    with pytest.raises(ConfigError, match="bad port 0"):
        with_changes(old, port=0)
    with pytest.raises(ConfigError, match="unknown key 'hots'"):
        with_changes(old, hots="x")


def test_probe_compiler_list_skips_entries_that_are_not_objects() -> None:
    probe = {"compilers": ["eager", {"name": "tvm", "available": False}, 3, None, {"name": "ov"}]}
    assert compilers_of(probe) == ["eager", "ov"]
    assert compilers_of({"compilers": "eager"}) == []  # neither a table nor a list


def test_tuning_event_keeps_task_objects_and_reads_counts() -> None:
    model = RunModel()
    event = {
        "type": "tuning", "key": "k", "trials_done": "12", "budget": 64.0, "best_ms": 3,
        "tasks": [{"name": "conv", "trials": 12, "best_ms": 1.5}, "garbage", None],
    }  # fmt: skip
    model.apply(RunEvent(run_id="r", device="d", kind="agent", state="running", event=event))
    tuning = model.devices[("r", "d")].tuning
    assert tuning is not None
    assert (tuning.trials_done, tuning.budget, tuning.best_ms) == (12, 64, 3.0)
    assert tuning.tasks == [{"name": "conv", "trials": 12, "best_ms": 1.5}]
    with pytest.raises(TypeError, match="not a count"):
        model.apply(
            RunEvent(run_id="r", device="d", kind="agent", event={"type": "progress", "rep": [1]})
        )
