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
