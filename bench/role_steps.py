"""Role-step benchmark: how far each role's GRPO update moves the shared model (issue 33,
point 9; docs/architecture.md §2.9).

Both roles train one model on one chain of checkpoints with ONE AdamW carried across roles
(:func:`spade.training.run.trainer_from_parent`: each update loads its parent's weights *and*
optimizer state, only the learning rate is the role's own). Adam divides each weight's step by
the root of its second moment ``v``, an average of *both* roles' squared gradients
(``beta2 = 0.999``: hundreds of steps), and its first moment carries the previous update's
direction into the next (``beta1 = 0.9``). So a role whose gradients are smaller than the
other's moves the weights less than its learning rate says, and partly along the other's
direction. The reference scales its designer ("environment") rewards by ``env_reward_scale``
(unhinted plays per environment x regeneration interval, at most 50) to make up for it.

This bench runs the role chain a campaign runs (per round an agent update, then a designer
update on the rounds that train it: ``run.regen_interval``, ``training.designer_delay_steps``),
each update through the campaign's own code: its samples from
:func:`spade.training.run.agent_samples` / :func:`~spade.training.run.designer_samples`
(records built here), its trainer from :func:`~spade.training.run.trainer_from_parent` (the
parent checkpoint's weights and optimizer), one :meth:`GRPOTrainer.step`, then a checkpoint
the next update resumes. The same batches go through every variant:

- ``current``: designer rewards centred per skill (no std), as shipped;
- ``scaled``: those advantages times ``env_reward_scale`` (:func:`env_reward_scale` of the
  chain's plays and regeneration interval, as the reference computes it);
- ``zscore``: the designer's rewards z-scored per skill (std), like the agent's;
- ``separate``: current advantages, but each role resumes its *own* previous optimizer state
  (a fresh one at its first update) on the shared weights: what each role's AdamW would do
  alone.

The batches. Completions are sampled once from the model at temperature 1 (the behaviour
log-probs are the model's own), an agent prompt and a designer prompt; each round draws from
them. Agent: ``--envs`` environments x ``--plays`` plays with 0/1 returns, each environment's
win rate uniform in [0, 1] (seeded), advantages z-scored per environment (groups whose plays
all agree get 0, as in a campaign). Designer: the designer rewards of the 2-core demo
rounds (docs/results/demo.md, the rule-directive rows: four designs a round
in one skill, graded rejections), :data:`DEMO_DESIGN_ROUNDS`, scored by
:func:`spade.scoring.rewards.raw_rewards` and centred by the campaign's code.

Measured per update (all over the trainable weights): the gradient norm before clipping (the
clip is ``training.grad_clip``), the step ``dtheta``: its RMS per weight over the learning rate
(1 is a full Adam step on every weight: what a fresh AdamW's first step takes), the median and
90th percentile of ``|dtheta| / lr`` per weight (on a fixed sample of 2^20 weights for big
models), the cosine between the step and the descent direction of the role's own clipped
gradient ``-g`` (a fresh AdamW's first step, ``-lr x sign(g)``, has ``|g|_1 / (|g|_2 sqrt(N))``;
lower: the step goes where the carried momentum points, not where this batch's gradient
does), the RMS of
the role's clipped gradient over the root of the mean bias-corrected second moment before the
step (``g/sqrt(v)``: below 1 the normaliser is set by larger earlier gradients), and the change
in log-prob of the role's own trained tokens, signed by each sample's advantage (mean over the
samples with a non-zero advantage of ``sign(A) x`` its tokens' mean change, nats: what the
update taught that role). Each role's row averages its updates after the chain's first update
(a fresh AdamW's first step is ``lr x sign(g)`` for any advantages). The summary: the
designer's RMS step per learning rate over the agent's, and each variant's agent step over
``current``'s (does it hurt the agent).

Benchmarks report; they do not assert. A table prints, JSON goes to
``bench/results/role_steps.json``.

Usage: ``.venv/bin/python bench/role_steps.py [--quick] [--model NAME] [--lora] [--lr LR]
[--rounds N] [--regen-interval R] [--delay D] [--envs E] [--plays P] [--variants a,b]
[--out PATH]``
"""

from __future__ import annotations

import argparse
import copy
import math
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from report import machine, timestamp, write_json  # bench/report.py (scripts run from bench/)
from rich.console import Console
from rich.table import Table

