"""Hand-written look-alikes of bundled examples: copies in disguise and small real variants.

The novelty check must call every copy a duplicate and every variant novel. Each is built from
the example's current source by exact replacements, so it follows the example as it changes.
"""

from __future__ import annotations

from spade.envs.examples import example_paths

EXAMPLES = {p.stem: p.read_text() for p in example_paths()}


def edited(origin: str, *changes: tuple[str, str]) -> str:
    code = EXAMPLES[origin]
    for old, new in changes:
        assert old in code, f"{origin} changed: {old!r} is gone"
        code = code.replace(old, new)
    return code


EXTRA_OPENINGS = """\
        for _ in range(3):  # a few extra openings make loops
            r, c = rng.choice(cells)
            d = rng.choice(["E", "S"])
            dr, dc = _STEP[d]
            if (r + dr, c + dc) in self.open and d not in self.open[(r, c)]:
                self.open[(r, c)].append(d)
                self.open[(r + dr, c + dc)].append(_BACK[d])
"""

# Copies: renamed identifiers, rewritten prose, docstrings, comments and hints; the same game.
COPIES = {
    "renamed code_breaker": (
        "code_breaker",
        edited(
            "code_breaker",
            ("CodeBreakerEnv", "VaultCrackerEnv"),
            ("self.code", "self.combination"),
            ("self.best", "self.top"),
            ("self.used", "self.tries_so_far"),
            ("Code breaker (logical deduction)", "Vault cracker"),
            ("secret code", "vault combination"),
            ("        self.length = length\n", "        self.length = length  # code length\n\n"),
        ),
    ),
    "re-commented code_breaker": (
        "code_breaker",
        edited(
            "code_breaker",
            ("class CodeBreakerEnv(TextEnv):", "class MastermindEnv(TextEnv):  # the game"),
            (
                '    """Guess a hidden code of distinct digits; each guess reports exact and misplaced digits.',
                '    """The player guesses a code; we answer with bulls and cows.',
            ),
        ),
    ),
    "renamed maze_walk": (
        "maze_walk",
        edited(
            "maze_walk",
            ("_STEP", "_DELTA"),
            ("_BACK", "_OPPOSITE"),
            ("_WORD", "_NAMES"),
            ("MazeWalkEnv", "LabyrinthEnv"),
            ("self.open", "self.doors"),
            ("self.used", "self.spent"),
            ("self.to_exit", "self.dist_exit"),
            ("def where", "def describe"),
            ("self.where()", "self.describe()"),
            ("nbrs", "candidates"),
        ),
    ),
    # Only constants changed: the same rules and text. A long example edited this little
    # differs in 8 tokens of 2,600: near-verbatim, though it plays differently.
    "retuned maze_walk": (
        "maze_walk",
        edited(
            "maze_walk",
            ("size: int = 5, moves: int = 22", "size: int = 6, moves: int = 24"),
            ("if 6 <= dist[cell] <= 10]", "if 8 <= dist[cell] <= 12]"),
        ),
    ),
    "re-hinted polynomial_probe": (
        "polynomial_probe",
        edited(
            "polynomial_probe",
            ("PolynomialProbeEnv", "HiddenCubicEnv"),
            (
                '"Evaluate f at distinct small points and solve the linear system they give "\n'
                '        "(finite differences help); f(0) is the constant term."',
                '"Ask for f(0), f(1), f(-1) and f(2), then solve for the coefficients."',
            ),
        ),
    ),
}

