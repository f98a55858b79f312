"""The model zoo (shardx/zoo.py): models people train, built from small
configs with random weights, each a whole AdamW train step traced, compiled,
run unsharded for 2 steps and compared with eager PyTorch; the sharding plans
(Megatron TP, DP, DP x TP on a 2x2 mesh) run on CPU threads and are compared
with the unsharded run and with eager. A failure names the model, the step
and the first mismatching output."""

import pytest

from shardx import zoo

UNSHARDED = ["gpt2", "llama", "bert", "mixtral", "resnet_tiny", "vit", "lstm", "gru"]
# Run after the unsharded tests, whose runs they reuse (zoo._UNSHARDED).
SHARDED = [("gpt2", "tp2"), ("llama", "dp2xtp2"), ("resnet_tiny", "dp2")]


@pytest.mark.parametrize("model", UNSHARDED)
def test_zoo_unsharded_matches_eager(tmp_path, build_dir, model):
    res = zoo.run_model(model, workdir=str(tmp_path))
    assert res.traced and res.compiled and res.ops > 0
    assert res.matches_eager, res.error


@pytest.mark.parametrize("model,plan", SHARDED, ids=[f"{m}-{p}" for m, p in SHARDED])
def test_zoo_sharded_matches_unsharded_and_eager(tmp_path, build_dir, model, plan):
    res = zoo.run_model(model, plan, workdir=str(tmp_path))
    assert res.matches_unsharded, res.error
    assert res.matches_eager, res.error
    assert sum(res.collectives.values()) > 0, "a sharded train step needs collectives"

