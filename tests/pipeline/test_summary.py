"""A round's summary row from its committed files."""

from __future__ import annotations

from spade.config import load_config
from spade.pipeline.record import campaign_store, jsonl
from spade.pipeline.summary import summarize_round


def test_environments_without_hinted_plays_do_not_break_the_means(tmp_path):
    cfg = load_config(overrides={"storage.root": str(tmp_path)})
    cs = campaign_store(cfg, "c")
    rows = [
        {"accepted": True, "failure": None, "win_rate": 0.5, "hinted_win_rate": None,
         "regret": 0.0, "reward": 0.25},
        {"accepted": True, "failure": None, "win_rate": 0.25, "hinted_win_rate": 1.0,
         "regret": 0.75, "reward": -0.25},
        {"accepted": False, "failure": "parse", "win_rate": None, "hinted_win_rate": None,
         "regret": None, "reward": 0.0},
    ]  # fmt: skip
    cs.store.write_bytes(cs.layout.stage_key(0, "score", "scored.jsonl"), jsonl(rows))
    row = summarize_round(campaign_store(cfg, "c"), 0)
    assert (row["attempts"], row["accepted"], row["rejections"]) == (3, 2, {"parse": 1})
    assert row["win_rate"] == 0.375 and row["hinted_win_rate"] == 1.0  # the one measured
    assert row["regret"] == 0.375 and row["designer_reward"] == 0.0
    assert row["replay_of"] is None and row["complete"] is False


def _designed(**row: object) -> dict[str, object]:
    base = {"source": "designed", "accepted": False, "failure": None, "win_rate": None,
            "hinted_win_rate": None, "regret": None, "novel": None, "repaired": False}  # fmt: skip
    return base | row


def test_designs_and_pool_environments_are_counted_apart(tmp_path):
    """Designs (tried, accepted, novel, copies, repaired, failed on our side) and pool
    environments in one round: win rates and regret over every environment played, the
    designer's reward and its spread over the designs only (those that failed on our side are
    only counted); training losses, or why a role was not trained."""
    cfg = load_config(overrides={"storage.root": str(tmp_path)})
    cs = campaign_store(cfg, "c")
    rows = [
        _designed(accepted=True, win_rate=0.5, hinted_win_rate=1.0, regret=0.5, novel=True,
                  repaired=True, reward=0.5, raw_reward=0.75),
        _designed(failure="duplicate", reward=-0.25, raw_reward=-0.2),
        _designed(failure="parse", reward=-0.25, raw_reward=-1.0),
        _designed(failed=True, failure="inference", reward=None, raw_reward=None),
        _designed(failure="inference", reward=-0.5, raw_reward=-1.0),  # before failed rows
        {"source": "pool", "accepted": True, "failure": None, "win_rate": 0.0,
         "hinted_win_rate": 0.5, "regret": 0.5, "reward": None, "raw_reward": None},
    ]  # fmt: skip
    cs.store.write_bytes(cs.layout.stage_key(0, "score", "scored.jsonl"), jsonl(rows))
    evaluations = [
        {
            "source": "designed",
            "unhinted_returns": [1.0, 0.0, 0.5, 0.0],
            "failed_plays": 2,
            "resumed_plays": 1,
        },
        {"source": "pool", "unhinted_returns": [0.0, 0.25, 0.0, 0.0], "failed_plays": 1},
    ]
    cs.store.write_bytes(
        cs.layout.stage_key(0, "evaluate", "evaluations.jsonl"), jsonl(evaluations)
    )
    cs.store.write_json(
        cs.layout.stage_key(0, "train_agent", "outcome.json"), {"metrics": {"loss": 0.125}}
    )
    skipped = {"skipped": "every advantage is zero (equal rewards within each group)"}
    cs.store.write_json(cs.layout.stage_key(0, "train_designer", "outcome.json"), skipped)
    row = summarize_round(campaign_store(cfg, "c"), 0)
    assert (row["attempts"], row["accepted"], row["novel"]) == (3, 1, 1)
    assert (row["duplicates"], row["repaired"], row["pool_envs"]) == (1, 1, 1)
    assert row["rejections"] == {"duplicate": 1, "parse": 1}
    assert (row["win_rate"], row["hinted_win_rate"], row["regret"]) == (0.25, 0.75, 0.5)
    assert (row["designed_win_rate"], row["designed_regret"]) == (0.5, 0.5)
    assert row["designer_reward"] == round((0.75 - 0.2 - 1.0) / 3, 4)  # before centring
    assert row["designer_spread"] == 0.75  # 0.5 - (-0.25)
    assert (row["designed_episodes"], row["pool_episodes"]) == (4, 4)
    assert row["failed_plays"] == 3  # inference failures, counted apart from the episodes
    assert row["resumed_plays"] == 1  # the pool's row was stored before the count existed
    assert row["failed_designs"] == 2  # counted, and left out of every number above
    assert (row["train_loss"], row["agent_skipped"]) == (0.125, None)
    assert row["designer_loss"] is None and row["designer_skipped"] == skipped["skipped"]


