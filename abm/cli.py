"""The ``abm`` command line. User errors exit 2 with one line; broken invariants exit 1."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import List, Optional

import typer

from abm.errors import InvariantError, UserError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None, help="abm: long-run fairness of lending policies, simulated.")


def _console(stderr: bool = False):
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # off a terminal (pipes, CI logs) rich would wrap tables at 80 columns: give them room
    return Console(stderr=stderr, highlight=False, width=None if stream.isatty() else 160)


@app.command()
def validate(files: List[Path] = typer.Argument(..., help="Scenario or study files."),
             set_: List[str] = typer.Option([], "--set", help="Override dotted.path=value.")) -> None:
    """Check scenario (or study) files: exit 0, or exit 2 with one line per problem."""
    from abm.config import load_scenario, read_yaml

    problems = []
    for f in files:
        try:
            data = read_yaml(f)
            if "study" in data or "base" in data and "grid" in data:
                from abm import study

                study.load_study(f, list(set_))
            else:
                load_scenario(f, list(set_))
            typer.echo(f"{f}: ok")
        except UserError as exc:
            problems.append(str(exc))
    if problems:
        raise UserError("\n".join(problems))


@app.command()
def population(scenario: Path = typer.Argument(..., help="Scenario file."),
               out: Path = typer.Option(..., "--out", help="Parquet file to write."),
               set_: List[str] = typer.Option([], "--set", help="Override dotted.path=value."),
               seed: Optional[int] = typer.Option(None, help="Root seed.")) -> None:
    """Generate the scenario's population: one row per applicant."""
    import numpy as np

    from abm.config import load_scenario
    from abm.population import generate_population, summary_table

    sc = load_scenario(scenario, list(set_), seed=seed)
    frame = generate_population(sc)
    tmp = out.with_name(f".tmp-{out.name}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(tmp, index=False)
        tmp.replace(out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UserError(f"--out {out}: cannot write ({exc.strerror or str(exc).splitlines()[0]})") from None
    _console().print(summary_table(frame))
    typer.echo(f"population: {len(frame)} applicants -> {out}")
    del np


@app.command()
def run(scenario: Path = typer.Argument(..., help="Scenario file."),
        policy: Optional[str] = typer.Option(None, help="Registered policy name (see `abm policies`)."),
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
        quiet: bool = typer.Option(False, help="No progress bar.")) -> None:
    """Simulate a scenario and write a run folder (an identical complete run by the same code is reused)."""
    from abm.config import load_scenario
    from abm.progress import episode_progress
    from abm.runner import run_to_folder

    sc = load_scenario(scenario, list(set_), policy=policy, episodes=episodes, seed=seed, objective=objective)
    if load is not None:
        from policies.torch_common import attach_checkpoint

        sc = attach_checkpoint(sc, load)
    with episode_progress(sc.episodes.count, f"{sc.name} / {sc.policy.name}", quiet=quiet) as advance:
        folder, computed = run_to_folder(sc, out, on_episode=advance, reuse=not recompute,
                                         notify=lambda line: typer.echo(line, err=True))
    from abm.report import print_run_summary, render_run

    print_run_summary(folder, _console())
    if not computed:
        typer.echo("(identical run already complete: reused, nothing recomputed)")
    if report:
        written = render_run(folder)
        typer.echo(f"report: {written}")
    if save is not None:
        from policies.torch_common import export_checkpoint

        typer.echo(f"checkpoint: {export_checkpoint(folder, save)}")
    typer.echo(f"run folder: {folder}")


@app.command()
def inspect(run_dir: Path = typer.Argument(..., help="A run folder."),
            agent: Optional[int] = typer.Option(None, help="Applicant id: print its timeline."),
            group: Optional[str] = typer.Option(None, help="Group name: print its summary."),
            limit: int = typer.Option(200, help="At most this many timeline rows.")) -> None:
    """An applicant's timeline or a group's summary from a run folder."""
    from abm.inspect import agent_timeline, group_summary, load_run

    run = load_run(run_dir)
    con = _console()
    if agent is not None:
        con.print(agent_timeline(run, agent, limit))
    elif group is not None:
        con.print(group_summary(run, group))
    else:
        raise UserError("inspect: give --agent ID or --group G")


@app.command()
def dashboard(folder: Optional[Path] = typer.Argument(None, help="A run folder or a study folder."),
              live: Optional[Path] = typer.Option(None, "--live", help="A scenario file: simulate it in the page."),
              port: int = typer.Option(8765, help="Port to listen on."),
              host: str = typer.Option("127.0.0.1", help="Address to listen on."),
              policy: Optional[str] = typer.Option(None, help="--live: registered policy name."),
              seed: Optional[int] = typer.Option(None, help="--live: root seed."),
              set_: List[str] = typer.Option([], "--set", help="--live: override dotted.path=value.")) -> None:
    """Browse a run or study in a local web app (metrics, applicants, timelines), or watch --live SCENARIO."""
    from abm import dashboard as web

    if (folder is None) == (live is None):
        raise UserError("dashboard: give a run or study folder, or --live SCENARIO (one of them)")
    if live is not None:
        web.serve_live(live, port, host, policy=policy, seed=seed, overrides=list(set_))
    elif policy is not None or seed is not None or set_:
        raise UserError("dashboard: --policy, --seed and --set apply to --live SCENARIO only")
    else:
        web.serve_folder(folder, port, host)


@app.command()
def study(study_file: Path = typer.Argument(..., help="Study file (scenarios/studies/*.yaml)."),
          scheduler: Optional[str] = typer.Option(None, help="Existing Dask scheduler tcp://HOST:PORT "
                                                  "(default: a local cluster)."),
          workers: Optional[int] = typer.Option(None, help="Local cluster size (default: one per core; "
                                                "0: in this process, no Dask)."),
          out: Optional[Path] = typer.Option(None, help="Study folder (default: outputs/studies/<name>)."),
          retry_failed: bool = typer.Option(False, "--retry-failed", help="Rerun runs that failed before."),
          recompute_stale: bool = typer.Option(False, "--recompute-stale", help="Rerun finished runs computed by "
                                               "other code (their folders are kept beside)."),
          set_: List[str] = typer.Option([], "--set", help="Override a study-file field dotted.path=value."),
          report: bool = typer.Option(False, "--report", help="Also render the study report."),
          quiet: bool = typer.Option(False, help="No progress bar.")) -> None:
    """Run a population study (grid x policies x objectives x seeds); resumable. Exit 1 if a run failed."""
    from abm.study import load_study, run_study

    spec = load_study(study_file, list(set_))
    outcome = run_study(spec, out or Path("outputs") / "studies" / spec.name, scheduler=scheduler, workers=workers,
                        retry_failed=retry_failed, recompute_stale=recompute_stale, quiet=quiet)
    for run_id, error in outcome.failures.items():
        typer.echo(f"failed: {run_id}: {error}", err=True)
    typer.echo(outcome.summary_line(spec.name))
    if report and outcome.succeeded + outcome.skipped:
        from abm.study import render_report

        typer.echo(f"report: {render_report(outcome.folder)}")
    if outcome.failed:
        sys.exit(1)


@app.command()
def report(folder: Path = typer.Argument(..., help="A run or study folder.")) -> None:
    """Render tables (Markdown/CSV) and PNG plots for a run or a study."""
    from abm.report import render

    typer.echo(f"report: {render(folder)}")


@app.command()
def policies() -> None:
    """List registered policies and their parameters."""
    from rich.table import Table

    from policies.registry import describe

    table = Table(title="registered policies")
    for col in ("name", "what it does", "parameters", "privileged"):
        table.add_column(col)
    for row in describe():
        params = "\n".join(f"{p['name']}={p['default']!r}: {p['description']}" for p in row["params"]) or "-"
        table.add_row(row["name"], row["doc"], params, ", ".join(row["privileged"]) or "-")
    _console().print(table)


@app.command()
def bench(quick: bool = typer.Option(False, "--quick", help="Only the N = 6,000 engine-vs-reference figures (< 1 min)."),
          json_: Optional[Path] = typer.Option(None, "--json", help="Write the figures as one flat JSON object.")) -> None:
    """Performance harness: engine vs a vectorised reference, scaling, memory, learning, adapter, studies."""
    from abm.bench import main as bench_main

    bench_main(quick=quick, json_path=json_)


def main() -> None:
    """Console entry point: map our errors to exit codes without tracebacks."""
    try:
        app(standalone_mode=False)
    except UserError as exc:
        for line in str(exc).splitlines() or ["error"]:
            typer.echo(f"error: {line}", err=True)
        sys.exit(2)
    except InvariantError as exc:
        typer.echo(f"invariant failed: {exc}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
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
        kind = type(exc).__name__
        if hasattr(exc, "format_message") and getattr(exc, "exit_code", None) == 2:  # UsageError family
            message = " ".join(exc.format_message().split())
            typer.echo(f"error: {message}", err=True)
            sys.exit(2)
        if kind == "Abort":
            sys.exit(130)
        if kind == "Exit":
            sys.exit(getattr(exc, "exit_code", 0))
        raise

if __name__ == "__main__":
    main()
