"""reasoning-gym held-out suite: procedural reasoning items on the paper's *hard* split.

Each item becomes a one-answer text environment: the first observation is the task header, the
question and an instruction to answer in ``\\boxed{...}``; the environment records the boxed
answer and ends the episode. Its own reward (exact match with the gold string) is provisional:
:meth:`ReasoningGymSuite.score` rescores the answer on the host with reasoning-gym's own
``dataset.score_answer``, because several of its scorers accept answers the gold string does not
(any valid cryptarithm mapping, any optimal Hanoi solution, numeric tolerance).

Safety: scoring runs on the host, so it may only pass the agent's text to scorers that never
evaluate it as code. Some reasoning-gym scorers do (``eval(answer)``, sympy's ``parse_expr``),
so only datasets on :data:`SAFE_DATASETS`, each with the reason its scorer was judged safe, can be
chosen or scored (tests/benchmarks/test_reasoning_gym.py also watches for compile/exec audit events
while scoring hostile answers). reasoning-gym itself is imported only when tasks are built or
scored: it is slow to import (~2 s) and the jail never sees it.
"""

from __future__ import annotations

import copy
import functools
import zlib
from typing import TYPE_CHECKING, Any

from spade.benchmarks.base import HeldoutTask, task_header
from spade.envs import extract_boxed
from spade.errors import ConfigValueError

if TYPE_CHECKING:
    from spade.records import Trajectory

SUITE_NAME = "reasoning_gym"

_DEFAULT = "base scorer: string equality, else substring length ratio"
_DECIMAL = "compute_decimal_reward: Decimal() of the answer, else string match"
_GRID = "per-line string/digit comparison with the solution grid"

# name -> (why its 0.1.25 scorer never evaluates the answer as code, the paper's hard config).
# The hard configs are the reasoning-gym paper's hard split (arXiv:2505.24760, App. A.3; in its
# repo: eval/yaml/hard/*.yaml, used by the SPADE reference as "rg:<name>-hard"). reasoning-gym
# 0.1.25 has no built-in "hard" preset, only per-attribute curriculum levels.
SAFE_DATASETS: dict[str, tuple[str, dict[str, Any]]] = {
    # math
    "basic_arithmetic": (_DEFAULT, dict(min_terms=5, max_terms=10, min_digits=2, max_digits=5)),
    "decimal_arithmetic": (
        "Decimal() of the answer, compared within a tolerance",
        dict(
            min_num_decimal_places=5,
            max_num_decimal_places=8,
            precision=10,
            min_terms=5,
            max_terms=8,
        ),
    ),
    "complex_arithmetic": (
        "string normalisation, then complex()/float() only",
        dict(
            min_real=-100,
            max_real=100,
            min_imag=-100,
            max_imag=100,
            operations_weights=[0.25, 0.25, 0.25, 0.25],
        ),
    ),
    "chain_sum": (_DECIMAL, dict(min_terms=5, max_terms=8, min_digits=4, max_digits=6)),
    "products": (_DECIMAL, dict(min_terms=4, max_terms=8, min_digits=4, max_digits=8)),
    "gcd": (_DEFAULT, dict(min_numbers=3, max_numbers=4, min_value=1000, max_value=10000)),
    "lcm": (_DEFAULT, dict(min_numbers=3, max_numbers=4, min_value=1000, max_value=10000)),
    "count_bits": (_DEFAULT, dict(min_n=1_000_000, max_n=100_000_000)),
    # logic
    "knights_knaves": (
        "splits the answer into (name, role) word pairs",
        dict(n_people=3, depth_constraint=3, width_constraint=3),
    ),
    "syllogism": (
        _DEFAULT,
        dict(allow_all=True, allow_no=True, allow_some=False, allow_some_not=False),
    ),
    "self_reference": ("string equality", dict(difficulty=5)),
    "aiw": (_DEFAULT, dict(task_type_weights=[0.5, 0.25, 0.25], max_entities=10)),
    "zebra_puzzles": ("lower-cased string equality", dict(num_people=5, num_characteristics=5)),
    "circuit_logic": (
        "string equality",
        dict(min_terms=10, max_terms=20, min_inputs=4, max_inputs=8),
    ),
    # algorithmic
    "word_sorting": (
        "re.split on commas, list comparison",
        dict(min_words=25, max_words=50, min_word_length=5, max_word_length=10),
    ),
    "base_conversion": (
        _DEFAULT,
        dict(min_base=9, max_base=18, min_value=10_000, max_value=100_000),
    ),
    "cryptarithm": (
        "split on ',' and '=', int() per letter, arithmetic on the puzzle's own words",
        dict(min_words=5, max_words=10),
    ),
    "letter_counting": (_DEFAULT, dict(min_words=25, max_words=50)),
    "caesar_cipher": (_DEFAULT, dict(min_rotation=15, max_rotation=25, min_words=15, max_words=25)),
    # games
    "mini_sudoku": (_GRID, dict(min_empty=6, max_empty=10)),
    "sudoku": (_GRID, dict(min_empty=30, max_empty=50)),
    "futoshiki": (
        _GRID,
        dict(min_board_size=6, max_board_size=7, min_difficulty=1, max_difficulty=2),
    ),
    "tower_of_hanoi": (
        "regex-parsed moves replayed on its own peg lists (one step per answer line)",
        dict(min_disks=5, max_disks=10, min_pegs=3, max_pegs=4),
    ),
    "maze": (_DEFAULT, dict(min_grid_size=25, max_grid_size=50, min_dist=10, max_dist=15)),
}

