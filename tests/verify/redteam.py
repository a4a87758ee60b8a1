"""A red team for the verifier: designs written as the designer writes them, with the verdict a
careful reviewer would give from the player's side (issue 49).

Each design rewrites one method of a bundled example (the clue, the credit, the opening in
setup(), the rules in play()) or splices a rule from another example into it. It is built from
the example's current source by exact replacements, each of which must occur once, so it
follows the example as it changes. Its kind, a reviewer's one-line reason and the expected
verdict ("keep" or "reject") come with it; the expected verdicts answer three questions about
the game, not about what the verifier does: can it be won by playing (not by reading the answer,
not by luck), does its score reward getting closer, is it new.
"""

from __future__ import annotations

from typing import NamedTuple

from spade.envs.examples import example_paths

EXAMPLES = {p.stem: p.read_text() for p in example_paths()}

LEAK = "answer in another form"
CREDIT = "credit that rewards the wrong thing"
FIXED = "one answer behind varied text"
LIE = "clue that lies or is noise"
GOOD = "good design"
KINDS = (LEAK, CREDIT, FIXED, LIE, GOOD)


class Design(NamedTuple):
    name: str
    parent: str  # the bundled example's stem
    kind: str
    reason: str  # the reviewer's one line
    expected: str  # "keep" or "reject"
    code: str


def edited(origin: str, *changes: tuple[str, str]) -> str:
    """The example ``origin`` with each ``old`` (present exactly once) replaced by ``new``."""
    code = EXAMPLES[origin]
    for old, new in changes:
        assert code.count(old) == 1, f"{origin} changed: {old!r} is not there exactly once"
        code = code.replace(old, new)
    return code


def bad(name: str, parent: str, kind: str, reason: str, *changes: tuple[str, str]) -> Design:
    return Design(name, parent, kind, reason, "reject", edited(parent, *changes))


def good(name: str, parent: str, reason: str, *changes: tuple[str, str]) -> Design:
    return Design(name, parent, GOOD, reason, "keep", edited(parent, *changes))


# The methods and lines the designs rewrite, as they read in the examples today.
HUNT_CLUE = '        return f"My number is {direction} than {guess}."\n'
HUNT_DIRECTION = '        direction = "higher" if self.number > guess else "lower"\n'
HUNT_CREDIT = "        return 0.5 * (1 - distance / self.top)\n"
HUNT_NUMBER = "        self.number = self.rng.randint(1, self.top)\n"
CODE_CLUE = '        return f"{exact} exact, {misplaced} misplaced"\n'
CODE_CREDIT = "        return 0.5 * self.best / self.length\n"
POLY_CLUE = '        return f"f({x}) = {self.value(x)}"\n'
POLY_CREDIT = "        return 0.5 * right / 4\n"
POLY_USED = "        self.used = 0\n        return (\n"
SEQ_REVEAL = 'f"t({n}) = {self.terms[n - 1]}. {self.asks - self.used} reveals left.",'
SEQ_CREDIT = "right / 3, True"
SWITCH_CLUE = r'        return f"Switches {ups}\nLamps {lit}"'
SWITCH_CREDIT = "right / 6, True"
CARGO_CLUE = "        w, v = self.weights[crate - 1], self.values[crate - 1]\n"
MAZE_WAYS = '        ways = ", ".join(_WORD[d] for d in "NESW" if d in self.open[self.pos])\n'

