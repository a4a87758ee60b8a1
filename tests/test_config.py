"""The campaign configuration: docs/architecture.md §1.4 defaults, YAML loading, overrides and
bad input."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from spade.config import (
    COGNITIVE_SKILLS,
    TOOL_SKILLS,
    CampaignConfig,
    DesignerConfig,
    ScoringConfig,
    load_config,
)
from spade.errors import ConfigError

# ----------------------------------------------------------------------------- defaults


def test_defaults_are_the_reference_numbers():
    cfg = load_config()
    d, e, s, m, c = cfg.designer, cfg.evaluation, cfg.scoring, cfg.memory, cfg.corpus
    # §2.2 design
    assert d.mode == "games"
    assert d.envs_per_round == 24
    assert d.active_skills == 3
    assert d.attempts_per_slot == 5
    assert d.temperature == 0.6
    assert (d.positives, d.negatives) == (2, 1)
    assert d.positive_win_rate == (0.15, 0.85)
    assert (d.too_easy_win_rate, d.too_hard_win_rate) == (0.9, 0.1)
    # §2.4 hint
    assert d.hint_temperature == 0.3
    # §2.5 evaluate
    assert (e.unhinted_plays, e.hinted_plays, e.max_turns) == (8, 16, 25)
    assert cfg.sandbox.verify.max_turns == 25
    # §2.6 score
    assert s.regret_estimator == "mean_gap"
    assert s.designer_reward == "blend"
    assert s.plateau_weight == 0.6
    assert s.regret_scale == 0.15
    assert (s.plateau_low, s.plateau_high, s.plateau_ramp) == (0.4, 0.6, 0.25)
    assert s.centre_per_skill is True
    assert s.invalid_reward == 0.0
    assert s.timeout_penalty == -0.5
    # §2.7 remember
    assert (m.capacity, m.code_head_chars) == (200, 20_000)  # whole code (the reference: 2,000)
    # the designer's help: whole examples within a budget, one repair turn, writing by default
    assert (d.strategy, d.repair_turns, d.max_example_chars) == ("write", 1, 4000)
    # §2.1 corpus
    assert (c.max_words_games, c.max_words_tool_use) == (6000, 4000)
    assert c.text_fields == ["text", "orig_doc"]
    # between regenerations the same environments are replayed (4 games, 8 tool use)
    assert cfg.run.regen_interval == 4


def test_training_defaults_are_the_reference_numbers():
    """docs/architecture.md §2.9: GRPO with z-scored advantages, clip-higher, a small KL, lr 1e-6
    or LoRA."""
    t = load_config().training
    assert t.advantage_std is True  # z-scored within each environment's plays
    assert (t.eps_low, t.eps_high) == (0.2, 0.28)
    assert 0.0 <= t.kl_coef <= 0.005 and t.kl_coef == 0.0  # reference range 0..0.005
    assert load_config(overrides={"training.kl_coef": 0.005}).training.kl_coef == 0.005
    assert t.kl_estimator == "k3"
    assert t.lr == 1e-6 and t.designer_lr == 1e-6  # full fine-tune
    assert t.lora.enabled is False  # ... or LoRA, one switch away
    assert load_config(overrides={"training.lora.enabled": True}).training.lora.enabled
    assert t.designer_delay_steps > 0  # the designer trains a few steps late (IS-corrected)
    assert t.is_cap > 0.0
    assert t.updates_per_batch == 1  # one on-policy step per batch unless asked for more
    assert t.engine == "torch"  # plain torch on one device; DeepSpeed at scale
    assert load_config(overrides={"training.engine": "deepspeed"}).training.engine == "deepspeed"
    assert t.deepspeed.bf16 is False  # fp32 master weights, bf16 autocast for a bf16 model


def test_default_config_equals_the_default_model():
    assert load_config() == CampaignConfig()


def test_skills_follow_the_mode():
    assert len(COGNITIVE_SKILLS) == len(TOOL_SKILLS) == 6
    assert DesignerConfig().skills == COGNITIVE_SKILLS
    assert DesignerConfig(mode="tool_use").skills == TOOL_SKILLS


# ----------------------------------------------------------------------------- loading


def write(tmp_path: Path, text: str, name: str = "campaign.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_load_from_yaml(tmp_path):
    path = write(
        tmp_path,
        """
