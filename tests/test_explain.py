"""What a config will do, printed: ``python -m boost_cells explain`` on every shipped config (O1 by name too) and on
broken files (exit status 2, the library's own error naming the file and the key), ``boost_cells.explain``'s numbers
against the freezing module's own (the sequences and the automatic schedule's criterion), and ``Model.train``'s log:
one INFO line at its start with the run's numbers, the whole summary at DEBUG, nothing without a logging setup.

The command line runs twice as a subprocess (every shipped config in one call, the broken files in another); the
rest goes through the Python functions and ``boost_cells.__main__.main`` in this process."""
import json
import logging
import os
import re
import subprocess
import sys
import warnings

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
import pytest
from mindspore import nn
from mindspore.train import Callback

from boost_cells import BoostConfig, BoostConfigWarning, BoostTrainOneStepCell, Model
from boost_cells.__main__ import main
from boost_cells.explain import Run, explain, summary
from boost_cells.freezing import FreezePlan, auto_criterion, freeze_index_sequence
from boost_cells.freezing.host.payback import Costs, cache_pays, paying_levels
from tests.launch import ROOT

RUN = Run(epochs=12, steps_per_epoch=44)  # the digits workload of the benchmarks: 44 updates an epoch


def command(*args):
    """``python -m boost_cells explain ARGS`` from the repository root, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "boost_cells", "explain", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def blocks(stdout):
    """The command's output per file: ``{path: text}`` (a file's block starts with the line ``path:``), its wrapped
    lines joined again (every run of spaces and line ends one space)."""
    parts = re.split(r"^(\S.*):$", stdout, flags=re.MULTILINE)
    return {path: " ".join(text.split()) for path, text in zip(parts[1::2], parts[2::2])}


def text(config, run=None, workers=None):
    return "\n".join(explain(config, run, workers))


def freeze(**grad_freeze):
    """A config with gradient freezing on (level O0, manual), its ``grad_freeze`` section ``grad_freeze``."""
    return {"level": "O0", "boost": {"mode": "manual", "grad_freeze": True}, "grad_freeze": grad_freeze}


# What each shipped config's summary must say with --steps-per-epoch 44 --epochs 12 (528 updates).
SHIPPED = {
    "O0.json": ["level O0;", "Nothing is on: the train cell is a plain training step",
                "keys that differ from level O0's defaults: none."],
    "O1.json": ["level O1;", "on: grad_freeze;", "boost.less_bn: false (default true)",
                "grad_freeze.param_groups: 3 (default 10)",
                "the automatic schedule (freeze_type \"auto\")", "3 nested suffixes",
                "total_steps: left out, so Model.train sets it from the run: 528 updates.",
                "nothing freezes before update 54 of 528 (epoch 2 of 12): the first 53 updates",
                "a decision every 26 updates", "as deep as the run can pay for (payback:",
                "frozen-prefix cache: \"auto\": where the network has enough stages",
                "it fills only where (steps left - an epoch) x the saving expected",
                "groups: up to 3 nested suffixes of the network's trainable parameters, cut at the network's stages"],
    "O2.json": ["level O2;", "on: grad_freeze, adasum;", "boost.less_bn: false (default true)",
                "common.device_number: 1 (default 8)",
                "update 54 of 528 (epoch 2 of 12)", "It needs data-parallel training over device_number x 2**k ranks",
                "stand-alone it is the plain step", "a frozen level's when the schedule first reaches it", "(with payback, only the levels that repay their compile)"],
    "adasum.json": ["on: adasum;", "boost.adasum: true (default false)", "groups of common.device_number = 1 rank"],
    "grad_accumulation.json": ["on: grad_accumulation;", "grad_accumulation: 4 micro-steps (batches) an update",
                               "an update every 4 steps: 132 updates (11 an epoch)"],
    "grad_freeze.json": ["the progressive schedule (freeze_type 2)", "2 nested suffixes",
                         "total_steps: 1000 (given), but the run has 528 updates",
                         "freezing starts at update 501 of 528 (epoch 12 of 12)",
                         "Drawn for 528 updates, it would start freezing at update 265.",
                         "frozen-prefix cache: off"],
    "log2_loss_scale.json": ["No boost feature is on.", "loss scale: log2: from 65536, log2(scale) + 0.01 per clean "
                             "step and - 1 per overflow, within [1, 16777216]"],
    "loss_scale.json": ["No boost feature is on.", "loss scale: dynamic: from 1024, x 2 after every 200 consecutive "
                        "clean steps, / 2 after 2 overflow(s), within [1, 16777216]",
                        "BoostTrainOneStepWithLossScaleCell"],
}


@pytest.mark.slow  # a subprocess
def test_command_explains_every_shipped_config():
    """One call explains every file in configs/ (each must have its expectations here), exit status 0."""
    paths = sorted((ROOT / "configs").glob("*.json"))
    assert sorted(path.name for path in paths) == sorted(SHIPPED)
    result = command(*(path.relative_to(ROOT) for path in paths), "--steps-per-epoch", 44, "--epochs", 12)
    assert result.returncode == 0, result.stderr
    found = blocks(result.stdout)
    assert sorted(found) == [f"configs/{name}" for name in sorted(SHIPPED)]
    for name, fragments in SHIPPED.items():
        for fragment in fragments:
            assert fragment in found[f"configs/{name}"], (name, fragment, found[f"configs/{name}"])
    assert "run: 12 epochs of 44 steps, one update a step: 528 updates (44 an epoch)." in found["configs/O1.json"]


@pytest.mark.slow  # a subprocess
def test_command_gives_the_librarys_error_for_a_broken_file_and_explains_the_others(tmp_path):
    """An unknown key (with the nearest valid key), bad JSON and a missing file: each gets the library's own message
    on stderr (``BoostConfig.coerce``'s, the argument named CONFIG), naming the file and the key; the good file
    between them is still explained, with the warning the library gives for it; exit status 2."""
    unknown = tmp_path / "unknown_key.json"
    unknown.write_text(json.dumps({"level": "O1", "grad_freeze": {"param_group": 4}}))
    not_json = tmp_path / "not_json.json"
    not_json.write_text('{"level": "O1",')
    warns = tmp_path / "warns.json"
    warns.write_text(json.dumps({"level": "O1", "boost": {"adasum": True}}))
    missing = tmp_path / "missing.json"
    result = command(unknown, warns, not_json, missing)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("python -m boost_cells explain: error:")]
    assert len(errors) == 3, result.stderr
    for path in (unknown, not_json, missing):
        with pytest.raises((ValueError, FileNotFoundError)) as raised:
            BoostConfig.coerce(str(path), arg="CONFIG")  # the command line gives a str
        assert f"python -m boost_cells explain: error: {raised.value}" in errors
    assert "unknown key 'param_group' in 'grad_freeze'" in errors[0] and "Did you mean 'param_groups'?" in errors[0]
    assert str(unknown) in errors[0] and str(not_json) in errors[1] and str(missing) in errors[2]
    assert list(blocks(result.stdout)) == [str(warns)]
    assert "the library warns: For 'BoostConfig', mode 'auto' with level 'O1' ignores the switches {'adasum': " \
           "True}" in result.stdout


@pytest.mark.parametrize("argv, message", [
    (["configs/O1.json", "--epochs", "3"], "--steps-per-epoch and --epochs go together"),
    (["configs/O1.json", "--epochs", "0", "--steps-per-epoch", "4"], "argument --epochs: must be an int >= 1"),
    (["configs/O1.json", "--workers", "two"], "argument --workers: must be an int >= 1, but got 'two'"),
    (["configs/O1.json", "--level", "O3"], "argument --level: invalid choice: 'O3'"),
    ([], "the following arguments are required: CONFIG"),
])
def test_command_usage_errors_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["explain", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_command_explains_a_shipped_config_by_name(tmp_path, monkeypatch, capsys):
    """``explain O1`` from any directory explains the shipped O1.json; an unknown name exits 2 with the
    library's error, which lists the names."""
    assert main(["explain", str(ROOT / "configs" / "O1.json")]) == 0
    by_path = blocks(capsys.readouterr().out)
    monkeypatch.chdir(tmp_path)
    assert main(["explain", "O1"]) == 0
    assert blocks(capsys.readouterr().out) == {"O1": by_path[str(ROOT / "configs" / "O1.json")]}
    assert main(["explain", "O7"]) == 2
    assert capsys.readouterr().err.startswith("python -m boost_cells explain: error: For 'BoostConfig', 'CONFIG': "
                                              "config file 'O7' does not exist, and it is not the name of a config "
                                              "shipped with boost_cells. Give a path to a JSON config file or one of "
                                              "the shipped names: O0, O1, O2, ")


def test_level_option_is_models_boost_level(tmp_path, capsys):
    """--level gives a file without a "level" key its level, as Model's boost_level; a file whose level differs is
    the library's error (exit status 2)."""
    path = tmp_path / "levelless.json"
    path.write_text(json.dumps({"grad_freeze": {"param_groups": 4}}))
    assert main(["explain", str(path), "--level", "O1"]) == 0
    assert "level O1;" in capsys.readouterr().out
    assert main(["explain", str(ROOT / "configs" / "O0.json"), "--level", "O1"]) == 2
    assert "the level argument 'O1' disagrees with the config's 'level' key 'O0'" in capsys.readouterr().err


def first_frozen(sequence):
    return next(t for t, index in enumerate(sequence) if index > 0) + 1


@pytest.mark.parametrize("grad_freeze", [
    {"freeze_type": 0, "param_groups": 10, "freeze_p": 0.7},
    {"freeze_type": 0, "param_groups": 3, "freeze_p": 0.2},
    {"freeze_type": 1, "param_groups": 4, "freeze_p": 0.7, "seed": 5},
    {"freeze_type": 2, "param_groups": 4, "freeze_p": 0.7},
    {"freeze_type": 2, "param_groups": 10, "freeze_p": 0.3, "total_steps": 200},
])
def test_when_freezing_starts_is_the_sequences_first_frozen_update(grad_freeze):
    """The update the summary names is the first entry that freezes of the very sequence the train cell walks
    (drawn for the run's 528 updates when total_steps is left out); for the progressive schedule every stage's
    first update too."""
    config = BoostConfig.from_dict(freeze(**grad_freeze))
    section = config.section("grad_freeze")
    total = section["total_steps"] if config.given("grad_freeze.total_steps") else 528
    sequence = freeze_index_sequence(section["param_groups"], section["freeze_type"], section["freeze_p"], total,
                                     section["seed"])
    start = first_frozen(sequence)
    assert f"can start at update {start} of 528 (epoch {-(-start // 44)} of 12)" in summary(config, RUN)
    lines = text(config, RUN)
    if section["freeze_type"] == 2:
        for group in range(2, section["param_groups"]):
            update = sequence.index(group) + 1
            assert f"from group {group} on from update {update} (epoch {-(-update // 44)})" in lines


def test_automatic_schedule_numbers_are_auto_criterions():
    """Warm-up and interval are auto_criterion's for the run (left-out total_steps) or the given total_steps; with
    accumulation the run counts updates, and an update's epoch is that of its last micro-step."""
    config = {"level": "O1", "boost": {"mode": "manual", "grad_accumulation": True},
              "grad_accumulation": {"grad_accumulation_step": 3},
              "grad_freeze": {"freeze_type": "auto", "param_groups": 3, "auto_warmup_share": 0.4,
                              "auto_interval_share": 0.1}}
    criterion = auto_criterion(12 * 44 // 3, 0.1, 0.4, 0.3)
    lines = text(config, RUN)
    assert "run: 12 epochs of 44 steps, an update every 3 steps: 176 updates (14.67 an epoch)." in lines
    update = criterion.warmup + 1
    assert f"nothing freezes before update {update} of 176 (epoch {-(-update * 3 // 44)} of 12)" in lines
    assert f"a decision every {criterion.interval} updates (auto_interval_share 0.1 of 176, " in lines
    given = auto_criterion(65536, 0.05, 0.1, 0.1)
    assert f"can start at update {given.warmup + 1} of total_steps 65536" in summary("configs/O1.json")


def test_where_total_steps_comes_from():
    """Without a run, total_steps (given or the default 65536) is the run length assumed; with one, a left-out one
    is the run's updates (as Model.train sets it), a given one is compared with it, and what a given one that
    differs does in the run is run.in_run's text, the words of Model.train's own warning."""
    progressive = {"freeze_type": 2, "param_groups": 3, "freeze_p": 0.5}
    assert "total_steps: left out, so the default 65536 updates is the run length assumed here; Model.train sets " \
           "a left-out total_steps from its run" in text(freeze(**progressive))
    assert "total_steps: 300 (given) is the run length the schedule is made for" in \
        text(freeze(**progressive, total_steps=300))
    assert "total_steps: left out, so Model.train sets it from the run: 528 updates." in \
        text(freeze(**progressive), RUN)
    assert "total_steps: 528 (given), the run's updates." in text(freeze(**progressive, total_steps=528), RUN)
    differs = text(freeze(**progressive, total_steps=300), RUN)
    assert "total_steps: 300 (given), but the run has 528 updates: Model.train keeps the given one" in differs
    assert "in this run of 528 updates: The progressive schedule starts freezing at update 151 and reaches its " \
           "deepest stage (training from group 2 on) at update 226, so the run's last 303 updates all train that " \
           "stage. Drawn for 528 updates, it would start freezing at update 265." in differs
    continuous = text(freeze(freeze_type=0, param_groups=3, freeze_p=0.5), RUN)
    assert "total_steps is not used" in continuous and "  total_steps:" not in continuous


def test_a_cells_plan_is_the_one_explained():
    """Given a built cell's plan (Model.train passes its cell's freeze_plan), explain and summary read it instead of
    making one from the config: a progressive plan drawn for 300 updates starts at its own update in the run's
    epochs, where the config left total_steps out (made here, the plan would be the run's: 528 updates)."""
    section = BoostConfig.coerce(freeze(freeze_type=2, param_groups=3, freeze_p=0.5)).section("grad_freeze")
    cells_plan = FreezePlan.from_section({**section, "total_steps": 300})
    made_here = FreezePlan.from_section(section).for_run(528)
    assert cells_plan.first_frozen_update != made_here.first_frozen_update
    config = freeze(freeze_type=2, param_groups=3, freeze_p=0.5)
    assert f"can start at update {made_here.first_frozen_update} of 528" in summary(config, RUN)
    assert f"can start at update {cells_plan.first_frozen_update} of 528" in summary(config, RUN, cells_plan)
    assert f"when: freezing starts at update {cells_plan.first_frozen_update} of 528" in \
        "\n".join(explain(config, RUN, plan=cells_plan))
    with pytest.raises(TypeError, match="For 'summary', 'plan' must be a FreezePlan"):
        summary(config, RUN, section)


def test_keys_that_differ_from_the_levels_default():
    """A key the config leaves out is not "different", nor one equal to the level's default, nor a switch that
    mode 'auto' ignores; a key read by a feature that is off, or by a schedule the config does not use (freeze_p
    with the automatic schedule, the default), is marked as not used."""
    with pytest.warns(UserWarning, match="ignores the switches"), \
            pytest.warns(UserWarning, match="'grad_freeze.freeze_p' .* is read by the continuous, interval and"):
        config = BoostConfig.from_dict({"level": "O1", "boost": {"adasum": True, "less_bn": True},
                                        "common": {"device_number": 4},
                                        "grad_freeze": {"param_groups": 10, "freeze_p": 0.5},
                                        "dim_reduce": {"n_components": 8}})
    lines = explain(config)
    start = lines.index("keys that differ from level O1's defaults:")
    assert lines[start + 1:start + 4] == ["  common.device_number: 4 (default 8) (not used: 'adasum' is off)",
                                          "  grad_freeze.freeze_p: 0.5 (default 0.7) (not used: the automatic "
                                          "schedule does not read it)",
                                          "  dim_reduce.n_components: 8 (default 32) (not used: 'dim_reduce' is off)"]
    assert not lines[start + 4].startswith("  ")


def test_frozen_prefix_cache_applies_only_to_schedules_that_freeze_for_good():
    """Progressive and automatic schedules freeze for good, so the cache applies; the interval schedule never does,
    so nothing is cached, and its groups still need a network of stages."""
    for grad_freeze in ({"freeze_type": 2, "freeze_p": 0.5}, {"freeze_type": "auto"}):
        lines = text(freeze(param_groups=3, cache_frozen_prefix=True, **grad_freeze))
        assert "frozen-prefix cache: applies" in lines and "at most cache_max_mb 2048 MB" in lines
        assert "frozen-prefix cache on" in summary(freeze(param_groups=3, cache_frozen_prefix=True, **grad_freeze))
    interval = text(freeze(param_groups=3, freeze_type=1, cache_frozen_prefix=True))
    assert "frozen-prefix cache: asked for, but the interval schedule here never freezes a group for good, so " \
           "nothing is cached" in interval and "it still needs a network of at least 3 stages" in interval
    assert "cache" not in summary(freeze(param_groups=3, freeze_type=1, cache_frozen_prefix=True))


def test_data_parallel_says_the_ranks_share_the_cache():
    """With workers > 1 and a cache that can serve, the summary says the ranks share its fill; not stand-alone,
    and not where nothing is cached (a schedule that never freezes for good, the cache off)."""
    shared = "the ranks share the outputs their caches compute"
    assert shared in text("configs/O2.json", RUN, workers=2)
    assert shared in text(freeze(param_groups=3, freeze_type=2, freeze_p=0.5, cache_frozen_prefix=True), workers=4)
    assert shared not in text("configs/O2.json", RUN, workers=1)
    assert shared not in text(freeze(param_groups=3, freeze_type=1, cache_frozen_prefix=True), workers=2)
    assert shared not in text(freeze(param_groups=3, freeze_type="auto", cache_frozen_prefix=False), workers=2)


@pytest.mark.parametrize("grad_freeze", [
    {"freeze_type": 2, "freeze_p": 0.5}, {"freeze_type": "auto"}, {"freeze_type": 1},
    {"freeze_type": 0, "freeze_p": 0.5}, {"freeze_type": 0, "freeze_p": 0},
])
def test_the_cache_applies_exactly_where_the_train_cell_builds_it(grad_freeze):
    """What the summary says of the cache is what BoostTrainOneStepCell does with the config on a staged network
    (a continuous cycle at freeze_p 0 never trains group 0, so that group is frozen for good and cached)."""
    config = freeze(param_groups=3, cache_frozen_prefix=True, total_steps=20, **grad_freeze)
    net = nn.SequentialCell([nn.Dense(4, 8), nn.Tanh(), nn.Dense(8, 8), nn.Tanh(), nn.Dense(8, 3)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BoostConfigWarning)
        cell = BoostTrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params()),
                                     boost_config=config)
    assert ("frozen-prefix cache: applies" in text(config)) == (cell.prefix_cache is not None)


def test_a_schedule_that_never_freezes_says_so():
    for grad_freeze, why in (({"param_groups": 1}, "with one group"),
                             ({"param_groups": 3, "freeze_type": 2, "freeze_p": 1}, "with freeze_p 1")):
        assert f"{why}: every update trains every group, so nothing freezes." in text(freeze(**grad_freeze), RUN)
        assert summary(freeze(**grad_freeze), RUN).endswith("never freezes.")
    late = summary(freeze(param_groups=3, freeze_type="auto", auto_warmup_share=0.5), Run(1, 1))
    assert late.endswith("never starts in this run of 1 update (it would at update 3).")


def test_adasum_with_workers_says_what_the_train_cell_does():
    """With --workers: stand-alone AdaSum is the plain step; a rank count adasum_groups serves gives its groups; one
    it refuses gets adasum_groups' own error."""
    config = {"level": "O2", "common": {"device_number": 2}}
    assert "with 1 worker: stand-alone, so the plain step." in text(config, workers=1)
    assert "with 8 workers: 4 groups of 2." in text(config, workers=8)
    assert "with 6 workers the train cell refuses: For 'AdaSum', rank count 6 with device_number 2 gives 3 " \
           "group(s)" in text(config, workers=6)


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="For 'Run', 'epochs' must be an int >= 1, but got 0"):
        Run(0, 44)
    with pytest.raises(TypeError, match="For 'Run', 'steps_per_epoch' must be an int >= 1, but got 4.5"):
        Run(2, 4.5)
    with pytest.raises(TypeError, match="For 'explain', 'run' must be a boost_cells.Run or None"):
        explain("configs/O1.json", (12, 44))
    with pytest.raises(ValueError, match=r"For 'explain', 'run' must give its epochs"):
        explain("configs/O1.json", Run(None, 44))
    with pytest.raises(ValueError, match="For 'explain', 'workers' must be an int >= 1, but got 0"):
        explain("configs/O1.json", workers=0)


