"""Sweeps: many ordinary runs over a grid of config fields, then one comparison.

The package, by data flow:

- :mod:`.spec`: experiments, grids, profiles (``profiles/*.yaml``), sweep files, expansion into
  runs; every value typed by the same grammar as ``depthlab train``'s flags.
- :mod:`.common`: what the backends share: planning (skip finished runs), sweep-directory checks,
  ``sweep.json``, the progress line.
- :mod:`.local`: the local backend (own process pool, one run per process) and the job function;
  :mod:`.ray`: the Ray Tune backend; :mod:`.run`: the driver that picks one.
- :mod:`.results`: ``sweep.json``, one row per run, ``results.csv`` / ``results.md``, grouping.
- :mod:`.science`: the published claims of the ``science`` profile and their verdicts;
  :mod:`.findings`: plain-language findings per experiment.

Layout of a sweep directory::

    SWEEP_DIR/
      sweep.json          the resolved plan: experiments, grid, every run's config
      runs/<name>/        one ordinary run directory per grid point (+ sweep_status.json, init_probe.json, train.log)
      results.csv         one row per run (see RESULT_COLUMNS), written at the end
      results.md          the same as a Markdown table
      science.md          the published-claims table of the experiments that have a judge (science profile)
      report.html, plots/ the comparison report (written by depthlab.report.sweep, not here)

This package never imports :mod:`depthlab.report` or :mod:`depthlab.cli`. The command line calls::

    spec = build_spec(profile, file, grid, overrides, only)
    out_dir = default_sweep_dir(spec, profile, file, grid, overrides, only)
    print(dry_run(spec, out_dir, workers))            # or
    run_sweep(spec, out_dir, workers=0, threads=0, rerun=False, log=print)
"""

from .findings import aggregate_table, init_lines, short_unit, summary_lines, sweep_unit
from .common import plan
from .local import dry_run, execute, init_probe
from .run import run_sweep
from .results import (FINAL_STATUSES, METRIC_COLUMNS, OK_STATUSES, RESULT_COLUMNS, aggregate, collect_results,
                      corpus_baselines, experiment_axes, field_value, group_name, is_sweep_dir, load_sweep,
                      mean_metric, failed_runs, run_details, sweep_baselines, sweep_items, write_results)
from .science import CLAIM_HEADER, CLAIMS, SCIENCE_MD, claims_markdown, science_claims, write_science_table
from .spec import (PROFILE_NAMES, RESULTS_CSV, RESULTS_MD, RUNS, SWEEP_DEFAULTS, SWEEP_JSON, Experiment, RunPoint,
                   SweepSpec, build_spec, coerce_value, default_sweep_dir, estimate_seconds, expand, load_profile,
                   load_sweep_file, parse_grid_arg, profile_descriptions, profile_spec, spec_to_json, varied_fields)

__all__ = [
    # the contract of the command line
    "build_spec", "default_sweep_dir", "dry_run", "run_sweep", "PROFILE_NAMES", "profile_descriptions",
    # spec
    "Experiment", "SweepSpec", "RunPoint", "SWEEP_DEFAULTS", "SWEEP_JSON", "RUNS", "RESULTS_CSV", "RESULTS_MD",
    "coerce_value", "parse_grid_arg", "load_profile", "profile_spec", "load_sweep_file", "spec_to_json", "expand",
    "varied_fields", "estimate_seconds",
    # planning and the job function
    "plan", "execute", "init_probe",
    # results
    "RESULT_COLUMNS", "METRIC_COLUMNS", "OK_STATUSES", "FINAL_STATUSES", "is_sweep_dir", "load_sweep",
    "run_details", "collect_results", "write_results", "sweep_items", "sweep_baselines", "corpus_baselines",
    "field_value", "group_name", "aggregate", "experiment_axes", "mean_metric", "failed_runs",
    # science and findings
    "CLAIMS", "CLAIM_HEADER", "SCIENCE_MD", "science_claims", "claims_markdown", "write_science_table",
    "summary_lines", "init_lines", "aggregate_table", "sweep_unit", "short_unit",
]
