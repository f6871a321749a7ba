"""`envad report` on a real server and store: the page renders in headless Chromium with
every image loaded, neighbours are never the image itself nor a known anomaly, and the
contact sheet and review list are written."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from client_archives import make_folder_dataset, make_image_tree
from envad.client import EnvadClient
from envad.client.backfill import run_backfill
from envad.client.backfill_plan import BackfillOptions
from envad.client.cli import main
from envad.client.report import build_report, read_scores
from envad.client.results import RowFilter
from envad.client.sources import open_source
from envad.errors import InvalidInput

#: Appended to a copy of the page: once everything loaded, record each <img>'s state.
IMAGE_PROBE = """<script>
window.addEventListener('load', () => {
  const seen = Array.from(document.images).map(img => ({
    src: img.getAttribute('src'), complete: img.complete, width: img.naturalWidth,
    role: img.closest('figure').className, id: img.closest('figure').dataset.id,
    item: img.closest('.item').dataset.id}));
  const out = document.createElement('pre');
  out.id = 'probe';
  out.textContent = JSON.stringify(seen);
  document.body.appendChild(out);
});
</script>"""


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: `make system-deps` installs it")
        pytest.skip("headless Chromium not installed (`make system-deps` installs it)")
    return found


def images_as_chromium_loads_them(page: Path, tmp_path: Path) -> list[dict]:
    probe = page.with_name("probe.html")
    probe.write_text(page.read_text().replace("</body>", IMAGE_PROBE + "</body>"))
    result = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu",
         "--allow-file-access-from-files", f"--user-data-dir={tmp_path / 'chromium'}",
         "--virtual-time-budget=10000", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    match = re.search(r'<pre id="probe">(.*?)</pre>', result.stdout, re.S)
    assert match, f"the probe did not run: {result.stdout[-1000:]}"
    return json.loads(html.unescape(match.group(1)))


@pytest.fixture
def scored(envad_server, tmp_path):
    """Normal rows stored with their files and fitted on, then an image tree scored and
    stored (so each scored image is its own nearest stored row), one of them reviewed."""
    train = make_folder_dataset(tmp_path / "train", per_env=12)
    tree = make_image_tree(tmp_path / "tree", envs=("camA", "camB"), per_env=4)
    scores = tmp_path / "scores.jsonl"
    with EnvadClient(envad_server.address) as client:
        run_backfill(client, open_source(train), tmp_path / "train.jsonl", progress=False)
        client.fit(RowFilter(splits=("train",)), detectors=("KNN", "LOF5", "IsoForest"),
                   allow_few_rows=True)
        run_backfill(client, open_source(tree), tmp_path / "tree.jsonl",
                     BackfillOptions(scores=True), scores_out=scores, progress=False)
    return envad_server, scores


def test_the_review_page_renders_with_every_image_loaded(scored, tmp_path) -> None:
    server, scores = scored
    out = tmp_path / "review"
    images = read_scores(scores)
    known_anomaly = next(i for i in images if i.env == "camA")
    with EnvadClient(server.address) as client:
        client.set_label([known_anomaly.id], "anomaly")
        summary = build_report(scores, out, top=3, neighbours=3, client=client)
    assert (summary.cameras, summary.images, summary.shown) == (2, 8, 6)

    seen = images_as_chromium_loads_them(out / "index.html", tmp_path)
    subjects = [s for s in seen if s["role"] == "subject"]
    neighbours = [s for s in seen if s["role"] == "neighbour"]
    assert len(subjects) == 6 and len(neighbours) == 18
    for image in seen:
        assert image["complete"] and image["width"] > 0, image
        assert (out / image["src"]).is_file()
    for neighbour in neighbours:
        assert neighbour["id"] != neighbour["item"]       # never the image itself
        assert neighbour["id"] != known_anomaly.id        # nor a reviewed anomaly
    page = (out / "index.html").read_text()
    assert page.count('<svg class="histogram"') == 2
    assert "votes" in page and 'data-env="camB"' in page

    with Image.open(summary.contact_sheet) as sheet:
        assert sheet.size == (6 * 192, 192 + 44)
        colours = sheet.convert("RGB").getcolors(maxcolors=1 << 24) or []
        assert len(colours) > 10   # thumbnails, not a blank page
    review = (out / "shown.csv").read_text().splitlines()
    assert review[0].startswith("id,env,") and len(review) == 7


def test_report_without_a_server_and_bad_input(scored, tmp_path, capsys) -> None:
    _, scores = scored
    out = tmp_path / "offline"
    assert main(["report", str(scores), "--out", str(out), "--neighbours", "0",
                 "--server", "127.0.0.1:1"]) == 0
    assert "review page" in capsys.readouterr().out
    assert "nearest normal neighbours" in (out / "index.html").read_text()
    assert not list(out.glob("thumbs/*")) == []
    bad = tmp_path / "scores.csv"
    bad.write_text("key\n")
    assert main(["report", str(bad), "--out", str(out), "--neighbours", "0"]) == 1
    assert "reads the .jsonl scores" in capsys.readouterr().err
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"status": "ok", "ensemble": 0.5}\n')
    with pytest.raises(InvalidInput, match="broken.jsonl:1: not a score record"):
        read_scores(broken)
