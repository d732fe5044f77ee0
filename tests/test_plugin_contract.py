"""The plug-in contract (rlvr_div.trainers.plugin): what a plug-in declares (its keys' ranges, how it is selected,
its checks against the task) is enforced by the base class, and no module outside the plug-ins holds a plug-in key's
range."""

import dataclasses
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from train_checks import trainer_config

from rlvr_div.errors import ConfigError
from rlvr_div.ranges import AT_LEAST_ONE, UNIT, is_integer_field, out_of_range
from rlvr_div.recipe import checks
from rlvr_div.trainers.grpo import DivergenceGRPOConfig
from rlvr_div.trainers.plugin import GRPOPlugin, active_plugins, plugin_classes


@dataclass
class _ToyArgs:
    toy: bool = False
    toy_k: int = 2
    toy_share: float = 0.5


class _Toy(GRPOPlugin):
    name = "toy"
    Args = _ToyArgs
    selected_by = "toy: true"
    switches = ("toy",)
    ranges = {"toy_k": AT_LEAST_ONE, "toy_share": UNIT}

    @classmethod
    def active(cls, args):
        return args.toy

    @classmethod
    def train_dataset(cls, args):
        return ["toy row"]


def _args(**kw):
    return SimpleNamespace(**{**dataclasses.asdict(_ToyArgs()), **kw})


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"toy": True, "toy_k": 0}, "toy_k must be an integer >= 1, got 0"),
        ({"toy": True, "toy_k": 1.5}, "toy_k must be an integer >= 1, got 1.5"),
        ({"toy": True, "toy_k": True}, "toy_k must be an integer >= 1, got True"),
        ({"toy": True, "toy_share": 1.5}, r"toy_share must be a finite number in \[0, 1\], got 1.5"),
        ({"toy": True, "toy_share": float("nan")}, "toy_share must be a finite number in"),
        ({"toy": True, "toy_share": "half"}, "toy_share must be a finite number in"),
        ({"toy_share": 0.25}, "toy_share=0.25 acts only with toy: true"),
    ],
)
def test_the_base_class_enforces_what_a_plug_in_declares(kw, message):
    with pytest.raises(ConfigError, match=message) as err:
        _Toy.check_declared(_args(**kw))
    assert "\n" not in str(err.value)


def test_declared_values_that_hold_pass():
    _Toy.check_declared(_args(toy=True, toy_k=1, toy_share=1))
    _Toy.check_declared(_args())  # not selected, nothing set
    # not selected: an out-of-range value is refused as not acting, before its range is read
    with pytest.raises(ConfigError, match="toy_k=0 acts only with toy: true"):
        _Toy.check_declared(_args(toy_k=0))


def test_a_range_for_a_key_the_plug_in_does_not_have_is_a_programming_error():
    class Broken(_Toy):
        name = "broken"
        ranges = {"toy_kk": AT_LEAST_ONE}

    with pytest.raises(TypeError, match="plug-in 'broken' declares 'toy_kk', which is not in its Args"):
        Broken.check_declared(_args(toy=True))


def test_only_active_plug_ins_are_listed(monkeypatch):
    import rlvr_div.trainers.plugin as plugin

    monkeypatch.setattr(plugin, "plugin_classes", lambda: [_Toy])
    assert active_plugins(_args()) == []
    assert active_plugins(_args(toy=True)) == [_Toy]
    assert active_plugins(SimpleNamespace(toy=True)) == []  # another trainer's config: none active


def test_an_active_plug_in_may_replace_the_training_set_and_two_may_not(monkeypatch):
    import rlvr_div.trainers.plugin as plugin

    class _Other(_Toy):
        name = "other"

    monkeypatch.setattr(plugin, "plugin_classes", lambda: [_Toy])
    assert plugin.train_dataset_of(_args()) is None
    assert plugin.train_dataset_of(_args(toy=True)) == ["toy row"]
    monkeypatch.setattr(plugin, "plugin_classes", lambda: [_Toy, _Other])
    with pytest.raises(ConfigError, match="plug-ins 'toy' and 'other' each replace the training set"):
        plugin.train_dataset_of(_args(toy=True))


def test_every_registered_plug_in_declares_ranges_of_its_own_keys_that_hold_their_defaults():
    for cls in plugin_classes():
        own = {f.name: f for f in dataclasses.fields(cls.Args)} if cls.Args else {}
        assert set(cls.ranges) <= set(own), cls.name
        assert set(cls.switches) <= set(own), cls.name
        for key, allowed in cls.ranges.items():
            default = own[key].default
            assert default is None or out_of_range(key, default, allowed, is_integer_field(own[key])) is None, key


