"""Token ids a server does not return are re-derived with the model's tokenizer.

The stand-in server tokenizes one character per token (id = code point) and renders prompts as
``<role>content\\n``; :func:`standin_tokenizer` is a real Hugging Face tokenizer that does the
same, so ids re-derived by the backend can be compared with the ids the stand-in returns when
asked. Whatever the server leaves out, the training samples built from its completions must be
the ones built from a server that returns every id.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from spade.config import InferenceConfig, load_config
from spade.designer.designer import generate
from spade.errors import InferenceError
from spade.inference.base import ChatRequest, Completion, SamplingParams
from spade.inference.openai import OpenAIBackend
from spade.records import DesignAttempt, Trajectory, Turn
from spade.testing.openai_server import (
    FakeOpenAIServer,
    echo,
    render_prompt,
    tokenize,
)
from spade.training.samples import (
    TrainSample,
    samples_from_design_attempts,
    samples_from_trajectories,
)

EOS = "<|im_end|>"
TURNS = [
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "look around"}],
    [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "look around"},
        {"role": "assistant", "content": "look around"},
        {"role": "user", "content": "\\boxed{north}"},
    ],
]
OLD_VLLM = {"return_token_ids_supported": False}  # ids only as "token_id:N" log-prob tokens
PLAIN = {"return_token_ids_supported": False, "tokens_as_ids_supported": False}  # no ids at all


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return standin_tokenizer(tmp_path_factory.mktemp("tok"))


def standin_tokenizer(folder: Path) -> Path:
    """A tokenizer folder that tokenizes as the stand-in does (ASCII, id = code point)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {chr(i): i for i in range(1, 128)} | {"<unk>": 0, EOS: 128, "<pad>": 129}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("(?m)."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>", eos_token=EOS
    )
    tok.chat_template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    tok.save_pretrained(folder)
    return folder


def complete(
    tokenizer: Path | None, requests: list[ChatRequest], **server: bool
) -> tuple[list[Completion], OpenAIBackend]:
    with FakeOpenAIServer("base-model", script=echo, **server) as srv:  # type: ignore[arg-type]
        backend = OpenAIBackend(
            InferenceConfig(base_url=srv.url), "base-model", tokenizer=tokenizer
        )
        return asyncio.run(backend.complete(requests)), backend


