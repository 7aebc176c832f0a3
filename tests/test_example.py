"""The main job, examples/train.py, run as a user runs it: stand-alone and under a 2-worker msrun; and how it picks
its network for a config."""
import json
import subprocess
import sys

import pytest

from tests.launch import ROOT, msrun

TRAIN = ROOT / "examples" / "train.py"
sys.path.insert(0, str(ROOT / "examples"))
import train as example  # noqa: E402  (examples/train.py)


@pytest.mark.slow  # a subprocess, trains to a target accuracy
@pytest.mark.parametrize("config", ["O0", "loss_scale"])
def test_standalone_job_reaches_95_percent(config):
    result = subprocess.run([sys.executable, str(TRAIN), "--config", f"configs/{config}.json", "--min-accuracy",
                             "0.95"], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert sum(line.startswith("epoch") for line in lines) == 20
    assert "overflows" in lines[-3] and "loss scale" in lines[-3]
    assert (config == "O0") == ("loss scale -" in lines[-3])


@pytest.mark.slow  # an msrun job, trains to a target accuracy
@pytest.mark.parametrize("config, extra", [("adasum", []), ("grad_accumulation", ["--batch-size", "8"])])
def test_job_runs_unchanged_under_msrun(tmp_path, config, extra):
    code, output = msrun(2, [TRAIN, "--config", f"configs/{config}.json", "--min-accuracy", "0.95", *extra],
                         tmp_path / "logs", timeout=300)
    assert code == 0, output[-5000:]
    assert "2 rank(s)" in output and "test accuracy: 0.9" in output


@pytest.mark.slow  # a subprocess, trains to a target accuracy
def test_o1_job_on_resnet_standalone():
    """Level O1 (the automatic freezing schedule over 3 groups, LessBN left off) on the example's small ResNet with
    BatchNorm, which the example picks for the config (LeNet's 2 layers cannot make 3 groups); a short run, so a lower
    bar than the 20-epoch jobs (3 epochs reached 0.98 with seed 0)."""
    result = subprocess.run([sys.executable, str(TRAIN), "--config", "configs/O1.json", "--epochs", "3",
                             "--min-accuracy", "0.9"], cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    picked = "network resnet, picked for configs/O1.json (the config's gradient freezing cannot split LeNet"
    assert picked in result.stdout
    assert "config configs/O1.json, BoostTrainOneStepCell, 1 rank(s)" in result.stdout
    assert sum(line.startswith("epoch") for line in result.stdout.splitlines()) == 3


@pytest.mark.slow  # an msrun job, trains to a target accuracy
def test_o2_job_on_resnet_under_msrun(tmp_path):
    """Level O2 (O1 plus AdaSum across the two workers, device_number 1) with the msrun command of
    docs/data-parallel.md."""
    code, output = msrun(2, [TRAIN, "--config", "configs/O2.json", "--network", "resnet", "--epochs", "2",
                             "--min-accuracy", "0.9"], tmp_path / "logs", timeout=500)
    assert code == 0, output[-5000:]
    assert "2 rank(s)" in output and "test accuracy: 0.9" in output


@pytest.mark.parametrize("config, network", [("O0", "lenet"), ("loss_scale", "lenet"), ("grad_freeze", "lenet"),
                                             ("O1", "resnet"), ("O2", "resnet")])
def test_the_config_picks_a_network_it_can_split(config, network):
    """Without --network: resnet for the level configs (less_bn on; 4 freezing groups where LeNet has 2 layers),
    lenet for the rest (grad_freeze.json's 2 groups split it); the reason is kept for the log line. An explicit
    --network is taken as given."""
    args = example.parse_args(["--config", f"configs/{config}.json"])
    assert args.network == network and args.network_reason
    assert example.parse_args(["--config", f"configs/{config}.json", "--network", "resnet"]).network_reason is None


def test_a_network_the_config_cannot_split_is_refused_naming_the_flag(tmp_path, capsys):
    """--network lenet with O1.json (3 groups; LeNet has 2 layers) or with a frozen-prefix cache (LeNet has no
    stages) fails before anything is built, telling the user to use --network resnet; a config that neither network
    suits says what to change."""
    raw = json.loads((ROOT / "configs" / "grad_freeze.json").read_text())
    raw["grad_freeze"]["cache_frozen_prefix"] = True
    cached = tmp_path / "cached.json"
    cached.write_text(json.dumps(raw))
    raw["grad_freeze"]["param_groups"] = 50
    too_many = tmp_path / "too_many.json"
    too_many.write_text(json.dumps(raw))
    for path, words in ((ROOT / "configs" / "O1.json", ["'grad_freeze.param_groups' must be at most", "use --network resnet"]),
                        (cached, ["stages", "use --network resnet"]),
                        (too_many, ["change 'grad_freeze.param_groups'"])):
        with pytest.raises(SystemExit) as exit_info:
            example.parse_args(["--config", str(path), "--network", "lenet"])
        assert exit_info.value.code == 2
        error = capsys.readouterr().err
        assert "--network lenet cannot be trained with this config's gradient freezing" in error
        for word in words:
            assert word in error, error
    assert example.parse_args(["--config", str(cached)]).network == "resnet"


def test_the_job_logs_each_freezing_decision_on_its_own_line():
    """After training, the job logs the train cell's decisions (``cell.decisions``), one ``decision: <line>`` each in
    update order, as bench/own_loop.py reads them; a cell without freezing (its ``decisions`` empty) logs none."""
    from boost_cells.freezing.host.decisions import Decision, Figure  # pylint: disable=import-outside-toplevel

    class Cell:
        decisions = (Decision(39, "payback", "allowed level 2", "level 2 pays", (Figure("full step", 14.2, "ms"),),
                              528),
                     Decision(131, "schedule", "froze level 2", "segments 0-1 settled", (), 528))

    logged = []
    example.report_decisions(Cell(), logged.append)
    assert logged == ["decision: update 39 of 528: allowed level 2: level 2 pays [full step 14.2 ms (measured)]",
                      "decision: update 131 of 528: froze level 2: segments 0-1 settled"]
    logged.clear()
    Cell.decisions = ()
    example.report_decisions(Cell(), logged.append)
    assert logged == []