# Known-unsafe scorers, named so that asking for one says why it is refused.
REFUSED: dict[str, str] = {
    **dict.fromkeys(
        [
            "countdown",
            "puzzle24",
            "polynomial_multiplication",
            "simple_integration",
            "intermediate_integration",
        ],
        "its scorer runs sympy parse_expr (Python eval) on the answer",
    ),
    **dict.fromkeys(
        ["n_queens", "binary_matrix", "spiral_matrix", "string_insertion"],
        "its scorer calls eval() on the answer",
    ),
    "rush_hour": "its scorer loops as many times as a number in the answer says (hangs the host)",
}

# Interleaved by category, so that a small subset already spans math, logic, algorithmic, games.
DEFAULT_DATASETS: tuple[str, ...] = (
    "basic_arithmetic", "knights_knaves", "word_sorting", "mini_sudoku",
    "decimal_arithmetic", "syllogism", "base_conversion", "tower_of_hanoi",
    "complex_arithmetic", "self_reference", "cryptarithm", "maze",
)  # fmt: skip

_INSTRUCTION = (
    "Think it through, then end your reply with your final answer, in the format the question "
    "asks for, inside \\boxed{...}."
)

_ENV_TEMPLATE = '''"""reasoning-gym {dataset} item {index}: one boxed answer, recorded."""

from spade.envs import TextEnv

PROMPT = {prompt!r}
GOLD = {gold!r}


class ReasoningGymItemEnv(TextEnv):
    """Shows the question and ends on the first boxed answer.

    The reward is provisional (exact match with the gold string): the suite rescores the
    answer on the host with reasoning-gym's own scorer.
    """

    invalid_format_message = "Give your final answer inside \\\\boxed{{...}}."

    def __init__(self, max_turns: int = 1, **kwargs):
        super().__init__(max_turns=max_turns, **kwargs)

    def setup(self) -> str:
        return PROMPT

    def play(self, move: str) -> tuple[str, float, bool]:
        return "Answer recorded.", 1.0 if move == GOLD.strip() else 0.0, True

    def solution(self) -> list[str]:
        return ["\\\\boxed{{" + GOLD + "}}"]
'''