LEAKS = [
    bad(
        "hunt mirrored number",
        "number_hunt",
        LEAK,
        "the first clue prints the number with its digits reversed: one probe, then read it",
        (
            HUNT_CLUE,
            "        mirror = str(self.number)[::-1]\n"
            '        return f"My number is {direction} than {guess}. In the mirror it reads {mirror}."\n',
        ),
    ),
    bad(
        "hunt dial offset in the opening",
        "number_hunt",
        LEAK,
        "the opening gives the number plus 137 and says so: won by subtraction, no guessing",
        (
            ' You have"\n            f" {self.guesses} guesses."',
            ' You have"\n            f" {self.guesses} guesses. The lock dial reads'
            ' {self.number + 137}, always 137 above my number."',
        ),
    ),
    bad(
        "hunt hex checksum",
        "number_hunt",
        LEAK,
        "every clue carries the number in hexadecimal as a 'checksum'",
        (
            HUNT_CLUE,
            '        return f"My number is {direction} than {guess} (checksum {self.number:#x})."\n',
        ),
    ),
    bad(
        "hunt sum with the guess",
        "number_hunt",
        LEAK,
        "the clue adds the guess and the number: any one guess gives the number by a subtraction",
        (
            HUNT_CLUE,
            '        return f"My number is {direction} than {guess}; together they make {self.number + guess}."\n',
        ),
    ),
    bad(
        "code spelled in the opening",
        "code_breaker",
        LEAK,
        "the opening spells the code's digits in order as words",
        (
            "        self.best = 0\n",
            '        words = "zero one two three four five six seven eight nine".split()\n'
            '        self.hum = " ".join(words[int(d)] for d in self.code)\n'
            "        self.best = 0\n",
        ),
        ('f"I picked a secret code', 'f"The vault hums: {self.hum}. I picked a secret code'),
    ),
    bad(
        "code read backwards",
        "code_breaker",
        LEAK,
        "after one guess the clue shows the code reversed",
        (
            CODE_CLUE,
            '        return f"{exact} exact, {misplaced} misplaced (the dial, read backwards: {self.code[::-1]})"\n',
        ),
    ),
    bad(
        "polynomial coefficients backwards",
        "polynomial_probe",
        LEAK,
        "the first evaluation lists the coefficients from a0 to a3",
        (
            POLY_CLUE,
            '        gauge = ", ".join(str(c) for c in reversed(self.coeffs))\n'
            '        return f"f({x}) = {self.value(x)} (gauge: {gauge})"\n',
        ),
    ),
    bad(
        "polynomial sums and differences",
        "polynomial_probe",
        LEAK,
        "the opening gives a3+a2, a3-a2, a1+a0, a1-a0, which pin every coefficient: no probe needed",
        (
            POLY_USED,
            "        self.used = 0\n        a3, a2, a1, a0 = self.coeffs\n        return (\n",
        ),
        (
            '            "I hid a polynomial',
            '            f"Gauges: a3+a2 = {a3 + a2}, a3-a2 = {a3 - a2}, a1+a0 = {a1 + a0},'
            ' a1-a0 = {a1 - a0}. "\n            "I hid a polynomial',
        ),
    ),
    bad(
        "sequence gaps to the targets",
        "sequence_oracle",
        LEAK,
        "one reveal also gives each target minus the revealed term: the three answers by addition",
        (
            SEQ_REVEAL,
            "f\"t({n}) = {self.terms[n - 1]}. Gaps to your targets: {', '.join(str(self.terms[i - 1]"
            ' - self.terms[n - 1]) for i in self.targets)}. {self.asks - self.used} reveals left.",',
        ),
    ),
    bad(
        "switchboard panel serial",
        "switchboard",
        LEAK,
        "the panel shows a serial that is each lamp's switch minus one: the wiring without experiments",
        (
            SWITCH_CLUE,
            '        serial = "".join(str(c - 1) for c in self.control)\n'
            r'        return f"Switches {ups}\nLamps {lit}\nPanel serial {serial}"',
        ),
    ),
    bad(
        "order total in cents",
        "order_fulfillment",
        LEAK,
        "the task text gives the total in cents and the short SKUs: nothing left to look up",
        (
            '            f"Order {self.target} must ship today.',
            "            f\"(Desk note: {self.total} cents in all; low stock: {', '.join(self.short)}.) \"\n"
            '            f"Order {self.target} must ship today.',
        ),
    ),
]