name: trial-1
seed: 7
designer:
  mode: tool_use
  envs_per_round: 6
  positive_win_rate: [0.2, 0.8]
evaluation:
  hinted_plays: 4
corpus:
  path: s3://bucket/docs.jsonl
  storage_options: {endpoint_url: "http://127.0.0.1:9000"}
""",
    )
    cfg = load_config(path)
    assert cfg.name == "trial-1" and cfg.seed == 7
    assert cfg.designer.mode == "tool_use" and cfg.designer.envs_per_round == 6
    assert cfg.designer.positive_win_rate == (0.2, 0.8)
    assert cfg.evaluation.hinted_plays == 4
    assert cfg.evaluation.unhinted_plays == 8  # untouched fields keep their defaults
    assert cfg.corpus.storage_options == {"endpoint_url": "http://127.0.0.1:9000"}


def test_load_accepts_str_paths_and_empty_files(tmp_path):
    assert load_config(str(write(tmp_path, ""))) == CampaignConfig()
    assert load_config(write(tmp_path, "# only a comment\n", "c.yaml")) == CampaignConfig()


def test_dotted_overrides(tmp_path):
    path = write(tmp_path, "designer:\n  envs_per_round: 6\n  temperature: 0.9\n")
    cfg = load_config(
        path,
        overrides={
            "designer.envs_per_round": 3,
            "scoring.plateau_ramp": 0.1,
            "inference.vllm.port": 9001,
            "seed": 5,
        },
    )
    assert cfg.designer.envs_per_round == 3  # the override wins over the file
    assert cfg.designer.temperature == 0.9  # the file's other values stay
    assert cfg.scoring.plateau_ramp == 0.1
    assert cfg.inference.vllm.port == 9001  # three levels deep
    assert cfg.seed == 5


def test_overrides_without_a_file():
    cfg = load_config(overrides={"designer.mode": "tool_use", "memory.capacity": 10})
    assert cfg.designer.mode == "tool_use" and cfg.memory.capacity == 10


def test_override_values_are_validated_like_the_file():
    # strings as a command line gives them are coerced where unambiguous
    assert load_config(overrides={"designer.envs_per_round": "4"}).designer.envs_per_round == 4
    with pytest.raises(ConfigError, match=r"designer\.envs_per_round"):
        load_config(overrides={"designer.envs_per_round": "many"})


def test_override_through_a_scalar_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="name"):
        load_config(overrides={"name.first": "x"}, path=write(tmp_path, "name: abc\n"))
    with pytest.raises(ConfigError, match="designer"):
        load_config(write(tmp_path, "designer: 3\n"), overrides={"designer.mode": "games"})


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"designer.envs_per_round": -1}, "designer.envs_per_round"),
        ({"designer.envs_per_round": 0}, "designer.envs_per_round"),
        ({"designer.attempts_per_slot": -3}, "designer.attempts_per_slot"),
        ({"designer.active_skills": 7}, "designer.active_skills"),
        ({"evaluation.unhinted_plays": -1}, "evaluation.unhinted_plays"),
        ({"evaluation.hinted_plays": -16}, "evaluation.hinted_plays"),
        ({"evaluation.max_turns": 0}, "evaluation.max_turns"),
        ({"memory.capacity": -200}, "memory.capacity"),
        ({"memory.code_head_chars": 0}, "memory.code_head_chars"),
        ({"corpus.min_words": -1}, "corpus.min_words"),
        ({"sandbox.workers": 0}, "sandbox.workers"),
        ({"inference.max_retries": -1}, "inference.max_retries"),
        ({"designer.temperature": -0.1}, "designer.temperature"),
        ({"designer.temperature": float("nan")}, "designer.temperature"),
        ({"scoring.regret_scale": 0.0}, "scoring.regret_scale"),
        ({"seed": -1}, "seed"),
        ({"designer.bogus": 1}, "designer.bogus"),
        ({"bogus_section": {}}, "bogus_section"),
        ({"inference.vllm.bogus": 1}, "inference.vllm.bogus"),
        ({"sandbox.verify.bogus": 1}, "sandbox.verify.bogus"),
        ({"designer.mode": "chess"}, "designer.mode"),
        ({"inference.backend": "tgi"}, "inference.backend"),
        ({"scoring.designer_reward": "fun"}, "scoring.designer_reward"),
        ({"model.dtype": "int4"}, "model.dtype"),
        ({"corpus.format": "csv"}, "corpus.format"),
        ({"name": "has spaces/slashes"}, "name"),
        ({"corpus.text_fields": []}, "corpus.text_fields"),
        ({"designer.positive_win_rate": [0.1, 0.2, 0.3]}, "designer.positive_win_rate"),
    ],
)
def test_bad_values_name_the_field(overrides, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(overrides=overrides)


def test_bad_field_in_a_file_names_the_file_and_the_field(tmp_path):
    path = write(tmp_path, "evaluation:\n  hinted_plays: -2\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(path) in str(info.value) and "evaluation.hinted_plays" in str(info.value)


def test_every_bad_field_is_reported_at_once(tmp_path):
    path = write(tmp_path, "designer:\n  envs_per_round: -1\n  mode: chess\nmemory:\n  x: 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    for field in ("designer.envs_per_round", "designer.mode", "memory.x"):
        assert field in str(info.value)


def test_plateau_low_above_high_is_an_error():
    with pytest.raises(ConfigError, match="plateau_low"):
        load_config(overrides={"scoring.plateau_low": 0.7, "scoring.plateau_high": 0.5})
    ok = load_config(overrides={"scoring.plateau_low": 0.5, "scoring.plateau_high": 0.5})
    assert ok.scoring.plateau_low == ok.scoring.plateau_high == 0.5


@pytest.mark.parametrize("band", [[0.8, 0.2], [-0.1, 0.5], [0.5, 1.5]])
def test_positive_win_rate_out_of_order_is_an_error(band):
    with pytest.raises(ConfigError, match="positive_win_rate"):
        load_config(overrides={"designer.positive_win_rate": band})


def test_too_hard_above_too_easy_is_an_error():
    with pytest.raises(ConfigError, match="too_hard_win_rate"):
        load_config(
            overrides={"designer.too_hard_win_rate": 0.95, "designer.too_easy_win_rate": 0.9}
        )


def test_assignment_is_validated_too():
    cfg = ScoringConfig()
    with pytest.raises(ValueError, match="plateau_ramp"):
        cfg.plateau_ramp = -1.0


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "42\n"])
def test_non_mapping_yaml_is_an_error(tmp_path, text):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match="mapping"):
        load_config(path)


def test_malformed_yaml_is_an_error(tmp_path):
    path = write(tmp_path, "designer: {mode: games\n  envs_per_round: [1,\n")
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(path)


def test_unsafe_yaml_tags_are_refused(tmp_path):
    path = write(tmp_path, "seed: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(path)


def test_missing_file_is_an_error(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match=r"nope\.yaml"):
        load_config(missing)


def test_folder_instead_of_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path)


def test_undecodable_file_is_an_error(tmp_path):
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"\xff\xfe\x00\x81 not yaml")
    with pytest.raises(ConfigError, match=r"binary\.yaml"):
        load_config(path)


# ----------------------------------------------------------------------------- round trip


def test_resolved_yaml_round_trips_the_defaults(tmp_path):
    cfg = load_config()
    path = write(tmp_path, cfg.resolved_yaml())
    assert load_config(path) == cfg


def test_resolved_yaml_round_trips_changed_values(tmp_path):
    cfg = load_config(
        overrides={
            "name": "round-trip",
            "designer.mode": "tool_use",
            "designer.positive_win_rate": [0.3, 0.7],
            "sandbox.policy_path": str(tmp_path / "policy.yaml"),
            "corpus.storage_options": {"endpoint_url": "http://x:1", "key": "k"},
            "inference.vllm.extra_args": ["--max-model-len", "2048"],
            "model.gguf_file": "m.gguf",
            "sandbox.verify.garbage_actions": ["", "\\boxed{"],
        }
    )
    text = cfg.resolved_yaml()
    data = yaml.safe_load(text)
    assert data["designer"]["envs_per_round"] == 24  # defaults are written out too
    assert "verify" in data["sandbox"] and "vllm" in data["inference"]
    again = load_config(write(tmp_path, text))
    assert again == cfg
    assert again.resolved_yaml() == text


# ----------------------------------------------------------------------------- descriptions


def _walk(model: type[BaseModel], prefix: str = ""):
    for name, info in model.model_fields.items():
        dotted = f"{prefix}{name}"
        yield dotted, info
        for arg in [info.annotation, *typing.get_args(info.annotation)]:
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                yield from _walk(arg, f"{dotted}.")


def test_every_field_has_a_description():
    fields = list(_walk(CampaignConfig))
    assert len(fields) > 80  # the walk reaches every section
    assert any(name == "sandbox.verify.garbage_actions" for name, _ in fields)
    missing = []
    for dotted, info in fields:
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            # a section: its class docstring is its description in the JSON schema (UI form)
            if not (info.description or (annotation.__doc__ or "").strip()):
                missing.append(dotted)
        elif not (info.description or "").strip():
            missing.append(dotted)
    assert not missing, missing


NUMERIC_EXEMPT = {
    # field: why it has no ge/le of its own
    "designer.positive_win_rate": "a (lo, hi) pair; DesignerConfig._bands keeps 0 <= lo <= hi <= 1",
}


def _is_numeric(annotation: object) -> bool:
    if annotation is bool:  # a bool is an int to Python, but has no range to bound
        return False
    if annotation in (int, float):
        return True
    return any(_is_numeric(arg) for arg in typing.get_args(annotation))


def test_every_numeric_field_has_both_bounds():
    numeric = {name: info for name, info in _walk(CampaignConfig) if _is_numeric(info.annotation)}
    # the walk reaches numbers in every corner: nested, optional, in lists of sections
    assert {"seed", "sandbox.verify.reward_min", "inference.vllm.port"} <= set(numeric)
    assert {"run.heldout_suites.seed", "metrics.prometheus_port"} <= set(numeric)
    assert set(NUMERIC_EXEMPT) <= set(numeric), "an exemption names no numeric field"
    unbounded = []
    for dotted, info in numeric.items():
        kinds = {type(m).__name__ for m in info.metadata}
        lower, upper = kinds & {"Ge", "Gt"}, kinds & {"Le", "Lt"}
        if not (lower and upper) and dotted not in NUMERIC_EXEMPT:
            unbounded.append(dotted)
    assert not unbounded, unbounded


@pytest.mark.parametrize(
    "field",
    [
        "seed",
        "designer.seed",
        "evaluation.seed",
        "training.seed",
        "sandbox.verify.seed",
    ],
)
def test_seeds_fit_in_32_bits(field):
    assert load_config(overrides={field: 2**32 - 1})
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(overrides={field: 2**32})
    suite = {"name": "humaneval", "seed": 2**32}
    with pytest.raises(ConfigError, match="seed"):
        load_config(overrides={"run.heldout_suites": [suite]})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"sandbox.verify.reward_min": float("-inf")}, "reward_min"),
        ({"sandbox.verify.reward_max": float("inf")}, "reward_max"),
        ({"sandbox.verify.reward_max": float("nan")}, "reward_max"),
        (
            {"sandbox.verify.reward_min": 0.0, "sandbox.verify.reward_max": 0.0},
            "reward_min must be below reward_max",
        ),
        (
            {"sandbox.verify.reward_max": 0.5},
            "success_threshold must not exceed reward_max",
        ),
    ],
)
def test_the_reward_range_is_finite_and_ordered(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(overrides=overrides)


def test_a_wider_reward_range_is_accepted():
    cfg = load_config(
        overrides={"sandbox.verify.reward_min": -5.0, "sandbox.verify.reward_max": 5.0}
    )
    assert (cfg.sandbox.verify.reward_min, cfg.sandbox.verify.reward_max) == (-5.0, 5.0)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000/v1", "https://api.example.com/v1", "http://vllm:8000/v1"]
)
def test_base_url_accepts_http_urls(url):
    assert load_config(overrides={"inference.base_url": url}).inference.base_url == url


@pytest.mark.parametrize(
    "url", ["127.0.0.1:8000/v1", "ftp://host/v1", "http://", "http:// spaced/v1", ""]
)
def test_base_url_must_be_an_http_url(url):
    with pytest.raises(ConfigError, match=r"inference\.base_url"):
        load_config(overrides={"inference.base_url": url})


def test_evaluation_and_verifier_share_the_success_threshold():
    both = {"evaluation.success_threshold": 0.5, "sandbox.verify.success_threshold": 0.5}
    assert load_config(overrides=both).evaluation.success_threshold == 0.5
    with pytest.raises(ConfigError, match="success_threshold must equal"):
        load_config(overrides={"evaluation.success_threshold": 0.5})
    with pytest.raises(ConfigError, match="success_threshold must equal"):
        load_config(overrides={"sandbox.verify.success_threshold": 0.5})
    # turn bounds may differ (evaluation caps every play): documented, not refused
    assert load_config(overrides={"evaluation.max_turns": 4}).sandbox.verify.max_turns == 25


def test_hint_limits_are_config_fields():
    d = load_config().designer
    assert (d.hint_max_sentences, d.hint_tries) == (3, 2)  # docs/architecture.md §2.4
    for field, bad in [("hint_max_sentences", 0), ("hint_tries", 0), ("hint_tries", 11)]:
        with pytest.raises(ConfigError, match=f"designer\\.{field}"):
            load_config(overrides={f"designer.{field}": bad})


def test_every_section_has_a_docstring_in_the_schema():
    schema = CampaignConfig.model_json_schema()
    for name, definition in schema["$defs"].items():
        assert definition.get("description"), name


def test_heldout_suites_are_validated():
    cfg = load_config(
        overrides={"run.heldout_suites": [{"name": "humaneval", "size": 3, "subsets": ["7"]}]}
    )
    assert cfg.run.heldout_suites[0].size == 3 and cfg.run.heldout_suites[0].max_turns is None
    with pytest.raises(ConfigError, match="name"):
        load_config(overrides={"run.heldout_suites": [{"name": "mmlu"}]})
    with pytest.raises(ConfigError, match="size"):
        load_config(overrides={"run.heldout_suites": [{"name": "humaneval", "size": 0}]})
    with pytest.raises(ConfigError, match="more than once: humaneval"):
        load_config(overrides={"run.heldout_suites": [{"name": "humaneval"}] * 2})


def test_lora_for_an_external_server_needs_a_store_the_server_mounts():
    lora = {"inference.backend": "openai", "training.lora.enabled": True}
    with pytest.raises(ConfigError, match=r"storage\.root on a filesystem the server mounts"):
        load_config(overrides={**lora, "storage.root": "s3://bucket/runs"})
    assert load_config(overrides={**lora, "storage.root": "/mnt/shared/runs"})  # mounted path
    assert load_config(overrides={**lora, "storage.root": "s3://b/r", "run.train": False})
    managed = {**lora, "inference.backend": "vllm", "storage.root": "s3://bucket/runs"}
    assert load_config(overrides=managed)  # a managed server here gets a local copy