def test_no_plug_in_key_has_its_range_in_the_recipe_checks():
    keys = {f.name for cls in plugin_classes() if cls.Args for f in dataclasses.fields(cls.Args)}
    from trl import GRPOConfig

    trl_keys = {f.name for f in dataclasses.fields(GRPOConfig)}
    assert not (set(checks.RANGES) & (keys - trl_keys))


def test_integer_fields_are_read_from_string_or_resolved_annotations():
    @dataclass
    class A:
        n: int = 1
        m: "int | None" = None
        x: float = 0.0
        y: int | None = field(default=None)

    fields = {f.name: f for f in dataclasses.fields(A)}
    assert is_integer_field(fields["n"]) and is_integer_field(fields["m"]) and not is_integer_field(fields["x"])
    fields["y"].type = int | None  # as HfArgumentParser leaves it after resolving the annotations
    assert is_integer_field(fields["y"])


def test_every_key_of_every_plug_in_is_declared_to_act_only_when_it_can():
    """Each key is the selection itself (a switch), a divergence's parameter (acts while that divergence is
    evaluated), or acts only when its plug-in is selected: no key of a plug-in that is off is silently ignored."""
    for cls in plugin_classes():
        own = {f.name for f in dataclasses.fields(cls.Args)} if cls.Args else set()
        assert set(cls.parameters_of) <= own, cls.name
        if cls.selected_by is None:
            declared = set(cls.switches) | set(cls.parameters_of) | set(cls.own_rules)
            assert own <= declared, (cls.name, own - declared)


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"mara_tau": 0.5}, "mara_tau=0.5 acts only with reward_shaping: mara"),
        ({"unlikeliness_lambda": 0.3}, "unlikeliness_lambda=0.3 acts only with reward_shaping: unlikeliness"),
        ({"pkpo_k": 2}, "pkpo_k=2 acts only with reward_shaping: pkpo"),
        ({"rehearsal_coef": 0.5}, "rehearsal_coef=0.5 acts only with rehearsal_path"),
        ({"controller_gain": 0.25}, "controller_gain=0.25 acts only with beta_schedule: validity_target"),
        ({"clip_cov_lb": 0.5}, "clip_cov_lb=0.5 acts only with covariance_penalty: clip_cov or kl_cov"),
        ({"js_scale": 2.0}, "js_scale=2.0 parametrises the 'js' divergence, which no term of this run evaluates"),
        ({"divergence": "js", "divergence_coef": 0.1, "dph_alpha": 0.3}, "dph_alpha=0.3 parametrises the 'alpha'"),
        ({"divergence_gradient": "plain"}, "divergence_gradient='plain' acts only with a divergence term"),
        ({"dpg": True, "dpg_divergence": "js", "dpg_alpha": 0.5}, "dpg_alpha=0.5 acts only with dpg_divergence: alpha"),
        # a key that adds to GRPO's loss is refused beside a plug-in that replaces that loss, even with coefficient 0
        ({"dpg": True, "divergence": "js"}, r"^divergence='js' does not act with trainer: dpg \(it replaces GRPO's"),
        ({"flowrl": True, "divergence": "forward_kl"}, "^divergence='forward_kl' does not act with flowrl: true"),
        # a bad name or coefficient is named as such before any key it would leave idle
        ({"divergence": "jss", "divergence_coef": 0.1, "js_scale": 2.0}, "unknown divergence 'jss'"),
        ({"divergence": "js", "beta": -0.1, "js_scale": 2.0}, "beta must be a finite number >= 0"),
        ({"beta_schedule": "validity-target", "target_validity": 0.8}, "beta_schedule must be one of"),
        (
            {"reward_shaping": "pkpo", "scale_rewards": "group"},
            "scale_rewards='group' does not act with reward_shaping: pkpo, whose advantages are used as they are",
        ),
    ],
)
def test_a_key_of_a_plug_in_that_is_off_is_refused_not_ignored(tmp_path, kw, message):
    with pytest.raises(ConfigError, match=message) as err:
        trainer_config(DivergenceGRPOConfig, tmp_path, **{"scale_rewards": "none", **kw})
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "kw",
    [
        {"divergence": "js", "divergence_coef": 0.1, "js_scale": 2.0},
        {"divergence": "js", "beta": 0.1, "js_scale": 2.0},  # beta: TRL's name of the coefficient
        {"divergence": "alpha", "divergence_coef": 0.1, "dph_alpha": 0.3},
        {"rehearsal_path": "stored", "rehearsal_divergence": "js", "js_scale": 2.0},  # DPH-RL's term evaluates js
        {"rehearsal_path": "stored", "rehearsal_coef": 0.5},
        {"reward_shaping": "pkpo", "pkpo_k": 2, "scale_rewards": "none"},
        {"reward_shaping": "mara", "mara_tau": 0.5, "divergence": "reverse_kl", "divergence_coef": 0.1},
        {"divergence": "js", "divergence_coef": 0.1, "divergence_gradient": "plain"},
        {"divergence_gradient": "plain", "use_bias_correction_kl": False},  # a resolved recipe without a term
        {"dpg": True, "dpg_divergence": "alpha", "dpg_alpha": 0.5},
    ],
)
def test_a_key_acts_where_its_plug_in_or_divergence_is_in_use(tmp_path, kw):
    trainer_config(DivergenceGRPOConfig, tmp_path, **kw)