class LogAtStart(Callback):
    """The boost_cells records already logged when training begins."""

    def __init__(self, caplog):
        super().__init__()
        self.caplog, self.seen = caplog, None

    def on_train_begin(self, run_context):
        self.seen = [record for record in self.caplog.records if record.name.startswith("boost_cells")]


def auto_freezing_model():
    """A Model over a 3-Dense MLP (nn.SequentialCell) with O1's automatic schedule over 3 groups and the cache,
    LessBN off; its dataset: 4 steps an epoch."""
    ms.set_seed(0)
    net = nn.SequentialCell([nn.Dense(4, 8), nn.Tanh(), nn.Dense(8, 8), nn.Tanh(), nn.Dense(8, 3)])
    config = {"level": "O1", "boost": {"mode": "manual", "less_bn": False},
              "grad_freeze": {"param_groups": 3, "freeze_type": "auto", "cache_frozen_prefix": True}}
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    model = Model(net, loss, nn.Momentum(net.trainable_params(), 0.1, 0.9), boost_level="O1",
                  boost_config_dict=config)
    x = np.random.RandomState(0).randn(32, 4).astype(np.float32)
    data = ds.NumpySlicesDataset({"x": x, "y": (x[:, 0] > 0).astype(np.int32)}, shuffle=False).batch(8)
    return model, data


