"""Reports: tables (Markdown/CSV) and figures (PNG, SVG or PDF) for a run folder or a study folder.

    run      a run folder's report (``render_run``), its console summary, ``to_markdown``
    study    a study folder's comparison tables and plots, then every paper form that applies
    seed000  seed 000's Figure 3 and Tables 2-3 (Eutopia lenders and learners)
    seed001  seed 001's Figure-1 tables (the fair-MDP planners on the beta-belief family)
    seed002  seed 002's Tables 1, 2 and 5 (deep fair RL on the score families)
    benchmark  a study across environments (families): reward and fairness gap per method

Every paper module has the same interface, ``applies(folder) -> bool`` and
``write(folder, out) -> list[Path]``; ``PAPERS`` below is the one place that lists them, and
``render_report`` hands that tuple to ``study.render_study``. Reports are the top layer: they
read study folders through ``abm.study`` (never the other way round) and may import policies.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from abm.errors import UserError
from abm.reports import benchmark, figures, seed000, seed001, seed002
from abm.reports.run import print_run_summary, render_run, to_markdown
from abm.reports.study import PaperReport, is_study_folder, render_study

PAPERS: tuple[PaperReport, ...] = (seed000, seed001, seed002, benchmark)


def render_report(folder: str | Path, frontier: tuple[str, str] | None = None, formats=("png",),
                  dpi: int = figures.DPI, facet: str | None = None) -> Path:
    """A study folder's ``report/``: comparison tables, plots and the forms of every paper in
    ``PAPERS``; ``frontier`` = (x, y): also the frontier on those axes (``abm report --frontier-x``)."""
    x, y = frontier if frontier is not None else (None, None)
    return render_study(folder, PAPERS, fairness=x, profit=y, formats=formats, dpi=dpi, facet=facet)


def render(folder: str | Path, frontier: tuple[str, str] | None = None, formats=("png",), dpi: int = figures.DPI,
           facet: str | None = None) -> Path:
    """``report/`` for a run folder or a study folder (``abm report``), all or nothing: an earlier
    ``report/`` is moved aside (``.tmp-report-*``) while the new one is written, and put back if
    writing fails (a full disk), so no partial ``report/`` is ever left; a write error names the
    report folder. ``formats`` (``"png,svg,pdf"`` or a sequence; ``abm report --format``), ``dpi``
    (``--dpi``) and ``facet`` (``"group"``: one panel per population group; ``--facet``) are
    checked first: a bad value is a one-line UserError and nothing is written."""
    formats, dpi, facet = figures.output_options(formats, dpi, facet)
    folder = Path(folder)
    out = folder / "report"
    if (out.exists() or out.is_symlink()) and not out.is_dir():  # a file, a FIFO, a dangling link: not ours
        raise UserError(f"{out}: exists and is not a folder; move it away (the report goes there)")
    old, existed = None, out.exists() or out.is_symlink()
    if out.is_dir() and not out.is_symlink():
        old = folder / f".tmp-report-{uuid.uuid4().hex[:8]}"
        try:
            os.replace(out, old)
        except OSError:  # cannot even rename (read-only folder): the writers below say so
            old = None
    try:
        written = render_report(folder, frontier, formats, dpi, facet) if is_study_folder(folder) else \
            render_run(folder, formats, dpi, facet)
    except BaseException as exc:
        if (old is not None or not existed) and out.is_dir() and not out.is_symlink():
            shutil.rmtree(out, ignore_errors=True)  # the partial new report
        if old is not None:
            os.replace(old, out)
        if isinstance(exc, OSError) and exc.filename is None:  # write() names no file: name the folder
            exc.filename = str(out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return written


__all__ = ["PAPERS", "PaperReport", "print_run_summary", "render", "render_report", "render_run", "render_study",
           "to_markdown"]
