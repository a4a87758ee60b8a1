"""Settings of the environment verifier (the campaign's ``sandbox.verify`` section)."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

DEFAULT_GARBAGE_ACTIONS = [
    "",
    "   ",
    "\\boxed{}",
    "\\boxed{",
    "}}}{{{",
    "\\boxed{\\boxed{\\boxed{1}}}",
    "<tool_call>{not json</tool_call>",
    '<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>',
    '<tool_call>{"name": 3, "arguments": []}</tool_call>',
    "<answer></answer>",
    "é∑😀\x00\u202e",
    "-1e309 NaN null None",
    "x" * 20000,
]

WaivableCheck = Literal[
    "seed_dependence", "informative", "winnable", "leaks_answer", "perverse_credit", "novelty"
]
"""The checks this project adds beyond the reference's acceptance gate (the reference accepts
fixed-instance environments and does not look for duplicates): the only ones an import may
waive (``spade.verify.checks.CHECKS`` names them; a test holds the two lists together)."""


class VerifyConfig(BaseModel):
    """How hard the verifier pushes a design before accepting it."""

    model_config = ConfigDict(extra="forbid")

    seed: int = Field(
        1234,
        ge=0,
        le=2**32 - 1,
        description="Seed of the instance the checks play (and of the random actions).",
    )
    max_turns: int = Field(
        25,
        ge=1,
        le=1000,
        description=(
            "Turn bound every episode must respect; passed to the constructor. A campaign plays"
            " designs with evaluation.max_turns instead (the game is built and cut off with"
            " that bound): with a smaller evaluation bound, a design whose solution needs more"
            " turns is accepted here but cannot be won in evaluation (it scores as too hard)."
        ),
    )
    reward_min: float = Field(
        -1.0, ge=-1e6, le=0.0, description="Lowest reward a step may return (finite)."
    )
    reward_max: float = Field(
        1.0, ge=0.0, le=1e6, description="Highest reward a step may return (finite)."
    )
    success_threshold: float = Field(
        1.0,
        gt=0.0,
        le=1.0,
        description="A terminated episode whose last reward is at least this reached the goal.",
    )
    random_episodes: int = Field(
        4,
        ge=0,
        le=100,
        description="Episodes of random actions played by the non-triviality check.",
    )
    max_random_win_rate: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description=(
            "Largest share of random episodes allowed to reach the goal. 0: one random win"
            " rejects the design (no bundled example is won by random play, over 12 seeds x 8"
            " episodes). Empty actions never may, whatever this says."
        ),
    )
    leak_seeds: int = Field(
        8,
        ge=0,
        le=64,
        description=(
            "Seeds (seed, seed + 1, ...) the leaks_answer check plays its readers on (policies"
            " that submit a function of values seen in the task text or the answer to one probe,"
            " fitted on other seeds): a reader that wins on all of them but one in eight (7 of 8;"
            " 4 of 4) leaks the answer. 0 turns the check off."
        ),
    )
    leak_fit_seeds: int = Field(
        8,
        ge=2,
        le=64,
        description=(
            "Seeds after the leak seeds on which the leaks_answer check fits its readers: a"
            " function from the values seen to the solution's answer must hold on all of them"
            " but one in eight before it is played on the leak seeds (each costs a reset, a"
            " solution() and two calls per probe)."
        ),
    )
    player_seeds: int = Field(
        8,
        ge=0,
        le=64,
        description=(
            "Seeds (seed, seed + 1, ...) the winnable check plays a design on with the"
            " observation-only player of the bundled example it varies (spade/verify/players/:"
            " it reads only what it is told): the player must win all of them but one in eight"
            " (7 of 8), or lose no more than one in eight beyond what it loses in that example,"
            " so a clue that lies or is noise fails. A design whose feedback the player does not"
            " read, or that varies no bundled example, passes with a note. 0 turns the check off."
        ),
    )
    max_miss_credit: float = Field(
        0.8,
        ge=0.0,
        le=1.0,
        description=(
            "The most the perverse_credit check lets a miss of the answer earn beyond what the"
            " design's parent pays the same miss: a rewrite may add honest closeness credit to a"
            " parent that pays misses 0, up to this. Without a parent, a design that pays every"
            " miss more than this on all of the credit_seeds pays nearly a win whatever the"
            " answer; one miss may earn more (cargo_knapsack pays a load 99% of the best 0.99)."
            " The bundled examples pay a miss at most 0.8 whatever it is (order_fulfillment: four"
            " of five checks passed, the total misreported)."
        ),
    )
    credit_seeds: int = Field(
        8,
        ge=1,
        le=64,
        description=(
            "Seeds (seed, seed + 1, ...) on which the perverse_credit check misses the solution's"
            " answer, on the design and its parent: a credit that pays a wrong answer as a win,"
            " or a farther miss more, on some instances only (a number that is a multiple of 4)"
            " is found on one of them. Each costs a few plays per seed on both games."
        ),
    )
    max_code_bytes: int = Field(
        200_000, ge=100, le=10_000_000, description="Largest source accepted (bytes)."
    )
    garbage_actions: list[str] = Field(
        default_factory=lambda: list(DEFAULT_GARBAGE_ACTIONS),
        description="Malformed actions every environment must survive.",
    )
    seed_probe_count: int = Field(
        3,
        ge=0,
        le=32,
        description=(
            "Seeds (seed, seed + 1, ...) the seed-dependence check resets with: an environment"
            " whose first observation and solution() are the same for all of them is one fixed"
            " instance, not an environment. The novelty check plays the same seeds. 0 turns the"
            " seed-dependence check off (novelty then plays `seed` alone); 1 is not allowed."
        ),
    )
    max_similarity: float = Field(
        0.99,
        ge=0.5,
        le=1.0,
        description=(
            "A design whose normalised source (no comments, docstrings or layout; its own"
            " identifiers made one placeholder) has at least this token similarity (difflib"
            " ratio) with a reference, and differs from it in literals only (numbers, strings),"
            " is a duplicate: fewer than ~1 token in 100 differs beyond renaming, retuning and"
            " rewording. A change of the code itself that small (a rule method rewritten) is"
            " judged by side-by-side play instead. Measured on bundled examples: copies"
            " (renamed, re-commented, constants retuned) 0.997-1.000, small real variants"
            " 0.953-0.975, two different examples at most 0.60."
        ),
    )
    similarity_max_tokens: int = Field(
        6000,
        ge=100,
        le=100_000,
        description=(
            "Tokens of each source the similarity compares (the first ones): bounds difflib's"
            " quadratic worst case. The bundled examples have 400-1,500 tokens."
        ),
    )
    behaviour_references: int = Field(
        2,
        ge=0,
        le=32,
        description=(
            "References, the most similar by source first, that the novelty check also plays"
            " side by side with the design (same seeds, same actions); identical observations"
            " throughout make the design a duplicate. 0: compare sources only."
        ),
    )
    behaviour_random_episodes: int = Field(
        2,
        ge=0,
        le=20,
        description="Episodes of random actions per seed in that side-by-side play.",
    )
    behaviour_confirm_seeds: int = Field(
        8,
        ge=0,
        le=64,
        description=(
            "More seeds (after the probe seeds) that a design playing like a reference on the"
            " probe seeds plays next, with near misses of every seed's solution, before it is"
            ' called a duplicate: a clue that adds information ("within 50" when close) can'
            " map one to one with the reference's on three seeds. Only suspected copies pay"
            " for it. 0: no more seeds (the reference's own solution and the near misses are"
            " still played on the probe seeds)."
        ),
    )
    waive: list[WaivableCheck] = Field(
        default_factory=list,
        description=(
            "Checks whose judgement does not reject an environment (for imported pools: the"
            " reference accepts fixed-instance environments). The check still runs; a failure"
            " it waives is kept in the verdict marked waived, and later checks run. A crash or"
            " limit inside the check is never waived."
        ),
    )

    @model_validator(mode="after")
    def _reward_range(self) -> Self:
        if not self.reward_min < self.reward_max:
            raise ValueError("reward_min must be below reward_max")
        if self.success_threshold > self.reward_max:  # no design could ever reach the goal
            raise ValueError("success_threshold must not exceed reward_max")
        if self.seed_probe_count == 1:  # one seed cannot show that the instance depends on it
            raise ValueError("seed_probe_count must be 0 (off) or at least 2")
        return self

    @property
    def probe_seeds(self) -> list[int]:
        """The seeds the seed-dependence and novelty checks play (``seed`` first)."""
        return [(self.seed + i) % 2**32 for i in range(max(1, self.seed_probe_count))]