def test_novelty_unknown_without_the_check(tmp_path):
    """Rows of a verifier without a novelty check (``novel`` None) count as unknown, not 0."""
    cfg = load_config(overrides={"storage.root": str(tmp_path)})
    cs = campaign_store(cfg, "c")
    rows = [_designed(accepted=True, win_rate=1.0, regret=0.0, reward=0.0)]
    cs.store.write_bytes(cs.layout.stage_key(0, "score", "scored.jsonl"), jsonl(rows))
    row = summarize_round(campaign_store(cfg, "c"), 0)
    assert row["novel"] is None and row["accepted"] == 1 and row["pool_envs"] == 0


def test_nothing_accepted_is_nothing_novel(tmp_path):
    """Rejected designs that never reached the novelty check (a crash, a syntax error) leave
    ``novel`` at 0, not unknown: nothing was accepted."""
    cfg = load_config(overrides={"storage.root": str(tmp_path)})
    cs = campaign_store(cfg, "c")
    rows = [_designed(failure="crash", reward=0.0), _designed(failure="syntax", reward=0.0)]
    cs.store.write_bytes(cs.layout.stage_key(0, "score", "scored.jsonl"), jsonl(rows))
    row = summarize_round(campaign_store(cfg, "c"), 0)
    assert (row["attempts"], row["accepted"], row["novel"]) == (2, 0, 0)


def test_each_accepted_design_is_shown_with_its_numbers_and_hint(tmp_path):
    """What a round's accepted designs became (how they were asked for, win rates, regret,
    designer reward before centring, hint), in the summary and as the lines spade status and
    the live view print."""
    from spade.cli.campaign import design_lines

    cfg = load_config(overrides={"storage.root": str(tmp_path)})
    cs = campaign_store(cfg, "c")
    rows = [
        _designed(env_id="env-a", accepted=True, win_rate=0.2, hinted_win_rate=0.6, regret=0.4,
                  reward=0.1, raw_reward=0.35, strategy="splice", parent="number_hunt",
                  directive="feedback", checks={"leaks_answer": "no reader wins " + "x" * 200}),
        _designed(env_id="env-b", failure="crash", reward=-0.1, raw_reward=-0.3),
    ]  # fmt: skip
    cs.store.write_bytes(cs.layout.stage_key(0, "score", "scored.jsonl"), jsonl(rows))
    hints = [{"env_id": "env-a", "hint": "Count what each clue rules out."}]
    cs.store.write_bytes(cs.layout.stage_key(0, "hint", "environments.jsonl"), jsonl(hints))
    row = summarize_round(campaign_store(cfg, "c"), 0)
    (played,) = row["designs_played"]
    assert played == {
        "env_id": "env-a", "strategy": "splice", "parent": "number_hunt",
        "directive": "feedback", "win_rate": 0.2, "hinted_win_rate": 0.6, "regret": 0.4,
        "paired_regret": None, "paired_regret_interval": None,  # no evaluation row here
        "reward": 0.35, "hint": "Count what each clue rules out.",
        "checks": {"leaks_answer": "no reader wins " + "x" * 200},
    }  # fmt: skip
    assert design_lines([row]) == [
        "round 0: design env-a (splice number_hunt feedback): win 0.20, hinted 0.60,"
        " regret 0.40, designer reward 0.35",
        "  hint: Count what each clue rules out.",
        "  leaks_answer: no reader wins " + "x" * 142 + "...",  # cut to 160 characters
    ]