def check_datasets(names: list[str] | tuple[str, ...]) -> list[str]:
    """``names`` without repeats; ValueError for any not on :data:`SAFE_DATASETS`."""
    bad = [n for n in names if n not in SAFE_DATASETS]
    if bad:
        why = "; ".join(
            f"{n!r}: {REFUSED.get(n, 'not an audited reasoning-gym dataset')}" for n in bad
        )
        valid = ", ".join(sorted(SAFE_DATASETS))
        raise ConfigValueError(f"reasoning_gym subsets: {why}. Valid datasets: {valid}")
    return list(dict.fromkeys(names))


def dataset_seed(name: str, seed: int) -> int:
    """The reasoning-gym seed of ``name`` in the subset of ``seed``.

    Most datasets draw item i from ``Random(seed + i)``: a hash per dataset keeps the subsets of
    neighbouring suite seeds from sharing items (seed s, item 1 == seed s+1, item 0).
    """
    return zlib.crc32(f"{name}:{seed}".encode())


@functools.lru_cache(maxsize=64)
def _dataset(name: str, seed: int, size: int) -> Any:
    # One instance per (name, seed, size), shared by tasks() and score(): some load word lists.
    # ``meta`` keeps these three and the index, so any item can be regenerated from it.
    import reasoning_gym

    check_datasets([name])
    return reasoning_gym.create_dataset(name, seed=seed, size=size, **SAFE_DATASETS[name][1])


def _env_code(dataset: str, index: int, header: str, entry: dict[str, Any]) -> str:
    prompt = f"{header}\n{entry['question'].strip()}\n\n{_INSTRUCTION}"
    gold = str(entry["answer"])
    return _ENV_TEMPLATE.format(dataset=dataset, index=index, prompt=prompt, gold=gold)


class ReasoningGymSuite:
    """reasoning-gym items on the hard split, scored by reasoning-gym on the host."""

    name = SUITE_NAME
    default_max_turns = 1

    def tasks(self, size: int, seed: int, subsets: list[str]) -> list[HeldoutTask]:
        """``size`` items dealt round-robin over the datasets (defaults: DEFAULT_DATASETS)."""
        names = check_datasets(subsets or DEFAULT_DATASETS)
        counts = {n: len(range(i, size, len(names))) for i, n in enumerate(names)}
        out = []
        for k in range(size):
            name, index = names[k % len(names)], k // len(names)
            ds_seed = dataset_seed(name, seed)
            entry = _dataset(name, ds_seed, counts[name])[index]
            task_id = f"{name}-{seed}-{index}"
            header = task_header(SUITE_NAME, task_id)
            meta = {
                "dataset": name,
                "config": copy.deepcopy(SAFE_DATASETS[name][1]),
                "seed": ds_seed,
                "size": counts[name],
                "index": index,
                "entry": entry,
            }
            out.append(
                HeldoutTask(
                    suite=SUITE_NAME,
                    task_id=task_id,
                    code=_env_code(name, index, header, entry),
                    gold=("\\boxed{" + str(entry["answer"]) + "}",),
                    meta=meta,
                )
            )
        return out

    def score(self, task: HeldoutTask, trajectory: Trajectory) -> float:
        """reasoning-gym's score of the boxed answer the environment recorded (0 if none)."""
        if not trajectory.terminated or not trajectory.turns:
            return 0.0
        answer = extract_boxed(trajectory.turns[-1].action)
        if answer is None:
            return 0.0
        meta = task.meta
        # The allow-list is checked again here: only audited scorers ever see the agent's text.
        ds = _dataset(check_datasets([meta["dataset"]])[0], meta["seed"], meta["size"])
        try:
            # A copy: a scorer may write into the entry (knight_swap's stores board states).
            value = float(ds.score_answer(answer, copy.deepcopy(meta["entry"])))
        except Exception:  # a scorer choking on malformed text (int("abc")): a wrong answer
            return 0.0
        return min(1.0, max(0.0, value)) if value == value else 0.0  # NaN -> 0


SUITE = ReasoningGymSuite()
