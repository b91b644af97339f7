"""Packaging: `abm init`, the declared dependencies and extras, the files a release carries, the
example notebook runs end to end, a wheel built from the repo carries our distribution name
(`abm-lending`; the package index's `abm` is another project) with `abm`, `policies` and the
`abm` command, and (slow) it installs into a fresh venv with no extras and runs `abm validate`
and a short heuristic `abm run` without torch."""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, SCENARIOS


def scenario_files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.yaml"))


def test_abm_init_copies_the_scenarios_and_refuses_a_non_empty_folder(cli, tmp_path):
    dest = tmp_path / "project"
    res = cli("init", str(dest))
    assert res.returncode == 0, res.stderr
    assert scenario_files(dest) == scenario_files(SCENARIOS) and "studies/smoke.yaml" in scenario_files(dest)
    assert (dest / "eutopia.yaml").read_bytes() == (SCENARIOS / "eutopia.yaml").read_bytes()
    res = cli("validate", str(dest / "lending-credit.yaml"), str(dest / "studies" / "smoke.yaml"))
    assert res.returncode == 0, res.stderr  # the studies' relative base paths still resolve
    before = {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    for target in (dest, dest / "eutopia.yaml"):  # non-empty folder; a file
        res = cli("init", str(target))
        assert res.returncode == 2 and "Traceback" not in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith("error: "), res.stderr
    assert {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()} == before  # nothing overwritten
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli("init", str(empty)).returncode == 0 and (empty / "eutopia.yaml").is_file()


def setup_cfg() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return cfg


def requirements(text: str) -> dict[str, str]:
    reqs = {}
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if line:
            name = re.match(r"[A-Za-z0-9_.\-]+", line).group(0).lower()
            reqs[name] = line[len(name):].strip()
    return reqs


def test_core_dependencies_are_ranges_and_the_heavy_parts_extras():
    cfg = setup_cfg()
    core = requirements(cfg["options"]["install_requires"])
    assert not {"torch", "stable-baselines3", "gymnasium", "nevergrad", "solara", "solara-assets", "pytest",
                "hypothesis", "selenium"} & set(core)
    assert {"mesa", "simpy", "numpy", "pandas", "pydantic", "pyarrow", "scikit-learn", "dask"} <= set(core)
    assert not [name for name, spec in core.items() if "==" in spec]  # ranges only
    extras = {name: requirements(text) for name, text in cfg["options.extras_require"].items()}
    assert set(extras["rl"]) == {"torch", "stable-baselines3", "gymnasium", "nevergrad"}
    assert set(extras["dashboard"]) == {"solara", "solara-assets", "ipyvuetify", "ipyvue", "altair"}
    assert {"pytest", "hypothesis", "selenium", "nbclient", "ipykernel"} <= set(extras["dev"])
    pinned = {name for reqs in extras.values() for name, spec in reqs.items() if "==" in spec}
    assert pinned == {"solara", "solara-assets"}  # explained in setup.cfg and the README
    assert cfg["options"]["python_requires"] == ">=3.11"
    readme = (ROOT / "README.md").read_text()
    assert "3.11" in readme and "mesa" in readme.lower()


def test_make_install_installs_everything_with_the_pinned_torch():
    makefile = (ROOT / "Makefile").read_text()
    assert 'pip install -q -e ".[rl,dashboard,dev]" -c constraints.txt' in makefile
    pins = requirements((ROOT / "constraints.txt").read_text())
    assert pins["torch"].startswith("==")
    try:
        installed = metadata.version("torch")
    except metadata.PackageNotFoundError:
        pytest.skip("torch is not installed here (an install without the [rl] extra)")
    assert installed.split("+")[0] == pins["torch"][2:]  # the build make install gives this machine


def test_release_files():
    license_text = (ROOT / "LICENSE").read_text()
    assert license_text.startswith("MIT License") and "2026 abm developers" in license_text
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] and citation["license"] == "MIT" and citation["authors"]
    assert citation["version"] == setup_cfg()["metadata"]["version"]
    assert "## Unreleased" in (ROOT / "CHANGELOG.md").read_text()
    guide = (ROOT / "docs" / "guide.md").read_text()
    for section in ("Install", "First run", "scenario", "study", "histor", "dashboard", "your own policy",
                    "your own family", "Python API"):
        assert section.lower() in guide.lower(), section


