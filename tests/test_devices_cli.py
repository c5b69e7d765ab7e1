"""``ngb paths`` and ``ngb devices ...`` through click's CliRunner (real files, real sshd)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from ngb.devices.inventory import load_inventory
from ngb.devices.paths import get_paths
from ngb.sweeps.cli import cli

from tests.sshd import SshdServer, free_port


def ngb(*args: str, input: str | None = None):  # noqa: ANN201
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def test_paths_follow_ngb_home(ngb_home: Path) -> None:
    r = ngb("paths", "--json")
    assert r.exit_code == 0
    data = json.loads(r.output)
    assert data["inventory"] == str(ngb_home / "config" / "devices.toml")
    assert data["known_hosts"] == str(ngb_home / "config" / "known_hosts")
    assert data["database"].startswith(str(ngb_home))
    assert "config" in ngb("paths").output


def test_add_list_show_remove_round_trip() -> None:
    r = ngb(
        "devices",
        "add",
        "nano1",
        "--host",
        "10.0.0.5",
        "--user",
        "ubuntu",
        "--port",
        "2222",
        "--group",
        "jetsons",
        "--group",
        "edge",
        "--python",
        "/usr/bin/python3.10",
    )
    assert r.exit_code == 0, r.output
    assert "ngb devices trust nano1" in r.output
    inv = load_inventory()
    assert inv.get("nano1").port == 2222 and inv.get("nano1").groups == ["jetsons", "edge"]

    listing = ngb("devices", "list").output.splitlines()
    assert listing[0].split() == ["NAME", "ADDRESS", "GROUPS", "PYTHON", "LAST", "PROBE"]
    row = next(line for line in listing if line.startswith("nano1"))
    assert "ubuntu@10.0.0.5:2222" in row and "edge,jetsons" in row
    assert any(line.startswith("localhost") and "(local)" in line for line in listing)

    data = json.loads(ngb("devices", "list", "--json").output)
    assert [d["name"] for d in data] == ["localhost", "nano1"]
    assert data[1]["python"] == "/usr/bin/python3.10" and data[1]["last_probe"] is None

    shown = json.loads(ngb("devices", "show", "nano1", "--json").output)
    assert shown["host"] == "10.0.0.5" and shown["all_groups"] == ["edge", "jetsons"]
    assert "10.0.0.5" in ngb("devices", "show", "nano1").output

    assert ngb("devices", "remove", "nano1").exit_code == 0
    assert "nano1" not in load_inventory()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["devices", "add", "x", "--host", "h", "--port", "70000"], "bad port 70000"),
        (["devices", "add", "bad;name", "--host", "h"], "bad device name"),
        (["devices", "add", "x", "--host", ""], "host is empty"),
        (["devices", "add", "localhost", "--host", "h"], "already exists"),
        (["devices", "show", "nanoo"], "unknown device 'nanoo'"),
        (["devices", "remove", "ghost"], "unknown device 'ghost'"),
        (["devices", "probe", "nowhere"], "unknown device or group 'nowhere'"),
    ],
)
def test_bad_input_gives_one_line_error(args: list[str], message: str) -> None:
    r = ngb(*args)
    assert r.exit_code != 0
    assert message in r.output
    error_lines = [ln for ln in r.output.splitlines() if ln.startswith("error: ")]
    assert len(error_lines) == 1 and "Traceback" not in r.output


def test_malformed_inventory_is_reported_and_never_overwritten() -> None:
    path = get_paths().ensure().inventory
    garbage = '[devices.a]\nhost = "h"\nport = "twenty"\n# my notes\n'
    path.write_text(garbage)
    r = ngb("devices", "add", "b", "--host", "h2")
    assert r.exit_code != 0 and "bad port 'twenty'" in r.output and str(path) in r.output
    r = ngb("devices", "check")
    assert r.exit_code != 0 and "bad port" in r.output
    assert path.read_text() == garbage
    path.write_text('[devices.a]\nhost = "h"\n')
    r = ngb("devices", "check")
    assert r.exit_code == 0 and "ok:" in r.output and "2 devices" in r.output


def test_import_dry_run_then_real(tmp_path: Path) -> None:
    src = tmp_path / "hosts.ini"
    src.write_text(
        "[jetsons]\norin1 ansible_host=192.0.2.11 ansible_user=nvidia\n"
        "nano1 ansible_host=192.0.2.12\n"
    )
    r = ngb("devices", "import", str(src), "--dry-run")
    assert r.exit_code == 0 and "2 added" in r.output and "nothing written" in r.output
    assert not get_paths().inventory.exists()
    r = ngb("devices", "import", str(src))
    assert r.exit_code == 0 and "saved" in r.output
    assert load_inventory().get("orin1").user == "nvidia"
    r = ngb("devices", "import", str(src))  # same again: nothing changes
    assert r.exit_code == 0 and "2 unchanged" in r.output
    src.write_text("[jetsons]\norin1 ansible_host=192.0.2.99\n")
    r = ngb("devices", "import", str(src))
    assert r.exit_code != 0 and "--replace" in r.output
    assert ngb("devices", "import", str(src), "--replace").exit_code == 0
    assert load_inventory().get("orin1").host == "192.0.2.99"


def test_help_does_not_import_heavy_modules() -> None:
    code = (
        "import sys\nfrom ngb.sweeps.cli import main\n"
        "try:\n    main(['devices', '--help'])\nexcept SystemExit:\n    pass\n"
        "mods = ('torch', 'asyncssh', 'duckdb', 'openvino', 'tvm')\n"
        "heavy = [m for m in mods if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "HEAVY []" in out.stdout
    assert "probe" in out.stdout and "trust" in out.stdout


# -- against the real sshd ------------------------------------------------------------------------


@pytest.mark.sshd
def test_trust_refuses_without_yes_then_accepts(sshd_server: SshdServer, sshd_home: Path) -> None:
    known = sshd_home / "config" / "known_hosts"
    known.unlink()
    r = ngb("devices", "trust", "dev-a")  # CliRunner's stdin is not a terminal
    assert r.exit_code != 0 and "re-run with --yes" in r.output
    assert "fingerprint: SHA256:" in r.output
    assert not known.exists()
    r = ngb("devices", "trust", "dev-a", "--yes")
    assert r.exit_code == 0 and "trusted" in r.output
    assert f"[127.0.0.1]:{sshd_server.device('dev-a').port} ssh-ed25519" in known.read_text()
    r = ngb("devices", "trust", "dev-a")
    assert r.exit_code == 0 and "already trusted" in r.output
    r = ngb("devices", "trust", "localhost")
    assert r.exit_code != 0 and "without SSH" in r.output


@pytest.mark.sshd
def test_probe_reports_each_device_and_fails_for_the_broken_one(
    sshd_server: SshdServer, sshd_home: Path
) -> None:
    pytest.importorskip("ngb.devices.bundle", reason="agent bundle builder not written yet")
    r = ngb(
        "devices",
        "add",
        "broken",
        "--host",
        "127.0.0.1",
        "--port",
        str(free_port()),
        "--group",
        "loop",
    )
    assert r.exit_code == 0
    r = ngb("devices", "probe", "loop")
    assert r.exit_code == 1
    lines = r.output.splitlines()
    ok = sorted(line.split()[1].rstrip(":") for line in lines if line.startswith("ok "))
    assert ok == ["dev-a", "dev-b", "dev-c"]
    fail = [line for line in lines if line.startswith("error: ")]
    assert len(fail) == 1 and fail[0].startswith("error: broken") and "refused" in fail[0]
    dev_c = next(line for line in lines if line.startswith("ok   dev-c"))
    assert "openvino" not in dev_c.split("compilers:")[1]
    r = ngb("devices", "probe", "dev-a,dev-c", "--json")
    assert r.exit_code == 0
    data = json.loads(r.output)
    assert data["dev-a"]["compilers"]["openvino"]["available"] is True
    assert data["dev-c"]["compilers"]["openvino"]["available"] is False
    if importlib.util.find_spec("ngb.sweeps.store.database") is None:
        return
    listing = ngb("devices", "list").output
    row = next(line for line in listing.splitlines() if line.startswith("dev-a"))
    assert row.split()[-1] != "-"  # the last probe is shown from the store


@pytest.mark.sshd
def test_probe_refuses_unknown_host_key(sshd_server: SshdServer, sshd_home: Path) -> None:
    (sshd_home / "config" / "known_hosts").unlink()
    r = ngb("devices", "probe", "dev-b")
    assert r.exit_code == 1
    assert "unknown host key SHA256:" in r.output and "ngb devices trust dev-b" in r.output