def test_the_paired_regret_stands_beside_the_regret_and_older_rows_have_none(tmp_path):
    """Round 0's evaluations were stored before plays were paired (no paired regret: None, not
    0); round 1's carry it: the round's mean over the environments that have one, and each
    design's line sets it, with its interval, beside the regret."""
    from spade.cli.campaign import design_lines

    cfg = load_config(overrides={"storage.root": str(tmp_path)})
    cs = campaign_store(cfg, "c")
    scored = [
        _designed(env_id="env-a", accepted=True, win_rate=0.0, hinted_win_rate=0.5, regret=0.5,
                  reward=0.1, raw_reward=0.1),
        _designed(env_id="env-b", accepted=True, win_rate=0.5, hinted_win_rate=0.5, regret=0.0,
                  reward=0.1, raw_reward=0.1),
    ]  # fmt: skip
    old = [{"env_id": "env-a", "regret": 0.5, "unhinted_returns": [0.0], "failed_plays": 0}]
    new = [
        old[0] | {"paired_regret": 0.25, "paired_regret_interval": [0.0, 0.5]},
        {"env_id": "env-b", "paired_regret": 0.0, "paired_regret_interval": [0.0, 0.0]},
    ]
    for rnd, evaluations in ((0, old), (1, new)):
        cs.store.write_bytes(cs.layout.stage_key(rnd, "score", "scored.jsonl"), jsonl(scored))
        cs.store.write_bytes(
            cs.layout.stage_key(rnd, "evaluate", "evaluations.jsonl"), jsonl(evaluations)
        )
    before, after = (summarize_round(campaign_store(cfg, "c"), r) for r in (0, 1))
    assert (before["regret"], before["paired_regret"]) == (0.25, None)
    assert before["designs_played"][0]["paired_regret"] is None
    assert (after["regret"], after["paired_regret"]) == (0.25, 0.125)
    assert after["designs_played"][0]["paired_regret_interval"] == [0.0, 0.5]
    lines = design_lines([before, after])
    assert lines[0].endswith("regret 0.50, designer reward 0.10")
    assert lines[4].endswith("regret 0.50 (paired 0.25 [0.00, 0.50]), designer reward 0.10")


def test_each_update_reports_the_sampler_mismatch_and_the_groups_without_gradient(tmp_path):
    """training_health from the training stages' outcomes (a skipped stage has none), and the
    line spade status prints per update."""
    import json

    from spade.cli.campaign import health_lines

    cfg = load_config(overrides={"storage.root": str(tmp_path)})
    cs = campaign_store(cfg, "c")
    metrics = {"loss": 0.1, "mismatch_kl": 0.0123, "mismatch_outside": 0.015,
               "zero_variance_groups": 0.5, "is_weight_mean": 0.99,
               "dropped_samples": 2, "shift_kl": 0.0021, "shift_up": 0.0125,
               "shift_down": -0.004}  # fmt: skip
    agent = {"metrics": metrics}
    designer = {"metrics": None, "skipped": "no designs this round"}
    for role, outcome in (("agent", agent), ("designer", designer)):
        key = cs.layout.stage_key(0, f"train_{role}", "outcome.json")
        cs.store.write_bytes(key, json.dumps(outcome).encode())
    row = summarize_round(campaign_store(cfg, "c"), 0)
    assert row["training_health"] == {"agent": {k: v for k, v in metrics.items() if k != "loss"}}
    assert health_lines([row]) == [
        "round 0: agent update: sampler KL 0.0123, ratios outside [0.5, 2] 1.5%,"
        " groups without gradient 50%, 2 replies dropped (no token ids)",
        "round 0: agent update moved the policy: KL 0.0021, log-prob per token +0.013 where the"
        " advantage > 0, -0.004 where < 0",
    ]


