"""``mindspore.boost``'s module paths in boost_cells: ``from boost_cells.grad_accumulation import
gradient_accumulation_op`` works wherever ``from mindspore.boost.grad_accumulation import ...`` did.

Each path is a module alias that the package registers when it is imported (``register``, called by
``boost_cells/__init__.py``), holding the reference module's ``__all__`` names, taken from the package's public
names. Aliases rather than nine files: the reference's layout (``base``, ``boost``, a top-level ``dim_reduce``) is
not boost_cells' (see docs/layout.md), so the paths stay a face of the package, listed in one table, and no
name gets a second home. Python's own ``os.path`` is registered the same way. An alias is not a file: it exists once
``boost_cells`` is imported, which ``import boost_cells.grad_accumulation`` and ``from boost_cells.X import Y`` do
first.

This module imports nothing from boost_cells: ``register`` is handed the package.
"""
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType

__all__ = ["REFERENCE_MODULES", "register"]

# (module, its __all__ in the reference's order), for every module of mindspore.boost (MindSpore 2.10).
REFERENCE_MODULES = (
    ("adasum", ("AdaSum",)),
    ("base", ("OptimizerProcess", "ParameterProcess")),
    ("boost", ("AutoBoost",)),
    ("boost_cell_wrapper", ("BoostTrainOneStepCell", "BoostTrainOneStepWithLossScaleCell")),
    ("dim_reduce", ("DimReduce",)),
    ("grad_accumulation", ("GradientAccumulation", "gradient_accumulation_op", "gradient_clear_op")),
    ("grad_freeze", ("GradientFreeze", "FreezeOpt", "freeze_cell")),
    ("group_loss_scale_manager", ("GroupLossScaleManager",)),
    ("less_batch_normalization", ("CommonHeadLastFN", "LessBN")),
)


def register(package):
    """Make every ``REFERENCE_MODULES`` path a module of ``package`` (the imported ``boost_cells`` module): an
    attribute of the package and an entry of ``sys.modules``, whose names are the package's own objects."""
    for short_name, names in REFERENCE_MODULES:
        full_name = f"{package.__name__}.{short_name}"
        alias = ModuleType(full_name, f"mindspore.boost.{short_name}'s names in {package.__name__}: "
                                      f"{', '.join(names)} (an alias registered by {__name__}).")
        alias.__spec__ = ModuleSpec(full_name, None, origin=__file__)
        alias.__all__ = list(names)
        for name in names:
            setattr(alias, name, getattr(package, name))
        setattr(package, short_name, alias)
        sys.modules[full_name] = alias
