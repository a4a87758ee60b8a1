"""A real model's multi-turn episodes, token by token: what the trainer is given to learn from
is exactly what the model generated, and nothing the environment said."""

from __future__ import annotations

import asyncio

import pytest

from spade.agent import EpisodeJob, RolloutSettings, run_episodes
from spade.config import InferenceConfig, ModelConfig
from spade.envs.examples import example_paths
from spade.training.samples import samples_from_trajectories

pytestmark = pytest.mark.sandbox


def test_trained_tokens_are_the_models_completions_across_turns(smol_env, policy):
    from spade.inference.hf import TransformersBackend

    backend = TransformersBackend(ModelConfig(), InferenceConfig(batch_size=2))
    paths = {p.stem: p for p in example_paths()}
    jobs = [
        EpisodeJob(stem, paths[stem].read_text(), seed=3) for stem in ("maze_walk", "code_breaker")
    ]
    settings = RolloutSettings(max_turns=3, temperature=1.0, max_tokens_per_turn=24, seed=5)

    async def play():
        try:
            return await run_episodes(backend, jobs, settings, policy=policy)
        finally:
            await backend.aclose()

    trajectories = asyncio.run(play())
    tok = backend.tokenizer
    assert sum(len(t.turns) for t in trajectories) > len(trajectories)  # several turns
    for traj in trajectories:
        for turn in traj.turns:  # the log-probs belong to the tokens; the text to the ids
            assert len(turn.logprobs) == len(turn.completion_token_ids) > 0
            assert all(lp <= 0.0 for lp in turn.logprobs)
            decoded = tok.decode(turn.completion_token_ids, skip_special_tokens=True)
            assert decoded.strip() == turn.text.strip()
        for later, earlier in zip(traj.turns[1:], traj.turns, strict=False):
            # the observation reached the model: it is in the next prompt, never trained on
            prompt = tok.decode(later.prompt_token_ids)
            assert earlier.observation.splitlines()[0] in prompt

    samples = samples_from_trajectories(trajectories)
    expected = []  # per episode: one sample (prefix-stable template) or one per turn
    for t in trajectories:
        turns = [turn.completion_token_ids for turn in t.turns if turn.completion_token_ids]
        expected += [[i for c in turns for i in c]] if t.token_view() is not None else turns
    trained = [[tid for tid, m in zip(s.input_ids, s.loss_mask, strict=True) if m] for s in samples]
    assert trained == expected
    for s in samples:  # log-probs sit on trained tokens only
        assert all(
            lp == 0.0 for lp, m in zip(s.behaviour_logprobs, s.loss_mask, strict=True) if not m
        )
