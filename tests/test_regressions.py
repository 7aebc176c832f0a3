"""Regression tests for defects the reliability properties found in modules other engineers are rewriting
(config validation, the train cells' parts). Each test names the property that found it; the fix was committed on
its own so it can be re-applied after a merge."""
import pytest

from boost_cells import BoostConfig


@pytest.mark.parametrize("doc, level_arg, path", [
    ({"grad_freeze": {"freeze_type": True}}, None, "'grad_freeze.freeze_type'"),   # bool taken for the int 1
    ({"grad_freeze": {"freeze_type": False}}, None, "'grad_freeze.freeze_type'"),
    ({"level": ["O1"]}, None, "'level'"),                                            # unhashable: TypeError
    ({"level": {"O1": 1}}, None, "'level'"),
    ({"dim_reduce": {"alpha": 10 ** 400}}, None, "'dim_reduce.alpha'"),              # OverflowError
    ({"grad_freeze": {"freeze_p": -(10 ** 400)}}, None, "'grad_freeze.freeze_p'"),
    ({"loss_scale": {"init": 10 ** 400}}, None, "'loss_scale.init'"),
])
def test_config_value_errors_found_by_generated_documents(doc, level_arg, path):
    """Found by tests/test_config_properties.py: 'freeze_type': true was accepted as 1, a list or object 'level'
    raised TypeError (unhashable), and an int too large for a float raised OverflowError. Each is a ValueError
    naming the key path now."""
    with pytest.raises(ValueError, match="For 'BoostConfig', " + path.replace(".", r"\.") + " must be"):
        BoostConfig.from_dict(doc, level=level_arg)


@pytest.mark.parametrize("content, message", [
    (b'{"level": "O1"\xff}', "is not valid JSON: 'utf-8' codec can't decode"),   # was UnicodeDecodeError, no name
    (b'["O1"]', "must hold a JSON object, but holds list"),                        # was TypeError
    (b'{"level": "O1", "level": "O2"}', "key 'level' is given twice"),            # the first value was dropped
    (b'{"grad_freeze": {"seed": -1}}', "'grad_freeze.seed' must be an int in [0, "),  # named the key, not the file
])
def test_config_file_errors_name_the_file(tmp_path, content, message):
    """Found by tests/test_files.py (corrupted config files): every error about a config file's content is a
    ValueError naming the file."""
    path = tmp_path / "broken.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="broken.json") as caught:
        BoostConfig.from_file(path)
    assert message in str(caught.value)


@pytest.mark.parametrize("doc, path", [
    ({"loss_scale": {"window": 10 ** 30}}, "'loss_scale.window'"),            # RuntimeError at graph build
    ({"loss_scale": {"hysteresis": 10 ** 30}}, "'loss_scale.hysteresis'"),    # OverflowError in np.full(int32)
    ({"loss_scale": {"window": 2 ** 31}}, "'loss_scale.window'"),
    ({"grad_accumulation": {"grad_accumulation_step": 10 ** 30}}, "'grad_accumulation.grad_accumulation_step'"),
    ({"common": {"grad_accumulation_step": 2 ** 31}}, "'common.grad_accumulation_step'"),
    ({"grad_freeze": {"seed": 2 ** 32}}, "'grad_freeze.seed'"),              # numpy: "Seed must be between ..."
])
def test_config_refuses_counts_its_int32_state_cannot_hold(doc, path):
    """Found by tests/test_constructor_properties.py and a build of accepted configs: these values passed the config
    and then failed when the cell was built (RuntimeError/OverflowError from the int32 counters, numpy's seed
    range). The counters are int32 Parameters, so the config now stops at 2**31 - 1 (the seed at 2**32 - 1)."""
    with pytest.raises(ValueError, match="For 'BoostConfig', " + path.replace(".", r"\.") + " must be an int in"):
        BoostConfig.from_dict(doc)
    edge = {section: {key: (2 ** 32 - 1 if key == "seed" else 2 ** 31 - 1) for key in keys}
            for section, keys in doc.items()}
    BoostConfig.from_dict(edge)


HUGE = 10 ** 400   # a JSON int too large for a float


