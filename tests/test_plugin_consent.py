"""Code runs only where the user said so (abm.plugins, issue 40): a plugin named in a file is
imported from an installed package or PYTHONPATH, or with the user's consent (``--plugins DIR``,
the name typed on the command line or given in code); validate/inspect/report of a file or
folder never import a module lying beside it (a marker file the module would write is never
created); a study's workers get the consent; an import that exits, is interrupted, fails or is
slow is named in one line (or a warning) with its file.

Module names are unique per test: a module imported in this process stays imported."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from abm import plugins, registry
from abm.errors import UserError
from conftest import ROOT, SCENARIOS, abm_cli, call_in_process, one_error_line, run_folder

SMALL = ["--set", "population.n_male=100", "--set", "population.n_female=100", "--episodes", "1", "--quiet"]
CREDIT = ["--set", "population.size=150", "--set", "episodes.horizon=50", "--episodes", "1", "--quiet"]


def marking_policy(folder: Path, name: str) -> Path:
    """A plugin module that leaves MARKER beside itself when imported, with a policy P."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent('''\
        from pathlib import Path

        from policies.heuristics import ApproveAll

        Path(__file__).with_name("MARKER").write_text("imported")


        class P(ApproveAll):
            """Approve everyone (a plugin that marks its import)."""
        '''))
    return path


def scenario(folder: Path, policy: str, family: str | None = None) -> Path:
    path = folder / "s.yaml"
    lines = ([f"family: {family}"] if family else []) + [f'policy: {{name: "{policy}"}}']
    path.write_text("\n".join(lines) + "\n")
    return path


def in_process(*args: str) -> tuple[int, str]:
    """``abm ARGS`` in this process: (exit code, the one stderr line or all of stderr)."""
    code, _, err = call_in_process(*args)
    lines = [line for line in err.splitlines() if line.strip()]
    return code, lines[0] if len(lines) == 1 else err


# -- validate, inspect, report: nothing beside the file is imported ----------------------------
def test_validate_of_a_scenario_naming_a_module_beside_it_imports_nothing(tmp_path, monkeypatch):
    marking_policy(tmp_path, "evil_validate")
    path = scenario(tmp_path, "evil_validate:P")
    monkeypatch.chdir(tmp_path)
    code, line = in_process("validate", "s.yaml")
    assert code == 2 and line.startswith("error: s.yaml: policy.name: unknown policy 'evil_validate:P': module "
                                         "'evil_validate' was not imported: it lies in the working directory")
    assert "--plugins DIR" in line and "type the name on the command line" in line
    monkeypatch.chdir(ROOT)  # the file's folder is not searched either
    code, line = in_process("validate", str(path))
    assert code == 2 and "No module named 'evil_validate'" in line and "--plugins DIR" in line
    assert not (tmp_path / "MARKER").exists()
    assert "evil_validate" not in sys.modules


def test_validate_imports_nothing_where_python_put_the_working_directory_on_the_path(tmp_path):
    """``python -c`` (and ``python -m``, a notebook) put the working directory first on sys.path:
    a name read from a file is still not imported from it, nor from a link there to elsewhere."""
    elsewhere = tmp_path / "elsewhere"
    marking_policy(elsewhere, "evil_linked")
    work = tmp_path / "work"
    marking_policy(work, "evil_path")
    (work / "evil_linked.py").symlink_to(elsewhere / "evil_linked.py")
    for name in ("evil_path", "evil_linked"):
        scenario(work, f"{name}:P")
        line = one_error_line(abm_cli("validate", "s.yaml", cwd=work))
        assert f"module '{name}' was not imported: it lies in the working directory" in line
    assert not (work / "MARKER").exists() and not (elsewhere / "MARKER").exists()


def test_run_needs_consent_for_a_module_beside_the_scenario(tmp_path, monkeypatch):
    marking_policy(tmp_path, "evil_run")
    scenario(tmp_path, "evil_run:P")
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    code, line = in_process("run", "s.yaml", "--out", str(out), *SMALL)
    assert code == 2 and "module 'evil_run' was not imported" in line and "--plugins DIR" in line
    assert not (tmp_path / "MARKER").exists() and not out.exists()

    code, line = in_process("run", "s.yaml", "--out", str(out), "--plugins", ".", *SMALL)  # the guide: --plugins .
    assert code == 0, line
    assert (tmp_path / "MARKER").exists()
    folder = next((out).iterdir())
    assert json.loads((folder / "summary.json").read_text())["code_fingerprint"].count("+evil_run=") == 1


def test_a_name_typed_on_the_command_line_is_consent_for_the_working_directory(tmp_path, monkeypatch):
    marking_policy(tmp_path, "typed_cli")
    scenario(tmp_path, "approve_all")
    monkeypatch.chdir(tmp_path)
    code, line = in_process("validate", "s.yaml", "--policy", "typed_cli:P")
    assert code == 0 and line == "", line
    assert (tmp_path / "MARKER").exists()
    marking_policy(tmp_path, "typed_listing")
    code, out, err = call_in_process("policies", "typed_listing:P")  # the guide: abm policies mylenders:WealthCap
    assert code == 0 and out.startswith("typed_listing:P  (typed_listing:P, plugin)"), err


def test_a_plugins_folder_is_consent_for_that_folder_only(tmp_path, monkeypatch):
    trusted, beside = tmp_path / "trusted", tmp_path / "beside"
    marking_policy(trusted, "ok_folder")
    marking_policy(beside, "evil_folder")
    beside_file = scenario(beside, "evil_folder:P")
    monkeypatch.chdir(beside)
    code, line = in_process("validate", str(beside_file), "--plugins", str(trusted))
    assert code == 2 and "module 'evil_folder' was not imported" in line
    assert not (beside / "MARKER").exists()
    code, _ = in_process("validate", str(scenario(beside, "ok_folder:P")), "--plugins", str(trusted))
    assert code == 0 and (trusted / "MARKER").exists()
    assert str(trusted) not in sys.path  # the command's consent ended with it


@pytest.mark.parametrize("command", ["validate", "run", "study", "population"])
@pytest.mark.parametrize("bad, message", [("no_such_folder", "no such folder"), ("s.yaml", "not a folder")])
def test_plugins_must_name_a_folder(tmp_path, monkeypatch, command, bad, message):
    scenario(tmp_path, "approve_all")
    monkeypatch.chdir(tmp_path)
    extra = ["--out", str(tmp_path / "out")] if command in ("run", "study", "population") else []
    code, line = in_process(command, "s.yaml", "--plugins", bad, *extra)
    assert code == 2 and line == f"error: --plugins {bad}: {message}" + (
        " (give the folder that holds the plugin module)" if message == "not a folder" else "")
    assert not (tmp_path / "out").exists()


def test_dashboard_of_a_folder_takes_no_plugins(tmp_path):
    pytest.importorskip("solara")
    code, line = in_process("dashboard", str(tmp_path), "--plugins", str(tmp_path))
    assert code == 2 and line == ("error: dashboard: --plugins applies to --live SCENARIO only (a folder is read as "
                                  "data: no plugin is imported)")


def test_inspect_report_and_validate_of_a_run_folder_import_no_plugin(tmp_path, monkeypatch):
    """A run folder of a plugin family, read where its package lies: validate refuses (as run
    would without consent), inspect and report read it as data; the package is never imported."""
    plugins_dir = tmp_path / "plugins"
    package = plugins_dir / "fam_read"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from pathlib import Path\n\nPath(__file__).parent.with_name('MARKER').write_text('x')\n")
    (package / "lending.py").write_text(textwrap.dedent('''\
        from typing import Literal

        from abm.families import credit_score


        class Scenario(credit_score.Scenario):
            family: Literal["fam_read.lending"] = "fam_read.lending"


        World = credit_score.World
        '''))
    res = abm_cli("run", str(SCENARIOS / "lending-credit.yaml"), "--set", "family=fam_read.lending", "--plugins",
                  str(plugins_dir), "--out", str(tmp_path / "out"), *CREDIT)
    assert res.returncode == 0, res.stderr
    folder = run_folder(res.stdout)
    (plugins_dir / "MARKER").unlink()
    monkeypatch.chdir(plugins_dir)
    code, line = in_process("validate", str(folder))
    assert code == 2 and "unknown family 'fam_read.lending': module 'fam_read.lending' was not imported" in line
    code, line = in_process("run", str(folder), "--quiet")
    assert code == 2 and "was not imported" in line
    code, err = in_process("inspect", str(folder))
    assert code == 0, err
    code, err = in_process("report", str(folder))
    assert code == 0, err
    assert (folder / "report").is_dir()
    assert not (plugins_dir / "MARKER").exists() and "fam_read" not in sys.modules


# -- a study: the consent reaches its workers -------------------------------------------------
def test_a_study_on_dask_workers_imports_from_the_plugins_folder(tmp_path):
    plugins_dir = tmp_path / "plugins"
    marking_policy(plugins_dir, "study_folder")
    study = tmp_path / "consent-study.yaml"
    study.write_text(textwrap.dedent(f"""\
        study: {{name: consent-study, seed: 3, episodes: 1, seeds: 1}}
        base: {SCENARIOS / 'eutopia.yaml'}
        overrides: {{population.n_male: 100, population.n_female: 100}}
        policies:
          - {{name: "study_folder:P"}}
        """))
    out = tmp_path / "st"
    line = one_error_line(abm_cli("study", str(study), "--workers", "1", "--out", str(out), "--quiet"))
    assert "No module named 'study_folder'" in line and "--plugins DIR" in line and not out.exists()
    res = abm_cli("study", str(study), "--workers", "1", "--out", str(out), "--quiet", "--plugins", str(plugins_dir))
    assert res.returncode == 0, res.stderr
    assert "1 succeeded, 0 skipped, 0 failed" in res.stdout and "1 worker" in res.stdout


def test_the_consent_travels_with_a_task():
    consent = plugins.Consent(folders=("/somewhere",), named=(("/work", "mymod"),))
    with plugins.allowed(consent):
        assert plugins.current().folders == ("/somewhere",) and ("/work", "mymod") in plugins.current().named
    assert "/somewhere" not in plugins.current().folders


# -- the Python API: a name given in code is consent --------------------------------------------
def test_the_api_imports_a_name_given_in_code_but_not_one_read_from_a_file(tmp_path, monkeypatch):
    import abm

    marking_policy(tmp_path, "api_file")
    marking_policy(tmp_path / "sub", "api_code")
    path = scenario(tmp_path, "api_file:P")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="module 'api_file' was not imported: it lies in the working directory"):
        abm.run(path, episodes=1, overrides=["population.n_male=100", "population.n_female=100"])
    assert not (tmp_path / "MARKER").exists()
    monkeypatch.chdir(tmp_path / "sub")
    run = abm.run(path, policy="api_code:P", episodes=1, overrides=["population.n_male=100", "population.n_female=100"])
    assert run.summary["policy"] == "api_code:P" and (tmp_path / "sub" / "MARKER").exists()


# -- guarded imports ------------------------------------------------------------------------------
@pytest.mark.parametrize("body, raised", [
    ("import sys\nsys.exit(0)\n", "SystemExit: 0"),
    ("import sys\nsys.exit(3)\n", "SystemExit: 3"),
    ("raise SystemExit('bye')\n", "SystemExit: bye"),
    ("raise KeyboardInterrupt\n", "KeyboardInterrupt: no message"),
])
def test_a_plugin_that_exits_or_interrupts_at_import_is_refused(tmp_path, monkeypatch, body, raised):
    name = f"stops_{abs(hash(body)) % 10**8}"
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.chdir(tmp_path)
    code, line = in_process("validate", str(SCENARIOS / "eutopia.yaml"), "--policy", f"{name}:P")
    kind = raised.split(":")[0]
    assert code == 2 and line == (
        f"error: {SCENARIOS / 'eutopia.yaml'}: policy.name: unknown policy '{name}:P': module '{name}' raised {kind} "
        f"while being imported ({raised}); a plugin module must not stop the program at import; file "
        f"{tmp_path / name}.py, line {body.count(chr(10))}")


def test_ctrl_c_while_a_plugin_imports_is_still_an_interruption(tmp_path):
    (tmp_path / "hangs_ctrl_c.py").write_text("import time\n\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", "from abm.cli import main; main()", "validate",
                             str(SCENARIOS / "eutopia.yaml"), "--policy", "hangs_ctrl_c:P"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    time.sleep(4)  # importing abm, then the plugin
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and err.strip() == "interrupted: nothing was written", err


def test_a_slow_plugin_import_is_named_while_it_runs(tmp_path, monkeypatch):
    (tmp_path / "slow_import.py").write_text(textwrap.dedent('''\
        import time

        time.sleep(0.6)

        from policies.heuristics import ApproveAll as P
        '''))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(plugins.SLOW_IMPORT_ENV, "0.05")
    code, out, err = call_in_process("validate", str(SCENARIOS / "eutopia.yaml"), "--policy", "slow_import:P")
    assert code == 0 and out.endswith(": ok\n"), err
    assert err == (f"warning: still importing plugin module 'slow_import' after 0.05 s ({plugins.SLOW_IMPORT_ENV}); "
                   f"a plugin that hangs at import hangs abm (Ctrl+C stops it)\n")


@pytest.mark.parametrize("value", ["soon", "0", "-1", "nan", "inf"])
def test_the_slow_import_bound_is_checked(tmp_path, monkeypatch, value):
    marking_policy(tmp_path, f"bound_{value.replace('-', 'm')}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(plugins.SLOW_IMPORT_ENV, value)
    code, line = in_process("validate", str(SCENARIOS / "eutopia.yaml"), "--policy",
                            f"bound_{value.replace('-', 'm')}:P")
    assert code == 2 and line.endswith(f"{plugins.SLOW_IMPORT_ENV}: expected a number of seconds > 0, got {value!r}")
    assert not (tmp_path / "MARKER").exists()


# -- a family plugin's refusal names its file ---------------------------------------------------
@pytest.mark.parametrize("module, source, message", [
    ("no_world", "from abm.families.credit_score import Scenario\n",
     "is not a family module (it must define Scenario, an abm.config.ScenarioBase subclass, and World, a class; file "),
    ("not_base", "from pydantic import BaseModel\n\nclass Scenario(BaseModel):\n    pass\n\nWorld = int\n",
     "is not a family module (its Scenario must be an abm.config.ScenarioBase subclass; file "),
    ("no_literal", "from abm.families.credit_score import Scenario, World\n",
     "Scenario must declare family: Literal["),
    ("fails", "x = 1\nraise RuntimeError('broken family')\n",
     "cannot import module '{pkg}.fails' (RuntimeError: broken family); file "),
])
def test_a_family_plugin_refusal_names_its_file(tmp_path, monkeypatch, module, source, message):
    pkg = f"famfile_{module}"
    (tmp_path / pkg).mkdir()
    (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / pkg / f"{module}.py").write_text(source)
    code, line = in_process("validate", str(SCENARIOS / "lending-credit.yaml"), "--set", f"family={pkg}.{module}",
                            "--plugins", str(tmp_path))
    assert code == 2 and f"unknown family '{pkg}.{module}'" in line and message.format(pkg=pkg) in line, line
    assert str(tmp_path / pkg / f"{module}.py") in line
    for name in (f"{pkg}.{module}",):
        registry._PLUGIN_FAMILIES.pop(name, None)
        registry.FAMILIES.pop(name, None)
    registry.scenario_union.cache_clear()


# -- abm validate --policy ------------------------------------------------------------------------
def test_validate_takes_the_policy_run_would_use(tmp_path):
    credit = str(SCENARIOS / "lending-credit.yaml")
    assert call_in_process("validate", credit, "--policy", "max_util")[0] == 0
    code, line = in_process("validate", credit, "--policy", "oracle")
    assert code == 2 and "policy 'oracle' does not apply to family 'credit_score'" in line
    code, line = in_process("validate", credit, "--policy", "no_such_policy")
    assert code == 2 and "unknown policy 'no_such_policy'" in line
    code, line = in_process("validate", str(SCENARIOS / "studies" / "smoke.yaml"), "--policy", "random")
    assert code == 2 and line.endswith("--policy applies to scenario files (a study names its own policies)")


def test_typed_names_are_only_plugin_names():
    assert plugins.typed_names(["mymod:Cls", None, "random"], ["policy.name=a.b:C", "family=pkg.fam",
                                                               "population.data_dir=x.csv", "seed=3"]) == \
        ["mymod:Cls", "random", "a.b:C", "pkg.fam"]
    assert [plugins.module_of(n) for n in ("mymod:Cls", "random", "pkg.fam", "a.b:C", "x:", "1x:y")] == \
        ["mymod", None, "pkg", "a", None, None]
