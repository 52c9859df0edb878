"""Secrets (R4 5/7 item 3): Hydra's own per-run files (`hydra.output_subdir=.hydra`: config.yaml, hydra.yaml,
overrides.yaml) are written redacted like multirun.yaml; the by-name net covers plurals (`access_tokens`,
`secrets`, `api_keys`) and header-style names (`bearer`, `signature`, `authorization`, `x-api-key`)."""

from __future__ import annotations

import pytest

from tests.conftest import cli_env, run_cli
from xbench.records import redact as R

SECRET_NAMES = ("access_tokens", "secrets", "api_keys", "apikeys", "refresh_tokens", "client_secrets", "private_keys",
                "passwords", "cookies", "bearer", "signature", "x_amz_signature", "authorization", "x-api-key",
                "X-Api-Key", "Proxy-Authorization")
LOOK_ALIKES = ("max_tokens", "exclude_keys", "special_tokens", "num_tokens", "tokens", "keys", "monkeys", "tokenizer",
               "global_batch_tokens", "batch_size", "passes")


def test_plural_and_header_style_names_are_secret_and_look_alikes_are_not():
    assert [k for k in SECRET_NAMES if not R.is_secret_key(k)] == []  # was: the plurals, bearer and signature
    assert [k for k in LOOK_ALIKES if R.is_secret_key(k)] == []
    tree = {"access_tokens": ["tok-a1", "tok-b2"], "secrets": {"db": "s3"}, "api_keys": "k1", "max_tokens": 5,
            "headers": {"X-Api-Key": "v1", "Bearer": "w1", "Signature": "z1", "Accept": "json"}}
    assert R.redact(tree, values=[]) == {
        "access_tokens": R.REDACTED, "secrets": R.REDACTED, "api_keys": R.REDACTED, "max_tokens": 5,
        "headers": {"X-Api-Key": R.REDACTED, "Bearer": R.REDACTED, "Signature": R.REDACTED, "Accept": "json"}}
    text = "access_tokens=[ta-1234,tb-1234] 'secrets': ['s1234'] bearer: b-12345 signature=sig-1234 max_tokens=5"
    assert R.redact_text(text, []) == (f"access_tokens={R.REDACTED} 'secrets': {R.REDACTED} bearer: {R.REDACTED} "
                                       f"signature={R.REDACTED} max_tokens=5")
    assert R.override_secret_values("+model.options.access_tokens=[hx-tok-aa1,hx-tok-bb2]") == \
        ["[hx-tok-aa1,hx-tok-bb2]", "hx-tok-aa1", "hx-tok-bb2"]


PLANTED = {"+model.options.db_password=hx-sub-pw11": "hx-sub-pw11",
           "+model.options.access_tokens=[hx-tok-aa1,hx-tok-bb2]": "hx-tok-aa1",
           "+model.options.x-api-key=hx-xkey-cc3": "hx-xkey-cc3",
           "+model.options.bearer=hx-bear-dd4": "hx-bear-dd4"}
ENV_SECRET = "hx-env-7f3e9a21c0"


@pytest.mark.slow  # over 3 s: make test-fast's budget
@pytest.mark.parametrize("multirun", [False, True])
def test_hydras_own_files_are_written_redacted(tmp_path, multirun):
    """hydra.output_subdir=.hydra brought back config.yaml, hydra.yaml and overrides.yaml with every secret of the
    command line and the environment in plain text; now each is born redacted (the run itself is refused at once:
    Hydra writes its files before the run starts)."""
    where = ("hydra.sweep.dir=" if multirun else "hydra.run.dir=") + str(tmp_path / "hydra")
    p = run_cli(*(["-m"] if multirun else []), "hydra.output_subdir=.hydra", where, *PLANTED,
                f"logger.wandb.entity={ENV_SECRET}", "baseline=nosuch", store=tmp_path / "store",
                env=cli_env(SERVICE_API_KEYS=ENV_SECRET), timeout=300)
    assert "baseline='nosuch'" in p.stderr, p.stderr[-2000:]
    files = sorted((tmp_path / "hydra").rglob(".hydra/*.yaml"))
    assert [f.name for f in files] == ["config.yaml", "hydra.yaml", "overrides.yaml"], files
    for f in files:
        text = f.read_text()
        leaked = [v for v in (*PLANTED.values(), "hx-tok-bb2", ENV_SECRET) if v in text]
        assert not leaked, f"{f.name}: {leaked}"
        assert R.REDACTED in text, f.name
    assert "access_tokens: <redacted>" in files[0].read_text()