@pytest.mark.slow  # over 3 s alone
def test_model_train_logs_one_info_line_at_its_start_and_the_summary_at_debug(caplog):
    """Quiet by default (the package adds no handler, so Python's WARNING level drops the records); with logging at
    DEBUG, one INFO record before training begins, in the run's numbers (5 epochs of 4 steps: total_steps 20 from
    the run, no freeze before update 3), and the whole summary in one DEBUG record. (The decisions made while it
    trains are logged on their own logger, boost_cells.decisions: tests/test_decisions.py.)"""
    package = logging.getLogger("boost_cells")
    assert package.handlers == [] and package.level == logging.NOTSET
    caplog.set_level(logging.DEBUG, logger="boost_cells")
    model, data = auto_freezing_model()
    at_start = LogAtStart(caplog)
    model.train(5, data, callbacks=[at_start])
    records = [record for record in caplog.records
               if record.name.startswith("boost_cells") and record.name != "boost_cells.decisions"]
    assert at_start.seen == records
    infos = [record for record in records if record.levelno == logging.INFO]
    assert [record.getMessage() for record in infos] == [
        "boost level O1: grad_freeze on; automatic freezing of 3 groups can start at update 3 of 20 (epoch 1 of 5), "
        "frozen-prefix cache on."]
    assert [record.levelno for record in records] == [logging.INFO, logging.DEBUG]
    debug = records[1].getMessage()
    assert debug.startswith("What the boost config does in this run:\nlevel O1;")
    assert "total_steps: left out, so Model.train sets it from the run: 20 updates." in debug
    assert "frozen-prefix cache: applies" in debug
    assert model.boost.config.section("grad_freeze")["total_steps"] == 20


