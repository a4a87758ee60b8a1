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
from spade.training.weights import wrap_lora


def waits_for_the_lock(
    load: Callable[[], Any], owner: Any, name: str, monkeypatch: pytest.MonkeyPatch
) -> Any:
    """Run ``load`` in a thread while this thread holds HF_LOADING, and prove it waited for the
    lock: ``owner.name`` (the library call that does the loading, spied on and passed through)
    must run in the worker while the worker owns HF_LOADING, and only after this thread let the
    lock go. No timing: the worker signals it is about to load, this thread records that it lets
    go, then lets go; a load outside the lock fails the ownership check however fast it is."""
    events: list[tuple[str, bool]] = []
    real = getattr(owner, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        events.append(("loading", HF_LOADING._is_owned()))  # owned by the calling thread?
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, spy)
    done: list[Any] = []
    about_to_load = threading.Event()

    def work() -> None:
        about_to_load.set()
        done.append(load())

    worker = threading.Thread(target=work)
    with HF_LOADING:
        worker.start()
        assert about_to_load.wait(120)
        events.append(("released", True))  # still held here: the worker cannot be past it
    worker.join(120)
    assert done, "the load did not finish once the lock was free"
    assert events[0] == ("released", True), events  # nothing loaded while this thread held it
    assert len(events) > 1 and all(owned for _, owned in events[1:]), events  # under the lock
    monkeypatch.setattr(owner, name, real)
    return done[0]


def test_a_tokenizer_load_waits_for_a_model_load_in_another_thread(
    tiny_policy, monkeypatch
) -> None:
    from transformers import AutoTokenizer

    tokenizer = waits_for_the_lock(
        lambda: load_tokenizer(tiny_policy), AutoTokenizer, "from_pretrained", monkeypatch
    )
    assert tokenizer.chat_template


def test_a_model_load_and_a_lora_wrap_wait_too(tiny_policy, monkeypatch) -> None:
    from transformers import AutoModelForCausalLM

    from spade.inference.adapters import peft

    resolved = resolve_model(ModelConfig(name_or_path=str(tiny_policy)))
    model, _ = waits_for_the_lock(
        lambda: load_model_and_tokenizer(resolved, "float32", "cpu"),
        AutoModelForCausalLM,
        "from_pretrained",
        monkeypatch,
    )
    lora = LoraConfig(enabled=True, rank=2, target_modules=["q_proj"])
    wrapped = waits_for_the_lock(
        lambda: wrap_lora(model, lora, seed=0), peft(), "get_peft_model", monkeypatch
    )
    assert any("lora_A" in name for name, _ in wrapped.named_parameters())


def test_importing_the_in_process_backend_waits_too() -> None:
    """spade.inference.hf imports from transformers at module level: under the lock as well
    (a fresh interpreter, where nothing has imported it yet). Its ``from transformers import``
    is observed (``builtins.__import__``, passed through): it must run while its thread owns
    HF_LOADING, after the thread holding the lock let it go."""
    import subprocess
    import sys

    script = (
        "import builtins, sys, threading\n"
        "from spade.inference.models import HF_LOADING\n"
        "assert 'spade.inference.hf' not in sys.modules\n"
        "events = []\n"
        "real = builtins.__import__\n"
        "def spy(name, globals=None, locals=None, fromlist=(), level=0):\n"
        "    if name == 'transformers' and (globals or {}).get('__name__') == 'spade.inference.hf':\n"
        "        events.append(('importing', HF_LOADING._is_owned()))\n"
        "    return real(name, globals, locals, fromlist, level)\n"
        "builtins.__import__ = spy\n"
        "about_to_import = threading.Event()\n"
        "def work():\n"
        "    about_to_import.set()\n"
        "    __import__('spade.inference.hf')\n"
        "t = threading.Thread(target=work)\n"
        "with HF_LOADING:\n"
        "    t.start()\n"
        "    assert about_to_import.wait(120)\n"
        "    events.append(('released', True))\n"
        "t.join(120)\n"
        "assert 'spade.inference.hf' in sys.modules\n"
        "assert events[0] == ('released', True), events\n"
        "assert len(events) > 1 and all(owned for _, owned in events[1:]), events\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
