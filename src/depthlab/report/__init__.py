"""Figures (``plots``) and the self-contained HTML report (``html``) of a run directory.

Importing this package does not import matplotlib or torch; the plotting functions do, lazily,
and never touch matplotlib's global state (no pyplot, no backend switch).
"""

from .html import Section, build_report, html_table, img_tag, render_page
from .plots import PLOTS, make_all_plots

__all__ = ["build_report", "render_page", "img_tag", "html_table", "Section", "make_all_plots", "PLOTS"]
