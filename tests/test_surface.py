"""Both packages' surfaces, walked side by side: every class of every module of the installed ``mindspore.boost``
(its ``__all__``), its public methods and their signatures, and the public attributes its ``__init__`` sets (read
from its source), against boost_cells' class of the same name, built here (the methods by name on the class, the
attributes on instances built in the cases that set them: accumulation, freezing, group loss scales). A difference
fails unless ``docs/drop-in.md``'s table of differences lists it with its reason, and a listed difference that is
gone fails too, so the table stays true.

Compatible signatures as in ``tests/test_compat_paths.py``: the reference's parameters first, in order, with the same
names, kinds and defaults; any further parameter has a default. Private names (a leading underscore) are the
reference's implementation and are not walked, except those its subclasses call (``SUBCLASS_PRIVATES``)."""
import ast
import importlib
import inspect
import pkgutil
import re
import textwrap

import mindspore.boost as reference
import numpy as np
from mindspore import Tensor, nn

import boost_cells
import boost_cells.updates.adasum
from tests.helpers import accumulation, freeze_config, linear_setup, mlp_setup
from tests.launch import ROOT

# The reference's private methods and attributes that code built on it calls (its train cells' docstrings offer the
# overflow methods to subclasses; MindCV's GradientAccumulation subclass drives the three accumulation names).
SUBCLASS_PRIVATES = {
    "BoostTrainOneStepWithLossScaleCell": ("_set_sense_scale", "_start_overflow_check", "_get_overflow_status",
                                           "_process_loss_scale"),
    "GradientAccumulation": ("_max_accumulation_step", "_grad_accumulation", "_accumulation_step"),
}


def reference_classes():
    """``{name: class}`` for every class in the ``__all__`` of every module of the reference."""
    found = {}
    for info in pkgutil.walk_packages(reference.__path__, reference.__name__ + "."):
        module = importlib.import_module(info.name)
        found.update({name: getattr(module, name) for name in module.__all__ if inspect.isclass(getattr(module, name))})
    return found


def own_base_names(cls):
    """What ``cls`` inherits from outside the reference (``nn.Cell``, ``nn.TrainOneStepCell``, ``object``)."""
    return {name for base in cls.__mro__ if not base.__module__.startswith(reference.__name__)
            for name in dir(base)}


def public_methods(cls):
    return sorted(name for name in dir(cls)
                  if not name.startswith("_") and name not in own_base_names(cls) and callable(getattr(cls, name)))


def init_attributes(cls):
    """The attribute names ``self.X`` that the ``__init__`` of ``cls`` and of its reference bases assign."""
    names = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or not klass.__module__.startswith(reference.__name__):
            continue
        for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(init)))):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            names |= {leaf.attr for target in targets for leaf in ast.walk(target)
                      if isinstance(leaf, ast.Attribute) and isinstance(leaf.value, ast.Name) and leaf.value.id == "self"}
    return sorted(name for name in names if not name.startswith("_"))


def compatible(ours, theirs):
    """Whether a call written for ``theirs`` means the same on ``ours`` (see the module docstring)."""
    try:
        expected, got = (list(inspect.signature(f).parameters.values()) for f in (theirs, ours))
    except (TypeError, ValueError):
        return True  # a builtin without a signature on one side: nothing to compare
    return [(p.name, p.kind, p.default) for p in got[:len(expected)]] == \
        [(p.name, p.kind, p.default) for p in expected] and \
        all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in got[len(expected):])


def present(obj, name):
    """Whether ``obj`` has ``name``: an attribute whose read raises anything but AttributeError is there, refusing
    (a read-only property that names what to read instead)."""
    try:
        return hasattr(obj, name)
    except Exception:  # pylint: disable=broad-except
        return True


