"""One self-contained HTML file per run: config, summary, baselines, diagnosis and every figure.

The page makes no network request: images are embedded as ``data:image/png;base64`` URIs, the
CSS is inline, there is no script, and a Content-Security-Policy meta tag forbids loading
anything else, so the file can be mailed, archived or opened offline years later.

:func:`render_page`, :func:`img_tag`, :func:`html_table` and :class:`Section` are the building
blocks; other reports (e.g. a sweep comparison) reuse them to get the same look.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, Union

from ..analytics.diagnose import Thresholds, loss_level, no_rule_judged
from ..analytics.samples import TEMPERATURE, TOP_K
from ..config import model_record
from ..errors import DepthlabError
from ..figures import REPORT_SOFTWARE, check_run_figures
from ..rundir import BASELINES, CONFIG, DIAGNOSIS, REPORT, SUMMARY, atomic_write, init_from_record, init_from_words
from ..rundir import PLOTS as PLOT_DIR
from ..units import finite_or_none, fmt_value
from .plots import PLOTS, UPDATE_RATIO_MUON, RunData, load_run_data, make_all_plots

__all__ = ["Section", "render_page", "img_tag", "html_table", "esc", "build_report", "run_cards", "GENERATOR"]

GENERATOR = REPORT_SOFTWARE
"""Value of ``<meta name="generator">``: marks files this module wrote (safe to overwrite); the PNG
``Software`` text of the run figures too (:func:`depthlab.figures.written_by_report`)."""

WIDE_TABLE_COLS = 8
"""Tables with more columns than this get the compact style (smaller type, headers that wrap)."""

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

CSS = """
:root { --fg:#1b1f24; --muted:#57606a; --line:#d0d7de; --bg:#ffffff; --card:#f6f8fa;
        --blue:#0072B2; --orange:#E69F00; --green:#009E73; --red:#D55E00; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--fg);
       font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
main { max-width: 1240px; margin: 0 auto; padding: 24px 28px 64px; }
header { border-bottom: 1px solid var(--line); margin-bottom: 8px; padding-bottom: 12px; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 20px; margin: 36px 0 10px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h3 { font-size: 16px; margin: 18px 0 6px; }
.subtitle { color: var(--muted); margin: 0; }
nav { font-size: 14px; margin: 10px 0 0; }
nav a { color: var(--blue); margin-right: 14px; text-decoration: none; }
nav a:hover { text-decoration: underline; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(190px, 1fr)); gap: 12px; margin: 12px 0; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; }
.card .k { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.card .v { font-size: 22px; font-weight: 600; font-variant-numeric: tabular-nums; }
.card .u { color: var(--muted); font-size: 13px; }
.table-wrap { max-width: 100%; overflow-x: auto; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 14px; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 12px 4px 0; text-align: left; vertical-align: top; }
th { color: var(--muted); font-weight: 600; }
td.num { text-align: right; white-space: nowrap; }
table.compact { font-size: 12.5px; }
table.compact th, table.compact td { padding: 3px 8px 3px 0; }
table.compact th, table.compact td { overflow-wrap: break-word; }
.samples td.text { white-space: pre-wrap; font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 13px; }
.tables { display: flex; flex-wrap: wrap; gap: 8px 40px; }
.tables > div { min-width: 240px; }
figure { margin: 18px 0 28px; }
figure img { display: block; max-width: 100%; height: auto; border: 1px solid var(--line); border-radius: 6px; }
figcaption { color: var(--muted); font-size: 14px; margin-top: 6px; max-width: 980px; }
.finding { border-left: 4px solid var(--orange); background: var(--card); padding: 8px 14px; margin: 10px 0;
           border-radius: 0 6px 6px 0; }
.finding.ok { border-left-color: var(--green); }
.finding .rule { font-weight: 600; font-family: ui-monospace, "DejaVu Sans Mono", monospace; }
.finding p { margin: 4px 0; }
.muted { color: var(--muted); }
code { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 13px; }
footer { color: var(--muted); font-size: 13px; margin-top: 48px; border-top: 1px solid var(--line); padding-top: 8px; }
@media print { figure { break-inside: avoid; } nav { display: none; } }
"""


def esc(value: Any) -> str:
    """HTML-escape ``str(value)`` (quotes included)."""
    return html.escape(str(value), quote=True)


@dataclass
class Section:
    """One titled part of a page.

    Attributes:
        title: heading text (plain text, escaped when rendered).
        body: trusted HTML (build it with :func:`esc`, :func:`html_table`, :func:`img_tag`).
        anchor: id for the table of contents; default: derived from the title.
    """

    title: str
    body: str
    anchor: Optional[str] = None

    def id(self) -> str:
        """The element id: ``anchor`` or the title lower-cased with non-alphanumerics as ``-``."""
        if self.anchor:
            return self.anchor
        return "".join(c if c.isalnum() else "-" for c in self.title.lower()).strip("-") or "section"


def img_tag(png_path: Union[str, Path], alt: str = "", caption: Optional[str] = None,
            width: Optional[int] = None) -> str:
    """A ``<figure>`` holding a PNG embedded as a base64 data URI (no file reference remains).

    Args:
        png_path: the PNG file to embed.
        alt: alternative text (plain text).
        caption: optional caption under the image (plain text).
        width: optional display width in CSS pixels. Wider images always scale down to the
            content column (never a horizontal scroll); figures are drawn at most
            :data:`depthlab.figures.MAX_W` inches wide so that a run report shows them at 1:1.

    Returns:
        HTML text.

    Raises:
        DepthlabError: the file is missing or is not a PNG.
    """
    p = Path(png_path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise DepthlabError(f"cannot embed image {p}: {e.strerror or e}") from None
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        raise DepthlabError(f"cannot embed image {p}: not a PNG file")
    b64 = base64.b64encode(data).decode("ascii")
    w = f' width="{int(width)}"' if width else ""
    cap = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    return (f'<figure><img src="data:image/png;base64,{b64}" alt="{esc(alt or p.stem)}"{w} '
            f'loading="eager">{cap}</figure>')


def _breakable(value: Any) -> str:
    """:func:`esc`, with a line-break opportunity (``<wbr>``) after ``_ ; / ,`` so that long field
    names, rule lists and run paths wrap at their joints instead of mid-word."""
    return "<wbr>".join(esc(part) for part in re.split(r"(?<=[_;/,])", str(value)))


def html_table(rows: Iterable[Sequence[Any]], header: Optional[Sequence[str]] = None) -> str:
    """A table of plain values (escaped); numbers are formatted and right-aligned.

    Args:
        rows: each a sequence of cells (str, int, float, bool, None, list, dict).
        header: optional column titles.

    Returns:
        HTML text: the table inside a ``div.table-wrap`` that never lets it widen the page (a
        table with more than :data:`WIDE_TABLE_COLS` columns gets the compact style, whose
        headers and text cells wrap, so it fits a 1280-px page without scrolling).
    """
    header = list(header) if header else None
    rows = [list(r) for r in rows]
    ncols = max([len(header or [])] + [len(r) for r in rows])
    compact = ncols > WIDE_TABLE_COLS
    text = _breakable if compact else esc
    out = ['<div class="table-wrap"><table class="compact">' if compact else '<div class="table-wrap"><table>']
    if header:
        out.append("<thead><tr>" + "".join(f"<th>{text(h)}</th>" for h in header) + "</tr></thead>")
    out.append("<tbody>")
    for row in rows:
        cells = []
        for c in row:
            num = isinstance(c, (int, float)) and not isinstance(c, bool)
            cells.append(f'<td class="num">{esc(fmt_value(c))}</td>' if num else f"<td>{text(fmt_value(c))}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def render_page(title: str, sections: Iterable[Union[Section, tuple[str, str]]],
                subtitle: Optional[str] = None, cards: Sequence[tuple[str, str, str]] = ()) -> str:
    """A complete, self-contained HTML document (inline CSS, no scripts, no external requests).

    Args:
        title: page title and top heading (plain text).
        sections: :class:`Section` objects or ``(title, body_html)`` pairs, in order; a table
            of contents links to each.
        subtitle: a line under the heading (plain text).
        cards: headline numbers shown as cards under the heading: ``(label, value, unit)``.

    Returns:
        The HTML text (UTF-8; write it with ``encoding="utf-8"``).
    """
    secs = [s if isinstance(s, Section) else Section(*s) for s in sections]
    now = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f'<meta name="generator" content="{GENERATOR}">',
             f"<title>{esc(title)}</title>", f"<style>{CSS}</style>", "</head>", "<body>", "<main>",
             "<header>", f"<h1>{esc(title)}</h1>"]
    if subtitle:
        parts.append(f'<p class="subtitle">{esc(subtitle)}</p>')
    if len(secs) > 1:
        parts.append("<nav>" + "".join(f'<a href="#{esc(s.id())}">{esc(s.title)}</a>' for s in secs) + "</nav>")
    parts.append("</header>")
    if cards:
        parts.append('<div class="cards">' + "".join(
            f'<div class="card"><div class="k">{esc(k)}</div><div class="v">{esc(v)}</div>'
            f'<div class="u">{esc(u)}</div></div>' for k, v, u in cards) + "</div>")
    for s in secs:
        parts.append(f'<section id="{esc(s.id())}"><h2>{esc(s.title)}</h2>{s.body}</section>')
    parts.append(f"<footer>Written by {GENERATOR} on {esc(now)}. Self-contained: no network access needed."
                 "</footer></main></body></html>")
    return "\n".join(parts)


# ----------------------------------------------------------------------------- the run report
def _flatten(d: dict, prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out += _flatten(v, f"{prefix}{k}.")
        else:
            out.append((f"{prefix}{k}", v))
    return out


def run_cards(run: RunData, leaks: bool = False) -> list[tuple[str, str, str]]:
    """The cards at the top of a run report: (label, value, note) each, from the summary, the evaluations
    and the baselines (best val loss, its distance to bigram, the whole-split loss, steps, tokens, time, size).
    ``leaks``: the run's diagnosis found ``causal_leak`` (:func:`leaks_future`), so a loss below bigram is that
    leak, not context used."""
    s = run.summary or {}
    cards = []
    best = finite_or_none(s.get("best_val_loss"))
    if best is None and run.evals:
        vals = [v for v in (finite_or_none(r.get("val_loss")) for r in run.evals) if v is not None]
        best = min(vals) if vals else None
    if best is not None:
        cards.append(("best validation loss", f"{best:.3f}",
                      f"nats/{run.unit} = {run.bits_per_char(best):.3f} bits/char"))
        bg = finite_or_none(((run.baselines or {}).get("bigram") or {}).get("nats"))
        if bg is not None:
            words = _level_words(best, run.baselines, run.unit_word)
            if leaks:
                words = words.replace(", uses context", "") + f", but {LEAK_WORDS}"
            cards.append(("minus bigram baseline", f"{best - bg:+.3f}", "nats: " + words))
    fv = s.get("final_validation") if isinstance(s.get("final_validation"), dict) else {}
    whole = finite_or_none(fv.get("val_loss"))
    if whole is not None:
        part = "all" if fv.get("tokens") == fv.get("of_tokens") else f"{fmt_value(fv.get('tokens'))} of"
        what = "characters" if run.unit == "char" else "tokens"
        cards.append(("whole val split", f"{whole:.3f}", f"nats/{run.unit}, best weights, {part} "
                      f"{fmt_value(fv.get('of_tokens'))} predicted val {what}"))  # the split less its first
    if s.get("final_step") is not None:
        cards.append(("steps", fmt_value(s["final_step"]), "optimizer steps"))
    cards += _init_card(run)
    if finite_or_none(s.get("tokens_seen")) is not None:
        cards.append(("tokens seen", f"{float(s['tokens_seen']):,.0f}", "characters" if run.unit == "char"
                      else "tokens"))
    if finite_or_none(s.get("wall_time_s")) is not None:
        cards.append(("wall time", f"{float(s['wall_time_s']):.1f}", "seconds"))
    if finite_or_none(s.get("params")) is not None:
        m = (run.config or {}).get("model") or {}
        tied = "token embedding (tied to the head)" if m.get("tie_weights", True) else "token embedding and head"
        table = ", position table left out" if m.get("position", "learned") == "learned" else " (rotary positions)"
        cards.append(("parameters", f"{float(s['params']):,.0f}", "every parameter of the model" if m.get("source")
                      else f"{tied} included{table}"))
    return cards


def _init_card(run: RunData) -> list[tuple[str, str, str]]:
    """The card of a run started ``--init-from``: config.json ``resolved.init_from`` (none for another run)."""
    record = init_from_record(run.config)
    if record is None:
        return []
    return [("started from", Path(str(record.get("source"))).name, init_from_words(record))]


def _level_words(best: float, baselines: dict, unit: str = "character") -> str:
    """What a best val loss says about context use, in the diagnosis's own terms (same margin); ``unit``:
    :attr:`RunData.unit_word`."""
    margin = Thresholds().bigram_margin
    try:
        level = loss_level(best, baselines, margin)[0]
    except (KeyError, TypeError, ValueError):  # an old or partial baselines.json: bigram only
        bg = float(baselines["bigram"]["nats"])
        level = ("below bigram" if best < bg - margin else "above bigram" if best >= bg + margin else
                 "within margin of bigram")  # the margin on both sides, as the diagnosis's loss_level has it
    return {"above uniform": "above the uniform level, worse than equal guessing",
            "at uniform": "at the uniform level, nothing learned yet",
            "between unigram and uniform": f"between unigram and uniform: not even the {unit} frequencies yet",
            "at unigram": f"at the unigram level: no context at all, not even the current {unit}",
            "above bigram": f"above bigram: less than the current {unit} tells",
            "within margin of bigram": f"within {margin:g} of bigram: the current {unit} alone",
            "below bigram": "below bigram, uses context"}[level]


def _baseline_section(run: RunData) -> str:
    b = run.baselines
    if not b:
        return (f'<p class="muted">No {BASELINES} in this run (an older run, analytics off, or the file deleted), '
                "and the run's corpus could not be read (or changed since training) to recompute them.</p>")
    rows = []
    unit = run.unit_word
    for name, what in (("uniform", f"every {unit} equally likely: ln V"),
                       ("unigram", f"{unit} frequencies, no context at all"),
                       ("bigram", f"the current {unit} only, none of the context before it")):
        e = b.get(name)
        if isinstance(e, dict):
            rows.append((name, what, finite_or_none(e.get("nats")), finite_or_none(e.get("bits_per_char"))))
    best = finite_or_none((run.summary or {}).get("best_val_loss"))
    if best is not None:
        rows.append(("this model (best val)", "", best, run.bits_per_char(best)))
    txt = html_table(rows, ["model", "what it knows", f"val cross-entropy (nats/{run.unit})", "bits/char"])
    if b.get("vocab_size") is not None:
        txt += f'<p class="muted">Vocabulary: {esc(b["vocab_size"])} {unit}s. Baselines: counts on ' \
               "the train split with add-one smoothing, scored on the validation split.</p>"
    if run.baselines_recomputed:
        txt += (f'<p class="muted">Recomputed from the run\'s corpus: its {BASELINES} is missing or damaged (the '
                "corpus is the file the run trained on).</p>")
    return txt


def _diagnosis_now(run: RunData) -> Optional[dict]:
    """The diagnosis of a run without ``diagnosis.json`` (the trainer writes it at the end of a run: one stopped
    before its end has none), as ``depthlab diagnose`` applies the rules now; None when they cannot be applied."""
    from ..analytics.diagnose import diagnose_run_full, findings_json

    try:
        findings, missing = diagnose_run_full(run.run_dir)
    except DepthlabError:
        return None
    return {**findings_json(findings), "not_judged": missing}


#: What a run whose diagnosis found ``causal_leak`` reads into its loss by position and its cards.
LEAK_WORDS = ("the model sees the tokens it predicts (causal_leak, under Diagnosis), so its loss is no measure "
              "of the context it uses")


def leaks_future(diagnosis: Optional[dict]) -> bool:
    """Whether a diagnosis (diagnosis.json's format) found ``causal_leak``."""
    return any(isinstance(f, dict) and f.get("rule") == "causal_leak" for f in (diagnosis or {}).get("findings") or [])


def report_diagnosis(run: RunData) -> tuple[Optional[dict], bool]:
    """(the diagnosis a report shows, whether it is the run's diagnosis.json): the file, or the rules applied now
    (:func:`_diagnosis_now`; None when they cannot be)."""
    return (run.diagnosis, True) if run.diagnosis is not None else (_diagnosis_now(run), False)


def _diagnosis_section(run: RunData, d: Optional[dict], from_file: bool) -> str:
    note = ""
    if not from_file:
        if d is None:
            return (f'<p class="muted">No {DIAGNOSIS} in this run (the trainer writes it at the end of a run), and '
                    "the diagnosis rules cannot read this run's records.</p>")
        note = (f'<p class="muted">No {DIAGNOSIS} in this run (the trainer writes it at the end of a run: this one '
                "stopped before its end, or the file was deleted): the rules applied now by depthlab report, as "
                "<code>depthlab diagnose RUN_DIR</code> prints them.</p>")
    return note + _findings_html(d)


def _findings_html(d: dict) -> str:
    findings = d.get("findings") or []
    nj = [str(w) for w in (d.get("not_judged") or []) if isinstance(w, str)]
    nj_html = "".join(f'<p class="muted">Not judged: {esc(w)}</p>' for w in nj)
    if not findings:
        if nj:
            said = ("no rule could judge this run" if no_rule_judged(nj) else
                    "no problems found by the rules that could judge this run")
            return f'<div class="finding ok"><p class="rule">{said}</p></div>' + nj_html
        return '<div class="finding ok"><p class="rule">no problems found</p><p>The diagnosis rules found ' \
               "nothing to flag.</p></div>"
    out = []
    for f in findings:
        if not isinstance(f, dict):
            continue
        ev = f.get("evidence")
        ev_txt = ev if isinstance(ev, str) else json.dumps(ev)
        out.append(f'<div class="finding"><p class="rule">{esc(f.get("rule", "?"))}</p>'
                   f"<p><b>Evidence:</b> {esc(ev_txt)}</p><p><b>Remedy:</b> {esc(f.get('remedy', ''))}</p></div>")
    return "".join(out) + nj_html


MAX_SAMPLES = 12
"""Samples shown in a run report; more are thinned evenly (first and last always kept)."""


def _samples_section(run: RunData) -> Optional[str]:
    """The training-time samples (``kind: sample`` records), oldest first, each with the validation
    loss of the evaluation at that step; None when the run recorded none (``train.sample_interval`` 0)."""
    recs = run.samples
    if not recs:
        return None
    shown = recs
    if len(recs) > MAX_SAMPLES:
        idx = sorted({round(i * (len(recs) - 1) / (MAX_SAMPLES - 1)) for i in range(MAX_SAMPLES)})
        shown = [recs[i] for i in idx]
    val = {r.get("step"): finite_or_none(r.get("val_loss")) for r in run.evals}
    rows = []
    for r in shown:
        v = val.get(r.get("step"))
        rows.append(f'<tr><td class="num">{esc(fmt_value(r.get("step")))}</td>'
                    f'<td class="num">{esc("—" if v is None else f"{v:.3f}")}</td>'
                    f'<td class="text">{esc(r["text"])}</td></tr>')
    note = (f"{len(recs)} samples recorded; {len(shown)} shown, evenly spaced. " if len(shown) < len(recs) else "")
    return ('<div class="table-wrap samples"><table><thead><tr><th>step</th><th>val loss (nats/char)</th>'
            f"<th>sample (the same prompt and seed every time, temperature {TEMPERATURE:g}, top-k {TOP_K})</th>"
            "</tr></thead>"
            "<tbody>" + "".join(rows) + "</tbody></table></div>"
            f'<p class="muted">{esc(note)}Only the weights change between samples, so each text shows what the '
            "model had learned by that step.</p>")


RESOLVED_FIELDS = ("optimizer", "dtype", "attention", "device", "compile", "threads")
"""``train`` fields whose ``auto`` (or 0) config.json ``resolved`` records the outcome of."""
PLANNED_FIELDS = ("max_iters", "lr_decay_iters", "warmup_iters")
"""``train`` fields that ``train.fit_to_time`` may replace (``resolved.plan`` records what ran)."""


def config_rows(run: RunData, sec: str) -> list[tuple[str, Any]]:
    """The rows of one config section as the report shows them: for ``train``, a field that
    ``resolved`` records reads ``asked (ran: what ran)`` when the two differ (``auto (ran: muon)``); for ``model``,
    ``embed_scale`` (``auto (ran: none)``)."""
    d = run.config.get(sec) if run.config else None
    if not isinstance(d, dict):
        return []
    if sec == "model":  # a model.source run's config.json from before it left out depthlab's GPT's fields
        d = model_record(d)
    rows = _flatten(d)
    ran = run.config.get("resolved")
    if sec == "model" and isinstance(ran, dict) and ran.get("embed_scale") is not None:  # what auto built
        return [(k, f"{fmt_value(v)} (ran: {fmt_value(ran['embed_scale'])})" if k == "embed_scale"
                 and v != ran["embed_scale"] else v) for k, v in rows]
    if sec != "train" or not isinstance(ran, dict):
        return rows
    plan = ran.get("plan") if isinstance(ran.get("plan"), dict) else {}  # train.fit_to_time's replacements
    out = []
    for k, v in rows:
        if k in RESOLVED_FIELDS and k in ran and ran[k] != v:
            v = f"{fmt_value(v)} (ran: {fmt_value(ran[k])})"
        elif k == "max_iters":
            v = _steps_row(v, plan.get(k), run.summary)
        elif k in PLANNED_FIELDS and k in plan and plan[k] != v:
            v = f"{fmt_value(v)} (ran: {fmt_value(plan[k])}, train.fit_to_time's plan)"
        out.append((k, v))
    return out


def _steps_row(asked: Any, planned: Any, summary: Optional[dict]) -> Any:
    """``max_iters`` as asked, then fit_to_time's plan (when it replaced it) and the steps summary.json says
    ran (when they differ from the step the run was to end at), with its ``stopped_by``."""
    final = (summary or {}).get("final_step")
    end = planned if planned is not None else asked
    notes = [] if planned is None or planned == asked else [f"planned: {fmt_value(planned)} by train.fit_to_time"]
    if final is not None and (final != end or notes):
        by = (summary or {}).get("stopped_by")
        notes.append(f"ran: {fmt_value(final)}" + (f", stopped by {by}" if by and final != end else ""))
    return f"{fmt_value(asked)} ({'; '.join(notes)})" if notes else asked


def _config_section(run: RunData) -> str:
    if not run.config:
        return f'<p class="muted">No {CONFIG} in this run.</p>'
    parts = ['<div class="tables">']
    for sec in ("model", "train", "data"):
        if isinstance(run.config.get(sec), dict):
            parts.append(f"<div><h3>{esc(sec)}</h3>{html_table(config_rows(run, sec))}</div>")
    parts.append("</div>")
    if isinstance(run.config.get("resolved"), dict):
        parts.append('<p class="muted">"ran:" is what the run used (config.json <code>resolved</code>) where the '
                     "config asked for <code>auto</code> or another value decided on the machine; for "
                     "<code>max_iters</code>, the last step summary.json records.</p>")
    return "".join(parts)


def _summary_section(run: RunData) -> str:
    if not run.summary:
        return f'<p class="muted">No {SUMMARY}: the run did not finish (or is still running).</p>'
    return html_table(_flatten(run.summary), ["field", "value"])


FIGURE_NOTES = {
    "loss": "Losses are per character, in nats (left axis) and bits (right axis). The horizontal lines "
            "are what trivial models reach: at the unigram line the network uses no context at all (not even the "
            "current character; a stack without shortcuts whose positions collapsed ends here); at the bigram line "
            "it predicts from the current character alone, so the context before it does not reach the loss "
            "(look at attention); only below the bigram line is that context used.",
    "grad_flow": "Each row is a block, each column a logged step; colour is the gradient L2 norm on a log "
                 "scale. Vanishing gradients show as dark rows near block 0.",
    "grad_layers": "Gradient L2 norm of each block at the first, middle and last logged steps, and per "
                   "component at the last step.",
    "update_ratio": "Size of each optimizer update relative to the weights, per block. Around 1e-3 is the "
                    "usual healthy range for AdamW; far above means too high a learning rate.",
    "activations": "Residual-stream RMS, sublayer output RMS, rank measure (0 = all tokens collapsed onto "
                   "one vector, Dong et al. 2021) and mean token cosine, per block; colour = training step.",
    "attn_entropy": "Entropy of each head's attention distribution, in nats. ln t is the entropy of "
                    "uniform attention over the t visible tokens.",
    "attention": "Attention weights of every head of the first and last block on a validation snippet "
                 "(best checkpoint). Rows: the position predicting; columns: the characters it looks at.",
    "rezero_alpha": "The learnt ReZero residual gates; they start at 0, and their size shows how much each "
                    "sublayer contributes.",
    "layers": "Left: the val loss when the stream after each block is read by the model's head, after its "
              "final norm where it has one (logit lens); the embeddings alone see one character, so they cannot "
              "go below the best one-character predictor of the val split (at or below the bigram line), and the "
              "drop from block to block is what each adds. Right: how much the val loss rises when a block is "
              "replaced by the identity; grey bars (within 0.01 nats of 0) are blocks the loss does not use, "
              "vermillion ones (0.01 nats or more below 0) blocks whose removal lowers the loss "
              "(`depthlab layers` prints the numbers).",
    "context": "Val loss at each position of the evaluation windows. Position 0 sees one character, so it cannot go "
               "below the best one-character predictor of the val split (at or below the bigram line); the "
               "fall below the bigram line at later positions is context the model uses. One line per "
               "kept checkpoint shows how that use changed between them (`depthlab context` prints the numbers).",
}


def figure_note(run: RunData, name: str) -> Optional[str]:
    """The note under figure ``name`` of this run: :data:`FIGURE_NOTES`, except the update ratios of a Muon
    run, which AdamW's ~1e-3 rule of thumb does not describe."""
    if name == "update_ratio" and run.optimizer == "muon":
        return UPDATE_RATIO_MUON + "."
    note = FIGURE_NOTES.get(name)
    if note is not None and name in UNIT_NOTES and run.unit != "char":  # a BPE run: a position sees one token
        note = note.replace("Losses are per character, in nats (left axis) and bits (right axis)",
                            f"Losses are per {run.unit_word}, in nats (left axis), and in bits per character of "
                            "the text (right axis)").replace("character", run.unit_word).replace(
                            f"bits per {run.unit_word} of the text", "bits per character of the text")
    return note


#: The notes of :data:`FIGURE_NOTES` that say what one token is ("character" of a character run).
UNIT_NOTES = ("loss", "layers", "context")


def _attention_words(run: RunData) -> Optional[str]:
    """Why a run gets no attention figure by design, or None (a BPE run was told its files may be damaged)."""
    m, d = (run.config or {}).get("model") or {}, (run.config or {}).get("data") or {}
    if m.get("source"):
        return "read from depthlab's GPT's attention hook points: a model.source model has none"
    if d.get("tokenizer") == "bpe":
        return "drawn for character-level runs, whose labels are characters; this run's tokenizer is bpe"
    return None


def build_report(run_dir: Union[str, Path], out: Optional[Union[str, Path]] = None,
                 skip: Sequence[str] = ()) -> Path:
    """Draw the run's figures and write one self-contained HTML report.

    Args:
        run_dir: a directory written by ``depthlab train``.
        out: the HTML file to write; default ``run_dir/report.html``.
        skip: figure names not to draw (see :data:`depthlab.report.plots.PLOTS`).

    Returns:
        The path of the written report.

    Raises:
        DepthlabError: ``run_dir`` missing or not a run; ``out`` is a folder, or an existing file
            that this command did not write (it is never overwritten); so is a file at a figure's place in
            ``run_dir/plots/`` (:func:`depthlab.figures.check_run_figures`).
    """
    run = load_run_data(run_dir)
    dest = Path(out) if out else run.dir.file(REPORT)
    _check_dest(dest)
    # a file of the user's at a figure's place is refused before anything is written, as report.html is
    check_run_figures([run.run_dir / PLOT_DIR / f"{name}.png" for name in PLOTS if name not in skip])
    try:
        pngs = make_all_plots(run.run_dir, skip=skip)
    except OSError as e:  # the figures go into the run's plots/ (a read-only run directory, a full disk)
        raise DepthlabError(f"report: cannot write the figures into {run.run_dir / 'plots'}: {e.strerror or e}; "
                            "the run directory must be writable (copy it elsewhere to report on it)") from None
    diagnosis, from_file = report_diagnosis(run)
    leaks = leaks_future(diagnosis)
    figs = []
    for name, (_fn, caption) in PLOTS.items():
        if name in pngs:
            note = figure_note(run, name)
            if leaks and name in ("context", "layers") and note:
                note += f" In this run {LEAK_WORDS}."
            figs.append(f"<h3>{esc(caption)}</h3>" + img_tag(pngs[name], alt=caption, caption=note))
    if not figs:
        figs.append('<p class="muted">Nothing to plot yet: the run has logged no metrics.</p>')
    by_design = _attention_words(run)  # no attention figure for this kind of run: said with its own reason
    missing = [PLOTS[n][1].lower() for n in PLOTS if n not in pngs and n not in skip and n != "rezero_alpha"
               and not (n == "attention" and by_design)]
    if "attention" not in pngs and "attention" not in skip and by_design and pngs:
        figs.append(f'<p class="muted">Not drawn: {esc(PLOTS["attention"][1].lower())} ({esc(by_design)}).</p>')
    if missing and pngs:
        figs.append(f'<p class="muted">Not drawn: {esc("; ".join(missing))} (not recorded in this run, not '
                    "measurable for this model, or drawn from files that are missing or damaged, which the "
                    "command then names in a warning).</p>")
    sub = run.model_line()
    samples = _samples_section(run)
    sections = [Section("Diagnosis", _diagnosis_section(run, diagnosis, from_file)),
                Section("Figures", "".join(figs)),
                *([Section("Samples during training", samples, anchor="samples")] if samples else []),
                Section("Baselines", _baseline_section(run)),
                Section("Summary", _summary_section(run)),
                Section("Configuration", _config_section(run))]
    page = render_page(f"depthlab report: {run.run_dir.name}", sections, subtitle=sub, cards=run_cards(run, leaks))
    try:
        atomic_write(dest, page.encode("utf-8"))
    except OSError as e:
        raise DepthlabError(f"report: cannot write {dest}: {e.strerror or e}; choose a writable --out") from None
    return dest


def _check_dest(dest: Path) -> None:
    if dest.is_dir():
        raise DepthlabError(f"--out {dest} is a folder; give a file name such as {dest / REPORT}")
    above = next((p for p in dest.parents if p.exists()), None)  # the nearest existing folder the file goes under
    if above is not None and not above.is_dir():
        raise DepthlabError(f"--out {dest}: {above} is a file, not a folder; give a path inside a folder")
    if not dest.parent.is_dir():  # a mistyped folder is not made (probe refuses it too)
        raise DepthlabError(f"report: the folder of --out {dest} does not exist; create it or choose another path")
    if dest.exists():
        try:
            head = dest.read_text(encoding="utf-8", errors="replace")[:4000]
        except OSError as e:
            raise DepthlabError(f"cannot write {dest}: {e.strerror or e}") from None
        if f'name="generator" content="{GENERATOR}"' not in head:
            raise DepthlabError(f"{dest} exists and was not written by depthlab report; refusing to "
                                "overwrite it (choose another --out)")
