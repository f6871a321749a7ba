"""The review page's HTML: one self-contained file (inline CSS, SVG and script,
thumbnails and full-size images by relative path), readable from disk in any browser
without a server. Its one script keeps the reviewer's verdicts (a "false alarm" and a
"new content" toggle per item) and downloads them as review.csv (columns id, verdict,
env, file; client/review_file.py reads it)."""

from __future__ import annotations

import os
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from html import escape
from pathlib import Path

HISTOGRAM_W, HISTOGRAM_H = 320, 90

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 2em; }
.meta { color: #666; }
.item { display: flex; gap: 1em; align-items: flex-start; padding: .6em 0;
        border-top: 1px solid #ddd; }
.item figure { margin: 0; }
.item img { display: block; width: 192px; height: auto; image-rendering: auto; }
.anomaly .score { color: #b00; font-weight: bold; }
.scores td { padding: 0 .6em 0 0; font-size: 12px; }
.neighbours { display: flex; gap: .5em; flex-wrap: wrap; }
.neighbours figure img { width: 96px; height: auto; }
figcaption { font-size: 11px; color: #555; max-width: 192px; overflow-wrap: anywhere; }
.missing { width: 96px; height: 72px; background: #eee; color: #888; font-size: 11px;
           display: flex; align-items: center; justify-content: center; }
.verdicts label { margin-right: 1em; font-size: 13px; }
.toolbar { position: sticky; top: 0; background: #fff; padding: .4em 0;
           border-bottom: 1px solid #ddd; }
.failed li { font-size: 12px; }
svg .bar { fill: #4a7fb5; } svg .over { fill: #c0504d; } svg .threshold { stroke: #222; }
"""


#: the verdicts a toggle records, as review.csv writes them (client/review_file.py)
FALSE_ALARM, NEW_CONTENT = "false_alarm", "new_content"

SCRIPT = """
function reviewCsv() {
  const quote = v => /[",\\n]/.test(v) ? '"' + v.replace(/"/g, '""') + '"' : v;
  const rows = [['id', 'verdict', 'env', 'file']];
  document.querySelectorAll('.item').forEach(item => {
    const marked = item.querySelector('input.verdict:checked');
    if (marked) rows.push([item.dataset.id, marked.value, item.dataset.env,
                           item.dataset.file]);
  });
  return rows.map(r => r.map(quote).join(',')).join('\\n') + '\\n';
}
function markedCount() {
  document.getElementById('marked').textContent =
    document.querySelectorAll('input.verdict:checked').length;
}
document.addEventListener('change', event => {
  const box = event.target;
  if (!box.classList.contains('verdict')) return;
  if (box.checked) box.closest('.item').querySelectorAll('input.verdict').forEach(
    other => { if (other !== box) other.checked = false; });
  markedCount();
});
function downloadReview() {
  const link = document.getElementById('download');
  link.href = 'data:text/csv;charset=utf-8,' + encodeURIComponent(reviewCsv());
  link.click();
}
"""


def render_page(sections, source_name: str, out_dir=None, failures=()) -> str:
    """The whole page for the camera sections of envad.client.report; `out_dir` (the
    page's folder) makes the full-size links relative, `failures` are listed at the end."""
    shown = sum(len(s.top) for s in sections)
    total = sum(len(s.scores) for s in sections)
    created = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        "<title>envad review</title>", f"<style>{STYLE}</style></head><body>",
        "<h1>envad review: most anomalous images per camera</h1>",
        f'<p class="meta">{total} scored images from {escape(source_name)}, '
        f"{len(sections)} camera(s), {shown} shown; written {created}. Score = ensemble of "
        "the detectors' calibrated scores (0..1, higher = more anomalous); votes = "
        "detectors at or above the threshold.</p>",
        '<p class="toolbar">Mark each image you checked as <b>false alarm</b> (it shows '
        "nothing new) or <b>new content</b> (a real anomaly), then "
        '<button type="button" onclick="downloadReview()">download review.csv</button> '
        '<a id="download" download="review.csv" href="#" hidden>review.csv</a>'
        '(<span id="marked">0</span> marked; only marked images are in it). Apply it '
        "with <code>envad label --from review.csv</code> (false alarm: labelled normal, "
        "new content: labelled anomaly) and refit with <code>envad fit</code>.</p>",
    ]
    for section in sections:
        parts.append(_section(section, out_dir))
    parts.append(_failures(failures))
    parts.append(f"<script>{SCRIPT}</script></body></html>")
    return "\n".join(parts) + "\n"


def _failures(failures) -> str:
    if not failures:
        return ""
    items = "".join(f"<li>{escape(f.key or f.uri)}: {escape(f.reason)}</li>" for f in failures)
    return (f'<section class="failed"><h2>Files that could not be scored '
            f"({len(failures)})</h2><ul>{items}</ul></section>")


def _section(section, out_dir=None) -> str:
    flagged = sum(1 for s in section.scores if s >= section.threshold)
    rows = [
        f'<section class="camera" data-env="{escape(section.env)}">',
        f"<h2>Camera {escape(section.env or '(none)')}</h2>",
        f'<p class="meta">{len(section.scores)} images, {flagged} at or above the threshold '
        f"{section.threshold:.3f}</p>",
        histogram_svg(section.histogram(), section.threshold),
    ]
    rows += [_item(entry, out_dir) for entry in section.top]
    rows.append("</section>")
    return "\n".join(rows)


def _item(entry, out_dir=None) -> str:
    image = entry.image
    verdict = "anomaly" if image.is_anomaly else "normal"
    detector_rows = "".join(
        f"<tr><td>{escape(name)}</td><td>{score['calibrated']:.3f}</td>"
        f"<td>raw {score['raw']:.4g}</td></tr>"
        for name, score in sorted(image.detectors.items()))
    neighbours = "".join(_figure(n, small=True) for n in entry.neighbours) or (
        '<span class="meta">no neighbours (not asked, or none stored)</span>')
    link = full_size_link(out_dir, image.uri) if out_dir is not None and image.uri else ""
    name = escape(image.file_name)
    return (
        f'<div class="item {verdict}" data-id="{escape(image.id)}" '
        f'data-env="{escape(image.env)}" data-file="{name}">'
        f"{_figure(entry.thumb, small=False, link=link)}"
        f'<div><div class="score">{image.ensemble:.3f} ({verdict}, votes '
        f"{image.votes()}/{len(image.detectors)})</div>"
        f'<div class="verdicts"><label><input type="checkbox" class="verdict" '
        f'value="{FALSE_ALARM}"> false alarm</label><label><input type="checkbox" '
        f'class="verdict" value="{NEW_CONTENT}"> new content</label></div>'
        f'<div class="meta">file <a class="full" href="{escape(link)}">{name}</a>'
        f"<br>taken {escape(image.timestamp or 'unknown')}{_event(image)}"
        f"<br>{escape(image.key)}<br>id {escape(image.id)}</div>"
        f'<table class="scores">{detector_rows}</table>'
        f'<div class="meta">nearest normal neighbours (same camera first):</div>'
        f'<div class="neighbours">{neighbours}</div></div></div>'
    )


def _event(image) -> str:
    if not image.event:
        return ""
    return f"<br>event {escape(image.event)} ({image.event_size} image(s), the top one shown)"


def _figure(thumb, *, small: bool, link: str = "") -> str:
    role = "neighbour" if small else "subject"
    caption = escape(thumb.file_name) if small else ""
    if small:
        where = "same camera" if thumb.same_camera else "other camera"
        caption += f"<br>{escape(thumb.env or '(none)')} ({where})"
    if thumb.distance is not None:
        caption += f" d={thumb.distance:.3g}"
    if thumb.label:
        caption += f" [{escape(thumb.label)}]"
    body = (f'<img src="{escape(thumb.path)}" alt="{escape(thumb.id)}" loading="eager">'
            if thumb.path else f'<div class="missing">cannot read {escape(thumb.uri)}</div>')
    if link:
        body = f'<a href="{escape(link)}">{body}</a>'
    return (f'<figure class="{role}" data-id="{escape(thumb.id)}">{body}'
            f"<figcaption>{caption}</figcaption></figure>")


def histogram_svg(counts: list[int], threshold: float) -> str:
    """Bars of the score histogram over [0, 1], bins at or above the threshold in red,
    and the threshold as a vertical line."""
    peak = max(counts) or 1
    width = HISTOGRAM_W / len(counts)
    bars = []
    for i, count in enumerate(counts):
        height = (HISTOGRAM_H - 12) * count / peak
        css = "over" if (i + 1) / len(counts) > threshold else "bar"
        bars.append(f'<rect class="{css}" x="{i * width:.1f}" y="{HISTOGRAM_H - 12 - height:.1f}" '
                    f'width="{width - 1:.1f}" height="{height:.1f}"><title>{i / len(counts):.2f}'
                    f"-{(i + 1) / len(counts):.2f}: {count}</title></rect>")
    x = threshold * HISTOGRAM_W
    return (f'<svg class="histogram" width="{HISTOGRAM_W}" height="{HISTOGRAM_H}" '
            f'viewBox="0 0 {HISTOGRAM_W} {HISTOGRAM_H}" role="img" '
            f'aria-label="score histogram">{"".join(bars)}'
            f'<line class="threshold" x1="{x:.1f}" x2="{x:.1f}" y1="0" y2="{HISTOGRAM_H - 12}"/>'
            f'<text x="0" y="{HISTOGRAM_H - 1}" font-size="10">0</text>'
            f'<text x="{HISTOGRAM_W - 8}" y="{HISTOGRAM_H - 1}" font-size="10">1</text></svg>')


def full_size_link(out_dir: Path, uri: str) -> str:
    """Where the page links an image: a local file by its path relative to the page's
    folder (so the folder can move with the archive), a URL as it is."""
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme in ("http", "https"):
        return uri
    local = (Path(urllib.request.url2pathname(parsed.path)) if parsed.scheme == "file"
             else Path(uri))
    try:
        relative = os.path.relpath(local.resolve(), out_dir.resolve())
    except ValueError:                # another drive (Windows): an absolute file URL
        return local.resolve().as_uri()
    return urllib.parse.quote(Path(relative).as_posix())