from spade.config import CampaignConfig, ModelConfig, ScoringConfig
from spade.records import DesignAttempt, Trajectory, Turn
from spade.scoring.rewards import DesignOutcome, raw_rewards
from spade.training.samples import TrainSample, assign_advantages, collate, micro_batches
from spade.training.scoring import token_logprobs

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "role_steps.json"
VARIANTS = ("current", "scaled", "zscore", "separate")
QUANTILE_SAMPLE = 2**20  # weights the per-weight quantiles are taken on (all, when fewer)
ADAM_BETA2 = 0.999  # spade.training.engines' AdamW

AGENT_PROMPT = (
    "You are playing Number Hunt. A hidden integer lies between 1 and 100. Each turn, guess"
    " it; you are told whether the number is higher or lower. Reply with your guess as"
    " \\boxed{N}."
)
DESIGNER_PROMPT = (
    "Rewrite the method `clue(self, guess)` of the game below so that the clue it returns"
    " tells the player something new about the hidden number. Keep the signature.\n\n"
    "class NumberHuntEnv:\n    def clue(self, guess):\n        return 'higher' if guess <"
    " self.target else 'lower'\n"
)

# The 2-core demo table of docs/results/demo.md, rule-directive rows (configs/demo-cpu.yaml: one
# skill a round, two slots x two samples = four designs, graded rejections; progress within a
# tier, which the table does not give, is set mid-tier). Valid designs: mean return and regret.
DEMO_DESIGN_ROUNDS: tuple[tuple[dict[str, Any], ...], ...] = (
    (  # seed 0, round 0: a polynomial_probe credit rule (its plays all scored 0), a clue that
        # tells nothing, a syntax error, a credit that wins every seed
        {"valid": True, "mean_return": 0.0, "regret": 0.0},
        {"failure_kind": "unsolvable", "progress": 0.8},
        {"failure_kind": "syntax", "progress": 0.5},
        {"failure_kind": "trivial", "progress": 0.6},
    ),
    (  # seed 0, round 1: a credit rule, two of those, a reward of 1.5 (out of the contract)
        {"valid": True, "mean_return": 0.0, "regret": 0.0},
        {"failure_kind": "unsolvable", "progress": 0.8},
        {"failure_kind": "trivial", "progress": 0.6},
        {"failure_kind": "contract", "progress": 0.5},
    ),
    (  # seed 1, round 0: two number_hunt clues accepted (partial rewards in 19 of 26 plays),
        # a misspelt name and a clue calling itself (crashes)
        {"valid": True, "mean_return": 0.3, "regret": 0.0},
        {"valid": True, "mean_return": 0.2, "regret": 0.0},
        {"failure_kind": "crash", "progress": 0.2},
        {"failure_kind": "crash", "progress": 0.3},
    ),
    (  # seed 1, round 1: a clue that names the number (regret 0.03, designer reward 0.09), a
        # division by zero, a reward of 3.0, a clue iterating an int
        {"valid": True, "mean_return": 0.0, "regret": 0.034},
        {"failure_kind": "crash", "progress": 0.5},
        {"failure_kind": "contract", "progress": 0.5},
        {"failure_kind": "crash", "progress": 0.4},
    ),
)


# ------------------------------------------------------------------------------ pure math


def env_reward_scale(plays_per_env: int, regen_interval: int, cap: float = 50.0) -> float:
    """The reference's designer-reward scale: actor plays per environment times the
    regeneration interval (the designer trains once a regeneration, the agent every round),
    at most ``cap``; 1 when either count is 0."""
    if plays_per_env <= 0 or regen_interval <= 0:
        return 1.0
    return min(float(plays_per_env * regen_interval), cap)


def designer_trains(round_: int, regen_interval: int, delay: int) -> bool:
    """Whether round ``round_`` has a designer update: it trains on the attempts of round
    ``round_ - delay``, and only regeneration rounds (every ``regen_interval``-th) design."""
    source = round_ - delay
    return source >= 0 and source % regen_interval == 0


def schedule(rounds: int, regen_interval: int, delay: int) -> list[tuple[int, str]]:
    """The chain's updates in order: ``(round, role)``, the agent's first in each round."""
    out: list[tuple[int, str]] = []
    for r in range(rounds):
        out.append((r, "agent"))
        if designer_trains(r, regen_interval, delay):
            out.append((r, "designer"))
    return out