IMAGENET = ["explain", "O1", "--steps-per-epoch", "625", "--epochs", "90"]


def break_even(output):
    """The break-even table's rows: ``{compile seconds: [milliseconds a step, ...]}`` (freezing's, then the cache's)."""
    rows = re.findall(r"^ +(\d+) s +(.*)$", output, flags=re.MULTILINE)
    return {int(seconds): [float(ms) for ms in re.findall(r"([\d.]+) ms a step", rest)] for seconds, rest in rows}


def test_break_even_is_paybacks_rule_at_the_first_decision(capsys):
    """``explain O1`` for 90 epochs of 625 steps gives, for a compile of 1, 3 and 10 s, what a frozen level must save
    a step over the updates left at the first decision (update 5626 of 56250) and what the cache must; a saving 1%
    above each figure passes payback's own rule (``paying_levels``, ``cache_pays``), 1% below does not."""
    assert main(IMAGENET) == 0
    output = capsys.readouterr().out
    assert "break-even: at the first decision, update 5626 of 56250 (epoch 10 of 90), 50625 steps are left" in \
        " ".join(output.split())
    table = break_even(output)
    assert sorted(table) == [1, 3, 10]
    left, fill = 56250 - 5625, 625
    for seconds, (freezing_ms, cache_ms) in table.items():
        for factor, pays in ((1.01, True), (0.99, False)):
            saving = freezing_ms / 1000 * factor
            costs = Costs(step={0: 1.0, 1: 1.0 - saving}, compile={0: seconds}, shares=(0.0, 0.5))
            assert (paying_levels(costs, 0, left) == (1,)) == pays, (seconds, factor)
            cached = Costs(step={0: 1.0, 1: 0.5}, compile={0: seconds}, shares=(0.0, 0.5),
                           cached_step={1: 0.5 - cache_ms / 1000 * factor})
            assert cache_pays(cached, 1, left, fill) == pays, (seconds, factor)


