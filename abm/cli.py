"""The ``abm`` command line. User errors exit 2 with one line; broken invariants exit 1."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Callable, List, Optional

import typer

from abm.errors import Interrupted, InvariantError, UserError, owned_output

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None, help="abm: long-run fairness of lending policies, simulated.")


def _console(stderr: bool = False):
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # off a terminal (pipes, CI logs) rich would wrap tables at 80 columns: give them room
    return Console(stderr=stderr, highlight=False, width=None if stream.isatty() else 160)


PLUGINS_HELP = ("Also import plugin modules (module:Class, package.module) from this folder, for this command "
                "(repeatable); without it a plugin named in a file comes only from an installed package or "
                "PYTHONPATH.")


def _consent(folders: List[Path], *typed: Optional[str], sets: List[str] = ()) -> None:
    """What this command may import: the ``--plugins`` folders, and the plugin names typed on the
    command line (from the working directory; ``abm.plugins``)."""
    from abm import plugins

    plugins.allow(folders, plugins.typed_names(typed, sets))


@app.command()
def validate(files: List[Path] = typer.Argument(..., help="Scenario or study files (or run folders)."),
             set_: List[str] = typer.Option([], "--set", help="Override dotted.path=value."),
             policy: Optional[str] = typer.Option(None, help="Validate scenario files as `abm run --policy` would "
                                                  "run them: a registered name or a plugin module:Class."),
             plugins_: List[Path] = typer.Option([], "--plugins", metavar="DIR", help=PLUGINS_HELP)) -> None:
    """Check scenario (or study) files as `abm run` / `abm study` would: exit 0, or exit 2 with one line
    per problem. Imports a plugin only where `run` would (installed, PYTHONPATH, --plugins, typed names)."""
    from abm.config import load_scenario, read_yaml, scenario_file

    _consent(plugins_, policy, sets=set_)
    problems = []
    for f in files:
        try:
            data = read_yaml(scenario_file(f))  # a run folder, as `abm run` takes it
            if "study" in data or "base" in data and "grid" in data:
                from abm.study import load_study

                if policy is not None:
                    raise UserError(f"{f}: --policy applies to scenario files (a study names its own policies)")
                for notice in load_study(f, list(set_)).notices:
                    typer.echo(f"warning: {notice}", err=True)
            else:
                load_scenario(f, list(set_), policy=policy)
            typer.echo(f"{f}: ok")
        except UserError as exc:
            problems.append(str(exc))
    if problems:
        raise UserError("\n".join(problems))


@app.command()
def population(scenario: Path = typer.Argument(..., help="Scenario file."),
               out: Path = typer.Option(..., "--out", help="Parquet file to write."),
               set_: List[str] = typer.Option([], "--set", help="Override dotted.path=value."),
               seed: Optional[int] = typer.Option(None, help="Root seed."),
               plugins_: List[Path] = typer.Option([], "--plugins", metavar="DIR", help=PLUGINS_HELP)) -> None:
    """Generate the scenario's population: one row per applicant."""
    import numpy as np

    from abm.config import load_scenario
    from abm.population import edges_path, generate_network, generate_population, summary_table

    _consent(plugins_, sets=set_)
    sc = load_scenario(scenario, list(set_), seed=seed)
    frame = generate_population(sc)
    edges = generate_network(sc)  # None without a network section
    written = [(frame, out)] + ([(edges, edges_path(out))] if edges is not None else [])
    for _, path in written:
        owned_output(path, "--out")
    for table, path in written:
        tmp = path.with_name(f".tmp-{path.name}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            table.to_parquet(tmp, index=False)
            tmp.replace(path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise UserError(f"--out {path}: cannot write ({exc.strerror or str(exc).splitlines()[0]})") from None
    _console().print(summary_table(frame))
    typer.echo(f"population: {len(frame)} applicants -> {out}")
    if edges is not None:
        typer.echo(f"network: {len(edges)} ties -> {edges_path(out)}")
    del np


@app.command()
def run(scenario: Path = typer.Argument(..., help="Scenario file."),
        policy: Optional[str] = typer.Option(None, help="Policy: a registered name (see `abm policies`) or a "
                                             "plugin module:Class."),
        episodes: Optional[int] = typer.Option(None, help="Number of episodes."),
        seed: Optional[int] = typer.Option(None, help="Root seed."),
        objective: Optional[str] = typer.Option(None, help="Learning objective perspective:family[:param]."),
        set_: List[str] = typer.Option([], "--set", help="Override dotted.path=value (repeatable)."),
        out: Optional[Path] = typer.Option(None, help="Output root (default: the scenario's outputs.root)."),
        report: bool = typer.Option(False, "--report", help="Also render the report (PNG + tables)."),
        load: Optional[Path] = typer.Option(None, "--load", help="Start the policy from a checkpoint (a .pt, its folder or a run folder)."),
        save: Optional[Path] = typer.Option(None, "--save", help="Also copy the trained policy's checkpoint here (.pt or folder)."),
        recompute: bool = typer.Option(False, "--recompute", help="Run again even if an identical run is complete "
                                       "(the old folder is kept beside it)."),
        quiet: bool = typer.Option(False, help="No progress bar."),
        plugins_: List[Path] = typer.Option([], "--plugins", metavar="DIR", help=PLUGINS_HELP)) -> None:
    """Simulate a scenario and write a run folder (an identical complete run by the same code is reused)."""
    from abm.config import load_scenario
    from abm.progress import episode_progress
    from abm.runner import run_to_folder

    _consent(plugins_, policy, objective, sets=set_)
    sc = load_scenario(scenario, list(set_), policy=policy, episodes=episodes, seed=seed, objective=objective)
    if out is None and _is_run_folder(scenario):  # a shared run folder's outputs.root decides nothing
        out = Path(type(sc.outputs)().root)
    if load is not None:
        from policies.torch_common import attach_checkpoint

        sc = attach_checkpoint(sc, load)
    if save is not None:  # refused before the run, not after it
        from policies.torch_common import save_target

        save_target(save)
    with _kept("the run was not finished: no run folder was written"), \
            episode_progress(sc.episodes.count, f"{sc.name} / {sc.policy.name}", quiet=quiet) as advance:
        folder, computed = run_to_folder(sc, out, on_episode=advance, reuse=not recompute,
                                         notify=lambda line: typer.echo(line, err=True))
    from abm.reports import print_run_summary, render

    with _kept(f"the run folder {folder} is complete and kept; what comes after it (report, --save) was not "
               f"finished"):
        print_run_summary(folder, _console())
        if not computed:
            typer.echo("(identical run already complete: reused, nothing recomputed)")
        if report:
            written = render(folder)  # all or nothing: no partial report/ on a full disk
            typer.echo(f"report: {written}")
        if save is not None:
            from policies.torch_common import export_checkpoint

            typer.echo(f"checkpoint: {export_checkpoint(folder, save)}")
    typer.echo(f"run folder: {folder}")


def _is_run_folder(path: Path) -> bool:
    """A run folder (or its scenario.yaml): what ``abm run`` computes again."""
    return path.is_dir() or path.name == "scenario.yaml" and (path.parent / "summary.json").is_file()


@contextlib.contextmanager
def _kept(what: str | Callable[[], str]):
    """Ctrl+C or SIGTERM inside: ``Interrupted`` with the line saying what was kept (``what``, or
    what it returns when called then)."""
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(what() if callable(what) else what) from None


@app.command()
def inspect(run_dir: Path = typer.Argument(..., help="A run folder (a study folder: its runs)."),
            agent: Optional[int] = typer.Option(None, help="Applicant id: print its timeline."),
            group: Optional[str] = typer.Option(None, help="Group name: print its summary."),
            limit: Optional[int] = typer.Option(None, help="At most this many timeline rows (default 200; an "
                                                "export writes every row unless --limit is given)."),
            neighbours: bool = typer.Option(True, "--neighbours/--no-neighbours",
                                            help="Runs with a network: interleave the neighbours' approvals."),
            json_: Optional[str] = typer.Option(None, "--json", metavar="PATH",
                                                help="Write what inspect shows as one JSON object to PATH "
                                                "(-: stdout) instead of printing the table."),
            csv_: Optional[str] = typer.Option(None, "--csv", metavar="PATH",
                                               help="Write what inspect shows as a CSV table to PATH (-: stdout) "
                                               "instead of printing the table.")) -> None:
    """A run's per-group overview, an applicant's timeline or a group's summary from a run folder (a
    study folder: its runs); --json / --csv PATH export the same as data."""
    from abm import inspect as ins
    from abm import plugins

    plugins.forbid("abm inspect")
    if limit is not None and limit < 0:
        raise UserError(f"--limit: must be 0 or more, got {limit}")
    if json_ is not None and csv_ is not None:
        raise UserError("inspect: give --json PATH or --csv PATH, not both")
    fmt, target = ("json", json_) if json_ is not None else ("csv", csv_) if csv_ is not None else (None, None)
    runs = ins.study_runs(run_dir)
    if runs is not None and fmt is not None and agent is None and group is None:
        payload, table = ins.study_export(run_dir, runs)
        return _export(fmt, target, payload, table, f"{len(runs)} runs of study {run_dir}")
    if runs is not None:  # list them (stdout), then the one-line error of load_run
        for run_id, finished in runs:
            typer.echo(f"{run_dir / 'runs' / run_id}{'' if finished else '  (not finished)'}")
    run = ins.load_run(run_dir)
    if fmt is None:
        con = _console()
        if agent is not None:
            con.print(ins.agent_timeline(run, agent, 200 if limit is None else limit, neighbours))
        elif group is not None:
            con.print(ins.group_summary(run, group))
        else:
            con.print(ins.run_overview(run))
        return
    if agent is not None:
        payload, table = ins.agent_export(run, agent, limit, neighbours)
        what = f"applicant {agent}'s history ({len(table)} rows)"
    elif group is not None:
        payload, table = ins.group_export(run, group)
        what = f"group {group}'s summary"
    else:
        payload, table = ins.run_export(run)
        what = f"the run's overview ({len(table)} groups)"
    _export(fmt, target, payload, table, what)


def _export(fmt: str, target: str, payload: dict, table, what: str) -> None:
    """``abm inspect --json/--csv``: the data to stdout (``-``) or to a file (then one line saying so)."""
    from abm.inspect import export_text, write_export

    text = export_text(fmt, payload, table)
    if target == "-":
        typer.echo(text, nl=False)
        return
    typer.echo(f"inspect: {what} -> {write_export(text, target, f'--{fmt}')}")


@app.command()
def dashboard(folder: Optional[Path] = typer.Argument(None, help="A run folder or a study folder."),
              live: Optional[Path] = typer.Option(None, "--live", help="A scenario file: simulate it in the page."),
              port: int = typer.Option(8765, help="Port to listen on."),
              host: str = typer.Option("127.0.0.1", help="Address to listen on."),
              policy: Optional[str] = typer.Option(None, help="--live: registered policy name."),
              seed: Optional[int] = typer.Option(None, help="--live: root seed."),
              set_: List[str] = typer.Option([], "--set", help="--live: override dotted.path=value."),
              allow_origin: List[str] = typer.Option([], "--allow-origin", help="Also accept pages (and a proxy's "
                                                     "Host) from this origin, e.g. https://dash.example.org "
                                                     "(repeatable)."),
              plugins_: List[Path] = typer.Option([], "--plugins", metavar="DIR", help="--live: " + PLUGINS_HELP)
              ) -> None:
    """Browse a run or study in a local web app (metrics, applicants, timelines), or watch --live SCENARIO.

    Only pages served by the dashboard itself (loopback names, or --host and --allow-origin) may
    talk to it; bound beyond loopback (e.g. --host 0.0.0.0) it also needs the printed URL's token."""
    import importlib.util

    from abm import dashboard as web
    from abm import pip_install

    if importlib.util.find_spec("solara") is None:
        raise UserError(f"dashboard: needs the [dashboard] extra: {pip_install('dashboard')}")
    if (folder is None) == (live is None):
        raise UserError("dashboard: give a run or study folder, or --live SCENARIO (one of them)")
    stopped = _kept("the dashboard stopped (it writes no file: nothing to keep)")
    if live is not None:
        _consent(plugins_, policy, sets=set_)
        with stopped:
            web.serve_live(live, port, host, policy=policy, seed=seed, overrides=list(set_),
                           allow_origins=list(allow_origin))
    elif policy is not None or seed is not None or set_:
        raise UserError("dashboard: --policy, --seed and --set apply to --live SCENARIO only")
    elif plugins_:
        raise UserError("dashboard: --plugins applies to --live SCENARIO only (a folder is read as data: no plugin "
                        "is imported)")
    else:
        from abm import plugins

        plugins.forbid("abm dashboard FOLDER")
        with stopped:
            web.serve_folder(folder, port, host, allow_origins=list(allow_origin))


@app.command()
def study(study_file: Path = typer.Argument(..., help="Study file (scenarios/studies/*.yaml)."),
          scheduler: Optional[str] = typer.Option(None, help="Existing Dask scheduler tcp://HOST:PORT "
                                                  "(default: a local cluster)."),
          workers: Optional[int] = typer.Option(None, help="Local cluster size (0: in this process, no Dask; "
                                                "default: in this process while the runs left are below a "
                                                "local cluster's measured break-even, else one worker per "
                                                "core; a line says which and why)."),
          out: Optional[Path] = typer.Option(None, help="Study folder (default: outputs/studies/<name>)."),
          retry_failed: bool = typer.Option(False, "--retry-failed", help="Rerun runs that failed before."),
          recompute_stale: bool = typer.Option(False, "--recompute-stale", help="Rerun finished runs computed by "
                                               "other code (their folders are kept beside)."),
          set_: List[str] = typer.Option([], "--set", help="Override a study-file field dotted.path=value."),
          order: str = typer.Option("", help="Policies to run first, comma-separated NAME or NAME:VARIANT "
                                    "(bisim_ppo:full), each at every seed before the next; the order changes no run."),
          skip: Optional[Path] = typer.Option(None, metavar="LEDGER", help="Leave out the runs this CSV's run_id "
                                              "column names (a ledger of earlier sittings: benchmarks/study_ledger.py)."),
          report: bool = typer.Option(False, "--report", help="Also render the study report."),
          quiet: bool = typer.Option(False, help="No progress bar."),
          plugins_: List[Path] = typer.Option([], "--plugins", metavar="DIR", help=PLUGINS_HELP + " A study's "
                                              "workers import from the same folder (the same path on each).")) -> None:
    """Run a population study (grid x policies x objectives x seeds); resumable. Exit 1 if a run failed."""
    from abm.runner import is_complete
    from abm.study import load_study, run_study
    from abm.study.execute import read_held, skip_notices
    from abm.study.spec import order_items

    _consent(plugins_, sets=set_)
    spec = load_study(study_file, list(set_))
    held = read_held(skip) if skip is not None else frozenset()
    for notice in [*spec.notices, *skip_notices(held, spec, f"--skip {skip}")]:
        typer.echo(f"warning: {notice}", err=True)
    folder = out or Path("outputs") / "studies" / spec.name

    def kept() -> str:
        done = sum(is_complete(folder / "runs" / r.run_id) for r in spec.runs)
        return (f"study {spec.name}: {done} of {len(spec.runs)} runs are finished and kept in {folder}, "
                f"{len(spec.runs) - done} are not (the same command resumes)")

    with _kept(kept):
        outcome = run_study(spec, folder, scheduler=scheduler, workers=workers, retry_failed=retry_failed,
                            recompute_stale=recompute_stale, quiet=quiet, order=order_items(order), skip=held,
                            on_backend=typer.echo)  # the default's choice, one line
    for run_id, error in outcome.failures.items():
        typer.echo(f"failed: {run_id}: {error}", err=True)
    typer.echo(outcome.summary_line(spec.name))
    if report and outcome.succeeded + outcome.skipped:
        from abm.reports import render

        with _kept(lambda: f"{kept()}; the report was not written (report/ is as it was)"):
            typer.echo(f"report: {render(outcome.folder)}")
    if outcome.failed:
        sys.exit(1)


@app.command()
def report(folder: Path = typer.Argument(..., help="A run or study folder."),
           frontier_x: Optional[str] = typer.Option(None, "--frontier-x", metavar="METRIC",
                                                    help="A study: also draw the frontier with this metric on x "
                                                    "(default: the first fairness metric, e.g. wealth_gap)."),
           frontier_y: Optional[str] = typer.Option(None, "--frontier-y", metavar="METRIC",
                                                    help="A study: also draw the frontier with this metric on y "
                                                    "(default: the first profit metric, e.g. "
                                                    "cumulative_profit)."),
           formats: str = typer.Option("png", "--format", metavar="FORMATS",
                                       help="Figure formats, comma-separated: png, svg, pdf (default: png)."),
           dpi: int = typer.Option(110, "--dpi", help="PNG resolution, 50 to 1200 (default: 110)."),
           facet: Optional[str] = typer.Option(None, "--facet", metavar="group",
                                               help="group: a per-group metric's figure gets one panel per "
                                               "population group.")) -> None:
    """Render tables (Markdown/CSV) and figures (PNG, SVG, PDF) for a run or a study."""
    from abm import plugins
    from abm.reports import render
    from abm.reports.figures import output_options
    from abm.reports.study import frontier_axes, frontier_file, is_study_folder

    plugins.forbid("abm report")
    options = dict(zip(("formats", "dpi", "facet"), output_options(formats, dpi, facet)))  # bad values: one line
    interrupted = _kept(f"the report was not written ({folder / 'report'} is as it was)")
    if frontier_x is None and frontier_y is None:
        with interrupted:
            typer.echo(f"report: {render(folder, **options)}")
        return
    flag = "--frontier-x" if frontier_x is not None else "--frontier-y"
    if not is_study_folder(folder):
        raise UserError(f"{flag}: applies to a study folder (study.yaml or runs/), and {folder} is not one")
    x, y = frontier_axes(folder, frontier_x, frontier_y)  # checked before anything is drawn
    with interrupted:
        written = render(folder, frontier=(x, y), **options)  # the chosen frontier is part of the report
    typer.echo(f"report: {written}")
    typer.echo(f"frontier: {frontier_file(written, x, y)}")


@app.command()
def policies(name: Optional[str] = typer.Argument(None, help="A policy name (or plugin module:Class): show it "
                                                  "in detail.")) -> None:
    """List the policies with the families they apply to; `abm policies NAME` shows one in detail."""
    from rich.markup import escape
    from rich.table import Table

    from abm import registry

    if name is None:  # names from the registry's strings: no policy is imported (fast, no torch)
        table = Table(title="policies (abm policies NAME: parameters and details)")
        for col in ("name", "families", "class"):
            table.add_column(col)
        every = len(registry.family_capabilities())  # the families listing() matched against, plugins included
        for row in registry.listing():
            fams = row["families"]
            shown = "any" if fams is not None and len(fams) == every else \
                (", ".join(fams) if fams else ("none built in" if fams is not None else "? (see abm policies NAME)"))
            target = row["target"] + ("" if row["source"] == "built-in" else f"  ({row['source']})")
            table.add_row(escape(row["name"]), shown, escape(target))
        _console().print(table)
        typer.echo("plugins: any Policy subclass as module:Class (--policy, policy.name), or an installed "
                   "package's entry point (group abm.policies); see docs/guide.md")
        return
    _consent([], name)  # a plugin name typed here may come from the working directory
    info = registry.details(name)
    con = _console()
    con.print(f"{info['name']}  ({info['target']}, {info['source']})", markup=False)
    if info["doc"]:
        con.print(info["doc"], markup=False)
    con.print(f"families: {', '.join(info['families']) or 'none built in'}"
              f"{'  (requires: ' + ', '.join(info['requires']) + ')' if info['requires'] else ''}", markup=False)
    if info["privileged"]:
        con.print(f"privileged columns read: {', '.join(info['privileged'])}", markup=False)
    if info["twin"]:
        con.print(f"counterpart on other families: {info['twin']}", markup=False)
    if info["saves"]:
        con.print("keeps its trained state in the run folder (policy/)", markup=False)
    if not info["params"]:
        con.print("parameters: none", markup=False)
        return
    table = Table(title="parameters (policy.<name> in a scenario, --set policy.<name>=value)")
    for col in ("name", "type", "default", "allowed", "description"):
        table.add_column(col)
    for p in info["params"]:
        table.add_row(*(escape(str(v)) for v in (p["name"], p["type"], repr(p["default"]),
                                                 ", ".join(p["constraints"]) or "-", p["description"])))
    con.print(table)


@app.command()
def init(folder: Path = typer.Argument(..., help="A new or empty folder.")) -> None:
    """Copy the bundled scenarios (and studies) into FOLDER, to run and edit your own."""
    from abm.api import init as copy_scenarios

    files = copy_scenarios(folder)
    typer.echo(f"{len(files)} scenario files copied to {folder}/; next: abm validate {folder}/eutopia.yaml, "
               f"abm run {folder}/lending-credit.yaml --episodes 3")


@app.command()
def schema(markdown: bool = typer.Option(False, "--markdown", help="The Markdown field reference instead."),
           check: bool = typer.Option(False, "--check", help="Exit 1 if docs/scenario-reference.md or "
                                      "docs/scenario.schema.json is stale (a source checkout).")) -> None:
    """Print the JSON Schema of a scenario file (for editors); --markdown: the field reference."""
    from abm import reference

    if check:
        raise SystemExit(reference.main(["--check"]))
    typer.echo(reference.markdown() if markdown else reference.json_text(), nl=False)


@app.command()
def bench(quick: bool = typer.Option(False, "--quick", help="Only the N = 6,000 engine-vs-reference figures (< 1 min)."),
          json_: Optional[Path] = typer.Option(None, "--json", help="Write the figures as one flat JSON object.")) -> None:
    """Performance harness: engine vs a vectorised reference, scaling, memory, learning, adapter, studies."""
    from abm.bench import main as bench_main

    bench_main(quick=quick, json_path=None if json_ is None else owned_output(json_, "--json"))


def _terminate(signum, frame) -> None:
    """SIGTERM: the same path as Ctrl+C (``_kept`` says what was kept), exit 143."""
    global _SIGNAL
    _SIGNAL = signal.SIGTERM
    raise KeyboardInterrupt


_SIGNAL = signal.SIGINT  # the signal that interrupted this command (exit 128 + its number)


def main() -> None:
    """Console entry point: map our errors to exit codes without tracebacks."""
    global _SIGNAL
    _SIGNAL = signal.SIGINT
    try:
        previous = signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread (an embedding program): its own handlers stay
        previous = None
    from abm import plugins

    try:
        with plugins.session():  # the plugin consent a command gives ends with it
            code = app(standalone_mode=False)  # typer turns a KeyboardInterrupt it sees into 130
        if code == 130:
            raise Interrupted("nothing was written")
        if isinstance(code, int) and code:
            sys.exit(code)
    except Interrupted as exc:
        typer.echo(f"interrupted: {exc}", err=True)
        sys.exit(128 + _SIGNAL)
    except UserError as exc:
        for line in str(exc).splitlines() or ["error"]:
            typer.echo(f"error: {line}", err=True)
        sys.exit(2)
    except InvariantError as exc:
        typer.echo(f"invariant failed: {exc}", err=True)
        sys.exit(1)
    except OSError as exc:
        import errno

        # a full, read-only or forbidden output folder is the user's to fix, not an internal error
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        typer.echo(f"error: {where}cannot write ({os.strerror(exc.errno)})", err=True)
        sys.exit(2)
    except SystemExit:
        raise
    except Exception as exc:  # click usage errors (typer vendors click) and anything unexpected
        if hasattr(exc, "format_message") and getattr(exc, "exit_code", None) == 2:  # UsageError family
            message = " ".join(exc.format_message().split())
            typer.echo(f"error: {message}", err=True)
            sys.exit(2)
        if type(exc).__name__ == "Abort":  # end of input at a prompt
            typer.echo("interrupted: nothing was written", err=True)
            sys.exit(130)
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    main()
