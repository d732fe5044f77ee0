"""The plug-in contract (rlvr_div.trainers.plugin): what a plug-in declares (its keys' ranges, how it is selected,
its checks against the task) is enforced by the base class, and no module outside the plug-ins holds a plug-in key's
range."""

import dataclasses
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from rlvr_div import preflight
from rlvr_div.errors import ConfigError
from rlvr_div.ranges import AT_LEAST_ONE, UNIT, is_integer_field, out_of_range
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

    with pytest.raises(TypeError, match="plug-in 'broken' declares a range for 'toy_kk'"):
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


def test_no_plug_in_key_has_its_range_in_preflight():
    keys = {f.name for cls in plugin_classes() if cls.Args for f in dataclasses.fields(cls.Args)}
    from trl import GRPOConfig

    trl_keys = {f.name for f in dataclasses.fields(GRPOConfig)}
    assert not (set(preflight.RANGES) & (keys - trl_keys))


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
