"""The cluster templates under infra/ parse and hang together (no docker, no cluster, no network).

What is checked: every YAML/JSON file parses; compose services use only declared volumes and
networks and depend only on defined services; the work-pool templates declare every placeholder
(the Prefect server's check) and keep every variable of Prefect's default templates; the
Kubernetes templates keep what prefect-kubernetes requires of a job manifest; the k8s
manifests name apiVersion, kind and metadata; the campaign configs in infra/README.md validate;
the `metrics` compose profile adds Prometheus and Grafana and nothing else (the dashboards and
the scrape config are checked in tests/metrics/test_grafana.py); the GPU worker of compose (with
`spade infra env`'s variables) and a Kubernetes flow-run Job (with the job variables `spade
deploy --config` sets) get every GPU an 8-GPU preset places work on; the Dockerfile installs
what the GPU path needs without a CUDA toolkit (read, not built: there is no Docker here).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
INFRA = REPO / "infra"
GPU_PRESETS = ("games-8gpu.yaml", "tooluse-8gpu.yaml")
NOT_OURS = {"prefect.yaml"}  # the deployment file has its own tests
WORK_POOLS = INFRA / "work-pools"
K8S_POOLS = ("kubernetes-gpu.json", "kubernetes-cpu.json")


def _files(*suffixes: str) -> list[Path]:
    return sorted(p for p in INFRA.rglob("*") if p.suffix in suffixes and p.name not in NOT_OURS)


def _yaml_docs(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _compose() -> dict[str, Any]:
    return yaml.safe_load((INFRA / "compose.yaml").read_text())


_COMPOSE_VAR = re.compile(r"\$\{(\w+)(?::-([^${}]*))?\}")  # innermost first: defaults nest


def _interpolated_compose(env: dict[str, str]) -> dict[str, Any]:
    """compose.yaml as Docker Compose reads it with ``env`` (``${VAR}`` and ``${VAR:-default}``,
    nested; ``$$`` stays literal)."""
    text = (INFRA / "compose.yaml").read_text()
    while True:
        done = _COMPOSE_VAR.sub(lambda m: env.get(m[1]) or m[2] or "", text)
        if done == text:
            return yaml.safe_load(done)
        text = done


def _gpu_request(service: dict[str, Any]) -> dict[str, Any]:
    (device,) = service["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    assert not ("count" in device and "device_ids" in device)  # Docker refuses both
    return device


def _pool(name: str) -> dict[str, Any]:
    return json.loads((WORK_POOLS / name).read_text())


def _k8s_default_template() -> dict[str, Any]:
    """prefect-kubernetes' default base job template, as Prefect ships it in its collections
    metadata (prefect-kubernetes itself is not installed)."""
    import prefect

    views = Path(prefect.__file__).parent / "server/api/collections_data/views"
    meta = json.loads((views / "aggregate-worker-metadata.json").read_text())
    return meta["prefect-kubernetes"]["kubernetes"]["default_base_job_configuration"]


@pytest.mark.parametrize("path", _files(".yaml", ".yml"), ids=lambda p: str(p.relative_to(INFRA)))
def test_yaml_parses(path: Path) -> None:
    assert _yaml_docs(path), f"{path} holds no document"


@pytest.mark.parametrize("path", _files(".json"), ids=lambda p: str(p.relative_to(INFRA)))
def test_json_parses(path: Path) -> None:
    assert isinstance(json.loads(path.read_text()), dict)


def test_infra_has_the_expected_files() -> None:
    for name in ("compose.yaml", "Dockerfile", "README.md", "work-pools/process.json"):
        assert (INFRA / name).is_file(), name
    assert _files(".yaml") and list((INFRA / "k8s").glob("*.yaml"))


# ---- compose ----------------------------------------------------------------------------------


def _named_volumes(service: dict[str, Any]) -> set[str]:
    names = set()
    for vol in service.get("volumes", []):
        if isinstance(vol, dict):
            source, kind = vol.get("source"), vol.get("type", "volume")
        else:
            source, kind = vol.split(":", 1)[0], "volume"
        # Bind mounts start with ., / or ~; anything else is a named volume.
        if kind == "volume" and source and not source.startswith((".", "/", "~", "$")):
            names.add(source)
    return names


def test_compose_services_use_only_declared_volumes_and_networks() -> None:
    compose = _compose()
    volumes = set(compose.get("volumes") or {})
    networks = set(compose.get("networks") or {}) | {"default"}
    for name, service in compose["services"].items():
        assert _named_volumes(service) <= volumes, f"{name}: undeclared volume"
        nets = service.get("networks") or []
        assert set(nets) <= networks, f"{name}: undeclared network"
    used = set().union(*(_named_volumes(s) for s in compose["services"].values()))
    assert volumes <= used, f"declared but unused volumes: {volumes - used}"


def test_compose_dependencies_and_images() -> None:
    services = _compose()["services"]
    expected = {"postgres", "prefect-server", "minio", "minio-init", "vllm"}
    assert expected | {"cpu-worker", "gpu-worker"} <= set(services)
    for name, service in services.items():
        assert set(service.get("depends_on") or {}) <= set(services), name
        assert service.get("image"), f"{name}: no image (nothing is built by compose)"
        for dep, cond in (service.get("depends_on") or {}).items():
            if cond.get("condition") == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits on {dep}'s health"


def test_compose_workers_can_run_nsjail_and_reach_the_services() -> None:
    services = _compose()["services"]
    for name, pool in (("cpu-worker", "spade-cpu"), ("gpu-worker", "spade-gpu")):
        worker = services[name]
        command = worker["command"]
        assert command[:3] == ["prefect", "worker", "start"]
        assert command[command.index("--pool") + 1] == pool
        assert command[command.index("--type") + 1] == "process"
        template = command[command.index("--base-job-template") + 1]
        assert (INFRA.parent / template.removeprefix("/opt/spade/")).is_file()
        privileged = worker.get("privileged") is True
        unconfined = {"seccomp=unconfined", "apparmor=unconfined"} <= set(
            worker.get("security_opt", [])
        )
        assert privileged or ("SYS_ADMIN" in worker.get("cap_add", []) and unconfined), name
        env = worker["environment"]
        assert env["PREFECT_API_URL"] == "http://prefect-server:4200/api"
        assert env["SPADE_PROJECT_DIR"] == "/opt/spade"
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= set(env)
        assert "shared:/shared" in worker["volumes"]
    assert "shared:/shared" in services["vllm"]["volumes"]  # adapters load by the same path
    gpu = services["gpu-worker"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpu["driver"] == "nvidia" and "gpu" in gpu["capabilities"]


def test_compose_vllm_serves_runtime_lora() -> None:
    vllm = _compose()["services"]["vllm"]
    assert "--enable-lora" in vllm["command"]
    assert vllm["environment"]["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert any(a.startswith("--model=${SPADE_MODEL:-") for a in vllm["command"])


def test_compose_metrics_profile_adds_prometheus_and_grafana_only() -> None:
    """`--profile metrics` adds the two services; the default stack is what it was."""
    services = _compose()["services"]
    default = {n for n, s in services.items() if not s.get("profiles")}
    assert default == {
        "postgres",
        "prefect-server",
        "minio",
        "minio-init",
        "vllm",
        "cpu-worker",
        "gpu-worker",
    }
    profiled = {n: s["profiles"] for n, s in services.items() if s.get("profiles")}
    assert profiled == {"prometheus": ["metrics"], "grafana": ["metrics"]}
    for name in default:  # compose refuses a default service that waits on a profiled one
        assert not set(services[name].get("depends_on") or {}) & set(profiled), name
    for name in profiled:  # bind mounts resolve against infra/ (the compose file's folder)
        for vol in services[name]["volumes"]:
            source = vol.split(":")[0]
            if source.startswith("./"):
                assert (INFRA / source).exists(), f"{name}: {source} missing"
    prometheus = services["prometheus"]
    config_path = next(a for a in prometheus["command"] if a.startswith("--config.file="))
    assert f"./grafana/prometheus.yaml:{config_path.split('=', 1)[1]}:ro" in prometheus["volumes"]
    assert services["grafana"]["depends_on"] == {"prometheus": {"condition": "service_healthy"}}


def test_compose_prefect_server_uses_postgres() -> None:
    server = _compose()["services"]["prefect-server"]
    url = server["environment"]["PREFECT_API_DATABASE_CONNECTION_URL"]
    assert url.startswith("postgresql+asyncpg://") and "@postgres:5432/" in url
    assert server["environment"]["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false"
    assert "/api/health" in " ".join(server["healthcheck"]["test"])


def test_the_prefect_servers_keep_concurrency_leases_through_a_restart() -> None:
    """The spade-gpu limit's leases in files under a PREFECT_HOME that outlives the server
    process (compose: a volume; Kubernetes: the pod's emptyDir), not in its memory: a restart
    lost them, and the slots they held stayed taken for good."""
    files = "prefect.server.concurrency.lease_storage.filesystem"
    server = _compose()["services"]["prefect-server"]
    env = server["environment"]
    assert env["PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE"] == files
    assert f"prefect-home:{env['PREFECT_HOME']}" in server["volumes"]
    by_name = {(d["kind"], d["metadata"]["name"]): d for _, d in _k8s_docs()}
    pod = by_name["Deployment", "prefect-server"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    k8s_env = {e["name"]: e.get("value") for e in container["env"]}
    assert k8s_env["PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE"] == files
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == k8s_env["PREFECT_HOME"])
    assert {"name": mount["name"], "emptyDir": {}} in pod["volumes"]


def test_compose_gpu_worker_and_vllm_take_different_gpus_by_default() -> None:
    services = _interpolated_compose({})["services"]
    worker, vllm = _gpu_request(services["gpu-worker"]), _gpu_request(services["vllm"])
    assert int(worker["count"]) == 1  # Docker gives a count of N the host's GPUs 0 .. N-1
    assert vllm["device_ids"] == ["1"]


def _infra_env(preset: Path) -> dict[str, str]:
    """The variables `spade infra env --config PRESET` prints (its `NAME=value` lines)."""
    from typer.testing import CliRunner

    from spade.cli import app

    done = CliRunner().invoke(app, ["infra", "env", "--config", str(preset)])
    assert done.exit_code == 0, done.output
    lines = [line for line in done.output.splitlines() if line and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


@pytest.mark.parametrize("name", GPU_PRESETS)
def test_an_8gpu_preset_gives_the_gpu_worker_and_its_kubernetes_job_8_gpus(name: str) -> None:
    from prefect.utilities.templating import apply_values

    from flows.deployments import config_deployment
    from spade.config import load_config

    preset = REPO / "configs" / name
    env = _infra_env(preset)
    worker = _gpu_request(_interpolated_compose(env)["services"]["gpu-worker"])
    assert int(worker["count"]) == 8, env  # vLLM on 0-3 and training on 4-7, in one container
    spec = yaml.safe_load((INFRA / "prefect.yaml").read_text())
    (campaign,) = [d for d in spec["deployments"] if d["name"] == "campaign"]
    deployment = config_deployment(campaign, load_config(preset))
    assert deployment["work_pool"]["name"] == "spade-gpu"
    template = _pool("kubernetes-gpu.json")
    props = template["variables"]["properties"]
    values = {k: v["default"] for k, v in props.items() if "default" in v}
    values |= {"name": "spade-campaign", "command": "prefect flow-run execute"}
    values |= deployment["work_pool"]["job_variables"]  # a deployment's override the pool's
    job = apply_values(template["job_configuration"]["job_manifest"], values)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8


# ---- work-pool templates ----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(p.name for p in WORK_POOLS.glob("*.json")))
def test_work_pool_template_declares_every_placeholder(name: str) -> None:
    """What the server checks on `prefect work-pool create --base-job-template`
    (``prefect.server.schemas.actions.validate_base_job_template``, not imported here: the
    server's schemas add a second to the import)."""
    from prefect.utilities.templating import find_placeholders

    template = _pool(name)
    assert set(template) == {"job_configuration", "variables"}
    used = {
        p.name
        for part in template["job_configuration"].values()
        for p in find_placeholders(json.dumps(part))
    }
    declared = set(template["variables"]["properties"])
    assert used <= declared, f"undeclared variables: {used - declared}"
    assert not (declared - used), f"variables no placeholder uses: {declared - used}"


def test_process_template_keeps_prefects_default_variables() -> None:
    from prefect.workers.process import ProcessWorker

    default = ProcessWorker.get_default_base_job_template()
    ours = _pool("process.json")
    assert set(default["variables"]["properties"]) <= set(ours["variables"]["properties"])
    assert set(default["job_configuration"]) <= set(ours["job_configuration"])


def test_process_template_renders_a_process_job_configuration() -> None:
    from prefect.utilities.templating import apply_values
    from prefect.workers.process import ProcessJobConfiguration

    template = _pool("process.json")
    props = template["variables"]["properties"]
    defaults = {k: v["default"] for k, v in props.items() if "default" in v}
    config = ProcessJobConfiguration(**apply_values(template["job_configuration"], defaults))
    assert str(config.working_dir) == "/opt/spade"


@pytest.mark.parametrize("name", K8S_POOLS)
def test_kubernetes_template_keeps_the_default_variables(name: str) -> None:
    default = _k8s_default_template()
    ours = _pool(name)
    assert set(default["variables"]["properties"]) <= set(ours["variables"]["properties"])
    assert set(default["job_configuration"]) <= set(ours["job_configuration"])


@pytest.mark.parametrize("name", K8S_POOLS)
def test_kubernetes_template_renders_a_job_prefect_accepts(name: str) -> None:
    from prefect.utilities.templating import apply_values

    template = _pool(name)
    props = template["variables"]["properties"]
    values = {k: v["default"] for k, v in props.items() if "default" in v}
    values |= {"name": "spade-round", "command": "prefect flow-run execute"}
    job = apply_values(template["job_configuration"]["job_manifest"], values)
    # What prefect-kubernetes' validators demand of a job manifest.
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    pod = job["spec"]["template"]["spec"]
    assert (pod["parallelism"], pod["completions"], pod["restartPolicy"]) == (1, 1, "Never")
    container = pod["containers"][0]
    assert container["name"] == "prefect-job"
    assert container["image"] == "spade:latest"
    assert container["securityContext"]["capabilities"]["add"] == ["SYS_ADMIN"]
    assert container["securityContext"]["seccompProfile"] == {"type": "Unconfined"}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["shared"] == "/shared"
    claims = {v["name"]: v.get("persistentVolumeClaim") for v in pod["volumes"]}
    assert claims["shared"] == {"claimName": "spade-shared"}
    gpus = container["resources"].get("limits", {}).get("nvidia.com/gpu")
    assert gpus == (1 if name == "kubernetes-gpu.json" else None)


# ---- kubernetes manifests ---------------------------------------------------------------------


def _k8s_docs() -> list[tuple[str, dict[str, Any]]]:
    return [(p.name, d) for p in sorted((INFRA / "k8s").glob("*.yaml")) for d in _yaml_docs(p)]


def test_k8s_manifests_have_api_version_kind_and_metadata() -> None:
    docs = _k8s_docs()
    assert docs
    for file, doc in docs:
        assert isinstance(doc, dict), file
        assert doc.get("apiVersion") and doc.get("kind"), file
        assert doc.get("metadata", {}).get("name"), file


def test_k8s_deployments_select_their_pods_and_services_match() -> None:
    docs = [d for _, d in _k8s_docs()]
    pod_labels = []
    for d in docs:
        if d["kind"] == "Deployment":
            labels = d["spec"]["template"]["metadata"]["labels"]
            assert d["spec"]["selector"]["matchLabels"].items() <= labels.items()
            pod_labels.append(labels)
    for d in docs:
        if d["kind"] == "Service":
            sel = d["spec"]["selector"]
            assert any(sel.items() <= labels.items() for labels in pod_labels), d["metadata"]


def test_k8s_vllm_and_worker() -> None:
    by_name = {(d["kind"], d["metadata"]["name"]): d for _, d in _k8s_docs()}
    vllm = by_name["Deployment", "vllm"]["spec"]["template"]["spec"]["containers"][0]
    assert vllm["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "--enable-lora" in vllm["args"]
    worker = by_name["Deployment", "prefect-worker-gpu"]["spec"]["template"]["spec"]
    command = worker["containers"][0]["command"]
    assert command[command.index("--pool") + 1] == "spade-gpu"
    assert command[command.index("--type") + 1] == "kubernetes"
    assert ("ServiceAccount", worker["serviceAccountName"]) in by_name
    server = by_name["Deployment", "prefect-server"]["spec"]["template"]["spec"]["containers"][0]
    db = next(e for e in server["env"] if e["name"] == "PREFECT_API_DATABASE_CONNECTION_URL")
    assert "secretKeyRef" in db["valueFrom"]


# ---- Dockerfile ------------------------------------------------------------------------------


def _dockerfile_runs() -> list[str]:
    """The Dockerfile's RUN instructions, continuation lines joined."""
    text = re.sub(r"\\\n", " ", (INFRA / "Dockerfile").read_text())
    return [line[4:] for line in text.splitlines() if line.startswith("RUN ")]


def test_dockerfile_installs_the_gpu_path_without_a_cuda_toolkit() -> None:
    """A CUDA torch and DeepSpeed from the project's pins, no toolkit: torch on PyPI is the CUDA
    build (its nvidia-* runtime wheels are pinned with it; no CPU-only wheel index is named),
    DeepSpeed compiles no op (training uses torch's Adam), nothing installs nvcc."""
    text = (INFRA / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.12-", text, flags=re.M)
    install = next(r for r in _dockerfile_runs() if "pip install -c constraints.txt -e" in r)
    extras = re.search(r"-e '\.\[([a-z0-9,]+)\]'", install)
    assert extras and {"ml", "s3"} <= set(extras[1].split(","))
    assert "DS_BUILD_OPS=0" in install and "torch.version.cuda" in install
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    assert "index-url" not in code and "download.pytorch.org" not in code
    assert not re.search(r"nvcc|cuda-toolkit|nvidia/cuda:.*devel", code)
    pyproject = (REPO / "pyproject.toml").read_text()
    ml = re.search(r"^ml = \[(.*)\]$", pyproject, flags=re.M)
    assert ml and '"torch' in ml[1] and '"deepspeed' in ml[1]
    pins = dict(
        line.split("==", 1)
        for line in (REPO / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert {"torch", "deepspeed", "nvidia-cuda-runtime", "nvidia-nccl-cu13"} <= set(pins)
    assert "nvidia-cuda-nvcc" not in pins


def test_dockerfile_gives_the_jail_what_bootstrap_gives_it() -> None:
    """The jail's numpy (Debian's) and its site folder, with scripts/bootstrap.sh's pins."""
    text = (INFRA / "Dockerfile").read_text()
    bootstrap = (REPO / "scripts" / "bootstrap.sh").read_text()
    want = re.search(r'^jail_pins="([^"]+)"$', bootstrap, flags=re.M)
    have = re.search(r'^ARG JAIL_PINS="([^"]+)"$', text, flags=re.M)
    assert want and have and have[1] == want[1]
    jail_site = next(r for r in _dockerfile_runs() if "$JAIL_PINS" in r)
    assert "--target /usr/local/lib/spade-jail-site --python-version 3.11" in jail_site
    apt = next(r for r in _dockerfile_runs() if "apt-get install" in r)
    assert {"python3.11", "python3-numpy", "libnl-route-3-200"} <= set(apt.split())


# ---- README ----------------------------------------------------------------------------------


def test_readme_campaign_configs_validate() -> None:
    from spade.config import CampaignConfig

    text = (INFRA / "README.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
    assert blocks
    for block in blocks:
        CampaignConfig.model_validate(yaml.safe_load(block))
