"""Attack: tool schemas that are not JSON Schema. With __CALLS__ set to 0 every ``tools()``
answer has a property given as ``"string"`` instead of ``{"type": "string"}`` (which passed the
verifier and raised AttributeError in the agent's prompt building); with N > 0, the first N
answers are valid and later ones not (a design that passes verification, then changes)."""


class BadToolSchemaEnv:
    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns
        self.calls = 0

    def tools(self):
        self.calls += 1
        spec = {"type": "string"} if self.calls <= __CALLS__ else "string"
        params = {"type": "object", "properties": {"key": spec}, "required": ["key"]}
        return [{"type": "function", "function": {"name": "look", "description": "Look.", "parameters": params}}]

    def tool_look(self, key):
        return "value of " + str(key)

    def reset(self, seed=None):
        return "call look", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return ["<answer>x</answer>"]
