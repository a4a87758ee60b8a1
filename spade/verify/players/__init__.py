"""Observation-only reference players for the bundled examples (``spade/envs/examples``).

``feasibility`` replays ``solution()``, which reads the hidden state, so a clue that lies or is
noise still passes it. A player here is our own code that wins a bundled example the way an agent
must: by reading what it is told (regexes over the text, the JSON of tool results), never the
hidden state. Each is a :data:`~spade.verify.episodes.Policy` made fresh per episode; it reads
sizes and ranges from the opening, since a design may retune them.

A player reads feedback only in its parent's own form: the sentence the bundled example prints
("My number is higher than 500."), about the move just made, a value the whole of its clause;
a tool result with the parent's keys and kinds of value. Text added around that sentence is
read past; a sentence whose subject or words changed ("Your guess is lower") is not read, since
a loose reading turns an honest rewording into a lie. A player raises :class:`Abstain` when an
observation is not in that form (the player then says nothing of the design), and
:class:`Contradiction` when what it was told leaves no way to win (a clue inconsistent with the
earlier ones or with the rules the opening stated): the game is then not won by playing.
"""

from __future__ import annotations

from spade.verify.players.base import (
    Abstain,
    Contradiction,
    Player,
    box,
    call,
    clip,
    need,
    solve,
)
from spade.verify.players.numeric import (
    MAX_CODES,
    CargoKnapsack,
    CodeBreaker,
    NumberHunt,
    PolynomialProbe,
    all_codes,
    digits_of,
    fitting,
)
from spade.verify.players.puzzles import MazeWalk, OwnershipRiddle, SequenceOracle, Switchboard
from spade.verify.players.tools import BankTransfer, OrderFulfillment, cents, money, tool_result

__all__ = [
    "MAX_CODES",
    "PLAYERS",
    "Abstain",
    "BankTransfer",
    "CargoKnapsack",
    "CodeBreaker",
    "Contradiction",
    "MazeWalk",
    "NumberHunt",
    "OrderFulfillment",
    "OwnershipRiddle",
    "Player",
    "PolynomialProbe",
    "SequenceOracle",
    "Switchboard",
    "all_codes",
    "box",
    "call",
    "cents",
    "clip",
    "digits_of",
    "fitting",
    "money",
    "need",
    "solve",
    "tool_result",
]

PLAYERS: dict[str, type[Player]] = {
    "number_hunt": NumberHunt,
    "code_breaker": CodeBreaker,
    "polynomial_probe": PolynomialProbe,
    "cargo_knapsack": CargoKnapsack,
    "maze_walk": MazeWalk,
    "switchboard": Switchboard,
    "sequence_oracle": SequenceOracle,
    "ownership_riddle": OwnershipRiddle,
    "bank_transfer": BankTransfer,
    "order_fulfillment": OrderFulfillment,
}
"""The player of each bundled example, by the example's file stem."""