CREDITS = [
    bad(
        "hunt misses paid nearly a win",
        "number_hunt",
        CREDIT,
        "any miss earns at least 0.9: a player who never finds the number is paid almost a win",
        (HUNT_CREDIT, "        return 0.9 + 0.09 * (1 - distance / self.top)\n"),
    ),
    bad(
        "hunt pays only far misses",
        "number_hunt",
        CREDIT,
        "only misses farther than half the range are paid, and more the farther",
        (
            HUNT_CREDIT,
            "        return 0.5 * distance / self.top if distance > self.top // 2 else 0.0\n",
        ),
    ),
    bad(
        "hunt reversed on some numbers",
        "number_hunt",
        CREDIT,
        "when the number is a multiple of 4 a farther miss is paid more",
        (
            HUNT_CREDIT,
            "        if self.number % 4 == 0:  # the lucky quarter pays the bold guesses\n"
            "            return 0.5 * distance / self.top\n"
            "        return 0.5 * (1 - distance / self.top)\n",
        ),
    ),
    bad(
        "hunt thresholds below one",
        "number_hunt",
        CREDIT,
        "a whole-number distance compared with 0.01 and 0.05: every miss scores 0, closeness is never paid",
        (
            HUNT_CREDIT,
            "        if distance < 0.01:\n            return 0.5\n"
            "        if distance < 0.05:\n            return 0.25\n        return 0.0\n",
        ),
    ),
    bad(
        "code flat credit",
        "code_breaker",
        CREDIT,
        "0.45 whatever the guesses were: running out the guesses with junk pays as much as near misses",
        (CODE_CREDIT, "        return 0.45\n"),
    ),
    bad(
        "code pays no progress",
        "code_breaker",
        CREDIT,
        "0.4 with no digit ever in place: empty plays are paid where the parent pays 0",
        (CODE_CREDIT, "        return 0.4 + 0.1 * self.best / self.length\n"),
    ),
    bad(
        "polynomial three of four is a win",
        "polynomial_probe",
        CREDIT,
        "a wrong answer with 3 of 4 coefficients right is paid a full win",
        (
            POLY_CREDIT,
            "        if right >= 3:\n            return 1.0\n        return 0.5 * right / 4\n",
        ),
    ),
    bad(
        "polynomial count equals a coefficient",
        "polynomial_probe",
        CREDIT,
        "a wrong answer wins when the count right equals |a0|: with a0 = 0 an all-wrong answer wins",
        (POLY_CREDIT, "        return 1.0 if right == abs(self.coeffs[-1]) else 0.5 * right / 4\n"),
    ),
    bad(
        "polynomial credit of a millionth",
        "polynomial_probe",
        CREDIT,
        "about 1e-6 whatever happens: the partial score means nothing",
        (POLY_CREDIT, "        return 1e-06\n"),
    ),
    bad(
        "sequence pays the wrong predictions",
        "sequence_oracle",
        CREDIT,
        "the fewer predictions right the more it pays: all three wrong scores 0.9",
        (SEQ_CREDIT, "(3 - right) / 3 * 0.9, True"),
    ),
    bad(
        "switchboard five of six is a win",
        "switchboard",
        CREDIT,
        "a wiring with one lamp wrong is paid 1.0, as a win",
        (SWITCH_CREDIT, "1.0 if right >= 5 else right / 6, True"),
    ),
    bad(
        "cargo pays an overweight load",
        "cargo_knapsack",
        CREDIT,
        "a load the ship cannot carry is paid up to 0.9: loading every crate earns 0.9",
        (
            "                    0.0,\n                    True,\n",
            "                    min(0.9, value / self.best),\n                    True,\n",
        ),
    ),
    bad(
        "maze pays standing still",
        "maze_walk",
        CREDIT,
        "bumping into walls until the moves run out is paid 0.45, where the parent pays 0",
        ("max(0.0, 0.5 * covered)", "0.45 + 0.05 * max(0.0, covered)"),
    ),
    bad(
        "bank pays doing nothing",
        "bank_transfer",
        CREDIT,
        "an answer with no payment scores 0.6, more than a right payment without reference (0.33)",
        ("        score = 0.0\n", "        score = 0.6\n"),
    ),
]