def rms(x: torch.Tensor) -> float:
    return float(x.float().pow(2).mean().sqrt())


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    na, nb = float(a.norm()), float(b.norm())
    return float(torch.dot(a, b)) / (na * nb) if na > 0 and nb > 0 else 0.0


def signed_logprob_change(
    before: Sequence[float], after: Sequence[float], advantages: Sequence[float]
) -> float:
    """Mean over samples with a non-zero advantage of ``sign(A) x (after - before)`` (each a
    sample's mean token log-prob): positive when the update raised what was rewarded and
    lowered what was not. 0.0 when every advantage is 0."""
    terms = [
        math.copysign(1.0, a) * (y - x)
        for x, y, a in zip(before, after, advantages, strict=True)
        if a != 0.0
    ]
    return sum(terms) / len(terms) if terms else 0.0


def mean_of(rows: Sequence[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return sum(values) / len(values) if values else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


# ------------------------------------------------------------------------------- batches


@dataclass
class Completion:
    prompt: list[int]
    tokens: list[int]
    logprobs: list[float] = field(default_factory=list)


def sample_completions(
    model: Any, tokenizer: Any, text: str, n: int, max_new: int, seed: int
) -> list[Completion]:
    """``n`` completions of the chat prompt ``text`` sampled at temperature 1 (cut after the
    end-of-sequence token), with their own log-probs under ``model`` (the behaviour's)."""
    messages = [{"role": "user", "content": text}]
    chat = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt = list(tokenizer(chat, add_special_tokens=False)["input_ids"])
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    torch.manual_seed(seed)
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=max_new,
            num_return_sequences=n,
            pad_token_id=pad,
        )
    completions = []
    for row in out[:, len(prompt) :].tolist():
        tokens = row[: row.index(eos) + 1] if eos in row else row
        completions.append(Completion(prompt, tokens or [eos]))
    samples = [
        TrainSample(
            c.prompt + c.tokens,
            [0] * len(c.prompt) + [1] * len(c.tokens),
            [0.0] * (len(c.prompt) + len(c.tokens)),
            0.0,
            "pool",
            advantage=0.0,
        )
        for c in completions
    ]
    batch = collate(samples, pad)
    with torch.no_grad():
        lp, _ = token_logprobs(model, batch)
    for i, c in enumerate(completions):
        start = len(c.prompt) - 1  # position t predicts token t + 1
        c.logprobs = lp[i, start : start + len(c.tokens)].tolist()
    return completions


def agent_batch(
    cfg: CampaignConfig, pool: Sequence[Completion], rng: random.Random, envs: int, plays: int
) -> list[TrainSample]:
    """A round's agent samples through :func:`spade.training.run.agent_samples`: ``envs``
    environments x ``plays`` one-turn unhinted plays of the pool's completions, 0/1 returns at
    a win rate drawn uniformly per environment."""
    from spade.training.run import agent_samples

    trajectories = []
    for e in range(envs):
        win_rate = rng.random()
        for play, c in enumerate(rng.sample(list(pool), plays)):
            ret = 1.0 if rng.random() < win_rate else 0.0
            turn = Turn(c.prompt, c.tokens, c.logprobs, "", "", "", ret, True, False, "stop",
                        0.0, 0.0)  # fmt: skip
            trajectories.append(Trajectory(f"env-{e}", play, False, turns=[turn],
                                           status="terminated"))  # fmt: skip
    return agent_samples(cfg, trajectories)


def demo_design_rewards(scoring: ScoringConfig) -> list[list[float]]:
    """The raw (uncentred) designer rewards of :data:`DEMO_DESIGN_ROUNDS` under ``scoring``."""
    rounds = []
    for r, designs in enumerate(DEMO_DESIGN_ROUNDS):
        outcomes = [
            DesignOutcome(
                env_id=f"r{r}d{i}",
                skill="s",
                valid=bool(d.get("valid")),
                failure_kind=d.get("failure_kind"),
                progress=d.get("progress", 0.0),
                win_rate=d.get("mean_return") if d.get("valid") else None,
                regret=d.get("regret"),
                mean_return=d.get("mean_return"),
            )
            for i, d in enumerate(designs)
        ]
        rounds.append(raw_rewards(outcomes, scoring))
    return rounds


def designer_batch(
    cfg: CampaignConfig, pool: Sequence[Completion], rng: random.Random, rewards: Sequence[float]
) -> list[TrainSample]:
    """A round's designer samples through :func:`spade.training.run.designer_samples`: one
    attempt of one skill per reward, on the pool's completions (centred once, per skill)."""
    from spade.training.run import designer_samples

    attempts = [
        DesignAttempt(
            slot=i,
            attempt=0,
            skill="skill",
            doc_id="doc",
            messages=[],
            prompt_token_ids=c.prompt,
            token_ids=c.tokens,
            logprobs=c.logprobs,
        )
        for i, c in enumerate(rng.sample(list(pool), len(rewards)))
    ]
    return designer_samples(cfg, attempts, rewards)


def variant_samples(
    variant: str, role: str, samples: Sequence[TrainSample], scale: float
) -> list[TrainSample]:
    """``samples`` (with the campaign's advantages) as ``variant`` trains them: the designer's
    advantages times ``scale`` (``scaled``) or its rewards z-scored per skill (``zscore``);
    otherwise unchanged. Copies: the chain's batches are shared by every variant."""
    out = copy.deepcopy(list(samples))
    if role != "designer":
        return out
    if variant == "scaled":
        for s in out:
            s.advantage = (s.advantage or 0.0) * scale
    elif variant == "zscore":
        assign_advantages(out, "zscore")
    return out


# --------------------------------------------------------------------------- measurement


class StepProbe:
    """Reads the optimizer's inputs just before its step: the clipped gradient (flattened)
    and the bias-corrected second moment's mean (None before any step)."""

    def __init__(self, optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter]):
        self.params = params
        self.grad: torch.Tensor | None = None
        self.v_mean: float | None = None
        self.handle = optimizer.register_step_pre_hook(self._hook)

    def _hook(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        grads = [
            (p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1)
            for p in self.params
        ]
        self.grad = torch.cat(grads).float()
        total, count = 0.0, 0
        for p in self.params:
            state = optimizer.state.get(p) or {}
            if "exp_avg_sq" not in state:
                return  # a fresh optimizer: no second moment yet
            step = float(state["step"])
            total += float(state["exp_avg_sq"].sum()) / (1.0 - ADAM_BETA2**step)
            count += p.numel()
        self.v_mean = total / count

    def close(self) -> None:
        self.handle.remove()


def flat_params(params: Sequence[torch.nn.Parameter]) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).float() for p in params]).clone()


