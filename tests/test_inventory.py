"""Inventory file: round trip, every validation error, Ansible import, target resolution; and the
LocalTransport that the built-in localhost uses."""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import pytest
from ngb.core.base.errors import ConfigError, UnknownNameError
from ngb.devices.ansible import import_ansible
from ngb.devices.inventory import (
    Device,
    Group,
    Inventory,
    load_inventory,
    merge_devices,
)
from ngb.devices.local import LocalTransport
from ngb.devices.paths import get_paths
from ngb.devices.transport import TransportError


def _sample() -> Inventory:
    return Inventory(
        [
            Device("nano1", "10.0.0.5", user="ubuntu", groups=["jetsons"], tags=["arm"]),
            Device("nano2", "10.0.0.6", port=2222, identity_file="~/.ssh/lab", notes="desk"),
            Device("gpu1", "gpu1.lab", jump_host="nano1", python="/opt/py/bin/python"),
        ],
        [Group("edge", members=["nano2"], children=["jetsons"])],
    )


def test_round_trip_keeps_everything_and_stays_readable(tmp_path: Path) -> None:
    inv = _sample()
    path = inv.save(tmp_path / "devices.toml")
    text = path.read_text()
    assert "[devices.nano1]" in text and "[groups.edge]" in text
    assert "workdir" not in text  # defaults are not written out
    back = load_inventory(path)
    assert [d.to_dict() for d in back] == [d.to_dict() for d in inv]
    assert back.groups["edge"].children == ["jetsons"]


def test_localhost_is_built_in_even_without_a_file(tmp_path: Path) -> None:
    inv = load_inventory(tmp_path / "absent.toml")
    assert list(inv.devices) == ["localhost"]
    local = inv.get("localhost")
    assert local.transport == "local" and local.is_local
    assert local.python == sys.executable
    assert load_inventory().get("localhost").is_local  # NGB_HOME from conftest: no file there


def test_localhost_can_be_adjusted_but_not_removed(tmp_path: Path) -> None:
    path = tmp_path / "d.toml"
    path.write_text('[devices.localhost]\ngroups = ["here"]\n')
    inv = load_inventory(path)
    assert inv.get("localhost").is_local and inv.get("localhost").groups == ["here"]
    inv.remove("localhost")  # drops the override, back to the built-in
    assert inv.get("localhost").groups == []
    with pytest.raises(ConfigError, match="built in"):
        inv.remove("localhost")


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[devices.a]\nhost = "h"\n[devices.a]\nhost = "h2"\n', "invalid TOML"),
        ('[devices.Nano]\nhost = "h"\n[devices.nano]\nhost = "h2"\n', "duplicate device name"),
        ('[devices.a]\nhost = "h"\nport = 70000\n', "device 'a': bad port 70000"),
        ('[devices.a]\nhost = "h"\nport = 0\n', "bad port 0"),
        ('[devices.a]\nhost = "h"\nport = "22"\n', "bad port '22'"),
        ('[devices.a]\nhost = ""\n', "device 'a': host is empty"),
        ("[devices.a]\nport = 22\n", "device 'a': host is missing"),
        ('[devices."a b"]\nhost = "h"\n', "bad device name 'a b'"),
        ('[devices."x;rm"]\nhost = "h"\n', "bad device name 'x;rm'"),
        ('[devices.a]\nhots = "h"\n', "unknown key 'hots' (did you mean 'host'"),
        ('[devices.a]\nhost = "h"\ntransport = "telnet"\n', "bad transport 'telnet'"),
        ('[devices.a]\nhost = "h"\ngroups = "g"\n', "groups must be a list of strings"),
        ('[devices.a]\nhost = "h"\njump_host = "bastoin"\n', "unknown jump_host 'bastoin'"),
        ('[devices.a]\nhost = "h"\n[groups.g]\nmembers = ["b"]\n', "unknown device 'b'"),
        ('[devices.a]\nhost = "h"\n[groups.g]\nchildren = ["nope"]\n', "unknown group 'nope'"),
        ('[devices.a]\nhost = "h"\n[groups.a]\nmembers = ["a"]\n', "a device has the same name"),
        (
            '[devices.a]\nhost = "h"\n[groups.g]\nchildren = ["k"]\n[groups.k]\nchildren = ["g"]\n',
            "cycle",
        ),
        ('[device.a]\nhost = "h"\n', "unknown top-level key 'device'"),
    ],
)
def test_validation_errors_name_file_and_device(tmp_path: Path, toml: str, message: str) -> None:
    path = tmp_path / "devices.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as err:
        load_inventory(path)
    text = str(err.value)
    assert message in text
    assert text.startswith(str(path))
    assert "\n" not in text
    assert path.read_text() == toml  # loading never touches the file