def test_the_quickstart_notebook_runs_end_to_end(tmp_path):
    nbformat = pytest.importorskip("nbformat", reason="nbformat is in the [dev] extra (make install)")
    nbclient = pytest.importorskip("nbclient", reason="nbclient is in the [dev] extra (make install)")
    pytest.importorskip("ipykernel", reason="ipykernel is in the [dev] extra (make install)")
    source = ROOT / "examples" / "quickstart.ipynb"
    notebook = nbformat.read(source, as_version=4)
    work = tmp_path / "nb"
    work.mkdir()
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(work)}})
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on any failure
    outputs = "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
                      for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", []))
    assert "<abm.Run " in outputs  # it printed its runs
    assert not any(o.get("output_type") == "error" for cell in notebook.cells for o in cell.get("outputs", []))


# ---------------------------------------------------------------------------------------------
# A wheel in a fresh venv (slow: creates a venv and installs the core dependencies)


def _source_copy(dest: Path) -> Path:
    """The repo's files as git sees them (tracked and new, not ignored), without build leftovers."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def _run(cmd: list[str], cwd: Path, env: dict | None = None, timeout: float = 1800) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, timeout=timeout)
    assert res.returncode == 0, f"{' '.join(map(str, cmd))}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A wheel built from a copy of the repo (a few seconds: no venv, no dependencies)."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    src = _source_copy(tmp_path / "src")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"),
          str(src)], cwd=tmp_path, timeout=300)
    wheels = list((tmp_path / "dist").glob("*.whl"))
    assert len(wheels) == 1, wheels
    return {"src": src, "wheel": wheels[0], "tmp": tmp_path}


def _dist_info(names: list[str], wheel: Path) -> str:
    folders = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
    assert len(folders) == 1, (wheel.name, folders)
    return folders.pop()


def test_the_wheel_is_named_ours_and_holds_abm_policies_and_the_abm_command(built):
    """`pip install abm` would install the package index's unrelated `abm`: the distribution is
    abm.DISTRIBUTION (setup.cfg's name), while the import name and the command stay `abm`."""
    import abm

    assert abm.DISTRIBUTION == "abm-lending" and setup_cfg()["metadata"]["name"] == abm.DISTRIBUTION
    assert abm.pip_install("rl") == "pip install 'abm-lending[rl]'" and abm.pip_install() == "pip install abm-lending"
    wheel = built["wheel"]
    assert wheel.name.startswith("abm_lending-" + setup_cfg()["metadata"]["version"] + "-"), wheel.name
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        info = _dist_info(names, wheel)
        meta = zf.read(f"{info}/METADATA").decode()
        entry = configparser.ConfigParser()
        entry.read_string(zf.read(f"{info}/entry_points.txt").decode())
    fields = [line.split(": ", 1) for line in meta.split("\n\n")[0].splitlines() if ": " in line]
    assert [v for k, v in fields if k == "Name"] == [abm.DISTRIBUTION]
    assert [v for k, v in fields if k == "Version"] == [abm.__version__]
    assert {n.split("/")[0] for n in names if n.endswith(".py")} == {"abm", "policies"}
    assert {"abm/__init__.py", "abm/cli.py", "policies/__init__.py", "policies/base.py"} <= set(names)
    bundled = {n.removeprefix("abm/scenarios/") for n in names if n.startswith("abm/scenarios/")}
    assert bundled == set(scenario_files(SCENARIOS)) and "studies/smoke.yaml" in bundled  # what `abm init` copies
    assert dict(entry["console_scripts"]) == {"abm": "abm.cli:main"}
    extras = {v for k, v in fields if k == "Provides-Extra"}
    assert {"rl", "dashboard", "dev"} <= extras


# `pip install abm`, `"abm[rl]"`, 'abm[...]': the package index's abm, unless the line says it is another project
_BARE_ABM = re.compile(r"pip install\s+[\"']?abm(?![\w-])")


def _bare_install_lines(paths: list[Path]) -> list[str]:
    return [f"{p.relative_to(ROOT)}: {line.strip()}" for p in paths for line in p.read_text().splitlines()
            if _BARE_ABM.search(line) and "unrelated" not in line and "another project" not in line]


def test_every_install_line_names_our_distribution():
    """README, guide, examples, Makefile: `abm-lending`, never a bare `abm`."""
    docs = [ROOT / p for p in ("README.md", "docs/guide.md", "examples/README.md", "examples/plugin_policy/README.md",
                               "Makefile", "CITATION.cff")]
    assert _bare_install_lines(docs) == []
    assert "pip install abm-lending " in docs[0].read_text() and "abm-lending[rl]" in docs[1].read_text()
    import tomllib

    plugin = tomllib.loads((ROOT / "examples" / "plugin_policy" / "pyproject.toml").read_text())
    assert "abm-lending" in plugin["project"]["dependencies"] and "abm" not in plugin["project"]["dependencies"]


def test_the_extras_hints_name_our_distribution():
    """A missing extra's one-line error tells the user a command that installs *this* project."""
    assert _bare_install_lines(sorted((ROOT / "abm").rglob("*.py"))) == []


@pytest.fixture(scope="module")
def fresh_install(built):
    """The built wheel, installed into a new venv with no extras."""
    src, wheel, tmp_path = built["src"], built["wheel"], built["tmp"]
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], cwd=tmp_path, env=env)
    work = tmp_path / "work"  # a user's folder, with a policies/ folder of their own
    (work / "policies").mkdir(parents=True)
    (work / "policies" / "__init__.py").write_text("")
    return {"src": src, "wheel": wheel, "py": venv / "bin" / "python", "abm": venv / "bin" / "abm", "env": env,
            "work": work, "tmp": tmp_path}