def sample_logprobs(trainer: Any, samples: Sequence[TrainSample]) -> list[float]:
    """Each sample's mean log-prob of its trained tokens under the trainer's weights, at
    its role's temperature."""
    module = trainer.engine.module
    module.eval()
    out = [0.0] * len(samples)
    for group in micro_batches(samples, trainer.config.micro_batch_tokens):
        batch = collate([samples[i] for i in group], trainer.pad_id)
        with torch.no_grad():
            lp, _ = token_logprobs(module, batch, temperature=trainer.temperature)
        mask = batch["loss_mask"]
        means = (lp * mask).sum(dim=1) / mask.sum(dim=1).clamp_min(1.0)
        for i, value in zip(group, means.tolist(), strict=True):
            out[i] = value
    return out


def update(
    cfg: CampaignConfig,
    role: str,
    parent: str | None,
    samples: Sequence[TrainSample],
    root: str,
    own_optimizer: str | bool | None,
    index: torch.Tensor | None,
) -> tuple[str, dict[str, Any]]:
    """One update of the chain, as :func:`spade.training.run.update_from_parent` takes it,
    measured; returns its checkpoint and its row. ``own_optimizer``: False to continue the
    parent's optimizer (one optimizer); else the role's own last checkpoint (None: a fresh
    AdamW) whose optimizer state replaces the parent's (``separate``)."""
    from spade.inference.checkpoint_reader import CheckpointReader
    from spade.training.run import trainer_from_parent

    trainer, files = trainer_from_parent(cfg, role, parent)  # type: ignore[arg-type]
    engine = trainer.engine
    if own_optimizer is not False:
        if own_optimizer is None:
            engine.optimizer.state.clear()  # a fresh AdamW's moments, on the shared weights
        else:
            with CheckpointReader(str(own_optimizer)) as reader:
                engine.load_optimizer_state(reader.optimizer_state(0, 1))
        engine.set_lr(trainer.lr)
    params = engine.params
    before = flat_params(params)
    lp_before = sample_logprobs(trainer, samples)
    probe = StepProbe(engine.optimizer, params)
    metrics = trainer.step(samples)
    probe.close()
    delta = flat_params(params) - before
    lp_after = sample_logprobs(trainer, samples)
    lr = trainer.lr
    per_weight = (delta if index is None else delta[index]).abs() / lr
    q50, q90 = torch.quantile(per_weight, torch.tensor([0.5, 0.9])).tolist()
    grad = probe.grad if probe.grad is not None else torch.zeros_like(delta)
    row = {
        "role": role,
        "lr": lr,
        "samples": len(samples),
        "trained_tokens": metrics.trained_tokens,
        "advantage_abs_mean": sum(abs(s.advantage or 0.0) for s in samples) / len(samples),
        "grad_norm": metrics.grad_norm,
        "clipped": metrics.grad_norm > cfg.training.grad_clip,
        "step_norm": float(delta.norm()),
        "step_rms_over_lr": rms(delta) / lr,
        "step_q50_over_lr": q50,
        "step_q90_over_lr": q90,
        "cos_step_own_grad": cosine(delta, -grad),
        "grad_over_sqrt_v": (rms(grad) / math.sqrt(probe.v_mean) if probe.v_mean else None),
        "logprob_gain": signed_logprob_change(
            lp_before, lp_after, [s.advantage or 0.0 for s in samples]
        ),
        "optimizer_step": trainer.global_step,  # the chain's updates so far
        "adam_step": int(engine.optimizer.state[params[0]]["step"]),  # this AdamW's steps
    }
    uri = trainer.save(root, parent=parent, model_files=files)
    del trainer
    return uri, row


