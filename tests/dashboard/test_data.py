"""spade.dashboard.data on a synthetic campaign: the numbers are what the stages wrote."""

from __future__ import annotations

import pytest

from spade.config import CampaignConfig
from spade.dashboard import data as data_mod
from spade.dashboard.data import CampaignData, campaign_ids, loader
from spade.pipeline.context import RoundContext
from spade.pipeline.record import StageRecord
from spade.storage import STAGES, ObjectStore
from spade.testing.synthetic import STAGE_SECONDS, SUITES, build_campaign

ROUNDS, ENVS = 5, 20
SCALARS = ("attempts", "accepted", "memory_size", "weights", "rejections", "skills")
MEANS = ("acceptance_rate", "win_rate", "hinted_win_rate", "regret", "designer_reward")


@pytest.fixture(scope="module")
def camp(tmp_path_factory):
    """The module's campaign, read by many tests: none may write to it (a test that rewrites a
    round builds its own, ``own_camp``), so each reads what ``build_campaign`` wrote whatever
    the order the tests run in."""
    return build_campaign(tmp_path_factory.mktemp("runs"), rounds=ROUNDS, environments=ENVS, in_progress=True)  # fmt: skip


@pytest.fixture
def own_camp(tmp_path):
    """A campaign of the test's own, like ``camp``, for a test that rewrites a round."""
    return build_campaign(tmp_path, rounds=ROUNDS, environments=ENVS, in_progress=True)


def check_rounds(ov, camp):
    assert [r.round for r in ov.rounds] == list(range(ROUNDS + 1))
    for r in ov.rounds[:ROUNDS]:
        want = camp.expected[r.round]
        assert r.complete and r.stages_done == list(STAGES)
        for key in SCALARS:
            assert getattr(r, key) == want[key], (r.round, key)
        for key in (*MEANS, "heldout_win_rate"):
            assert getattr(r, key) == pytest.approx(want[key]), (r.round, key)
        assert r.heldout_suites == want["heldout_suites"]  # JSON round-trips floats exactly
        for role in ("agent", "designer"):
            for metric in ("loss", "kl", "clip_fraction", "grad_norm", "entropy"):
                assert r.train[role][metric] == want["train"][role][metric]
        assert r.stage_seconds == STAGE_SECONDS
    assert sum(r.accepted for r in ov.rounds) == ENVS


def test_overview_matches_what_was_written(camp):
    ov = CampaignData(camp.root, camp.campaign_id).overview()
    check_rounds(ov, camp)
    assert ov.memory_capacity == camp.capacity
    assert ov.store_url.endswith(f"campaign/{camp.campaign_id}")
    row = ov.rows()[2]
    assert row["win_rate"] == pytest.approx(camp.expected[2]["win_rate"])
    assert row["agent_loss"] == camp.expected[2]["train"]["agent"]["loss"]
    assert row["seconds"] == pytest.approx(sum(STAGE_SECONDS.values()))


def test_round_in_progress_has_only_its_committed_stages(camp):
    last = CampaignData(camp.root, camp.campaign_id).overview().rounds[-1]
    assert last.stages_done == ["sample_documents", "design", "verify", "hint"]
    assert not last.complete
    assert (last.attempts, last.win_rate, last.memory_size, last.train) == (0, None, None, {})
    assert set(last.stage_seconds) == set(last.stages_done)


def test_reload_reads_manifests_only_until_a_stage_commits(own_camp, monkeypatch):
    """A reload reads the manifests only, until a stage commits: then that round's files (and
    only those) are read again. It rewrites round 3, so on a campaign of its own."""
    camp = own_camp
    data = CampaignData(camp.root, camp.campaign_id)
    first = data.overview()
    assert data.overview(max_age_s=60) is first  # young enough: not even the manifests
    asked: list[str] = []
    real = data_mod.read_many

    def spy(store, keys):
        keys = list(keys)
        asked.extend(keys)
        return real(store, keys)

    monkeypatch.setattr(data_mod, "read_many", spy)
    assert data.overview().rows() == first.rows()
    assert asked and all(k.endswith("/manifest.json") for k in asked)
    # re-run round 3's publish stage: only that round's small files are read again
    asked.clear()
    cfg = CampaignConfig.model_validate({"storage": {"root": camp.root}})
    rec = StageRecord(RoundContext.open(cfg, camp.campaign_id, 3), "publish")
    rec.write_json("weights.json", {"version": "r0003-again", "checkpoint": None, "kind": "lora"})
    rec.commit(seconds=9.0)
    ov = data.overview()
    files = [k for k in asked if not k.endswith("/manifest.json")]
    assert files and all("/round-0003/" in k for k in files)
    assert ov.round(3).weights == "r0003-again" and ov.round(3).stage_seconds["publish"] == 9.0
    assert ov.round(2).weights == camp.expected[2]["weights"]