def test_two_plug_ins_that_own_one_hook_are_refused(monkeypatch):
    """A hook whose result replaces TRL's (the loss forward, the advantages) has one owner: the trainer would run the
    first active plug-in's and silently never the other's."""
    import rlvr_div.trainers.plugin as plugin

    class _Forward(_Toy):
        name = "forward_a"

        def forward(self, base, *args, **kwargs):
            return None

    class _OtherForward(_Forward):
        name = "forward_b"

    class _Advantages(_Toy):
        name = "advantages_a"

        def advantages(self, out):
            return None

    plugin.check_loss_owners([_Forward, _Advantages])  # different hooks: fine
    with pytest.raises(ConfigError, match="^forward_a and forward_b both take over the loss forward; use one$"):
        plugin.check_loss_owners([_Forward, _OtherForward])
    with pytest.raises(ConfigError, match="^advantages_a and advantages_b both set the advantages; use one$"):
        plugin.check_loss_owners([_Advantages, type("_B", (_Advantages,), {"name": "advantages_b"})])


def test_penalties_and_loss_replacers_are_read_through_declared_interfaces(tmp_path, monkeypatch):
    """SimKO refuses a penalty on the per-token log-probabilities that any plug-in declares (its
    ``log_prob_penalties``), and the divergence term a loss replacer that any plug-in declares (``replaces_loss``):
    a new plug-in declaring one is refused by them without their code naming it."""
    import rlvr_div.trainers.plugin as plugin

    config = trainer_config(
        DivergenceGRPOConfig, tmp_path, covariance_penalty="kl_cov", kl_cov_ratio=0.02, num_iterations=2
    )
    assert plugin.log_prob_penalties(config) == ["covariance_penalty: kl_cov"] and plugin.loss_replacers(config) == []
    config = trainer_config(DivergenceGRPOConfig, tmp_path, divergence="js", divergence_coef=0.1)
    assert plugin.log_prob_penalties(config) == ["divergence: js (coefficient > 0)"]
    assert plugin.loss_replacers(trainer_config(DivergenceGRPOConfig, tmp_path, dpg=True)) == ["trainer: dpg"]

    class _Penalty(_Toy):
        name = "toy_penalty"

        @classmethod
        def log_prob_penalties(cls, args):
            return ("toy: true",) if args.toy else ()

    class _Replacer(_Toy):
        name = "toy_replacer"
        replaces_loss = True

    args = SimpleNamespace(simko=True, simko_alpha=0.01, simko_lambda=1.1, toy=True)
    monkeypatch.setattr(plugin, "plugin_classes", lambda: [_Penalty])
    from rlvr_div.trainers.simko import check_simko

    with pytest.raises(ConfigError, match="^simko does not combine with toy: true, a penalty on the per-token log-"):
        check_simko(args)
    monkeypatch.setattr(plugin, "plugin_classes", lambda: [_Replacer])
    from rlvr_div.trainers.divergence_term import DivergenceTerm

    with pytest.raises(ConfigError, match="^divergence='js' does not act with toy: true"):
        DivergenceTerm.prepare(SimpleNamespace(divergence="js", toy=True))


