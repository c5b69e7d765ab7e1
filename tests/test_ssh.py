"""SshTransport, host-key trust and deploy/probe against a real OpenSSH sshd on loopback."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from ngb.devices import hostkeys
from ngb.devices.agent_remote import agent_bundle, deploy_agent, probe_device
from ngb.devices.inventory import Device, Inventory
from ngb.devices.local import LocalTransport
from ngb.devices.ssh import DEFAULT_HANDSHAKES, SshTransport, set_handshake_limit
from ngb.devices.ssh_connect import ciphers_for, preferred_ciphers
from ngb.devices.transport import HostKeyError, TransportError

from tests.sshd import SshdServer, free_port, keygen

pytestmark = pytest.mark.sshd


def _ssh(dev: Device, known_hosts: list[Path], **kw) -> SshTransport:
    return SshTransport(dev, known_hosts=known_hosts, ssh_config=[], connect_timeout=10, **kw)


def _keygen_fingerprint(pub: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True)
    return out.stdout.split()[1]


def _bundle_or_skip() -> None:
    try:
        import ngb.devices.bundle  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"agent bundle builder not available yet: {exc}")


@pytest.fixture
def known(sshd_server: SshdServer, tmp_path: Path) -> list[Path]:
    return [sshd_server.write_known_hosts(tmp_path / "known_hosts")]


async def test_connect_run_stream_put_get(
    sshd_server: SshdServer, known: list[Path], tmp_path: Path
) -> None:
    dev = sshd_server.device("dev-a")
    async with _ssh(dev, known) as t:
        r = await t.run(["sh", "-c", "echo out; echo err >&2; exit 5"])
        assert (r.returncode, r.stdout, r.stderr) == (5, "out\n", "err\n")
        r = await t.run(
            [dev.python, "-c", "import sys; print(sys.stdin.read()[::-1])"], input="abc"
        )
        assert r.stdout.strip() == "cba"
        code = "import sys\nfor i in range(3): print(i)\nprint('bye', file=sys.stderr)\nsys.exit(2)"
        lines = [line async for line in t.stream([dev.python, "-c", code])]
        assert lines == ["0", "1", "2"]
        assert t.last_exit_status == 2 and t.last_stderr == "bye\n"
        payload = tmp_path / "payload.bin"
        payload.write_bytes(bytes(range(256)) * 4096)
        remote = tmp_path / "remote-copy.bin"
        await t.put(str(payload), str(remote))
        await t.get(str(remote), str(tmp_path / "back.bin"))
        assert (tmp_path / "back.bin").read_bytes() == payload.read_bytes()
        with pytest.raises(TransportError, match="get"):
            await t.get(str(tmp_path / "missing.bin"), str(tmp_path / "x"))
        with pytest.raises(TransportError, match="timed out"):
            await t.run(["sleep", "30"], timeout=0.5)
    assert not t.connected
    await t.close()  # idempotent


async def test_a_stream_gives_whole_lines_however_they_arrive(
    sshd_server: SshdServer, known: list[Path]
) -> None:
    """Lines cut across writes (and so across SSH packets), CRLF endings, an empty line and a
    last line without its newline come out as the lines they are (the stream splits what has
    arrived itself, not one ``readline`` per line)."""
    dev = sshd_server.device("dev-a")
    script = "printf 'on'; sleep 0.2; printf 'e\\r\\ntw'; sleep 0.2; printf 'o\\n\\nthree'"
    async with _ssh(dev, known) as t:
        lines = [line async for line in t.stream(["sh", "-c", script])]
        assert lines == ["one", "two", "", "three"]
        assert t.last_exit_status == 0
        many = [line async for line in t.stream(["seq", "1", "20000"])]  # many chunks' worth
        assert many == [str(i) for i in range(1, 20001)]
        # a 4 MiB line (a torn or foreign event log) comes whole, in linear time
        long = "head -c 4194304 /dev/zero | tr '\\0' x; echo; echo after"
        lines = [line async for line in t.stream(["sh", "-c", long])]
        assert [len(line) for line in lines] == [4 * 2**20, 5] and lines[1] == "after"


async def test_stream_stopped_early_stops_the_remote_command(
    sshd_server: SshdServer, known: list[Path], tmp_path: Path
) -> None:
    dev = sshd_server.device("dev-b")
    marker = tmp_path / "finished"
    code = (
        "import time\nfor i in range(100): print(i, flush=True); time.sleep(0.05)\n"
        f"open({str(marker)!r}, 'w').close()"
    )
    async with _ssh(dev, known) as t:
        gen = t.stream([dev.python, "-u", "-c", code])
        assert await gen.__anext__() == "0"
        await gen.aclose()
        r = await t.run(["true"])  # the connection is still usable
        assert r.returncode == 0
    await asyncio.sleep(0.5)
    assert not marker.exists()


async def test_unknown_host_key_is_refused_with_fingerprint(
    sshd_server: SshdServer, tmp_path: Path
) -> None:
    dev = sshd_server.device("dev-a")
    t = _ssh(dev, [])  # nothing trusted
    with pytest.raises(HostKeyError) as err:
        await t.connect()
    expected = _keygen_fingerprint(sshd_server.host_key.with_suffix(".pub"))
    assert err.value.fingerprint == expected
    assert err.value.changed is False
    assert expected in str(err.value) and "ngb devices trust dev-a" in str(err.value)
    assert not t.connected


@pytest.mark.parametrize("hashed", [False, True])
async def test_fetch_then_trust_is_accepted(
    sshd_server: SshdServer, tmp_path: Path, hashed: bool
) -> None:
    dev = sshd_server.device("dev-b")
    kh = tmp_path / "ngb_known_hosts"
    key_type, fp, key = await hostkeys.fetch_host_key(dev, ssh_config=[])
    assert key_type == "ssh-ed25519"
    assert fp == _keygen_fingerprint(sshd_server.host_key.with_suffix(".pub"))
    assert hostkeys.key_status(dev, key, [str(kh)]) == "unknown"
    hostkeys.trust(dev, key, path=kh, hashed=hashed)
    hostkeys.trust(dev, key, path=kh, hashed=hashed)  # re-trusting does not pile up entries
    lines = kh.read_text().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("|1|" if hashed else f"[127.0.0.1]:{dev.port} ssh-ed25519 ")
    assert hostkeys.key_status(dev, key, [str(kh)]) == "trusted"
    async with _ssh(dev, [kh]) as t:
        assert (await t.run(["echo", "ok"])).stdout == "ok\n"
    # the same key on another port is a different host entry: still unknown there
    other = sshd_server.device("dev-a")
    with pytest.raises(HostKeyError):
        await _ssh(other, [kh]).connect()


async def test_changed_host_key_is_refused(tmp_path: Path) -> None:
    server = SshdServer.create(tmp_path / "srv", names=("solo",)).start()
    try:
        dev = server.device("solo")
        kh = tmp_path / "kh"
        _, old_fp, key = await hostkeys.fetch_host_key(dev, ssh_config=[])
        hostkeys.trust(dev, key, path=kh)
        async with _ssh(dev, [kh]) as t:
            assert (await t.run(["true"])).returncode == 0
        server.regenerate_host_key()
        server.restart()
        with pytest.raises(HostKeyError) as err:
            await _ssh(dev, [kh]).connect()
        assert err.value.changed is True
        assert err.value.fingerprint != old_fp
        assert "CHANGED" in str(err.value)
        # the operator re-trusts (after checking): the old entry is replaced, not kept
        _, new_fp, new_key = await hostkeys.fetch_host_key(dev, ssh_config=[])
        assert new_fp == err.value.fingerprint
        hostkeys.trust(dev, new_key, path=kh)
        assert len(kh.read_text().splitlines()) == 1
        async with _ssh(dev, [kh]) as t:
            assert (await t.run(["true"])).returncode == 0
    finally:
        server.stop()


async def test_closed_port_and_bad_key_give_one_line_errors(
    sshd_server: SshdServer, known: list[Path], tmp_path: Path
) -> None:
    closed = dataclasses.replace(sshd_server.device("dev-a"), name="gone", port=free_port())
    with pytest.raises(TransportError) as err:
        await _ssh(closed, known).connect()
    assert "refused" in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith("gone (127.0.0.1:")

    stranger = keygen(tmp_path / "stranger")
    wrong = dataclasses.replace(sshd_server.device("dev-a"), identity_file=str(stranger))
    with pytest.raises(TransportError, match="authentication failed"):
        await _ssh(wrong, known).connect()
    missing = dataclasses.replace(wrong, identity_file=str(tmp_path / "nope"))
    with pytest.raises(TransportError, match="identity file not found"):
        await _ssh(missing, known).connect()


async def test_device_fields_cannot_inject_commands(
    sshd_server: SshdServer, known: list[Path], tmp_path: Path
) -> None:
    _bundle_or_skip()
    pwned = Path(f"/tmp/ngb-pwned-{uuid.uuid4().hex}")
    base = sshd_server.device("dev-a")
    evil_python = dataclasses.replace(base, python=f"x; touch {pwned}")
    async with _ssh(evil_python, known) as t:
        with pytest.raises(TransportError, match="cannot run on the device"):
            await deploy_agent(t, evil_python)
        r = await t.run(["echo", f"$(touch {pwned})", f"`touch {pwned}`", "|", "&&"])
        assert r.stdout == f"$(touch {pwned}) `touch {pwned}` | &&\n"
    evil_workdir = dataclasses.replace(base, workdir=str(tmp_path / f"w; touch {pwned}"))
    async with _ssh(evil_workdir, known) as t:
        remote = await deploy_agent(t, evil_workdir)
    assert remote.startswith(str(tmp_path / f"w; touch {pwned}"))  # a literal, odd folder name
    assert Path(remote).is_file()
    assert not pwned.exists()


async def test_deploy_uploads_once_and_probe_reports_availability(
    sshd_server: SshdServer, known: list[Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _bundle_or_skip()
    # A workdir of its own: the session's sshd devices may already hold this bundle from
    # earlier tests, and this test is about the first upload.
    full = dataclasses.replace(sshd_server.device("dev-a"), workdir=str(tmp_path / "fresh"))
    lacking = sshd_server.device("dev-c")
    puts: list[str] = []
    real_put = SshTransport.put

    async def counting_put(self, local, remote):  # noqa: ANN001
        puts.append(remote)
        await real_put(self, local, remote)

    monkeypatch.setattr(SshTransport, "put", counting_put)
    async with _ssh(full, known) as t:
        first = await deploy_agent(t, full)
        again = await deploy_agent(t, full)
        assert first == again and len(puts) == 1
        assert Path(first).read_bytes() == agent_bundle()[0].read_bytes()
        assert first.startswith(full.workdir)
        facts_full = await probe_device(t, full)
    async with _ssh(lacking, known) as t:
        facts_lacking = await probe_device(t, lacking)
    assert facts_full["python"] == facts_lacking["python"] == sys.version.split()[0]
    assert facts_full["compilers"]["openvino"]["available"] is True
    assert facts_lacking["compilers"]["openvino"]["available"] is False
    assert facts_lacking["compilers"]["identity"]["available"] is True


async def test_probe_via_local_transport(tmp_path: Path) -> None:
    _bundle_or_skip()
    dev = dataclasses.replace(LocalTransport().device, workdir=str(tmp_path / "work"))
    async with LocalTransport(dev) as t:
        facts = await probe_device(t, dev)
    assert facts["cores_logical"] >= 1 and "compilers" in facts
    assert (tmp_path / "work").is_dir()


async def test_jump_host_from_inventory(sshd_server: SshdServer, known: list[Path]) -> None:
    bastion = sshd_server.device("dev-a")
    target = dataclasses.replace(sshd_server.device("dev-b"), jump_host="dev-a")
    inv = Inventory([bastion, target])
    set_handshake_limit(1)  # the jump takes its own handshake slot: must not deadlock
    try:
        async with _ssh(target, known, inventory=inv) as t:
            assert (await t.run(["echo", "through"])).stdout == "through\n"
            assert t._jump is not None and t._jump.connected
    finally:
        set_handshake_limit(DEFAULT_HANDSHAKES)
    assert t._jump is None
    unknown_jump = dataclasses.replace(target, jump_host=f"127.0.0.1:{free_port()}")
    with pytest.raises(TransportError, match="refused"):
        await _ssh(unknown_jump, known).connect()


async def test_concurrent_connects_under_a_handshake_limit(
    sshd_server: SshdServer, known: list[Path]
) -> None:
    set_handshake_limit(1)
    try:
        ts = [_ssh(d, known) for d in sshd_server.devices for _ in range(2)]
        await asyncio.gather(*(t.connect() for t in ts))
        outs = await asyncio.gather(*(t.run(["echo", t.name]) for t in ts))
        assert [o.stdout.strip() for o in outs] == [t.name for t in ts]
        await asyncio.gather(*(t.close() for t in ts))
    finally:
        set_handshake_limit(DEFAULT_HANDSHAKES)


async def test_kill_connections_drops_links_but_server_stays(
    sshd_server: SshdServer, known: list[Path]
) -> None:
    dev = sshd_server.device("dev-c")
    t = _ssh(dev, known)
    await t.connect()
    assert sshd_server.kill_connections() >= 1
    with pytest.raises(TransportError, match="connection lost"):
        for _ in range(20):  # the close may take a moment to arrive
            await t.run(["true"])
            await asyncio.sleep(0.1)
    await t.close()
    async with _ssh(dev, known) as t2:
        assert (await t2.run(["true"])).returncode == 0


async def test_ssh_config_alias_and_trust_under_the_real_name(
    sshd_server: SshdServer, tmp_path: Path
) -> None:
    real = sshd_server.device("dev-a")
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host lab-alias\n  HostName 127.0.0.1\n  Port {real.port}\n"
        f"  User {real.user}\n  IdentityFile {real.identity_file}\n"
    )
    dev = Device("aliased", "lab-alias")  # no port/user/key: ~/.ssh/config decides
    kh = tmp_path / "kh"
    _, fp, key = await hostkeys.fetch_host_key(dev, ssh_config=[config])
    hostkeys.trust(dev, key, path=kh, ssh_config=[config])
    assert kh.read_text().startswith(f"[127.0.0.1]:{real.port} ")
    assert hostkeys.key_status(dev, key, [str(kh)], ssh_config=[config]) == "trusted"
    t = SshTransport(dev, known_hosts=[kh], ssh_config=[config])
    async with t:
        assert (await t.run(["echo", "via alias"])).stdout == "via alias\n"


async def test_handshake_timeout_and_stream_cut_by_a_dropped_link(
    sshd_server: SshdServer, known: list[Path]
) -> None:
    import socket

    with socket.socket() as silent:  # accepts TCP but never speaks SSH
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        mute = Device("mute", "127.0.0.1", port=silent.getsockname()[1])
        t = SshTransport(mute, known_hosts=known, ssh_config=[], connect_timeout=1)
        with pytest.raises(TransportError, match="timed out") as err:
            await t.connect()
        assert "\n" not in str(err.value)

    dev = sshd_server.device("dev-b")
    code = "import time\nfor i in range(600): print(i, flush=True); time.sleep(0.05)"
    async with _ssh(dev, known) as t:
        got = []
        with pytest.raises(TransportError, match="connection lost"):
            async for line in t.stream([dev.python, "-u", "-c", code]):
                got.append(line)
                if len(got) == 3:
                    sshd_server.kill_connections()
        assert got[:3] == ["0", "1", "2"] and len(got) < 600


async def test_run_cut_by_a_dropped_link_is_a_transport_error(
    sshd_server: SshdServer, known: list[Path]
) -> None:
    dev = sshd_server.device("dev-a")
    async with _ssh(dev, known) as t:
        task = asyncio.ensure_future(t.run(["sleep", "20"]))
        await asyncio.sleep(0.5)
        sshd_server.kill_connections()
        with pytest.raises(TransportError, match="connection lost"):
            await asyncio.wait_for(task, timeout=15)


async def test_aes_gcm_is_agreed_unless_the_ssh_config_chooses_the_ciphers(
    sshd_server: SshdServer, known: list[Path], tmp_path: Path
) -> None:
    """AES-GCM costs the workstation a fifth of chacha20-poly1305's CPU per packet in asyncssh
    (``ssh_connect.preferred_ciphers``); an operator's ``Ciphers`` line still wins."""
    dev = sshd_server.device("dev-a")
    async with _ssh(dev, known) as t:
        assert t.connection is not None
        assert t.connection.get_extra_info("send_cipher") == "aes128-gcm@openssh.com"
        assert t.connection.get_extra_info("recv_cipher") == "aes128-gcm@openssh.com"
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n  Ciphers=chacha20-poly1305@openssh.com\n")
    t = SshTransport(dev, known_hosts=known, ssh_config=[config], connect_timeout=10)
    async with t:
        assert t.connection is not None
        assert t.connection.get_extra_info("send_cipher") == "chacha20-poly1305@openssh.com"


def test_ciphers_are_left_to_a_config_that_may_name_them(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("Host lab\n  User me\n  # Ciphers in a comment does not count\n")
    assert ciphers_for([]) == ciphers_for([str(plain)]) == preferred_ciphers()
    for text in ("  ciphers aes256-ctr\n", "Include ~/.ssh/more\n", "CIPHERS=+aes128-cbc\n"):
        named = tmp_path / "named"
        named.write_text("Host lab\n" + text)
        assert ciphers_for([str(plain), str(named)]) is None, text
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # never opened: a read would block
    assert ciphers_for([str(fifo)]) is None
    assert ciphers_for([str(tmp_path / "missing")]) is None