FIXED_ANSWERS = [
    bad(
        "hunt one number, many keepers",
        "number_hunt",
        FIXED,
        "the number is 613 on every seed; only the keeper's name changes",
        (
            HUNT_NUMBER,
            '        self.keeper = self.rng.choice(["Ada", "Bo", "Cy", "Dee", "Eve", "Finn", "Gil"])\n'
            "        self.number = 613\n",
        ),
        ('f"I am thinking of a whole number', 'f"{self.keeper} is thinking of a whole number'),
    ),
    bad(
        "code one code, many vaults",
        "code_breaker",
        FIXED,
        "the code is 4071 on every seed; only the vault number in the text changes",
        (
            '        self.code = "".join(self.rng.sample("0123456789", self.length))\n',
            "        self.vault = self.rng.randint(100, 999)\n"
            '        self.code = "4071"[: self.length]\n',
        ),
        ('f"I picked a secret code', 'f"Vault {self.vault}: I picked a secret code'),
    ),
    bad(
        "polynomial one cubic, many planets",
        "polynomial_probe",
        FIXED,
        "the cubic is 2x^3 - 3x^2 + 5 on every seed; only the planet named changes",
        (
            "        self.coeffs = [self.rng.choice(nonzero)] + [self.rng.randint(-9, 9) for _ in range(3)]\n",
            '        self.planet = self.rng.choice(["Vega", "Lyra", "Orion", "Draco", "Cygnus"])\n'
            "        self.coeffs = [2, -3, 0, 5]\n",
        ),
        (
            '            "I hid a polynomial',
            '            f"The probe on {self.planet} hid a polynomial',
        ),
    ),
    bad(
        "switchboard one wiring",
        "switchboard",
        FIXED,
        "the lamps follow switches 3 1 4 1 5 2 on every seed; only the starting panel changes",
        (
            "        self.control = [rng.randint(1, 6) for _ in _LAMPS]\n",
            "        self.control = [3, 1, 4, 1, 5, 2]\n",
        ),
    ),
    bad(
        "cargo one manifest, many ships",
        "cargo_knapsack",
        FIXED,
        "the crates are the same on every seed, so the best load is; only the ship's name changes",
        (
            "        n = self.count\n",
            '        n = self.count\n        self.ship = self.rng.choice(["Osprey", "Tern", "Petrel", "Skua"])\n',
        ),
        (
            "            self.weights = [self.rng.randint(2, 12) for _ in range(n)]\n",
            "            self.weights = [7, 3, 9, 4, 12, 5, 8, 2, 6, 10][:n]\n",
        ),
        (
            "            self.values = [self.rng.randint(3, 30) for _ in range(n)]\n",
            "            self.values = [12, 9, 25, 8, 30, 14, 20, 5, 11, 17][:n]\n",
        ),
        ("f\"Your ship's hold carries", "f\"The {self.ship}'s hold carries"),
    ),
    bad(
        "sequence one sequence, many oracles",
        "sequence_oracle",
        FIXED,
        "t(n) = 3n^2 - 2n + 5 and the targets 14, 17, 20 on every seed; only the oracle's name changes",
        (
            "        self.terms = terms\n",
            "        self.terms = [3 * n * n - 2 * n + 5 for n in range(1, 21)]\n",
        ),
        (
            "        self.targets = sorted(rng.sample(range(13, 21), 3))\n",
            '        self.oracle = rng.choice(["Ida", "Oz", "Uma", "Rex", "Sol"])\n'
            "        self.targets = [14, 17, 20]\n",
        ),
        ('f"A hidden integer sequence', 'f"Oracle {self.oracle} keeps a hidden integer sequence'),
    ),
]