def test_the_stand_in_tokenizer_is_the_stand_ins(tokenizer_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    text = tok.apply_chat_template(TURNS[1], tokenize=False, add_generation_prompt=True)
    assert tok(text, add_special_tokens=False)["input_ids"] == tokenize(render_prompt(TURNS[1]))


@pytest.mark.parametrize("server", [OLD_VLLM, PLAIN], ids=["token-id-logprobs", "text-logprobs"])
def test_missing_ids_are_re_derived_as_the_server_would_have_returned_them(
    tokenizer_dir: Path, server: dict[str, bool]
) -> None:
    requests = [ChatRequest(m) for m in TURNS]
    (full, _) = complete(None, requests)
    (derived, backend) = complete(tokenizer_dir, requests, **server)

    for want, got in zip(full, derived, strict=True):
        assert not want.token_ids_rederived and got.token_ids_rederived
        assert want.token_ids == tokenize(want.text) and want.prompt_token_ids  # the reference
        assert (got.text, got.prompt_token_ids, got.token_ids, got.logprobs) == (
            want.text, want.prompt_token_ids, want.token_ids, want.logprobs
        )  # fmt: skip
    assert backend.retokenizer is not None
    assert backend.retokenizer.prompts == 2
    assert backend.retokenizer.completions == (2 if server is PLAIN else 0)  # else exact ids
    assert backend.retokenizer.unaligned == 0


def test_without_a_tokenizer_missing_ids_stay_missing(caplog: pytest.LogCaptureFixture) -> None:
    (out,), backend = complete(None, [ChatRequest(TURNS[0])], **PLAIN)
    assert out.ok and out.text == "look around"
    assert (out.prompt_token_ids, out.token_ids, out.token_ids_rederived) == ([], [], False)
    assert backend.retokenizer is None and "cannot be trained on" in caplog.text


def test_ids_that_do_not_line_up_with_the_logprobs_are_not_kept(tokenizer_dir: Path) -> None:
    """ "é" is not in the vocabulary: re-tokenized it is <unk>, not the token the server scored."""
    request = ChatRequest([{"role": "user", "content": "café"}])
    (out,), backend = complete(tokenizer_dir, [request], **PLAIN)
    assert out.ok and out.text == "café" and len(out.logprobs) == 4
    assert out.token_ids == [] and out.token_ids_rederived  # not trainable, and said so
    assert out.prompt_token_ids  # the prompt's ids carry no log-probs: always re-derived
    assert backend.retokenizer is not None and backend.retokenizer.unaligned == 1


def test_a_final_end_of_turn_logprob_entry_becomes_the_eos_id(tokenizer_dir: Path) -> None:
    from spade.inference.retokenize import Retokenizer

    completion = Completion(text="ok", logprobs=[-0.1, -0.2, -0.3])
    Retokenizer(tokenizer_dir).fill(completion, TURNS[0], None, ["o", "k", ""])
    assert completion.token_ids == [ord("o"), ord("k"), 128]


def test_without_logprobs_the_text_is_re_tokenized(tokenizer_dir: Path) -> None:
    request = ChatRequest(TURNS[0], params=SamplingParams(logprobs=False))
    (out,), _ = complete(tokenizer_dir, [request], **PLAIN)
    assert (out.token_ids, out.logprobs) == (tokenize("look around"), [])


def test_a_tokenizer_that_cannot_be_loaded_is_an_inference_error(tmp_path: Path) -> None:
    with pytest.raises(InferenceError, match="cannot load the tokenizer"):
        complete(tmp_path / "nothing", [ChatRequest(TURNS[0])], **PLAIN)


def _agent_samples(completions: list[Completion]) -> list[TrainSample]:
    turns = [
        Turn(c.prompt_token_ids, c.token_ids, c.logprobs, c.text, c.text, "obs", 1.0, i == 1,
             False, c.finish_reason, 0.0, 0.0)
        for i, c in enumerate(completions)
    ]  # fmt: skip
    # the stand-in's prompts are not prefix-stable (no assistant tag before a reply), so each
    # turn is a sample of its own: its prompt's ids masked, its completion's trained on
    play = Trajectory("env", 0, hinted=False, turns=turns, status="terminated")
    return samples_from_trajectories([play])


def test_agent_and_designer_samples_from_re_derived_ids_are_the_full_servers(
    tokenizer_dir: Path,
) -> None:
    requests = [ChatRequest(m) for m in TURNS]
    (full, _) = complete(None, requests)
    for server in (OLD_VLLM, PLAIN):
        (derived, _) = complete(tokenizer_dir, requests, **server)
        want, got = _agent_samples(full), _agent_samples(derived)
        assert got == want and len(got) == 2
        for sample, completion in zip(got, full, strict=True):
            assert sample.input_ids == completion.prompt_token_ids + completion.token_ids

    cfg = load_config()

    async def design(tokenizer: Path | None, **server: bool) -> list[TrainSample]:
        with FakeOpenAIServer("base-model", script=echo, **server) as srv:  # type: ignore[arg-type]
            backend = OpenAIBackend(
                InferenceConfig(base_url=srv.url), "base-model", tokenizer=tokenizer
            )
            batch = [DesignAttempt(0, 0, "logic", "doc", messages=TURNS[0])]
            await generate(backend, batch, cfg)
        return samples_from_design_attempts(batch, [0.5])

    want = asyncio.run(design(None))
    assert want and want == asyncio.run(design(tokenizer_dir, **OLD_VLLM))
    assert want == asyncio.run(design(tokenizer_dir, **PLAIN))


def test_the_configured_openai_backend_re_derives_ids_with_the_models_tokenizer(
    tokenizer_dir: Path, tmp_path: Path
) -> None:
    from spade.inference.factory import open_backend
    from spade.testing.tiny_models import tiny_llama_config

    model_dir = tmp_path / "model"  # a model folder (config.json) whose tokenizer is the stand-in's
    shutil.copytree(tokenizer_dir, model_dir)
    tiny_llama_config(130, hidden=16, layers=1, heads=2, kv_heads=1).save_pretrained(model_dir)

    with FakeOpenAIServer("served", script=echo, **PLAIN) as srv:  # type: ignore[arg-type]
        cfg = load_config(
            overrides={
                "inference.backend": "openai",
                "inference.base_url": srv.url,
                "inference.served_model": "served",
                "model.name_or_path": str(model_dir),
            }
        )

        async def go() -> Completion:
            async with open_backend(cfg) as backend:
                (done,) = await backend.complete([ChatRequest(TURNS[0])])
                return done

        out = asyncio.run(go())
    assert out.token_ids_rederived and out.token_ids == tokenize("look around")
    assert out.prompt_token_ids == tokenize(render_prompt(TURNS[0]))