def test_save_refuses_invalid_and_leaves_file_intact(tmp_path: Path) -> None:
    path = _sample().save(tmp_path / "devices.toml")
    before = path.read_bytes()
    inv = load_inventory(path)
    with pytest.raises(ConfigError, match="already exists"):
        inv.add(Device("NANO1", "x"))
    inv.devices["bad"] = Device("bad", "h", port=99999)
    with pytest.raises(ConfigError, match="bad port"):
        inv.save()
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["devices.toml"]  # no temp files left


def test_resolve_names_groups_nested_groups_and_all() -> None:
    inv = _sample()
    assert [d.name for d in inv.resolve("nano2,gpu1")] == ["nano2", "gpu1"]
    assert [d.name for d in inv.resolve("jetsons")] == ["nano1"]
    assert [d.name for d in inv.resolve("edge")] == ["nano1", "nano2"]  # members + children
    assert [d.name for d in inv.resolve(["edge", "nano1"])] == ["nano1", "nano2"]  # no dups
    assert len(inv.resolve("all")) == 4 and len(inv.resolve(None)) == 4
    assert inv.groups_of("nano1") == ["edge", "jetsons"]
    with pytest.raises(UnknownNameError) as err:
        inv.resolve("nano3")
    assert "nano1" in err.value.close and "did you mean" in str(err.value)
    with pytest.raises(UnknownNameError, match="unknown group"):
        inv.group_members("jetson")


@pytest.mark.parametrize("name", ["all", "ALL", "All"])
def test_no_device_takes_a_name_that_d_reads_otherwise(name: str) -> None:
    """`-d all` means every device (issue 41: a device named `all` was what it picked): refused
    from the CLI's add, the console's form (``device_from_table``) and a file."""
    from ngb.devices.inventory import device_from_table, inventory_from_dict

    with pytest.raises(ConfigError, match=f"device name '{name}' is reserved"):
        _sample().add(Device(name, "h"))
    with pytest.raises(ConfigError, match="is reserved .*choose another"):
        device_from_table(name, {"host": "h"})
    with pytest.raises(ConfigError, match=rf"rename its table \[devices\.{name}\]"):
        inventory_from_dict({"devices": {name: {"host": "h"}}}, path=Path("devices.toml"))
    assert [d.name for d in _sample().resolve("all")] == [d.name for d in _sample()]


def test_no_device_or_group_takes_the_name_of_a_slurm_node() -> None:
    """A Slurm entry with 2 nodes runs as `gpu.1` and `gpu.2`, which `-d` names too."""
    gpu = Device("gpu", "localhost", transport="slurm", slurm={"partition": "p", "nodes": 2})
    inv = Inventory([gpu])
    with pytest.raises(ConfigError, match="device 'gpu.2' has the name of a node of Slurm"):
        inv.add(Device("gpu.2", "h"))
    with pytest.raises(ConfigError, match="group 'GPU.1' has the name of a node of Slurm"):
        inv.add(Device("pi", "h", groups=["GPU.1"]))
    inv.add(Device("gpu.3", "h"))  # not a node of a 2-node entry
    assert [d.name for d in inv.resolve("gpu.2")] == ["gpu.2"]  # the slot


@pytest.mark.parametrize(
    "table",
    [{"partition": "gpu\n"}, {"partition": "p", "gres": "gpu:1\n"},
     {"partition": "p", "time_limit": "02:00:00\n"}, {"partition": "p", "time_limit": "60\n"}],
)  # fmt: skip
def test_a_final_newline_is_no_part_of_a_slurm_word(table: dict[str, str]) -> None:
    """`$` matches before a final newline: the checks anchor at the very end (issue 41)."""
    with pytest.raises(ConfigError, match="slurm"):
        Inventory([Device("gpu", "localhost", transport="slurm", slurm=dict(table))]).validate()
    with pytest.raises(ConfigError, match="bad device name"):
        Inventory([Device("pi\n", "h")]).validate()