LIES = [
    bad(
        "hunt inverted on even numbers",
        "number_hunt",
        LIE,
        "higher and lower are swapped whenever the number is even: bisection walks away from it",
        (
            HUNT_DIRECTION,
            HUNT_DIRECTION
            + "        if self.number % 2 == 0:  # the even-numbered locks are wired backwards\n"
            '            direction = "lower" if direction == "higher" else "higher"\n',
        ),
    ),
    bad(
        "hunt random every third turn",
        "number_hunt",
        LIE,
        "every third clue is a coin flip, so no clue can be trusted",
        (
            HUNT_DIRECTION,
            HUNT_DIRECTION + "        if self.turn % 3 == 0:  # static on the line\n"
            '            direction = self.rng.choice(["higher", "lower"])\n',
        ),
    ),
    bad(
        "code counts swapped on odd openers",
        "code_breaker",
        LIE,
        "exact and misplaced are swapped when the guess starts with an odd digit",
        (
            CODE_CLUE,
            '        if guess[0] in "13579":  # odd dials read the other way round\n'
            "            exact, misplaced = misplaced, exact\n" + CODE_CLUE,
        ),
    ),
    bad(
        "polynomial constant whatever the point",
        "polynomial_probe",
        LIE,
        "every evaluation reports a0 as f(x): a3, a2, a1 can only be guessed",
        (POLY_CLUE, '        return f"f({x}) = {self.coeffs[-1]}"\n'),
    ),
    bad(
        "sequence noisy even terms",
        "sequence_oracle",
        LIE,
        "even-numbered terms are revealed off by one at random: differences and ratios are wrong",
        (
            SEQ_REVEAL,
            'f"t({n}) = {self.terms[n - 1] + (self.rng.choice([-1, 1]) if n % 2 == 0 else 0)}.'
            ' {self.asks - self.used} reveals left.",',
        ),
    ),
    bad(
        "switchboard lamps A and B swapped",
        "switchboard",
        LIE,
        "the panel labels lamp A's state as B and B's as A: a careful player names the wrong switches",
        (
            "else 'off'}\" for k, lamp in enumerate(_LAMPS))",
            'else \'off\'}" for k, lamp in enumerate("BACDEF"))',
        ),
    ),
    bad(
        "cargo weights one ton light",
        "cargo_knapsack",
        LIE,
        "inspection reports each weight one ton light: the best load by the clues can sink the ship",
        (CARGO_CLUE, "        w, v = self.weights[crate - 1] - 1, self.values[crate - 1]\n"),
    ),
    bad(
        "maze east and west swapped",
        "maze_walk",
        LIE,
        "the open ways name east for west and west for east: the map the player keeps is wrong",
        (
            MAZE_WAYS,
            '        ways = ", ".join(\n'
            '            _WORD[_BACK[d] if d in "EW" else d] for d in "NESW" if d in self.open[self.pos]\n'
            "        )\n",
        ),
    ),
]

