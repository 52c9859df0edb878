"""No xbench import writes the environment: compat's check of an XLA config (the runtime's and the XLA
strategies' rules) imports no torch_xla, which writes PJRT_DEVICE=CPU when it is unset, so a simulated host's
check does not depend on what was imported before it. Each check runs in a fresh interpreter with
PJRT_DEVICE unset (this test process may have imported torch_xla already)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import CONF, REPO

CHECK = """
import json, os, sys
before = dict(os.environ)
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from xbench import compat
from xbench.config import register_configs
from xbench.platforms.detect import HostFacts
register_configs()
with initialize_config_dir(config_dir=sys.argv[1], version_base="1.3"):
    cfgs = [OmegaConf.to_object(compose(config_name="config", overrides=o.split())) for o in json.loads(sys.argv[2])]
host = HostFacts(torch_xla=True, logical_cores=2, torch_version="2.9.0", tpu_chips=0)
reasons = [compat.check(c, host) for c in cfgs]
changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))
print(json.dumps({"reasons": reasons, "changed": changed, "torch_xla": "torch_xla" in sys.modules,
                  "xla_module": "xbench.runtimes.xla" in sys.modules}))
"""

XLA_CONFIGS = ["runtime=xla", "runtime=xla_compile parallel=xla_spmd parallel.world_size=2",
               "runtime=xla parallel=xla_mp parallel.world_size=2", "runtime=xla parallel=xla_fsdp parallel.world_size=2",
               "runtime=xla_compile runtime.backend=nope"]


def _fresh(code: str, *args: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"}
    out = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_compat_check_of_xla_configs_writes_no_environment_and_imports_no_torch_xla():
    got = _fresh(CHECK, str(CONF), json.dumps(XLA_CONFIGS))
    assert got["changed"] == [] and got["torch_xla"] is False and got["xla_module"] is False
    # the rules were asked, not skipped: the good configs pass, the unknown backend is refused
    assert got["reasons"][:4] == [[], [], [], []]
    assert any("backend 'nope' is unknown" in r for r in got["reasons"][4])


# Every xbench module but runtimes/xla.py imported, in a snippet after `import importlib, pkgutil, xbench`:
# `names` the modules, `failed` {module: why} where an optional extra is not installed here (the import itself
# is what is checked). tests/test_pure_checks.py's fresh process imports them the same way.
IMPORT_EVERY_MODULE = """
names = sorted(m.name for m in pkgutil.walk_packages(xbench.__path__, "xbench.")
               if m.name != "xbench.runtimes.xla")
failed = {}
for n in names:
    try:
        importlib.import_module(n)
    except ImportError as e:
        failed[n] = str(e)
"""

IMPORT_ALL = """
import importlib, json, os, pkgutil, sys
import xbench
before = dict(os.environ)
""" + IMPORT_EVERY_MODULE + """
changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))
print(json.dumps({"modules": len(names), "failed": failed, "changed": changed,
                  "torch_xla": "torch_xla" in sys.modules}))
"""


@pytest.mark.slow
def test_importing_every_xbench_module_writes_no_environment():
    """Every module but runtimes/xla.py (whose torch_xla import sets PJRT_DEVICE itself; xbench reaches it
    through runtimes.xla_module(), which sets it on purpose first) imported into one fresh process."""
    got = _fresh(IMPORT_ALL)
    assert got["modules"] > 50 and got["failed"] == {}
    assert got["changed"] == [] and got["torch_xla"] is False


def test_torch_xla_is_reached_one_way():
    """One way keeps torch_xla lazy (xbench/extras.py's docstring): runtimes/xla.py is imported only through
    runtimes.xla_module() (the launched XLA processes imported it directly), and USE_TORCH_XLA is written only by
    extras.keep_torch_xla_out (accelerate's runtime and the zoo each wrote it their own way). Read from every
    module's syntax tree, imports inside functions included."""
    import ast

    door, names = REPO / "xbench" / "runtimes" / "__init__.py", REPO / "xbench" / "extras.py"
    recorded = REPO / "xbench" / "records" / "env.py"  # the variables a record lists: names, not writes
    found = []
    for path in sorted((REPO / "xbench").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.ImportFrom) and path != door and (
                    node.module == "xbench.runtimes.xla"
                    or node.module == "xbench.runtimes" and any(a.name == "xla" for a in node.names)):
                found.append(f"{where}: imports runtimes/xla.py")
            if isinstance(node, ast.Import) and any(a.name == "xbench.runtimes.xla" for a in node.names):
                found.append(f"{where}: imports runtimes/xla.py")
            if isinstance(node, ast.Constant) and node.value == "USE_TORCH_XLA" and path not in (names, recorded):
                found.append(f"{where}: names USE_TORCH_XLA")
    assert found == []