def run_chain(
    variant: str,
    cfg: CampaignConfig,
    chain: Sequence[tuple[int, str, list[TrainSample]]],
    scale: float,
    workdir: Path,
    index: torch.Tensor | None,
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    """The whole chain under ``variant`` from the base model; a row per update."""
    root = workdir / variant
    parent: str | None = None
    own: dict[str, str | None] = {"agent": None, "designer": None}
    rows = []
    for n, (round_, role, samples) in enumerate(chain):
        batch = variant_samples(variant, role, samples, scale)
        mine: str | bool | None = own[role] if variant == "separate" else False
        started = time.perf_counter()
        uri, row = update(cfg, role, parent, batch, str(root), mine, index)
        row |= {"variant": variant, "round": round_, "update": n,
                "seconds": time.perf_counter() - started}  # fmt: skip
        rows.append(row)
        log(
            f"{variant:9s} r{round_} {role:8s} grad {row['grad_norm']:.3g}"
            f" step/lr {row['step_rms_over_lr']:.3f} cos {row['cos_step_own_grad']:+.2f}"
            f" dlogp {row['logprob_gain']:+.2e} ({row['seconds']:.0f} s)"
        )
        _prune(parent, own, uri)
        if variant == "separate":
            previous = own[role]
            own[role] = uri
            if previous not in (parent, None, uri):
                shutil.rmtree(previous, ignore_errors=True)
        parent = uri
    shutil.rmtree(root, ignore_errors=True)
    return rows


def _prune(parent: str | None, own: dict[str, str | None], new: str) -> None:
    """Delete the parent checkpoint once the new one is written, unless a role still resumes
    its optimizer from it (``separate``)."""
    if parent is not None and parent != new and parent not in own.values():
        shutil.rmtree(parent, ignore_errors=True)


# ------------------------------------------------------------------------------- report


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each role's mean figures over its updates after the chain's first (a fresh AdamW's
    first step is the same for any gradient)."""
    keys = ("grad_norm", "step_rms_over_lr", "step_q50_over_lr", "step_q90_over_lr",
            "cos_step_own_grad", "grad_over_sqrt_v", "logprob_gain",
            "advantage_abs_mean")  # fmt: skip
    out: dict[str, dict[str, Any]] = {}
    for role in ("agent", "designer"):
        mine = [r for r in rows if r["role"] == role and r["update"] > 0]
        out[role] = {k: mean_of(mine, k) for k in keys} | {
            "updates": len(mine),
            "clipped_share": sum(r["clipped"] for r in mine) / len(mine) if mine else None,
        }
    return out


def fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny random policy, 3 short rounds")
    ap.add_argument("--model", default="smollm2-135m-instruct", help="a local folder or alias")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--lora", action="store_true", help="train LoRA adapters (default: full)")
    ap.add_argument("--lr", type=float, default=None, help="both roles' (1e-6 full, 2e-5 LoRA)")
    ap.add_argument(
        "--grad-clip",
        type=float,
        default=1.0,
        help="training.grad_clip (1e6: none, as when every gradient is below the clip)",
    )
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--regen-interval", type=int, default=1, help="run.regen_interval")
    ap.add_argument("--delay", type=int, default=0, help="training.designer_delay_steps")
    ap.add_argument("--envs", type=int, default=2, help="environments a round")
    ap.add_argument("--plays", type=int, default=8, help="unhinted plays per environment")
    ap.add_argument("--agent-tokens", type=int, default=48, help="an agent reply's most tokens")
    ap.add_argument("--design-tokens", type=int, default=128, help="a design's most tokens")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    variants = args.variants.split(",")
    if any(v not in VARIANTS for v in variants) or "current" not in variants:
        ap.error(f"--variants: some of {', '.join(VARIANTS)}, 'current' among them")
    if args.quick:
        args.rounds, args.agent_tokens, args.design_tokens = 3, 12, 24
    lr = args.lr if args.lr is not None else (2e-5 if args.lora else 1e-6)
    started = time.perf_counter()
    console = Console(width=150)
    workdir = Path(tempfile.mkdtemp(prefix="role_steps-"))
    try:
        model_path = args.model
        if args.quick:
            from spade.testing.scripted_designer import write_tiny_policy

            model_path = str(write_tiny_policy(workdir / "policy"))
            lr = args.lr if args.lr is not None else 1e-3
        from spade.inference.models import load_model_and_tokenizer, resolve_model

        resolved = resolve_model(ModelConfig(name_or_path=model_path))
        model, tokenizer = load_model_and_tokenizer(resolved, args.dtype, "cpu")
        model_path = str(workdir / "model")  # a plain folder: every update loads it again
        model.save_pretrained(model_path)
        tokenizer.save_pretrained(model_path)
        cfg = CampaignConfig.model_validate(
            {
                "model": {"name_or_path": model_path, "device": "cpu", "dtype": args.dtype},
                "storage": {"root": str(workdir / "store")},
                "evaluation": {"temperature": 1.0, "unhinted_plays": args.plays},
                "designer": {"temperature": 1.0},
                "scoring": {"rejected_reward": "graded"},
                "training": {
                    "lr": lr,
                    "designer_lr": lr,
                    "grad_clip": args.grad_clip,
                    "lora": {"enabled": args.lora},
                },
                "run": {"regen_interval": args.regen_interval},
            }
        )
        scale = env_reward_scale(args.plays, args.regen_interval)
        per_round = args.envs * args.plays
        agent_pool = sample_completions(
            model, tokenizer, AGENT_PROMPT, per_round, args.agent_tokens, args.seed
        )
        design_pool = sample_completions(
            model, tokenizer, DESIGNER_PROMPT, 2 * len(DEMO_DESIGN_ROUNDS[0]),
            args.design_tokens, args.seed + 1,
        )  # fmt: skip
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        del model
        console.print(f"sampled the completions ({time.perf_counter() - started:.0f} s)")
        rng = random.Random(args.seed)
        design_rewards = demo_design_rewards(cfg.scoring)
        chain: list[tuple[int, str, list[TrainSample]]] = []
        designs = 0
        for round_, role in schedule(args.rounds, args.regen_interval, args.delay):
            if role == "agent":
                samples = agent_batch(cfg, agent_pool, rng, args.envs, args.plays)
            else:
                rewards = design_rewards[designs % len(design_rewards)]
                samples = designer_batch(cfg, design_pool, rng, rewards)
                designs += 1
            chain.append((round_, role, samples))
        gen = torch.Generator().manual_seed(args.seed)
        n_weights = _trainable_weights(cfg)
        index = (
            torch.randperm(n_weights, generator=gen)[:QUANTILE_SAMPLE]
            if n_weights > QUANTILE_SAMPLE
            else None
        )
        rows: list[dict[str, Any]] = []
        for variant in variants:
            rows += run_chain(variant, cfg, chain, scale, workdir, index, console.print)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    summary = {v: summarise([r for r in rows if r["variant"] == v]) for v in variants}
    base_agent = summary["current"]["agent"]["step_rms_over_lr"]
    comparison = {
        v: {
            "designer_over_agent_step": ratio(
                s["designer"]["step_rms_over_lr"], s["agent"]["step_rms_over_lr"]
            ),
            "designer_over_agent_logprob_gain": ratio(
                s["designer"]["logprob_gain"], s["agent"]["logprob_gain"]
            ),
            "agent_step_over_current": ratio(s["agent"]["step_rms_over_lr"], base_agent),
        }
        for v, s in summary.items()
    }
    kind = "LoRA" if args.lora else "full"
    title = (
        f"Role steps on one AdamW: {args.model if not args.quick else 'tiny policy'} ({kind},"
        f" lr {lr:g}), {args.rounds} rounds, regen interval {args.regen_interval}, delay"
        f" {args.delay}, grad clip {args.grad_clip:g}; scaled x{scale:g}"
    )
    table = Table(title=title)
    columns = ["variant", "role", "n", "|A|", "grad norm", "clipped", "RMS step/lr",
               "median |dθ|/lr", "p90 |dθ|/lr", "cos(dθ,-g)", "g/√v", "Δlog-p"]  # fmt: skip
    for col in columns:
        table.add_column(col, justify="right")
    for v in variants:
        for role in ("agent", "designer"):
            s = summary[v][role]
            table.add_row(
                v, role, str(s["updates"]), fmt(s["advantage_abs_mean"], ".2f"),
                fmt(s["grad_norm"], ".3g"), fmt(s["clipped_share"], ".0%"),
                fmt(s["step_rms_over_lr"]), fmt(s["step_q50_over_lr"]),
                fmt(s["step_q90_over_lr"]), fmt(s["cos_step_own_grad"], "+.2f"),
                fmt(s["grad_over_sqrt_v"]), fmt(s["logprob_gain"], "+.2e"),
            )  # fmt: skip
    console.print(table)
    ratios = Table(title="Designer against agent, and each variant's agent against current")
    for col in (
        "variant",
        "designer/agent RMS step",
        "designer/agent Δlog-p",
        "agent step / current",
    ):
        ratios.add_column(col, justify="right")
    for v, c in comparison.items():
        ratios.add_row(
            v,
            fmt(c["designer_over_agent_step"], ".2f"),
            fmt(c["designer_over_agent_logprob_gain"], ".2f"),
            fmt(c["agent_step_over_current"], ".2f"),
        )
    console.print(ratios)
    scales = {
        "demo-cpu (5 plays, interval 1)": env_reward_scale(5, 1),
        "games-8gpu (8 plays, interval 4)": env_reward_scale(8, 4),
        "tooluse-8gpu (8 plays, interval 8)": env_reward_scale(8, 8),
        "this run": scale,
    }
    console.print("env_reward_scale: " + ", ".join(f"{k} {v:g}" for k, v in scales.items()))
    result = {
        "machine": machine() | {"torch": torch.__version__},
        "timestamp": timestamp(),
        "model": "tiny" if args.quick else args.model,
        "trainable_params": trainable,
        "settings": {
            k: getattr(args, k)
            for k in (
                "quick",
                "lora",
                "dtype",
                "grad_clip",
                "rounds",
                "regen_interval",
                "delay",
                "envs",
                "plays",
                "agent_tokens",
                "design_tokens",
                "seed",
            )
        }
        | {"lr": lr, "grad_clip": cfg.training.grad_clip, "scale": scale},
        "env_reward_scales": scales,
        "design_rewards": design_rewards,
        "rows": rows,
        "summary": summary,
        "comparison": comparison,
        "wall_seconds": time.perf_counter() - started,
    }
    write_json(args.out, result)
    console.print(f"wrote {args.out}")


def _trainable_weights(cfg: CampaignConfig) -> int:
    """How many weights the trainer trains (LoRA: the adapters), from a trainer built once."""
    from spade.training.run import build_trainer

    trainer, _ = build_trainer(cfg, "agent")
    return sum(p.numel() for p in trainer.engine.params)


if __name__ == "__main__":
    main()