GOODS = [
    good(
        "hunt distance band",
        "number_hunt",
        "the clue keeps the direction and adds a true distance band: new information, still a search",
        (
            HUNT_CLUE,
            "        gap = abs(self.number - guess)\n"
            '        band = "within 10" if gap <= 10 else "within 100" if gap <= 100 else "over 100 away"\n'
            '        return f"My number is {direction} than {guess}, and {band}."\n',
        ),
    ),
    good(
        "hunt warmer or colder",
        "number_hunt",
        "adds whether this guess is closer than the previous one, a true comparison the direction does not give",
        (
            HUNT_CLUE,
            "        last = self.last\n"
            "        self.last = guess\n"
            "        if last is None:\n"
            '            return f"My number is {direction} than {guess}."\n'
            '        warmer = "warmer" if abs(self.number - guess) < abs(self.number - last) else "not warmer"\n'
            '        return f"My number is {direction} than {guess}; {warmer} than {last}."\n',
        ),
        (HUNT_NUMBER, HUNT_NUMBER + "        self.last = None\n"),
    ),
    good(
        "hunt sharper closeness credit",
        "number_hunt",
        "closeness is still paid, more steeply: a near miss keeps most of the parent's credit, a far one little",
        (HUNT_CREDIT, "        return 0.5 * (1 - distance / self.top) ** 3\n"),
    ),
    good(
        "hunt digits in place",
        "number_hunt",
        "splices code_breaker's exact count into the clue: how many digits of the guess sit in place",
        (
            HUNT_CLUE,
            '        placed = sum(a == b for a, b in zip(f"{self.number:03d}", f"{guess:03d}", strict=True))\n'
            '        return f"My number is {direction} than {guess}; {placed} of its three digits (with leading zeros) match yours in place."\n',
        ),
    ),
    good(
        "code which places",
        "code_breaker",
        "says which positions are right, not only how many: true, more informative, still a deduction",
        (
            CODE_CLUE,
            "        spots = [str(i + 1) for i, (a, b) in enumerate(zip(guess, self.code, strict=True)) if a == b]\n"
            '        where = ", ".join(spots) if spots else "none"\n'
            '        return f"right places: {where}; {misplaced} misplaced"\n',
        ),
    ),
    good(
        "code stricter credit",
        "code_breaker",
        "a miss is paid less than the parent pays and still more for more digits in place",
        (CODE_CREDIT, "        return 0.25 * (self.best / self.length) ** 2\n"),
    ),
    good(
        "code higher or lower",
        "code_breaker",
        "splices number_hunt's comparison: whether the code, read as a number, is above the guess",
        (
            CODE_CLUE,
            '        side = "higher" if self.code > guess else "lower"\n'
            '        return f"{exact} exact, {misplaced} misplaced; the code is {side} than {guess}"\n',
        ),
    ),
    good(
        "polynomial value and slope",
        "polynomial_probe",
        "each evaluation also gives the true slope f'(x): two equations a probe, the system still to solve",
        (
            POLY_CLUE,
            "        a3, a2, a1, _ = self.coeffs\n"
            "        slope = 3 * a3 * x * x + 2 * a2 * x + a1\n"
            '        return f"f({x}) = {self.value(x)}, and its slope f\'({x}) = {slope}"\n',
        ),
    ),
    good(
        "polynomial stricter credit",
        "polynomial_probe",
        "more coefficients right still pays more, each less than the parent: stricter, honest",
        (POLY_CREDIT, "        return 0.5 * (right / 4) ** 2\n"),
    ),
    good(
        "sequence neighbouring pairs",
        "sequence_oracle",
        "a reveal shows t(n) and t(n+1) but only three are allowed: consecutive terms, fewer choices",
        ("asks: int = 6", "asks: int = 3"),
        (
            'return "You may only reveal t(1) to t(12).", 0.0, False',
            'return "You may only ask n from 1 to 11.", 0.0, False',
        ),
        ("if not 1 <= n <= 12:", "if not 1 <= n <= 11:"),
        (
            SEQ_REVEAL,
            'f"t({n}) = {self.terms[n - 1]}, t({n + 1}) = {self.terms[n]}.'
            ' {self.asks - self.used} reveals left.",',
        ),
        ('f"Reveal a term with', 'f"Reveal two neighbouring terms t(n), t(n+1) with'),
        ("for n from 1 to 12 (", "for n from 1 to 11 ("),
        ("for n in range(1, 6)]", "for n in (1, 3, 5)]"),
    ),
    good(
        "sequence stricter credit",
        "sequence_oracle",
        "a partly right prediction is paid half what the parent pays, still more for more right",
        (SEQ_CREDIT, "0.5 * right / 3, True"),
    ),
    good(
        "switchboard name the inverted lamps",
        "switchboard",
        "the answer must also mark each inverted lamp: a second deduction (lamp state against its"
        " switch's position) on top of the wiring, scored per lamp",
        (
            r'_PAIR = re.compile(r"([A-Fa-f])\s*[=:]\s*(\d)")',
            r'_PAIR = re.compile(r"([A-Fa-f])\s*[=:]\s*(\d)(!?)")',
        ),
        (
            r'f"e.g. \\boxed{{A=1, B=2, C=2, D=6, E=3, F=1}}.',
            r'f"marking each inverted lamp with !, e.g. \\boxed{{A=1, B=2!, C=2, D=6!, E=3, F=1}}.',
        ),
        (
            "        pairs = {lamp.upper(): int(s) for lamp, s in _PAIR.findall(move)}\n",
            '        pairs = {lamp.upper(): (int(s), bang == "!") for lamp, s, bang in _PAIR.findall(move)}\n',
        ),
        (
            "pairs[lamp] == self.control[k] for k, lamp",
            "pairs[lamp] == (self.control[k], self.inverted[k]) for k, lamp",
        ),
        (
            'f"{lamp}={self.control[k]}" for k, lamp',
            "f\"{lamp}={self.control[k]}{'!' if self.inverted[k] else ''}\" for k, lamp",
        ),
    ),
    good(
        "cargo three deck slots",
        "cargo_knapsack",
        "a new rule: a hold of three fifths of the crates' weight but three deck slots (at most 3 crates);"
        " the best load respects both and is found by inspecting",
        (
            "self.capacity = sum(self.weights) * 2 // 5",
            "self.capacity = sum(self.weights) * 3 // 5",
        ),
        (
            "            for k in range(1, n + 1):\n",
            "            for k in range(1, 4):  # three deck slots\n",
        ),
        (
            "            weight = sum(self.weights[i - 1] for i in picked)\n",
            "            if len(picked) > 3:\n"
            '                return "The deck has three slots: load at most 3 crates.", 0.0, False\n'
            "            weight = sum(self.weights[i - 1] for i in picked)\n",
        ),
        (
            "f\"Your ship's hold carries at most {self.capacity} tons.",
            "f\"Your ship's hold carries at most {self.capacity} tons on three deck slots (at most 3 crates).",
        ),
    ),
    good(
        "maze corridor distance",
        "maze_walk",
        "each room also tells the true corridor distance to the exit: a gradient to follow, moves still to spend",
        (
            '        return f"You are at row {self.pos[0]}, column {self.pos[1]}. Open ways: {ways}."\n',
            "        steps = self.to_exit[self.pos]\n"
            '        return f"You are at row {self.pos[0]}, column {self.pos[1]}. Open ways: {ways}. The exit is {steps} rooms away by the corridors."\n',
        ),
    ),
    good(
        "bank payment fee",
        "bank_transfer",
        "a new rule: external payments cost a 1.50 fee from checking, so the shortfall to move grows by it",
        (
            "        if cents > self.balances[src]:\n"
            '            raise ToolError(f"insufficient funds: {src} holds {_money(self.balances[src])}")\n'
            "        self.balances[src] -= cents\n",
            "        fee = 0 if dst in self.balances else 150  # external payments carry a fee\n"
            "        if cents + fee > self.balances[src]:\n"
            "            raise ToolError(\n"
            '                f"insufficient funds: {src} holds {_money(self.balances[src])}"\n'
            '                f" and this needs {_money(cents + fee)} with the fee"\n'
            "            )\n"
            "        self.balances[src] -= cents + fee\n",
        ),
        (
            "\"customer's own accounts. Use",
            '"customer\'s own accounts; each external payment carries a 1.50 fee taken from the"\n'
            '            " paying account. Use',
        ),
        (
            "short = (self.invoice_cents - self.have) / 100",
            "short = (self.invoice_cents - self.have + 150) / 100",
        ),
    ),
    good(
        "order restock to twice the order",
        "order_fulfillment",
        "a new policy: a short product is restocked to twice the ordered quantity; checks and solution follow",
        (
            'f"stock to exactly {_REFILL} units; other',
            'f"stock to exactly twice the ordered quantity; other',
        ),
        (
            "            start = _REFILL if sku in self.short else self.original[sku]\n",
            "            start = 2 * qty if sku in self.short else self.original[sku]\n",
        ),
        (
            'call("update_stock", sku=sku, quantity=_REFILL) for sku in self.short]',
            'call("update_stock", sku=sku, quantity=2 * self.orders[self.target]["items"][sku])\n'
            "            for sku in self.short\n        ]",
        ),
    ),
]

DESIGNS: list[Design] = [*LEAKS, *CREDITS, *FIXED_ANSWERS, *LIES, *GOODS]
"""The red team: every design, bad and good, in the order of its kind."""
