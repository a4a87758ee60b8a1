"""Loading a model, a tokenizer or adapters takes ``HF_LOADING``: transformers' and peft's lazy
imports are not thread-safe, and with ``run.overlap`` a round trains (in a worker thread) while
the next one plays and loads a tokenizer."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from spade.config import LoraConfig, ModelConfig
from spade.inference.llamacpp import load_tokenizer
from spade.inference.models import HF_LOADING, load_model_and_tokenizer, resolve_model
from spade.testing.scripted_designer import write_tiny_policy
from spade.training.weights import wrap_lora


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    return write_tiny_policy(tmp_path_factory.mktemp("policy"))


def waits_for_the_lock(load: Callable[[], Any]) -> Any:
    """Run ``load`` in a thread while this thread holds HF_LOADING: it cannot finish until the
    lock is let go (an RLock: the holder's own thread would pass, another cannot). Unlocked,
    each of these loads (a tiny model, imports warm) takes well under the 1.5 s given."""
    done: list[Any] = []
    worker = threading.Thread(target=lambda: done.append(load()))
    with HF_LOADING:
        worker.start()
        worker.join(1.5)
        assert worker.is_alive() and not done  # blocked on the lock, whatever the speed
    worker.join(120)
    assert done, "the load did not finish once the lock was free"
    return done[0]


def test_a_tokenizer_load_waits_for_a_model_load_in_another_thread(policy) -> None:
    tokenizer = waits_for_the_lock(lambda: load_tokenizer(policy))
    assert tokenizer.chat_template


def test_a_model_load_and_a_lora_wrap_wait_too(policy) -> None:
    resolved = resolve_model(ModelConfig(name_or_path=str(policy)))
    model, _ = waits_for_the_lock(lambda: load_model_and_tokenizer(resolved, "float32", "cpu"))
    lora = LoraConfig(enabled=True, rank=2, target_modules=["q_proj"])
    wrapped = waits_for_the_lock(lambda: wrap_lora(model, lora, seed=0))
    assert any("lora_A" in name for name, _ in wrapped.named_parameters())


def test_importing_the_in_process_backend_waits_too() -> None:
    """spade.inference.hf imports from transformers at module level: under the lock as well
    (a fresh interpreter, where nothing has imported it yet)."""
    import subprocess
    import sys

    script = (
        "import sys, threading\n"
        "from spade.inference.models import HF_LOADING\n"
        "assert 'spade.inference.hf' not in sys.modules\n"
        "import torch\n"  # what it needs, loaded: unlocked, its import takes milliseconds
        "from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList\n"
        "import spade.inference.base, spade.inference.retokenize\n"
        "t = threading.Thread(target=lambda: __import__('spade.inference.hf'))\n"
        "with HF_LOADING:\n"
        "    t.start(); t.join(1.5)\n"
        "    assert t.is_alive(), 'imported while another thread held HF_LOADING'\n"
        "t.join(120)\n"
        "assert 'spade.inference.hf' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
