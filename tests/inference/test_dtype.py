"""``model.dtype``: ``auto`` keeps float32 on CPU; ``fast`` picks bf16 on a CPU only where the
cores multiply it in hardware (read from /proc/cpuinfo's flags)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from spade.inference import models
from spade.inference.models import cpu_has_native_bf16, pick_dtype

SAPPHIRE = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_tile amx_bf16\n"
EPYC_AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\nbugs\t\t: sysret_ss_attrs\n"
ICELAKE = "flags\t\t: avx2 avx512f avx512bw avx512_vnni\n"  # AVX-512 without its bf16 part


def test_native_bf16_is_read_from_the_flags_line_only() -> None:
    assert cpu_has_native_bf16(SAPPHIRE)
    assert cpu_has_native_bf16("flags\t\t: avx2 amx_bf16\n")
    assert not cpu_has_native_bf16(EPYC_AVX2)
    assert not cpu_has_native_bf16(ICELAKE)
    # a flag named on another line (a model name, the bugs line) is no flag
    assert not cpu_has_native_bf16("model name\t: avx512_bf16 box\nflags\t\t: avx2\n")
    assert not cpu_has_native_bf16("")


@pytest.mark.parametrize(("native", "want"), [(True, torch.bfloat16), (False, torch.float32)])
def test_fast_is_bf16_on_a_cpu_only_with_native_bf16(
    monkeypatch: pytest.MonkeyPatch, native: bool, want: torch.dtype
) -> None:
    # the machine's own flags are the one input replaced: the choice is what is tested
    monkeypatch.setattr(models, "cpu_has_native_bf16", lambda: native)
    cpu = torch.device("cpu")
    assert pick_dtype("fast", cpu) == want
    assert pick_dtype("auto", cpu) == torch.float32  # auto stays exact on CPU either way
    assert pick_dtype("fast", torch.device("cuda", 0)) == torch.bfloat16
    assert pick_dtype("bfloat16", cpu) == torch.bfloat16  # an explicit dtype is kept


def test_this_machines_flags_decide_fast() -> None:
    text = Path("/proc/cpuinfo").read_text()
    native = any(f in text.split() for f in ("avx512_bf16", "amx_bf16"))
    want = torch.bfloat16 if native else torch.float32
    assert pick_dtype("fast", torch.device("cpu")) == want