@pytest.mark.slow
def test_a_wheel_installs_into_a_fresh_venv_without_extras_and_runs_without_torch(fresh_install):
    src, wheel, py, abm, env, work, tmp_path = (fresh_install[k] for k in ("src", "wheel", "py", "abm", "env", "work",
                                                                           "tmp"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "abm/scenarios/eutopia.yaml" in names and "abm/scenarios/studies/smoke.yaml" in names
    assert "policies/base.py" in names and "abm/api.py" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith("LICENSE") for n in names)
    freeze = _run([str(py), "-m", "pip", "freeze"], cwd=tmp_path, env=env).stdout.lower()
    for heavy in ("torch", "stable-baselines3", "stable_baselines3", "gymnasium", "solara", "pytest"):
        assert f"{heavy}==" not in freeze, heavy

    _run([str(abm), "init", "proj"], cwd=work, env=env)
    plain = [f"proj/{n}" for n in ("eutopia.yaml", "lending-credit.yaml", "fico-delayed-impact.yaml",
                                   "beta-belief-loans.yaml", "admissions.yaml", "studies/smoke.yaml")]
    out = _run([str(abm), "validate", *plain], cwd=work, env=env).stdout
    assert out.count(": ok") == len(plain)
    rl = subprocess.run([str(abm), "validate", "proj/studies/table1.yaml"], cwd=work, env=env, capture_output=True,
                        text=True)
    assert rl.returncode == 2 and "[rl] extra" in rl.stderr, rl.stderr  # deep lenders need the extra: one line

    code = ("import runpy, sys\nsys.argv = ['abm', 'run', 'proj/lending-credit.yaml', '--episodes', '2', "
            "'--set', 'population.size=200', '--set', 'episodes.horizon=100', '--out', 'out', '--quiet']\n"
            "try:\n    runpy.run_module('abm.cli', run_name='__main__')\nexcept SystemExit as exc:\n"
            "    assert not exc.code, exc.code\n"
            "print('torch imported:', 'torch' in sys.modules)")
    res = _run([str(py), "-c", code], cwd=work, env=env)  # `python -c`: the user's policies/ is first on sys.path
    assert "torch imported: False" in res.stdout and "run folder: out/lending-credit-max_util-seed0-" in res.stdout
    api = _run([str(py), "-c", "import abm; r = abm.run('proj/lending-credit.yaml', episodes=1, "
                "overrides=['population.size=100', 'episodes.horizon=50']); print(len(r.episodes), r.summary['policy'])"],
               cwd=work, env=env)
    assert api.stdout.strip().endswith("1 max_util")

    # the example plugin package, installed: its entry point names a policy for the CLI
    _run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(src / "examples" / "plugin_policy")], cwd=tmp_path,
         env=env)
    res = _run([str(abm), "run", "proj/lending-credit.yaml", "--policy", "quota", "--episodes", "1", "--set",
                "population.size=100", "--set", "episodes.horizon=50", "--out", "out", "--quiet"], cwd=work, env=env)
    assert "run folder: out/lending-credit-quota-seed0-" in res.stdout


@pytest.mark.slow
def test_the_rl_extra_installs_and_runs_a_ppo_smoke_run(fresh_install):
    py, abm, env, work, src = (fresh_install[k] for k in ("py", "abm", "env", "work", "src"))
    _run([str(py), "-m", "pip", "install", "-q", f"{fresh_install['wheel']}[rl]", "-c", str(src / "constraints.txt")],
         cwd=work, env=env)
    if not (work / "proj").is_dir():
        _run([str(abm), "init", "proj"], cwd=work, env=env)
    res = _run([str(abm), "run", "proj/lending-credit.yaml", "--policy", "ppo", "--set", "policy.total_timesteps=256",
                "--set", "policy.n_steps=64", "--set", "policy.batch_size=32", "--episodes", "1", "--set",
                "population.size=100", "--set", "episodes.horizon=50", "--out", "out", "--quiet"], cwd=work, env=env)
    folder = work / res.stdout.strip().splitlines()[-1].split(": ", 1)[1]
    assert (folder / "policy").is_dir() and (folder / "summary.json").is_file()
