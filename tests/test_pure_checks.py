"""Checks and imports are pure: no import, check or question writes the environment, whatever host it is asked on.

Under a simulated torchrun rank, a task of a 2-task srun step and a TPU host, compat.check and the launch
questions (which launcher, does this process write the record, which rank is it, which TPU host, what environment
its processes get, whether it runs isolated) are asked of composed configs of several modes and strategies, and
os.environ is compared before and after. What a run needs set is applied where it launches, for that block only
(a srun task's torch variables: launch/torchrun.launch; env_vars.temporarily).

Before: under the srun step, compat.check of bench.mode=find_max_batch, and launch.writes_record of any config,
set RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT (launch.under_torchrun adopted
SLURM's facts as a side effect of answering); compat's probe of a Hugging Face model left HF_HUB_OFFLINE=1 (and
TORCHINDUCTOR_CACHE_DIR, which torch._dynamo writes as transformers imports it); on a TPU host
writes_record of an xla_mp config imported torch_xla (which writes GRPC_VERBOSITY, XLA_FLAGS ...) even when
TPU_WORKER_ID says which host this is."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from tests.conftest import REPO, cli_env
from tests.test_import_env import IMPORT_EVERY_MODULE
from xbench import env_vars

pytestmark = pytest.mark.usefixtures("cached_compose")

SIMULATED = {
    "torchrun": {"TORCHELASTIC_RUN_ID": "sim", "LOCAL_RANK": "1", "RANK": "1", "WORLD_SIZE": "2",
                 "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29511"},
    "srun": {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_NUM_TASKS": "2",
             "SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NODEID": "0", "SLURM_STEP_TASKS_PER_NODE": "2",
             "SLURM_STEP_NODELIST": "node[01-02]", "SLURM_JOB_NODELIST": "node[01-02]"},
    "tpu": {"PJRT_DEVICE": "TPU", "TPU_ACCELERATOR_TYPE": "v4-16", "TPU_NAME": "sim", "TPU_WORKER_ID": "1"},
}
# Every variable a simulated host sets, and every one a writer was seen to set: unset before a host is simulated.
CLEARED = sorted({*(k for env in SIMULATED.values() for k in env), "CLOUD_TPU_TASK_ID", "HF_HUB_OFFLINE",
                  "USE_TORCH_XLA", "GRPC_VERBOSITY", "TF_CPP_MIN_LOG_LEVEL", "PJRT_DYNAMIC_PLUGINS",
                  "TORCHINDUCTOR_CACHE_DIR",  # torch._dynamo's first import writes it (cli_env sets it: unset here)
                  *(k for k in os.environ if k.startswith(("SLURM_", "TPU_")))})
CONFIGS = ("", "bench.mode=find_max_batch", "+experiment=digits_to_target", "parallel=ddp parallel.world_size=2",
           "bench.mode=find_max_batch parallel=ddp parallel.world_size=2",
           "runtime=xla parallel=xla_mp parallel.world_size=2", "runtime=xla parallel=xla_spmd parallel.world_size=2")


def ask(cfg) -> dict:
    """compat.check and the launch questions of one config, on this host; what they answer."""
    from xbench import compat, launch, runtimes
    from xbench.launch import isolation, slurm_ranks, torchrun, xla
    from xbench.platforms.detect import host_facts

    facts = host_facts()
    return {"reasons": compat.check(cfg, facts), "launcher": launch.launcher(cfg),
            "writes_record": launch.writes_record(cfg), "process_environment": launch.process_environment(cfg.bench),
            "under_torchrun": torchrun.under_torchrun(), "global_rank": torchrun.global_rank(),
            "host_index": xla.host_index(), "torch_variables": slurm_ranks.torch_variables(),
            "pjrt_device": runtimes.default_pjrt_device(facts.tpu_chips, cfg.platform.device),
            "xla_environment": runtimes.xla_environment(cfg, facts.tpu_chips), "isolated": isolation.isolated(cfg)}


def changed(before: dict) -> list[str]:
    return sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))


def _check_answers(host: str, answers: dict) -> None:
    """The questions still answer what they did: only the environment they leave changed."""
    plain, fmb = answers[""], answers["bench.mode=find_max_batch"]
    if host == "tpu":
        assert not plain["under_torchrun"] and plain["writes_record"] and plain["host_index"] == 1
        assert not answers["runtime=xla parallel=xla_mp parallel.world_size=2"]["writes_record"]  # host 1 of 2
        assert answers["runtime=xla parallel=xla_mp parallel.world_size=2"]["xla_environment"]["PJRT_DEVICE"] == "TPU"
        return
    assert plain["under_torchrun"] and plain["global_rank"] == 1 and not plain["writes_record"]
    assert any("bench.mode=find_max_batch starts the ranks of each trial itself" in r for r in fmb["reasons"])
    if host == "srun":  # what launch/torchrun.launch applies while the rank runs, answered here
        assert plain["torch_variables"] == {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                                            "MASTER_PORT": str(29500 + 4242 % 2000), "MASTER_ADDR": "node01"}
    else:
        assert plain["torch_variables"] == {}  # torchrun set them all


@pytest.fixture
def environment():
    """This test's environment changes, whatever the code under test did, undone afterwards."""
    with env_vars.restored():
        yield


