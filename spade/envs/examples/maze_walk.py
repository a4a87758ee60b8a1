"""Maze walk (spatial_reasoning): reach a known exit in a hidden maze, seeing only nearby walls."""

from collections import deque

from spade.envs import TextEnv

_STEP = {"N": (-1, 0), "E": (0, 1), "S": (1, 0), "W": (0, -1)}
_BACK = {"N": "S", "S": "N", "E": "W", "W": "E"}
_WORD = {"N": "north", "E": "east", "S": "south", "W": "west"}


class MazeWalkEnv(TextEnv):
    """Walk through a hidden 5x5 maze to its exit within a move budget.

    Hidden state: the maze walls (only the openings of the current cell are shown). Bumping into
    a wall uses a move. Partial reward: when the moves run out, half the share of the maze
    distance to the exit that was covered; reaching the exit scores 1.
    """

    skill = "spatial_reasoning"
    hint = (
        "Keep a map of every cell and opening you have seen; prefer openings toward the exit "
        "and backtrack systematically out of dead ends."
    )

    def __init__(self, max_turns: int = 25, size: int = 5, moves: int = 22, **kwargs):
        super().__init__(max_turns=max_turns, **kwargs)
        self.size = size
        self.moves = min(moves, self.max_turns)

    def setup(self) -> str:
        n, rng = self.size, self.rng
        cells = [(r, c) for r in range(n) for c in range(n)]
        self.open: dict[tuple[int, int], list[str]] = {cell: [] for cell in cells}
        stack, seen = [(0, 0)], {(0, 0)}
        while stack:  # randomized depth-first search carves a perfect maze
            r, c = stack[-1]
            nbrs = [
                (d, (r + dr, c + dc))
                for d, (dr, dc) in _STEP.items()
                if (r + dr, c + dc) in self.open and (r + dr, c + dc) not in seen
            ]
            if not nbrs:
                stack.pop()
                continue
            d, cell = rng.choice(nbrs)
            self.open[(r, c)].append(d)
            self.open[cell].append(_BACK[d])
            seen.add(cell)
            stack.append(cell)
        for _ in range(3):  # a few extra openings make loops
            r, c = rng.choice(cells)
            d = rng.choice(["E", "S"])
            dr, dc = _STEP[d]
            if (r + dr, c + dc) in self.open and d not in self.open[(r, c)]:
                self.open[(r, c)].append(d)
                self.open[(r + dr, c + dc)].append(_BACK[d])
        self.start = rng.choice(cells)
        dist = self.distances(self.start)
        far = [cell for cell in cells if 6 <= dist[cell] <= 10]
        self.exit = rng.choice(far or [cell for cell in cells if dist[cell] == max(dist.values())])
        self.to_exit = self.distances(self.exit)
        self.pos, self.used = self.start, 0
        return (
            f"You are in a {n}x{n} maze of rooms; row 0 is the north edge, column 0 the west "
            f"edge. The exit is at row {self.exit[0]}, column {self.exit[1]}. Move with "
            f"\\boxed{{N}}, \\boxed{{E}}, \\boxed{{S}} or \\boxed{{W}}; you have {self.moves} "
            f"moves and bumping into a wall wastes one.\n{self.where()}"
        )

    def distances(self, source: tuple[int, int]) -> dict[tuple[int, int], int]:
        dist, queue = {source: 0}, deque([source])
        while queue:
            r, c = queue.popleft()
            for d in self.open[(r, c)]:
                nxt = (r + _STEP[d][0], c + _STEP[d][1])
                if nxt not in dist:
                    dist[nxt] = dist[(r, c)] + 1
                    queue.append(nxt)
        return dist

    def where(self) -> str:
        ways = ", ".join(_WORD[d] for d in "NESW" if d in self.open[self.pos])
        return f"You are at row {self.pos[0]}, column {self.pos[1]}. Open ways: {ways}."

    def play(self, move: str) -> tuple[str, float, bool]:
        word = move.strip().upper()
        d = word[:1] if word in ("N", "E", "S", "W", "NORTH", "EAST", "SOUTH", "WEST") else ""
        if not d:
            return "Move with \\boxed{N}, \\boxed{E}, \\boxed{S} or \\boxed{W}.", 0.0, False
        self.used += 1
        if d in self.open[self.pos]:
            self.pos = (self.pos[0] + _STEP[d][0], self.pos[1] + _STEP[d][1])
            text = f"You walk {_WORD[d]}. {self.where()}"
        else:
            text = f"A wall blocks the way {_WORD[d]}. {self.where()}"
        if self.pos == self.exit:
            return f"{text}\nYou found the exit!", 1.0, True
        if self.used >= self.moves:
            covered = 1 - self.to_exit[self.pos] / self.to_exit[self.start]
            return f"{text}\nNo moves left.", max(0.0, 0.5 * covered), True
        return f"{text} {self.moves - self.used} moves left.", 0.0, False

    def solution(self) -> list[str]:
        moves, pos = [], self.start
        while pos != self.exit:
            for d in "NESW":
                nxt = (pos[0] + _STEP[d][0], pos[1] + _STEP[d][1])
                if d in self.open[pos] and self.to_exit[nxt] == self.to_exit[pos] - 1:
                    moves.append("\\boxed{" + d + "}")
                    pos = nxt
                    break
        return moves
