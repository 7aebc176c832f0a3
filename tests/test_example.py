"""The main job, examples/train.py, run as a user runs it: stand-alone and under a 2-worker msrun."""
import subprocess
import sys

import pytest

from tests.launch import ROOT, msrun

TRAIN = ROOT / "examples" / "train.py"


@pytest.mark.parametrize("config", ["O0", "loss_scale"])
def test_standalone_job_reaches_95_percent(config):
    result = subprocess.run([sys.executable, str(TRAIN), "--config", f"configs/{config}.json", "--min-accuracy",
                             "0.95"], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert sum(line.startswith("epoch") for line in lines) == 20
    assert "overflows" in lines[-3] and "loss scale" in lines[-3]
    assert (config == "O0") == ("loss scale -" in lines[-3])


@pytest.mark.parametrize("config, extra", [("adasum", []), ("grad_accumulation", ["--batch-size", "8"])])
def test_job_runs_unchanged_under_msrun(tmp_path, config, extra):
    code, output = msrun(2, [TRAIN, "--config", f"configs/{config}.json", "--min-accuracy", "0.95", *extra],
                         tmp_path / "logs", timeout=300)
    assert code == 0, output[-5000:]
    assert "2 rank(s)" in output and "test accuracy: 0.9" in output


def test_o1_job_on_resnet_standalone():
    """Level O1 (LessBN with the feature-normalised head, gradient centralization, gradient freezing) on the
    example's small ResNet with BatchNorm; a short run, so a lower bar than the 20-epoch jobs."""
    result = subprocess.run([sys.executable, str(TRAIN), "--config", "configs/O1.json", "--network", "resnet",
                             "--epochs", "2", "--min-accuracy", "0.9"], cwd=ROOT, capture_output=True, text=True,
                            timeout=400)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "config configs/O1.json, BoostTrainOneStepCell, 1 rank(s)" in result.stdout
    assert sum(line.startswith("epoch") for line in result.stdout.splitlines()) == 2


def test_o2_job_on_resnet_under_msrun(tmp_path):
    """Level O2 (O1 plus AdaSum across the two workers, device_number 1) with the README's msrun command."""
    code, output = msrun(2, [TRAIN, "--config", "configs/O2.json", "--network", "resnet", "--epochs", "2",
                             "--min-accuracy", "0.9"], tmp_path / "logs", timeout=500)
    assert code == 0, output[-5000:]
    assert "2 rank(s)" in output and "test accuracy: 0.9" in output