def test_env_detail_and_transcripts(camp):
    data = CampaignData(camp.root, camp.campaign_id)
    rnd = ROUNDS - 1
    accepted = next(e for e in camp.envs.values() if e["accepted"])
    d = data.env_detail(rnd, accepted["env_id"])
    assert d.code == accepted["code"] and d.hint == accepted["hint"]
    assert d.document.startswith(f"Lanterns (article {rnd}.")
    assert d.attempt["doc_id"] == accepted["doc_id"] and "token_ids" not in d.attempt
    assert [c["name"] for c in d.verdict["checks"]] == [c["name"] for c in accepted["verdict"]["checks"]]  # fmt: skip
    assert d.evaluation["win_rate"] == accepted["evaluation"]["win_rate"]
    plays = data.trajectories(rnd, accepted["env_id"])
    assert len(plays) == 8 and sum(p["hinted"] for p in plays) == 4
    assert all("turns" not in p and p["messages"][0]["role"] == "system" for p in plays)
    wins = sum(p["return"] for p in plays if not p["hinted"]) / 4
    assert wins == accepted["evaluation"]["win_rate"]


def test_rejected_designs(camp):
    data = CampaignData(camp.root, camp.campaign_id)
    for rnd in range(ROUNDS):
        assert data.rejected_checks(rnd) == camp.expected[rnd]["rejected_checks"]
    rejected = next(e for e in camp.envs.values() if not e["accepted"])  # round 4: infeasible
    d = data.env_detail(ROUNDS - 1, rejected["env_id"])
    assert d.verdict["failed_check"] == "feasibility" and d.scored["failure"] == "infeasible"
    assert d.hint is None and d.evaluation is None
    assert data.trajectories(ROUNDS - 1, rejected["env_id"]) == []
    # round 2's rejection failed to parse: no code, no env id of its own
    ov = data.overview()
    parse = next(e for e in ov.round(2).envs if e["failure"] == "parse")
    d = data.env_detail(2, parse["env_id"])
    assert d.code is None and d.verdict is None and d.document is not None


def test_env_history_and_memory(camp):
    data = CampaignData(camp.root, camp.campaign_id)
    ov = data.overview()
    history = ov.env_history(camp.recurring_env)
    assert [h["round"] for h in history] == list(range(ROUNDS))
    for h in history:
        row = next(e for e in ov.round(h["round"]).envs if e["env_id"] == camp.recurring_env)
        assert h["regret"] == row["regret"]
    state = data.memory()
    assert len(state["records"]) == camp.expected[ROUNDS - 1]["memory_size"]
    assert state["records"][-1]["round"] == ROUNDS - 1
    assert len(data.memory(0)["records"]) == camp.expected[0]["memory_size"]


def test_summary_rounds_without_detail_files(tmp_path):
    camp = build_campaign(tmp_path, rounds=3, environments=6, detail_rounds=1)
    data = CampaignData(camp.root, camp.campaign_id)
    ov = data.overview()
    assert [r.accepted for r in ov.rounds] == [2, 2, 2]
    env = next(e for e in ov.round(0).envs if e["accepted"])
    d = data.env_detail(0, env["env_id"])  # code from the attempts, no transcripts stored
    assert d.code and data.trajectories(0, env["env_id"]) == []
    assert campaign_ids(ObjectStore(camp.root)) == [camp.campaign_id]
    assert CampaignData(camp.root, "other").overview().rounds == []


