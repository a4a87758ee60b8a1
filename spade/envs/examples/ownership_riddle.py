"""Ownership riddle (logical_deduction): find who owns which pet from clues and yes/no questions."""

import itertools
import re
from collections.abc import Callable

from spade.envs import TextEnv

_PEOPLE = ["Ana", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun"]
_PETS = ["cat", "dog", "fish", "owl", "rabbit", "parrot", "turtle", "hamster"]


class OwnershipRiddleEnv(TextEnv):
    """Five people each own a different pet; the clues leave several possibilities open.

    Hidden state: the assignment (the clues are true of it but consistent with 3-6 assignments).
    The agent may ask up to five "does X own the Y?" questions, each answered by ``clue``.
    Partial reward: one final answer scores the share of people matched to the right pet.
    """

    skill = "logical_deduction"
    hint = (
        "First list every assignment consistent with the clues, then ask questions that split "
        "the remaining possibilities evenly."
    )

    def __init__(self, max_turns: int = 25, questions: int = 5, **kwargs):
        super().__init__(max_turns=max_turns, **kwargs)
        self.questions = questions

    def statement(self) -> tuple[str, Callable[[tuple[int, ...]], bool]]:
        """A random statement for the opening's clues, and the test of an assignment it makes."""
        p, q = self.rng.sample(range(5), 2)
        x, y = self.rng.sample(range(5), 2)
        kind = self.rng.choice(["not", "either", "if", "neither"])
        name, pet = self.people, self.pets
        if kind == "not":
            return f"{name[p]} does not own the {pet[x]}.", lambda s: s[p] != x
        if kind == "either":
            return f"{name[p]} owns either the {pet[x]} or the {pet[y]}.", lambda s: s[p] in (x, y)
        if kind == "if":
            text = f"If {name[p]} owns the {pet[x]}, then {name[q]} owns the {pet[y]}."
            return text, lambda s: s[p] != x or s[q] == y
        return (
            f"Neither {name[p]} nor {name[q]} owns the {pet[x]}.",
            lambda s: x not in (s[p], s[q]),
        )

    def setup(self) -> str:
        self.people = self.rng.sample(_PEOPLE, 5)
        self.pets = self.rng.sample(_PETS, 5)
        perms = list(itertools.permutations(range(5)))
        self.hidden = self.rng.choice(perms)
        for _ in range(200):
            clues, left = [], perms
            while len(left) > 6:
                text, test = self.statement()
                kept = [s for s in left if test(s)]
                if test(self.hidden) and len(kept) < len(left):
                    clues.append(text)
                    left = kept
            if len(left) >= 3:
                break
        self.clues, self.candidates, self.used = clues, left, 0
        lines = "\n".join(f"- {c}" for c in clues)
        return (
            f"{', '.join(self.people)} each own exactly one of these pets, all different: "
            f"{', '.join(self.pets)}. Clues:\n{lines}\nThe clues do not settle everything. Ask "
            f"up to {self.questions} yes/no questions like \\boxed{{ask {self.people[0]} "
            f"{self.pets[0]}}}, then answer once: \\boxed{{"
            + ", ".join(f"{n}=..." for n in self.people)
            + "}."
        )

    def clue(self, person: int, pet: int) -> str:
        """What the player is told when asking whether self.people[person] owns self.pets[pet]
        (indices from 0 to 4)."""
        if self.hidden[person] == pet:
            return f"Yes: {self.people[person]} owns the {self.pets[pet]}."
        return f"No: {self.people[person]} does not own the {self.pets[pet]}."

    def find(self, words: list[str], text: str) -> list[int]:
        return [i for i, w in enumerate(words) if re.search(rf"\b{w}\b", text, re.IGNORECASE)]

    def play(self, move: str) -> tuple[str, float, bool]:
        if move.lower().startswith("ask"):
            who, what = self.find(self.people, move), self.find(self.pets, move)
            if len(who) != 1 or len(what) != 1:
                return "Ask about exactly one person and one pet.", 0.0, False
            if self.used >= self.questions:
                return "No questions left; give your answer.", 0.0, False
            self.used += 1
            left = self.questions - self.used
            return f"{self.clue(who[0], what[0])} {left} questions left.", 0.0, False
        pairs = re.findall(r"([A-Za-z]+)\s*[=:]\s*([A-Za-z]+)", move)
        guess = {}
        for person, pet in pairs:
            who, what = self.find(self.people, person), self.find(self.pets, pet)
            if len(who) == 1 and len(what) == 1:
                guess[who[0]] = what[0]
        if len(guess) == 5:
            right = sum(guess[p] == self.hidden[p] for p in range(5))
            if right == 5:
                return "Exactly right!", 1.0, True
            return f"{right} of 5 people are matched to the right pet.", right / 5, True
        return "Write \\boxed{ask Person pet} or name a pet for all five people.", 0.0, False

    def solution(self) -> list[str]:
        # questions that split what the clues leave open most evenly (the answer each gets is
        # known here) until one assignment is left, then that assignment
        asks: list[str] = []
        left = self.candidates
        while len(left) > 1 and len(asks) < self.questions:
            p, x = min(
                itertools.product(range(5), range(5)),
                key=lambda q: abs(2 * sum(s[q[0]] == q[1] for s in left) - len(left)),
            )
            asks.append(f"\\boxed{{ask {self.people[p]} {self.pets[x]}}}")
            left = [s for s in left if (s[p] == x) == (self.hidden[p] == x)]
        pairs = ", ".join(f"{self.people[p]}={self.pets[x]}" for p, x in enumerate(self.hidden))
        return [*asks, "\\boxed{" + pairs + "}"]