def instances(monkeypatch):
    """boost_cells' classes built as a user builds them, some in several cases, so that every attribute the
    reference sets under a condition (accumulation, freezing, group loss scales) has a case where it should be."""
    monkeypatch.setattr(boost_cells.updates.adasum, "ensure_group", lambda name, ranks: name)  # no msrun here
    net, net_with_loss, opt = linear_setup()
    groups = [[p] for p in net.trainable_params()]
    pca = np.linalg.qr(np.random.RandomState(3).randn(15, 2))[0].T.astype(np.float32)
    scaled_net, scaled_with_loss, scaled_opt = linear_setup()
    built = {
        "AdaSum": [boost_cells.AdaSum(0, 1, 2, opt.parameters)],
        "AutoBoost": [boost_cells.AutoBoost("O0", {})],
        "BoostTrainOneStepCell": [
            boost_cells.BoostTrainOneStepCell(*mlp_setup()[1:], boost_config={"level": "O0"}),
            boost_cells.BoostTrainOneStepCell(*mlp_setup()[1:],
                                              boost_config=freeze_config(freeze_type=2, **accumulation(2)))],
        "BoostTrainOneStepWithLossScaleCell": [
            boost_cells.BoostTrainOneStepWithLossScaleCell(*mlp_setup()[1:], Tensor(8.0),
                                                           boost_config=freeze_config(freeze_type=2, **accumulation(2))),
            boost_cells.BoostTrainOneStepWithLossScaleCell(scaled_with_loss, scaled_opt, boost_cells.GroupLossScaleManager(
                8.0, [[p] for p in scaled_net.trainable_params()]))],
        "CommonHeadLastFN": [boost_cells.CommonHeadLastFN(4, 3)],
        "DimReduce": [boost_cells.DimReduce(net_with_loss, opt, opt.parameters, pca, 2, 0.55, 0.9, 0.001, 0.4, 0, 1)],
        "FreezeOpt": [boost_cells.FreezeOpt(opt, groups, [0, 1])],
        "GradientAccumulation": [boost_cells.GradientAccumulation(2, opt)],
        "GradientFreeze": [boost_cells.GradientFreeze(2, 1, 0.5, 10)],
        "GroupLossScaleManager": [boost_cells.GroupLossScaleManager(8.0, groups)],
        "LessBN": [boost_cells.LessBN(net, fn_flag=False)],
        "OptimizerProcess": [boost_cells.OptimizerProcess(opt)],
        "ParameterProcess": [boost_cells.ParameterProcess()],
    }
    built["GroupLossScaleManager"][0].bind(net.trainable_params())
    return built


def surface_differences(monkeypatch):
    """``{(name, kind)}``: each reference name that boost_cells lacks, or has with another surface, where ``name`` is
    ``Class`` or ``Class.member`` and ``kind`` is "class", "constructor", "method", "signature", "attribute" or
    "private" (one of ``SUBCLASS_PRIVATES``)."""
    found = set()
    built = instances(monkeypatch)
    for name, theirs in sorted(reference_classes().items()):
        ours = getattr(boost_cells, name, None)
        if not inspect.isclass(ours):
            found.add((name, "class"))
            continue
        if not compatible(ours.__init__, theirs.__init__):
            found.add((name, "constructor"))
        found |= {(f"{name}.{private}", "private") for private in SUBCLASS_PRIVATES.get(name, ())
                  if not (hasattr(ours, private) or any(present(obj, private) for obj in built[name]))}
        for method in public_methods(theirs):
            if not hasattr(ours, method):
                found.add((f"{name}.{method}", "method"))
            elif callable(getattr(theirs, method, None)) and not compatible(getattr(ours, method),
                                                                            getattr(theirs, method)):
                found.add((f"{name}.{method}", "signature"))
        found |= {(f"{name}.{attribute}", "attribute") for attribute in init_attributes(theirs)
                  if not any(present(obj, attribute) for obj in built[name])}
    return found


def listed_differences():
    """``{(name, kind)}`` from the rows of docs/drop-in.md's table of differences (``| `name` | kind | why |``),
    each with a reason."""
    text = (ROOT / "docs" / "drop-in.md").read_text(encoding="utf-8")
    section = text.split("## Differences from the reference's surface", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([\w.]+)` \| (\w+) \| (.*) \|$", section, re.MULTILINE)
    assert all(len(why.strip()) > 20 for _, _, why in rows), "every listed difference gives its reason"
    return {(name, kind) for name, kind, _ in rows}


def test_every_difference_from_the_reference_surface_is_listed_with_its_reason(monkeypatch):
    assert sorted(surface_differences(monkeypatch) - listed_differences()) == []  # not listed: fix it or list it
    assert sorted(listed_differences() - surface_differences(monkeypatch)) == []  # gone: remove its row


def test_the_walk_sees_what_it_compares():
    """The walk would pass on nothing at all; it reads the reference's train-cell attributes and methods, and a
    missing attribute or an incompatible signature counts."""
    assert {"train_strategy", "auto_boost", "freeze_nets", "sync_tensor"} <= \
        set(init_attributes(reference.BoostTrainOneStepCell))
    assert "gpu_target" in init_attributes(reference.BoostTrainOneStepWithLossScaleCell)
    assert "adasum_process" in public_methods(reference.BoostTrainOneStepCell)
    assert not present(nn.Dense(2, 2), "train_strategy")

    def reference_call(loss, old_grad, loss_scale, weight, weight_clone, *inputs):
        return loss, old_grad, loss_scale, weight, weight_clone, inputs

    def own_call(loss, grads, *inputs):
        return loss, grads, inputs

    assert not compatible(own_call, reference_call) and compatible(reference_call, reference_call)
