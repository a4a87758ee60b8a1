"""``spade pool import``: every environment verified in the jail, the accepted ones stored
content-addressed with their verdicts, a report of why the others failed; waivers reported."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from spade.cli import app
from spade.config import VerifyConfig
from spade.curriculum.stored import read_index, read_pool
from spade.errors import ConfigError, StorageError
from spade.pools import import_pool
from spade.storage import ObjectStore
from tests.pools.builders import games_pool, renamed, sha256, sources

pytestmark = pytest.mark.sandbox


def test_an_import_stores_the_accepted_and_reports_the_rest(tmp_path, policy):
    envs = sources() | {
        "game_zcopy": sources()["game_number_hunt"],  # the same source
        "game_zrenamed": renamed("code_breaker"),  # the same normalised source
    }
    root = games_pool(tmp_path / "pool", envs, tamper="game_switchboard")
    store = ObjectStore(str(tmp_path / "store"))
    seen: list[tuple[int, int]] = []
    report = import_pool(
        str(root), store, "ref", policy=policy, workers=2, progress=lambda *a: seen.append(a)
    )
    # every environment is accounted for: accepted, or rejected with a kind and a reason
    assert (report.total, report.accepted, report.rejected) == (7, 2, 5)
    assert report.by_kind == {
        "checksum": 1,
        "duplicate_source": 1,
        "syntax": 1,
        "seed_independent": 1,
        "duplicate": 1,
    }
    why = {r.name: (r.kind, r.check) for r in report.rejections}
    assert why == {
        "game_switchboard": ("checksum", None),
        "game_zcopy": ("duplicate_source", None),
        "game_broken": ("syntax", "parse"),
        "game_fixed": ("seed_independent", "seed_dependence"),
        "game_zrenamed": ("duplicate", "novelty"),
    }
    copy = next(r for r in report.rejections if r.name == "game_zrenamed")
    assert copy.reason.startswith("a near-verbatim copy of 'game_code_breaker'")
    assert seen[0] == (0, 5) and sorted(seen)[-1] == (5, 5)  # the progress of 5 verifications
    # the accepted ones, content-addressed by the sha256 of their source, with their verdicts
    stored = read_pool(store, "ref")
    assert [(e.name, code) for e, code in stored] == [  # in file order
        ("game_code_breaker", envs["game_code_breaker"]),
        ("game_number_hunt", envs["game_number_hunt"]),
    ]
    for env, code in stored:
        assert env.sha256 == sha256(code) and store.get_blob(env.sha256) == code.encode()
        assert env.skill != "unknown" and env.meta["win_rate"] == 0.5 and env.waived == []
    verdicts = store.list("pools/ref/verdicts")
    assert len(verdicts) == 5  # every verified environment, rejected ones too
    fixed = store.read_json(f"pools/ref/verdicts/{sha256(envs['game_fixed'])}.json")
    assert fixed["failed_check"] == "seed_dependence" and not fixed["accepted"]
    saved = store.read_json("pools/ref/report.json")
    assert saved["by_kind"] == report.by_kind and len(saved["rejections"]) == 5


def test_a_waiver_accepts_a_fixed_instance_and_marks_it(tmp_path, policy):
    envs = sources(good=("number_hunt",)) | {"game_zrenamed": renamed("number_hunt")}
    root = games_pool(tmp_path / "pool", envs)
    store = ObjectStore(str(tmp_path / "store"))
    config = VerifyConfig(waive=["seed_dependence", "novelty"])
    report = import_pool(str(root), store, "lenient", policy=policy, config=config)
    assert (report.accepted, report.by_kind, report.waive) == (3, {"syntax": 1}, config.waive)
    assert report.waived == {"seed_dependence": 1, "novelty": 1}
    by_name = {e.name: e for e in read_index(store, "lenient")}
    assert by_name["game_fixed"].waived == ["seed_dependence"]
    assert by_name["game_number_hunt"].waived == []
    assert by_name["game_zrenamed"].waived == ["novelty"]
    verdict = store.read_json(f"pools/lenient/verdicts/{by_name['game_fixed'].sha256}.json")
    assert (
        verdict["accepted"]
        and {"name": "seed_dependence"}.items()
        <= next(c for c in verdict["checks"] if c.get("waived")).items()
    )
    # importing under the name again replaces the pool
    again = import_pool(str(root), store, "lenient", policy=policy)
    assert again.accepted == 1 and [e.name for e in read_index(store, "lenient")] == [
        "game_number_hunt"
    ]
    assert again.by_kind == {"syntax": 1, "seed_independent": 1, "duplicate": 1}
    with pytest.raises(ConfigError, match="no environment pool 'other'"):
        read_index(store, "other")


def test_a_re_import_replaces_the_pool_only_once_the_new_one_is_whole(
    tmp_path, policy, monkeypatch
):
    store = ObjectStore(str(tmp_path / "store"))
    first = sources(good=("number_hunt", "code_breaker"))
    import_pool(str(games_pool(tmp_path / "one", first)), store, "ref", policy=policy)
    old = read_pool(store, "ref")
    assert [e.name for e, _ in old] == ["game_code_breaker", "game_number_hunt"]
    second = {"game_switchboard": sources(good=("switchboard",))["game_switchboard"]}
    root = games_pool(tmp_path / "two", second)

    # the store fails while the new pool is written: the old one is still read, whole
    def lost(data: bytes) -> str:
        raise StorageError("the store went away")

    with monkeypatch.context() as mp:
        mp.setattr(store, "put_blob", lost)
        with pytest.raises(StorageError, match="went away"):
            import_pool(str(root), store, "ref", policy=policy)
    assert read_pool(store, "ref") == old

    report = import_pool(str(root), store, "ref", policy=policy)
    assert report.accepted == 1 and [e.name for e, _ in read_pool(store, "ref")] == [
        "game_switchboard"
    ]
    # only the new import's verdicts are left
    assert store.list("pools/ref/verdicts") == [
        f"pools/ref/verdicts/{sha256(second['game_switchboard'])}.json"
    ]


def test_the_command_prints_the_report_and_stores_the_pool(tmp_path):
    root = games_pool(tmp_path / "pool", sources(good=("code_breaker",)))
    store = str(tmp_path / "store")
    runner = CliRunner()
    args = ["pool", "import", str(root), "--store", store, "--name", "ref", "--workers", "2"]
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    assert "pool ref (games folder with checksums.sha256, manifest.jsonl): 1 of 3 accepted" in (
        done.output
    )
    assert "game_fixed: seed_independent [seed_dependence]: seeds 1234, 1235, 1236" in done.output
    assert "game_broken: syntax [parse]" in done.output and "pools/ref/report.json" in done.output
    waived = runner.invoke(app, [*args, "--waive", "seed_dependence", "--json"])
    assert waived.exit_code == 0, waived.output
    report = json.loads(waived.output)
    assert (report["accepted"], report["waived"]) == (2, {"seed_dependence": 1})
    bad = runner.invoke(app, [*args, "--waive", "feasibility"])
    assert bad.exit_code == 2 and "waive" in bad.output
    nothing = runner.invoke(app, ["pool", "import", str(tmp_path / "nowhere"), "--store", store])
    assert nothing.exit_code == 2 and "no environment pool at" in nothing.output


def test_a_pool_on_s3_is_imported_into_a_store_on_s3(tmp_path, s3_bucket):
    root = games_pool(tmp_path / "pool", sources(good=("number_hunt",)))
    for path in root.rglob("*"):
        if path.is_file():
            key = f"published/{path.relative_to(root)}"
            s3_bucket.client.put_object(Bucket=s3_bucket.name, Key=key, Body=path.read_bytes())
    options = json.dumps(s3_bucket.storage_options)
    store = f"s3://{s3_bucket.name}/runs"
    args = ["pool", "import", f"s3://{s3_bucket.name}/published", "--name", "far"]
    done = CliRunner().invoke(
        app, [*args, "--store", store, "--storage-options", options, "--source-options", options]
    )
    assert done.exit_code == 0, done.output
    assert "1 of 3 accepted" in done.output
    objects = ObjectStore(store, s3_bucket.storage_options)
    (env,) = read_index(objects, "far")
    assert env.name == "game_number_hunt" and objects.has_blob(env.sha256)
    none = CliRunner().invoke(
        app, ["pool", "export", "nobody", "--store", str(tmp_path), "-o", str(tmp_path / "out")]
    )
    assert none.exit_code == 2 and "has no accepted environment" in none.output