def test_the_closing_lines_set_the_last_held_out_numbers_beside_the_base_weights(tmp_path):
    """Round 0's held-out stage stored the base weights' numbers; the status closes with them
    and the last round's, each with its interval."""
    import json

    from spade.cli.campaign import heldout_lines

    cfg = load_config(overrides={"storage.root": str(tmp_path)})
    cs = campaign_store(cfg, "c")
    base = {
        "mean_return": 0.1,
        "mean_return_interval": [0.0, 0.25],
        "win_rate": 0.0,
        "win_rate_interval": [0.0, 0.56],
        "plays": 3,
    }
    for rnd, ret in ((0, 0.2), (1, 0.3)):
        summary = {
            "mean_return": ret,
            "mean_return_interval": [ret - 0.1, ret + 0.1],
            "win_rate": 0.0,
            "win_rate_interval": [0.0, 0.56],
            "plays": 3,
        } | ({"base": base} if rnd == 0 else {})
        prefix = f"{cs.layout.round_prefix(rnd)}/heldout"
        cs.store.write_bytes(f"{prefix}/summary.json", json.dumps(summary).encode())
    rows = [summarize_round(cs, r) for r in (0, 1)]
    assert rows[0]["heldout_base"] == base and rows[1]["heldout_base"] is None
    assert heldout_lines(rows) == [
        "held-out, base weights (3 plays, 95% intervals):",
        "  mean return 0.10 [0.00, 0.25], win rate 0.00 [0.00, 0.56]",
        "held-out, after round 1 (-) (3 plays, 95% intervals):",
        "  mean return 0.30 [0.20, 0.40], win rate 0.00 [0.00, 0.56]",
    ]
    assert heldout_lines([summarize_round(cs, 5)]) == []  # nothing played: nothing said


def test_each_role_reports_its_optimizer_steps_and_trained_tokens(tmp_path):
    """The budget a comparison of campaigns matches: a skipped update took no step, a stage
    not yet committed is unknown (None)."""
    import json

    cfg = load_config(overrides={"storage.root": str(tmp_path)})
    cs = campaign_store(cfg, "c")
    agent = {"metrics": {"loss": 0.1, "updates": 2, "trained_tokens": 183, "tokens": 5751}}
    key = cs.layout.stage_key(0, "train_agent", "outcome.json")
    cs.store.write_bytes(key, json.dumps(agent).encode())
    row = summarize_round(cs, 0)
    assert (row["agent_updates"], row["agent_tokens"]) == (2, 183)
    assert (row["designer_updates"], row["designer_tokens"]) == (None, None)
    skipped = {"metrics": None, "skipped": "every advantage is zero"}
    key = cs.layout.stage_key(0, "train_designer", "outcome.json")
    cs.store.write_bytes(key, json.dumps(skipped).encode())
    row = summarize_round(cs, 0)
    assert (row["designer_updates"], row["designer_tokens"]) == (0, 0)
    # two updates, one of them without a gradient (no optimizer step): one step taken
    flat = {"metrics": {"loss": 0.0, "updates": 2, "optimizer_steps": 1, "trained_tokens": 90}}
    cs.store.write_bytes(key, json.dumps(flat).encode())
    row = summarize_round(cs, 0)
    assert (row["designer_updates"], row["designer_tokens"]) == (1, 90)