# modules outside the plug-ins that name a plug-in's key by design: the keys each may name, and why
_NAMES_PLUGIN_KEYS = {
    "rlvr_div.divergences": (
        {"divergence", "dph_alpha", "js_scale"},
        "the divergences' own parameter checks, shared by the divergence and rehearsal terms",
    ),
    "rlvr_div.trainers.dph.offline": (
        {"rehearsal_path", "rehearsal_sampling_batch_size"},
        "DPH-RL's offline stage, which reads the recipe's offline-stage keys",
    ),
    "rlvr_div.rehearse": ({"rehearsal_path"}, "DPH-RL's offline stage as a command (rlvr-div rehearse)"),
    "rlvr_div.trainers": ({"divergence", "dpg"}, "the trainer names 'divergence' and 'dpg', not keys"),
    "rlvr_div.trainers.dpg_trainer": ({"dpg"}, "trainer: dpg is the GRPO config with dpg: true"),
    "rlvr_div.theory.beta_controller": (
        {"target_validity"},
        "the controller's own quantity, which the validity target drives",
    ),
    "rlvr_div.theory.calibration": ({"target_validity"}, "the calibration command's option of that name"),
    "rlvr_div.theory.calibration_report": ({"target_validity"}, "the calibration command's option of that name"),
}


def _names(path):
    """Every name a module's source uses as an attribute, a keyword argument or a string, with its line; the strings of
    a ``register_plugin(...)`` call aside (its ``after`` names plug-ins, not keys)."""
    import ast

    tree = ast.parse(path.read_text())
    declared = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "register_plugin"
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in declared:
            continue
        if isinstance(node, ast.Attribute):
            yield node.attr, node.lineno
        elif isinstance(node, ast.keyword) and node.arg is not None:
            yield node.arg, node.value.lineno
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value, node.lineno


def _plugin_keys():
    """(key -> the modules of the plug-ins whose Args hold it, module -> those keys), TRL's GRPOConfig keys left out."""
    import inspect

    from trl import GRPOConfig

    trl_keys = {f.name for f in dataclasses.fields(GRPOConfig)}
    owners: dict[str, set[str]] = {}
    own: dict[str, set[str]] = {}
    for cls in plugin_classes():
        if cls.Args is None:
            continue
        module = inspect.getmodule(cls).__name__
        for key in {f.name for f in dataclasses.fields(cls.Args)} - trl_keys:
            owners.setdefault(key, set()).add(module)
            own.setdefault(module, set()).add(key)
    return owners, own


def _foreign_keys(path, module, owners, own):
    """The uses in ``path`` (module ``module``) of a plug-in key that neither that module's plug-ins own nor the
    module's entry in :data:`_NAMES_PLUGIN_KEYS` allows."""
    allowed = own.get(module, set()) | _NAMES_PLUGIN_KEYS.get(module, (set(), ""))[0]
    return [f"{module}:{line} {name}" for name, line in _names(path) if name in owners and name not in allowed]


def test_no_module_names_another_plug_in_s_keys():
    """A plug-in key (one TRL's GRPOConfig does not have) is read, passed or named only in its plug-in's module or,
    for the keys listed there with their reason, a module of :data:`_NAMES_PLUGIN_KEYS`: a new cross-plug-in read, or
    a method key in the recipe layer, fails here."""
    from pathlib import Path

    owners, own = _plugin_keys()
    assert {"covariance_penalty", "simko", "dpg_alpha", "reward_shaping", "mara_tau"} <= set(owners)  # found them
    root = Path(__file__).resolve().parents[1]
    modules = {  # a package by its name (its __init__ is the module a plug-in class of it lives in)
        ".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
        for p in sorted((root / "rlvr_div").rglob("*.py"))
    }
    found = [use for module, path in modules.items() for use in _foreign_keys(path, module, owners, own)]
    assert not found, found
    assert set(_NAMES_PLUGIN_KEYS) <= set(modules)
    for module, (keys, _) in _NAMES_PLUGIN_KEYS.items():  # each listed key is a plug-in key the module does name
        named = {name for name, _ in _names(modules[module])}
        assert keys <= set(owners) & named, (module, keys - (set(owners) & named))


def test_the_key_scan_sees_a_cross_plug_in_read(tmp_path):
    owners, own = _plugin_keys()
    path = tmp_path / "probe.py"
    path.write_text("def f(args, build):\n    build(simko=True)\n    return args.covariance_penalty == 'kl_cov'\n")
    assert _foreign_keys(path, "rlvr_div.trainers.mara", owners, own) == [
        "rlvr_div.trainers.mara:2 simko",
        "rlvr_div.trainers.mara:3 covariance_penalty",
    ]
    assert _foreign_keys(path, "rlvr_div.trainers.simko", owners, own) == [
        "rlvr_div.trainers.simko:3 covariance_penalty"
    ]
    path.write_text("x = args.mara_tau\n")  # a listed module may name only its listed keys
    assert _foreign_keys(path, "rlvr_div.divergences", owners, own) == ["rlvr_div.divergences:1 mara_tau"]