ANSIBLE_YAML = """
all:
  vars:
    ansible_user: admin
  hosts:
    bastion:
      ansible_host: 192.0.2.1
  children:
    edge:
      vars:
        ansible_python_interpreter: /usr/bin/python3.10
      children:
        jetsons:
          vars:
            ansible_user: nvidia
          hosts:
            orin1:
              ansible_host: 192.0.2.11
              ansible_port: 2222
              ansible_ssh_private_key_file: ~/.ssh/orin
            nano[01:02]:
    servers:
      hosts:
        gpu1:
          ansible_user: root
          ansible_python_interpreter: /opt/conda/bin/python
"""


def test_ansible_yaml_import(tmp_path: Path) -> None:
    src = tmp_path / "hosts.yml"
    src.write_text(ANSIBLE_YAML)
    devs = {d.name: d for d in import_ansible(src)}
    assert sorted(devs) == ["bastion", "gpu1", "nano01", "nano02", "orin1"]
    orin = devs["orin1"]
    assert (orin.host, orin.port, orin.user) == ("192.0.2.11", 2222, "nvidia")  # child vars win
    assert orin.identity_file == "~/.ssh/orin"
    assert orin.python == "/usr/bin/python3.10"  # inherited from the parent group
    assert orin.groups == ["edge", "jetsons"]
    assert devs["nano02"].host == "nano02" and devs["nano02"].user == "nvidia"
    assert devs["bastion"].user == "admin" and devs["bastion"].groups == []
    assert (devs["gpu1"].user, devs["gpu1"].python) == ("root", "/opt/conda/bin/python")


ANSIBLE_INI = """
# lab inventory
bastion ansible_host=192.0.2.1

[jetsons]
orin1 ansible_host=192.0.2.11 ansible_user=nvidia
nano1:2200 ansible_host=192.0.2.12

[jetsons:vars]
ansible_python_interpreter=/usr/bin/python3
ansible_user=ubuntu

[edge:children]
jetsons

[edge:vars]
ansible_ssh_private_key_file=~/.ssh/edge
"""


def test_ansible_ini_import(tmp_path: Path) -> None:
    src = tmp_path / "hosts.ini"
    src.write_text(ANSIBLE_INI)
    devs = {d.name: d for d in import_ansible(src)}
    assert sorted(devs) == ["bastion", "nano1", "orin1"]
    assert devs["orin1"].user == "nvidia"  # host var beats group var
    assert devs["nano1"].user == "ubuntu" and devs["nano1"].port == 2200
    assert devs["nano1"].identity_file == "~/.ssh/edge"  # from the parent group
    assert devs["nano1"].groups == ["edge", "jetsons"]
    assert devs["bastion"].groups == [] and devs["bastion"].host == "192.0.2.1"


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("h.ini", "[g]\nbox ansible_port=http\n", "bad port 'http'"),
        ("h.ini", "[g\nbox\n", "unclosed section"),
        ("h.ini", "[g:children]\nmissing\n[g2:children]\ng\n", "no hosts found"),
        ("h.yml", "all: [1, 2\n", "invalid YAML"),
        ("h.yml", "all:\n  hostz: {}\n", "unknown key 'hostz'"),
    ],
)
def test_ansible_import_errors(tmp_path: Path, name: str, text: str, message: str) -> None:
    src = tmp_path / name
    src.write_text(text)
    with pytest.raises(ConfigError, match=message):
        import_ansible(src)


def test_merge_refuses_conflicts_unless_replace(tmp_path: Path) -> None:
    inv = _sample()
    new = [Device("nano1", "10.9.9.9", groups=["jetsons"]), Device("fresh", "fresh.lab")]
    with pytest.raises(ConfigError, match="nano1"):
        merge_devices(inv, new, replace_existing=False)
    assert "fresh" not in inv  # nothing half-applied
    report = merge_devices(inv, new, replace_existing=True)
    assert report == {"added": ["fresh"], "replaced": ["nano1"], "unchanged": []}
    assert inv.get("nano1").host == "10.9.9.9"
    # a merge that would break the inventory (edge's child group vanishes) changes nothing
    with pytest.raises(ConfigError, match="unknown group 'jetsons'"):
        merge_devices(inv, [Device("nano1", "10.1.1.1")], replace_existing=True)
    assert inv.get("nano1").host == "10.9.9.9"


