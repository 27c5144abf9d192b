"""``depthlab report RUN_DIR``: the command-line face of :func:`depthlab.report.html.build_report`."""

from __future__ import annotations

from .. import cli
from .html import build_report
from .plots import PLOTS


def cmd_report(argv: list[str]) -> int:
    """write a self-contained HTML report (figures, diagnosis, baselines) of a run

    Args:
        argv: the arguments after ``report``: ``RUN_DIR [--out FILE] [--skip NAME ...]``.

    Returns:
        0 on success (the report's path is printed on stdout).

    Raises:
        DepthlabError: bad arguments, missing run directory, not a run, or an ``--out`` file
            that depthlab did not write.
    """
    p = cli._Parser(prog=f"{cli.PROG} report",
                    description="Draw the figures of a run (PNGs in RUN_DIR/plots/) and write one "
                                "self-contained HTML file (images embedded, works offline).")
    p.add_argument("run_dir", help="a run directory written by depthlab train")
    p.add_argument("--out", default=None, help="HTML file to write (default: RUN_DIR/report.html)")
    p.add_argument("--skip", nargs="+", default=[], choices=list(PLOTS), metavar="FIGURE",
                   help=f"figures not to draw, from: {', '.join(PLOTS)}")
    a = p.parse_args(argv)
    from .sweep import build_sweep_report, is_sweep_dir

    if is_sweep_dir(a.run_dir):  # a sweep directory: rebuild its comparison report
        print(build_sweep_report(a.run_dir))
        return 0
    path = build_report(a.run_dir, a.out, skip=a.skip)
    print(path)
    return 0


cli.register("report", cmd_report)
