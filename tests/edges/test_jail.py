"""The jail: bwrap's argv from a policy (pure), and with the real bwrap what a command inside cannot do."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from bot.edges.jail import SYSTEM_READ_ONLY, JailPolicy, bwrap_argv, git_binds, probe, program_binds
from tests.process_helpers import gone

SECRET = "lanebot-test-secret-0f3c9a"


def _policy(root: Path, **overrides: object) -> JailPolicy:
    values: dict[str, object] = {
        "worktree": root / "work" / "worktrees" / "run-1" / "api",
        "home": root / "work" / "scratch" / "1" / "jail" / "home",
        "tmp": root / "work" / "scratch" / "1" / "jail" / "tmp",
    }
    values.update(overrides)
    policy = JailPolicy(**values)  # type: ignore[arg-type]
    for folder in (policy.worktree, policy.home, policy.tmp):
        folder.mkdir(parents=True, exist_ok=True)
    return policy


def _pairs(argv: list[str], flag: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, item in enumerate(argv) if item == flag]


def _run(bwrap: str, policy: JailPolicy, script: str, *, env: dict[str, str] | None = None) -> tuple[int, str]:
    argv = bwrap_argv(policy, ["sh", "-c", script], bwrap=bwrap)
    done = subprocess.run(
        argv,
        env=policy.environment() if env is None else env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


# --------------------------------------------------------------------------- the argv (pure)


def test_the_argv_isolates_pids_network_session_and_environment_and_ends_with_the_command():
    policy = JailPolicy(
        worktree=Path("/w/wt"), home=Path("/w/home"), tmp=Path("/w/tmp"), env={"LANEBOT_RUN": "7", "HOME": "/root"}
    )
    argv = bwrap_argv(policy, ["sh", "/w/check.sh"], bwrap="/usr/bin/bwrap")
    assert argv[0] == "/usr/bin/bwrap"
    for flag in ("--unshare-pid", "--unshare-net", "--die-with-parent", "--new-session"):
        assert flag in argv
    assert argv[argv.index("--") :] == ["--", "sh", "/w/check.sh"]
    assert argv[argv.index("--chdir") + 1] == "/w/wt"
    # Only the given variables, with the jail's own home and temp (not lanebot's HOME): bwrap's environment.
    assert policy.environment() == {
        "LANEBOT_RUN": "7",
        "HOME": "/w/home",
        "TMPDIR": "/w/tmp",
        "PATH": "/usr/local/bin:/usr/bin:/bin",
    }
    assert _pairs(argv, "--ro-bind-try") == [(folder, folder) for folder in SYSTEM_READ_ONLY]
    assert ("/w/wt", "/w/wt") in _pairs(argv, "--bind") and ("/w/home", "/w/home") in _pairs(argv, "--bind")
    assert ["--proc", "/proc"] == argv[argv.index("--proc") : argv.index("--proc") + 2]


def test_no_variable_is_ever_in_bwraps_argv_where_every_user_of_the_host_could_read_it():
    env = {"ANTHROPIC_API_KEY": "sk-ant-0d9f-secret", "LANEBOT_RUN": "run-7"}
    policy = JailPolicy(worktree=Path("/w/wt"), home=Path("/w/home"), tmp=Path("/w/tmp"), env=env)
    argv = bwrap_argv(policy, ["claude", "-p"])
    assert "--setenv" not in argv and "--clearenv" not in argv
    assert not [argument for argument in argv for text in (*env, *env.values()) if text in argument]


def test_the_command_sees_exactly_the_policys_variables_which_bwrap_was_started_with(bwrap, tmp_path):
    policy = _policy(tmp_path, env={"ANTHROPIC_API_KEY": "sk-ant-0d9f-secret", "LANEBOT_RUN": "7"})
    argv = bwrap_argv(policy, ["/usr/bin/env", "-0"], bwrap=bwrap)
    done = subprocess.run(argv, env=policy.environment(), capture_output=True, timeout=60, check=True)
    seen = dict(line.split("=", 1) for line in done.stdout.decode().split("\0") if line)
    assert seen == {**policy.environment(), "PWD": str(policy.worktree)}  # bwrap sets PWD on --chdir
    assert not [argument for argument in argv if "sk-ant-0d9f-secret" in argument]


def test_an_npm_cli_runs_from_its_bin_link_with_its_whole_node_modules_bound(tmp_path):
    modules = tmp_path / "agents" / "node_modules"
    script = modules / "@openai" / "codex" / "bin" / "codex.js"
    script.parent.mkdir(parents=True)
    script.write_text("#!/usr/bin/env node\n")
    (modules / ".bin").mkdir()
    (modules / ".bin" / "codex").symlink_to("../@openai/codex/bin/codex.js")
    assert program_binds(modules / ".bin" / "codex") == (modules / ".bin" / "codex", (modules,))


def test_a_native_binary_linked_from_elsewhere_runs_at_its_real_path_and_only_it_is_bound(tmp_path):
    real = tmp_path / "share" / "claude" / "versions" / "2.1.197"
    real.parent.mkdir(parents=True)
    real.write_text("")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "claude").symlink_to(real)
    assert program_binds(tmp_path / "bin" / "claude") == (real, (real,))


def test_a_program_of_the_system_needs_no_bind():
    assert program_binds(Path("/bin/sh")) in (
        (Path("/bin/sh"), ()),
        (Path("/usr/bin/sh"), ()),
        (Path("/usr/bin/dash"), ()),
    )


def test_with_the_network_on_the_jail_keeps_the_hosts_network_and_nothing_else_changes():
    off = JailPolicy(worktree=Path("/w/wt"), home=Path("/w/h"), tmp=Path("/w/t"))
    on = JailPolicy(worktree=Path("/w/wt"), home=Path("/w/h"), tmp=Path("/w/t"), network=True)
    assert "--unshare-net" in bwrap_argv(off, ["true"]) and "--unshare-net" not in bwrap_argv(on, ["true"])
    assert "--unshare-pid" in bwrap_argv(on, ["true"])


def test_deeper_binds_land_on_the_ones_that_hold_them_whatever_the_order_given():
    policy = JailPolicy(
        worktree=Path("/w/wt"),
        home=Path("/w/h"),
        tmp=Path("/w/t"),
        read_only=(Path("/w/wt/.git"), Path("/w/mirror")),
        writable=(Path("/w/mirror/worktrees/wt"),),
    )
    argv = bwrap_argv(policy, ["true"])
    assert argv.index("/w/mirror") < argv.index("/w/mirror/worktrees/wt")
    assert argv.index("/w/wt") < argv.index("/w/wt/.git")
    assert ("/w/mirror", "/w/mirror") in _pairs(argv, "--ro-bind")
    assert ("/w/mirror/worktrees/wt", "/w/mirror/worktrees/wt") in _pairs(argv, "--bind")


def test_hidden_paths_are_masked_only_where_a_bound_folder_would_show_them():
    policy = JailPolicy(
        worktree=Path("/w/wt"),
        home=Path("/w/h"),
        tmp=Path("/w/t"),
        hidden_dirs=(Path("/opt/lanebot"), Path("/srv/work")),
        hidden_files=(Path("/etc/lanebot/key.pem"), Path("/srv/.env")),
    )
    argv = bwrap_argv(policy, ["true"])
    assert argv[argv.index("--tmpfs", argv.index("--tmpfs") + 1) + 1] == "/opt/lanebot"
    assert ("/dev/null", "/etc/lanebot/key.pem") in _pairs(argv, "--ro-bind")
    assert "/srv/work" not in argv and "/srv/.env" not in argv  # not bound, so not there anyway
    inside = JailPolicy(
        worktree=Path("/w/wt"),
        home=Path("/w/h"),
        tmp=Path("/w/t"),
        read_only=(Path("/m"),),
        hidden_dirs=(Path("/m/x"),),
    )
    argv = bwrap_argv(inside, ["true"])
    assert argv.index("/m") < argv.index("/m/x") and argv[argv.index("/m/x") - 1] == "--tmpfs"


def test_relative_paths_and_an_empty_command_are_refused():
    with pytest.raises(ValueError, match="absolute"):
        bwrap_argv(JailPolicy(worktree=Path("wt"), home=Path("/h"), tmp=Path("/t")), ["true"])
    with pytest.raises(ValueError, match="command"):
        bwrap_argv(JailPolicy(worktree=Path("/wt"), home=Path("/h"), tmp=Path("/t")), [])


def test_the_probe_says_what_is_missing_and_how_to_install_it(tmp_path):
    problem = probe(str(tmp_path / "no-bwrap"))
    assert problem is not None
    assert "not installed" in problem.reason and "apt-get install bubblewrap" in problem.remedy


# --------------------------------------------------------------------------- with the real bwrap


def test_the_probe_passes_where_bwrap_works(bwrap):
    assert probe(bwrap) is None


def test_a_command_sees_only_its_binds_not_lanebots_files_or_other_worktrees(bwrap, tmp_path):
    policy = _policy(tmp_path)
    for name in ("key.pem", ".env", "lanebot.db"):
        (tmp_path / name).write_text(SECRET, encoding="utf-8")
    other = tmp_path / "work" / "worktrees" / "run-2" / "other"
    other.mkdir(parents=True)
    (other / "README").write_text(SECRET, encoding="utf-8")
    (policy.worktree / "mine.txt").write_text("mine\n", encoding="utf-8")
    script = (
        f"for f in {tmp_path}/key.pem {tmp_path}/.env {tmp_path}/lanebot.db {other}/README {Path.cwd()}/pyproject.toml;"
        " do test -e $f && echo LEAK $f; done; cat mine.txt; echo new > made.txt;"
        f" echo home > $HOME/h && echo tmp > $TMPDIR/t && echo slash-tmp > /tmp/s; ls {tmp_path}/work/worktrees"
    )
    status, output = _run(bwrap, policy, script)
    assert status == 0, output
    assert "LEAK" not in output and SECRET not in output
    assert output.split() == ["mine", "run-1"]  # the other run's folder does not exist inside
    assert (policy.worktree / "made.txt").read_text() == "new\n"
    assert (policy.home / "h").exists() and (policy.tmp / "t").exists()


def test_the_system_is_there_but_read_only(bwrap, tmp_path):
    status, output = _run(bwrap, _policy(tmp_path), "python3 -c 'print(6 * 7)'; touch /usr/x /etc/x 2>&1 | wc -l")
    assert status == 0, output
    assert output.split() == ["42", "2"]


def test_a_command_cannot_read_lanebots_environment_even_through_proc(bwrap, tmp_path, monkeypatch):
    monkeypatch.setenv("WEBHOOK_SECRET", SECRET)
    policy = _policy(tmp_path, env={"LANEBOT_RUN": "1"})
    script = 'env; cat /proc/1/environ /proc/$PPID/environ /proc/self/environ | tr "\\0" "\\n"; echo "run=$LANEBOT_RUN"'
    status, output = _run(bwrap, policy, script)
    assert status == 0, output
    assert SECRET not in output and "WEBHOOK_SECRET" not in output
    assert "run=1" in output


def test_a_command_cannot_see_lanebots_processes(bwrap, tmp_path):
    script = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done"
    status, output = _run(bwrap, _policy(tmp_path), script)
    assert status == 0, output
    ours = Path(f"/proc/{os.getpid()}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    assert ours not in output
    assert {line.split()[0] for line in output.splitlines() if line.strip()} <= {"/usr/bin/bwrap", bwrap, "sh", "tr"}
    pids = sorted(
        int(path.rsplit("/", 1)[-1]) for path in _run(bwrap, _policy(tmp_path), "echo /proc/[0-9]*")[1].split()
    )
    assert pids[0] == 1 and len(pids) <= 4  # bwrap's init, the shell, and what the shell started


def test_without_the_network_a_command_cannot_reach_the_hosts_loopback(bwrap, tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        connect = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 5); print('reached')\""
        status, output = _run(bwrap, _policy(tmp_path), connect)
        assert status != 0 and "reached" not in output and "ConnectionRefused" in output
        status, output = _run(bwrap, _policy(tmp_path, network=True), connect)
        assert status == 0 and "reached" in output  # the same command with build.network: true


def test_a_setsid_child_is_gone_once_the_command_ends(bwrap, tmp_path):
    marker = f"3600.{uuid.uuid4().int % 10**9}"
    started = time.monotonic()
    script = (
        f"setsid sleep {marker} >/dev/null 2>&1 & sleep 0.2;"
        " cat /proc/[0-9]*/comm | grep -qx sleep && echo started"  # it runs, in a session of its own
    )
    status, output = _run(bwrap, _policy(tmp_path), script)
    assert status == 0 and output.strip() == "started", output
    assert time.monotonic() - started < 30  # nothing held the output open
    assert gone(marker)


def test_git_works_in_a_worktree_but_its_mirror_cannot_be_configured_from_inside(bwrap, tmp_path):
    source = tmp_path / "source"
    _git(tmp_path, "init", "-q", "-b", "main", str(source))
    (source / "a.txt").write_text("a\n", encoding="utf-8")
    _git(source, "add", "a.txt")
    _git(source, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "a")
    mirror = tmp_path / "work" / "mirrors" / "o" / "r.git"
    _git(tmp_path, "clone", "-q", "--mirror", str(source), str(mirror))
    worktree = tmp_path / "work" / "worktrees" / "run-1" / "api"
    _git(mirror, "worktree", "add", "-q", "-b", "lane", str(worktree), "main")
    other = tmp_path / "work" / "worktrees" / "run-2" / "other"
    _git(mirror, "worktree", "add", "-q", "-b", "other", str(other), "main")
    binds = git_binds(worktree)
    assert binds.read_only[0] == mirror and binds.writable == (mirror / "worktrees" / "api",)
    policy = _policy(
        tmp_path, worktree=worktree, read_only=binds.read_only, writable=binds.writable, hidden_dirs=binds.hidden_dirs
    )
    (worktree / "a.txt").write_text("changed\n", encoding="utf-8")
    status, output = _run(bwrap, policy, "git status --short && git diff --stat")
    assert status == 0, output
    assert " M a.txt" in output and "1 file changed" in output
    status, output = _run(bwrap, policy, f"ls {mirror}/worktrees; test -e {other} && echo LEAK")
    assert output.split() == ["api"]  # the other worktree's admin folder is not there, nor the worktree
    status, output = _run(bwrap, policy, "git config core.fsmonitor 'touch /tmp/pwned'")
    assert status != 0, output
    status, _ = _run(bwrap, policy, "echo 'gitdir: /tmp/evil' > .git")
    assert status != 0
    assert "fsmonitor" not in (mirror / "config").read_text()
    assert (worktree / ".git").read_text().startswith("gitdir: ")


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)