def test_default_path_is_under_ngb_home() -> None:
    inv = Inventory([Device("a", "h")])
    assert inv.save() == get_paths().inventory
    assert load_inventory().get("a").host == "h"


# -- LocalTransport ----------------------------------------------------------------------------


async def test_local_run_stream_input_and_exit_codes(tmp_path: Path) -> None:
    t = LocalTransport()
    async with t:
        r = await t.run(
            [sys.executable, "-c", "import sys; print(sys.stdin.read().upper())"], input="abc"
        )
        assert (r.returncode, r.stdout.strip()) == (0, "ABC")
        r = await t.run([sys.executable, "-c", "import sys; sys.exit(3)"])
        assert r.returncode == 3
        r = await t.run(["/nonexistent/python", "-V"])
        assert r.returncode == 127 and "nonexistent" in r.stderr
        code = "import sys; print('a'); print('err', file=sys.stderr); print('b'); sys.exit(4)"
        lines = [line async for line in t.stream([sys.executable, "-c", code])]
        assert lines == ["a", "b"]
        assert t.last_exit_status == 4 and t.last_stderr == "err\n"
        with pytest.raises(TransportError, match="timed out"):
            await t.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)


async def test_local_stream_stopped_early_kills_the_command(tmp_path: Path) -> None:
    t = LocalTransport()
    marker = tmp_path / "finished"
    code = (
        f"import time\nfor i in range(100): print(i, flush=True); time.sleep(0.05)\n"
        f"open({str(marker)!r}, 'w').close()"
    )
    gen = t.stream([sys.executable, "-u", "-c", code])
    assert await gen.__anext__() == "0"
    await gen.aclose()
    await asyncio.sleep(0.3)
    assert not marker.exists()


async def test_local_put_get_and_no_shell(tmp_path: Path) -> None:
    t = LocalTransport()
    src = tmp_path / "src.bin"
    src.write_bytes(bytes(range(256)) * 10)
    await t.put(str(src), str(tmp_path / "copy.bin"))
    await t.get(str(tmp_path / "copy.bin"), str(tmp_path / "back.bin"))
    assert (tmp_path / "back.bin").read_bytes() == src.read_bytes()
    with pytest.raises(TransportError, match="copy"):
        await t.get(str(tmp_path / "missing"), str(tmp_path / "x"))
    pwned = Path(f"/tmp/ngb-pwned-{uuid.uuid4().hex}")
    r = await t.run(["echo", f"x; touch {pwned}", f"$(touch {pwned})"])
    assert r.stdout.strip() == f"x; touch {pwned} $(touch {pwned})"
    assert not pwned.exists()


@pytest.mark.parametrize(
    ("fields", "wanted"),
    [
        ({"host": "bob@10.0.0.1"}, "has a user in it"),
        ({"host": "10.0.0.1:2222"}, "has a port in it: write host without it and port = 2222"),
        ({"host": "[fe80::1]:2222"}, "port = 2222"),
        (
            {"host": "10.0.0.1", "user": "-oProxyCommand=x"},
            "user '-oProxyCommand=x' starts with '-'",
        ),
        ({"host": "-oProxyCommand=x"}, "host '-oProxyCommand=x' starts with '-'"),
        ({"host": "10.0.0.1", "identity_file": "/no/such/key"}, "identity file not found"),
        ({"host": "10.0.0.1", "identity_file": "/"}, "not a regular file"),
        ({"host": "fe80::1"}, None),
        ({"host": "nano.local", "user": "ubuntu"}, None),
    ],
)
def test_connection_checks(fields: dict, wanted: str | None) -> None:
    from ngb.devices.device_checks import first_problem
    from ngb.devices.inventory import Device

    problem = first_problem(Device(name="d", **fields))
    if wanted is None:
        assert problem is None
    else:
        assert problem is not None and wanted in problem