def test_heldout_suites_items_and_transcripts(camp):
    data = CampaignData(camp.root, camp.campaign_id)
    ov = data.overview()
    assert ov.suites() == sorted(SUITES)  # as summary.json stores them (keys sorted)
    assert ov.rows()[1]["heldout_reasoning_gym"] == pytest.approx(
        camp.expected[1]["heldout_suites"]["reasoning_gym"]["score"]
    )
    for rnd in range(ROUNDS):
        assert data.heldout_items(rnd) == camp.expected[rnd]["heldout_items"]
        assert [r["file"] for r in data.heldout_results(rnd)] == [f"held{i}.py" for i in range(4)]
    plays = data.heldout_transcripts(2, "humaneval")
    assert list(plays) == SUITES["humaneval"]
    assert plays["HumanEval/12"][0]["content"] == "[task HumanEval/12] Solve it (round 2)."
    assert data.heldout_transcripts(2, "nope") == {} and data.heldout_items(ROUNDS) == []


def test_campaign_without_suites(tmp_path):
    camp = build_campaign(tmp_path, rounds=2, environments=4, suites=False)
    data = CampaignData(camp.root, camp.campaign_id)
    ov = data.overview()
    assert ov.suites() == [] and all(r.heldout_suites == {} for r in ov.rounds)
    assert data.heldout_items(1) == [] and len(data.heldout_results(1)) == 4
    assert ov.round(1).heldout_win_rate == pytest.approx(camp.expected[1]["heldout_win_rate"])


def test_loader_is_shared_and_warm(camp):
    one = loader(camp.root, camp.campaign_id)
    assert loader(camp.root, camp.campaign_id) is one
    assert loader(camp.root, camp.campaign_id, '{"anon": false}') is not one
    ov = one.warm()
    assert one.overview(max_age_s=60) is ov  # the page's first overview is the warm one
    assert one.attempts(ROUNDS - 1)  # the latest round's attempts were read
    assert all("completion" in a and "token_ids" not in a for a in one.attempts(ROUNDS - 1))


def test_overview_refreshes_in_the_background(tmp_path):
    camp = build_campaign(tmp_path, rounds=2, environments=4)
    data = CampaignData(camp.root, camp.campaign_id)
    first = data.overview()
    cfg = CampaignConfig.model_validate({"storage": {"root": camp.root}})
    rec = StageRecord(RoundContext.open(cfg, camp.campaign_id, 1), "publish")
    rec.write_json("weights.json", {"version": "r0001-again", "checkpoint": None, "kind": "lora"})
    rec.commit(seconds=1.0)
    assert data.overview(max_age_s=0.0, wait=False) is first  # stale, answered at once
    refreshing = data._refreshing
    assert refreshing is not None
    refreshing.join(timeout=30)
    assert data.overview(max_age_s=60, wait=False).round(1).weights == "r0001-again"


def test_s3_store(s3_bucket):
    root = f"s3://{s3_bucket.name}/runs"
    options = s3_bucket.storage_options
    camp = build_campaign(root, rounds=2, environments=4, in_progress=True, storage_options=options)
    data = CampaignData(root, camp.campaign_id, s3_bucket.storage_options)
    ov = data.overview()
    assert len(ov.rounds) == 3 and ov.rounds[-1].attempts == 0
    for r in ov.rounds[:2]:
        assert r.win_rate == pytest.approx(camp.expected[r.round]["win_rate"])
        assert r.memory_size == camp.expected[r.round]["memory_size"]
    env = next(e for e in camp.envs.values() if e["accepted"])
    assert data.env_detail(1, env["env_id"]).code == env["code"]
    assert len(data.trajectories(1, env["env_id"])) == 8
    assert ov.rounds[1].heldout_suites == camp.expected[1]["heldout_suites"]
    assert data.heldout_items(1) == camp.expected[1]["heldout_items"]
    assert list(data.heldout_transcripts(1, "bfcl_multi_turn")) == SUITES["bfcl_multi_turn"]
    assert len(data.heldout_results(1)) == 4