# Variants: small changes to the rules or the hidden state; a different game.
VARIANTS = {
    "letter code_breaker": (
        "code_breaker",
        edited(
            "code_breaker",
            ("CodeBreakerEnv", "LetterLockEnv"),
            ('"0123456789"', '"ABCDEFGH"'),
            ("distinct digits (0-9)", "distinct letters (A-H)"),
            ("\\\\boxed{{0123}}", "\\\\boxed{{ABCD}}"),
            ("not guess.isdigit()", 'not set(guess) <= set("ABCDEFGH")'),
            ('guess = move.replace(" ", "")', 'guess = move.replace(" ", "").upper()'),
            ("give {self.length} distinct digits", "give {self.length} distinct letters A-H"),
            ("how many digits", "how many letters"),
        ),
    ),
    "exact-only code_breaker": (
        "code_breaker",
        edited(
            "code_breaker",
            ("CodeBreakerEnv", "ExactMatchEnv"),
            ("length: int = 4, guesses: int = 10", "length: int = 3, guesses: int = 12"),
            (
                "right place (exact) and how many are in the code but elsewhere (misplaced). ",
                "right place, nothing more. ",
            ),
            ("        misplaced = len(set(guess) & set(self.code)) - exact\n", ""),
            ('"{exact} exact, {misplaced} misplaced"', '"{exact} in place"'),
        ),
    ),
    "quadratic polynomial_probe": (
        "polynomial_probe",
        edited(
            "polynomial_probe",
            ("PolynomialProbeEnv", "QuadraticProbeEnv"),
            ("queries: int = 5", "queries: int = 4"),
            ("self.degree = 3", "self.degree = 2"),
            ("range(-9, 10) if c != 0]", "range(-5, 6) if c != 0]"),
            (
                "[self.rng.randint(-9, 9) for _ in range(3)]",
                "[self.rng.randint(-20, 20) for _ in range(2)]",
            ),
            ("f(x) = a3*x^3 + a2*x^2 + a1*x + a0", "f(x) = a2*x^2 + a1*x + a0"),
            (
                "between -9 and 9 (a3 is not zero)",
                "a2 from -5 to 5 (not zero), a1, a0 from -20 to 20",
            ),
            ("answer a3, a2, a1, a0", "answer a2, a1, a0"),
            ("answer 1, -2, 0, 7", "answer 1, -2, 7"),
            ("if len(nums) != 4:", "if len(nums) != 3:"),
            ("exactly four integers", "exactly three integers"),
            ("if right == 4:", "if right == 3:"),
            ("{right} of 4 coefficients", "{right} of 3 coefficients"),
            ("return 0.5 * right / 4", "return 0.5 * right / 3"),
            ("right`` of 4 coefficients", "right`` of 3 coefficients"),
            ("for x in (0, 1, -1, 2)", "for x in (0, 1, -1)"),
        ),
    ),
    "loop-free bigger maze_walk": (
        "maze_walk",
        edited(
            "maze_walk",
            ("MazeWalkEnv", "BigMazeEnv"),
            ("size: int = 5, moves: int = 22", "size: int = 6, moves: int = 24"),
            (EXTRA_OPENINGS, ""),
            ("if 6 <= dist[cell] <= 10]", "if 8 <= dist[cell] <= 12]"),
        ),
    ),
}

_HUNT_CLUE = '        return f"My number is {direction} than {guess}."\n'
_CODE_CLUE = '        return f"{exact} exact, {misplaced} misplaced"\n'
_WHERE = (
    '        return f"You are at row {self.pos[0]}, column {self.pos[1]}. Open ways: {ways}."\n'
)
_OWNER_CLUE = """\
        if self.hidden[person] == pet:
            return f"Yes: {self.people[person]} owns the {self.pets[pet]}."
        return f"No: {self.people[person]} does not own the {self.pets[pet]}."
"""