@pytest.mark.parametrize("host", SIMULATED)
def test_checks_and_launch_questions_write_no_variable_on_a_simulated_host(host, environment):
    from xbench.api import compose

    cfgs = {o: OmegaConf.to_object(compose(o.split())) for o in CONFIGS}
    for k in CLEARED:
        os.environ.pop(k, None)
    os.environ.update(SIMULATED[host])
    answers, written = {}, {}
    for overrides, cfg in cfgs.items():
        before = dict(os.environ)
        answers[overrides] = ask(cfg)
        written[overrides] = changed(before)
    assert written == {o: [] for o in CONFIGS}
    _check_answers(host, answers)


def test_compats_probe_of_a_hugging_face_model_leaves_the_environment_as_it_found_it(environment):
    """compat asks the zoo about model=hf/... (models/zoo.py), which loads transformers offline and without torch_xla;
    whatever that load sets (HF_HUB_OFFLINE, torch._dynamo's TORCHINDUCTOR_CACHE_DIR: simulated here, the real
    load costs ~10 s) is gone after. Before: HF_HUB_OFFLINE=1 stayed, and TORCHINDUCTOR_CACHE_DIR with it."""
    from xbench.models import zoo

    for k in ("HF_HUB_OFFLINE", "USE_TORCH_XLA", "TORCHINDUCTOR_CACHE_DIR"):
        os.environ.pop(k, None)
    os.environ["HF_TOKEN_PATH"] = "/somewhere/token"  # a variable of the user's, changed inside: back after
    before = dict(os.environ)
    with zoo._quiet_transformers():
        assert os.environ["HF_HUB_OFFLINE"] == "1"
        assert "torch_xla" in sys.modules or os.environ["USE_TORCH_XLA"] == "0"
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = "/tmp/torchinductor_sim"  # what importing torch._dynamo does
        os.environ["HF_TOKEN_PATH"] = "/elsewhere"
        del os.environ["HF_TOKEN_PATH"]
    assert changed(before) == []


FRESH = """
import importlib, json, os, pkgutil, sys
hosts, configs, cleared = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
base = {k: v for k, v in os.environ.items() if k not in cleared}
def become(env):
    os.environ.clear(); os.environ.update(env)
def changed(before):
    return sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))
# every variable of every simulated host at once: an import that branches on any of them takes that branch
become({**base, **{k: v for env in hosts.values() for k, v in env.items()}})
before = dict(os.environ)
import xbench
""" + IMPORT_EVERY_MODULE + """
out = {"modules": len(names), "failed": failed, "imports": changed(before), "written": {}, "answers": {}}
from omegaconf import OmegaConf
from xbench.api import compose
from tests.test_pure_checks import ask
cfgs = {o: OmegaConf.to_object(compose(o.split())) for o in configs}
for host, env in hosts.items():
    become({**base, **env})
    out["written"][host], out["answers"][host] = {}, {}
    for o, cfg in cfgs.items():
        before = dict(os.environ)
        out["answers"][host][o] = ask(cfg)
        out["written"][host][o] = changed(before)
out["torch_xla"] = "torch_xla" in sys.modules
print(json.dumps(out))
"""


@pytest.mark.slow
def test_a_fresh_process_imports_every_module_and_asks_everything_without_writing_a_variable():
    """The same in a fresh interpreter, where each import and each first question really runs (this session has
    imported them already, and a question may ask something once per process). ~6 s here."""
    env = {k: v for k, v in cli_env().items() if k not in CLEARED}
    p = subprocess.run([sys.executable, "-c", FRESH, json.dumps(SIMULATED), json.dumps(CONFIGS),
                        json.dumps(CLEARED)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["modules"] > 50 and got["failed"] == {} and got["imports"] == []
    assert got["written"] == {host: {o: [] for o in CONFIGS} for host in SIMULATED}
    assert got["torch_xla"] is False  # no question imported it (TPU_WORKER_ID answered which host this is)
    for host, answers in got["answers"].items():
        _check_answers(host, answers)