@pytest.mark.parametrize("kwargs, message", [
    ({"loss_scale_value": "1024"}, "'loss_scale_value' must be"),   # was TypeError from '<='
    ({"loss_scale_value": 1024.0, "max_scale": None}, "'max_scale' must be"),
    ({"loss_scale_value": 1024.0, "factor": HUGE}, "'factor' must be"),   # was OverflowError in float()
    ({"loss_scale_value": 1024.0, "factor": float("nan")}, "'factor' must be"),   # was accepted: a nan scale
    ({"loss_scale_value": 1024.0, "factor": "2"}, "'factor' must be"),
    ({"loss_scale_value": 1024.0, "window": float("inf")}, "'window' must be"),   # was OverflowError
    ({"loss_scale_value": 1024.0, "window": "O1"}, "'window' must be"),   # was int() ValueError
    ({"loss_scale_value": 1024.0, "hysteresis": 10 ** 30}, "'hysteresis' must be"),   # OverflowError np.full
    ({"loss_scale_value": 1024.0, "window": 10 ** 30}, "'window' must be"),   # failed at graph build
])
def test_dynamic_loss_scale_arguments_raise_value_error_naming_them(kwargs, message):
    """Found by tests/test_constructor_properties.py (builds or raises naming the argument)."""
    from boost_cells import DynamicLossScaleUpdate
    with pytest.raises(ValueError, match=message):
        DynamicLossScaleUpdate(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    ({"inc": HUGE}, "'inc' must be"),   # was OverflowError in float()
    ({"dec": HUGE}, "'dec' must be"),
    ({"min_scale": "1"}, "'min_scale' must be"),   # was TypeError from '<'
])
def test_log2_loss_scale_arguments_raise_value_error_naming_them(kwargs, message):
    """Found by tests/test_constructor_properties.py."""
    from boost_cells import Log2LossScaleUpdate
    with pytest.raises(ValueError, match=message):
        Log2LossScaleUpdate(1024.0, **kwargs)


@pytest.mark.parametrize("kwargs, message", [
    ({"init_loss_scale": HUGE}, "'init_loss_scale' must be"),   # was OverflowError in math.isfinite
    ({"init_loss_scale": 1024.0, "min_scale": HUGE}, "'min_scale' must be"),
    ({"init_loss_scale": 1024.0, "scale_factor": HUGE}, "'scale_factor' must be"),   # float()
    ({"init_loss_scale": 1024.0, "scale_window": 2 ** 31}, "'scale_window' must be"),   # int32
])
def test_group_loss_scale_manager_arguments_raise_value_error_naming_them(kwargs, message):
    """Found by tests/test_constructor_properties.py."""
    from boost_cells import GroupLossScaleManager
    with pytest.raises(ValueError, match=message):
        GroupLossScaleManager(loss_scale_groups=[], **kwargs)


@pytest.mark.parametrize("steps", [HUGE, 2 ** 31])
def test_gradient_accumulation_refuses_step_counts_its_int32_counter_cannot_hold(graph_mode, steps):
    """Found by tests/test_constructor_properties.py: 10**400 raised OverflowError (1.0 / steps), 10**30 failed
    when the graph was built."""
    from boost_cells import GradientAccumulation
    from tests.helpers import linear_setup
    with pytest.raises(ValueError, match="'max_accumulation_step' must be"):
        GradientAccumulation(steps, linear_setup()[2])


def test_dim_reduce_refuses_an_alpha_too_large_for_a_float_and_a_non_finite_matrix(graph_mode):
    """Found by tests/test_constructor_properties.py (alpha=10**400 raised OverflowError) and the planted-fault
    properties (a nan in 'pca_mat_local' was taken and reached every weight)."""
    import numpy as np
    from boost_cells import DimReduce
    from tests.helpers import linear_setup
    _, net_with_loss, opt = linear_setup()
    args = (net_with_loss, opt, opt.parameters)
    with pytest.raises(ValueError, match="'alpha' must be"):
        DimReduce(*args, np.zeros((2, 15), np.float32), 2, 0.55, 0.9, HUGE, 0.4, 0, 1)
    matrix = np.zeros((2, 15), np.float32)
    matrix[1, 3] = np.nan
    with pytest.raises(ValueError, match="'pca_mat_local' must hold finite real numbers"):
        DimReduce(*args, matrix, 2, 0.55, 0.9, 0.001, 0.4, 0, 1)


def test_dim_reduce_share_waits_with_a_huge_timeout_instead_of_raising_overflow(monkeypatch):
    """Found by generated configs: dim_reduce.timeout 10**30 (a valid int >= 0) made threading's join raise
    OverflowError; it now waits without a practical bound. (The all-reduce is a stand-in that returns at once:
    a real one needs a data-parallel job.)"""
    import numpy as np
    from boost_cells.updates import dim_reduce
    monkeypatch.setattr(dim_reduce.ops, "AllReduce", lambda: (lambda tensor: tensor))
    shared = dim_reduce.share_from_rank0(np.ones((2, 3), np.float32), 0, 10 ** 30)
    np.testing.assert_array_equal(shared, np.ones((2, 3), np.float32))


def test_gradient_freeze_refuses_a_seed_numpy_cannot_take():
    """Found by building accepted configs: seed 2**40 passed and the schedule failed with numpy's "Seed must be
    between 0 and 2**32 - 1", not naming the argument."""
    from boost_cells import GradientFreeze
    with pytest.raises(ValueError, match="'seed' must be an int in \\[0, 4294967295\\]"):
        GradientFreeze(2, 1, 0.5, 10, 2 ** 40)