def test_explain_says_what_sink_mode_and_a_nested_call_do_and_stays_under_120_columns(capsys):
    assert main(IMAGENET) == 0
    output = capsys.readouterr().out
    assert max(map(len, output.splitlines())) < 120
    joined = " ".join(output.split())
    assert "sink mode (GPU/Ascend) or a call nested in another Cell's graph: no host code runs between steps" in joined
    assert "the whole front freezes at once" in joined and "the cache is left out" in joined


def test_no_break_even_without_a_run_or_where_nothing_freezes_in_it():
    assert "break-even" not in text("configs/O1.json")
    late = freeze(param_groups=3, freeze_type="auto", auto_warmup_share=0.5, cache_frozen_prefix=True)
    assert "break-even" not in text(late, Run(1, 1))  # the run ends before the first decision
    assert "never (the run ends within an epoch)" in text(late, Run(1, 10))
    assert "break-even" not in text(freeze(param_groups=1), RUN)
    accumulated = text({**freeze(param_groups=3, freeze_type="auto"), "common": {"grad_accumulation_step": 4},
                        "boost": {"mode": "manual", "grad_freeze": True, "grad_accumulation": True}}, Run(12, 44))
    assert "update 15 of 132 (epoch 2 of 12), 472 steps are left" in accumulated  # (132 - 14) updates of 4 steps
    without_cache = text(freeze(param_groups=3, freeze_type="auto", cache_frozen_prefix=False), RUN)
    assert "a frozen level must save" in without_cache and "the cache must save" not in without_cache


def test_the_cache_needs_one_stage_a_group_in_every_line():
    """Every line of the summary that says what the cache needs gives the same count of stages: the groups'."""
    for groups in (2, 3, 5):
        lines = text(freeze(param_groups=groups, freeze_type="auto", cache_frozen_prefix=True), RUN)
        counts = set(re.findall(r"at least (\d+) stages", lines))
        assert counts == {str(groups)}, (groups, counts)