# Clues that tell more than the parent's: good designs, novel on every seed. On a few seeds
# each can map one to one onto the parent's clue (the part added is constant there, or
# coincides with the old clue), which made them duplicates on some verifier seeds.
ADDED = {
    "number_hunt within 50": (
        "number_hunt",
        edited(
            "number_hunt",
            (
                _HUNT_CLUE,
                '        near = " It is within 50 of your guess." if abs(self.number - guess)'
                ' <= 50 else ""\n'
                '        return f"My number is {direction} than {guess}.{near}"\n',
            ),
        ),
    ),
    "number_hunt parity": (
        "number_hunt",
        edited(
            "number_hunt",
            (
                _HUNT_CLUE,
                '        parity = "even" if self.number % 2 == 0 else "odd"\n'
                '        return f"My number is {direction} than {guess}, and it is {parity}."\n',
            ),
        ),
    ),
    "code_breaker positions": (
        "code_breaker",
        edited(
            "code_breaker",
            (
                _CODE_CLUE,
                "        places = [str(i + 1) for i, (a, b) in enumerate(zip(guess, self.code))"
                " if a == b]\n"
                '        where = ", ".join(places) or "none"\n'
                '        return f"{exact} exact (positions {where}), {misplaced} misplaced"\n',
            ),
        ),
    ),
    "code_breaker exact sum": (
        "code_breaker",
        edited(
            "code_breaker",
            (
                _CODE_CLUE,
                "        total = sum(int(a) for a, b in zip(guess, self.code) if a == b)\n"
                '        return f"{exact} exact (adding up to {total}), {misplaced} misplaced"\n',
            ),
        ),
    ),
    "maze_walk distance": (
        "maze_walk",
        edited(
            "maze_walk",
            (
                _WHERE,
                "        steps = self.to_exit[self.pos]\n"
                "        return (\n"
                '            f"You are at row {self.pos[0]}, column {self.pos[1]}. Open ways:'
                ' {ways}."\n'
                '            f" The exit is {steps} steps away."\n'
                "        )\n",
            ),
        ),
    ),
    "polynomial_probe slope": (
        "polynomial_probe",
        edited(
            "polynomial_probe",
            (
                '        return f"f({x}) = {self.value(x)}"\n',
                "        rise = self.value(x + 1) - self.value(x)\n"
                '        return f"f({x}) = {self.value(x)}, and f rises by {rise} to x + 1"\n',
            ),
        ),
    ),
    "cargo_knapsack rank": (
        "cargo_knapsack",
        edited(
            "cargo_knapsack",
            (
                '        return f"Crate {crate}: weight {w} tons, value {v}."\n',
                "        rank = 1 + sum(value > v for value in self.values)\n"
                '        return f"Crate {crate}: weight {w} tons, value {v} (rank {rank} by'
                ' value)."\n',
            ),
        ),
    ),
    "ownership_riddle listed side": (
        "ownership_riddle",
        edited(
            "ownership_riddle",
            (
                _OWNER_CLUE,
                "        if self.hidden[person] == pet:\n"
                '            return f"Yes: {self.people[person]} owns the {self.pets[pet]}."\n'
                '        side = "later" if self.hidden[person] > pet else "earlier"\n'
                '        return f"No: {self.people[person]} does not own the {self.pets[pet]};'
                ' their pet is listed {side}."\n',
            ),
        ),
    ),
}

# The same clues reworded, one to one, with a change of code (so that play judges them, not
# the source check): duplicates on every seed.
REWORDED = {
    "number_hunt too low": (
        "number_hunt",
        edited(
            "number_hunt",
            (
                _HUNT_CLUE,
                "        word = 'low' if direction == 'higher' else 'high'\n"
                '        return f"Too {word}: not {guess}."\n',
            ),
        ),
    ),
    "code_breaker bulls": (
        "code_breaker",
        edited(
            "code_breaker",
            (_CODE_CLUE, '        return "bulls {}, cows {}".format(exact, misplaced)\n'),
        ),
    ),
    "maze_walk rooms": (
        "maze_walk",
        edited(
            "maze_walk",
            (
                _WHERE,
                '        return f"Room ({self.pos[0]}, {self.pos[1]}); doors: {ways.upper()}."\n',
            ),
        ),
    ),
    "ownership_riddle indeed": (
        "ownership_riddle",
        edited(
            "ownership_riddle",
            (
                _OWNER_CLUE,
                "        name, animal = self.people[person], self.pets[pet]\n"
                "        if self.hidden[person] == pet:\n"
                '            return f"Indeed, the {animal} is {name}\'s."\n'
                '        return f"Nope, {name} has no {animal}."\n',
            ),
        ),
    ),
}
