"""`envad report` on a real server and store: the page renders in headless Chromium with
every image loaded, neighbours are never the image itself nor a known anomaly, and the
contact sheet and list of shown images are written. In Chromium, the page's toggles
produce a review.csv of exactly the marked images, which `envad label --from` applies to
the server; the full-size links resolve to the files. `envad report` on a scan's store
needs no server, and an unreachable server is one error naming the fixes."""

from __future__ import annotations

import csv
import html
import io
import json
import os
import re
import shutil
import subprocess
import urllib.parse
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


#: Appended to a copy of the page: click the toggles as a reviewer would (the first
#: item false alarm, the second new content, the third false alarm then new content, the
#: fourth on and off again), press the download button, and record what it would save
#: (the download itself is stopped: a saved file keeps headless Chromium from exiting).
REVIEW_CLICKS = """<script>
window.addEventListener('load', () => {
  document.getElementById('download').addEventListener('click', e => e.preventDefault());
  const items = Array.from(document.querySelectorAll('.item'));
  const box = (n, verdict) => items[n].querySelector(`input[value="${verdict}"]`);
  box(0, 'false_alarm').click();
  box(1, 'new_content').click();
  box(2, 'false_alarm').click(); box(2, 'new_content').click();
  box(3, 'false_alarm').click(); box(3, 'false_alarm').click();
  document.querySelector('button').click();
  const link = document.getElementById('download');
  const out = document.createElement('pre');
  out.id = 'probe';
  out.textContent = JSON.stringify({
    ids: items.map(i => i.dataset.id), download: link.getAttribute('download'),
    href: link.getAttribute('href'), marked: document.getElementById('marked').textContent,
    links: Array.from(document.querySelectorAll('a.full')).map(a => a.getAttribute('href'))});
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
    return run_in_chromium(page, IMAGE_PROBE, tmp_path)


def run_in_chromium(page: Path, probe_script: str, tmp_path: Path):
    """Open a copy of `page` with `probe_script` appended in headless Chromium; the JSON
    the script leaves in <pre id="probe">."""
    probe = page.with_name("probe.html")
    probe.write_text(page.read_text().replace("</body>", probe_script + "</body>"))
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
    (tree / "camA" / "broken.png").write_bytes(b"\x89PNG not really")
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


def test_the_page_review_csv_holds_the_marked_images_and_label_applies_it(
        scored, tmp_path, capsys) -> None:
    server, scores = scored
    out = tmp_path / "review"
    with EnvadClient(server.address) as client:
        build_report(scores, out, top=4, neighbours=2, client=client)
    page = (out / "index.html").read_text()
    assert "envad label --from review.csv" in page and "--ids-from" not in page
    assert "broken.png" in page and "could not be scored (1)" in page
    seen = run_in_chromium(out / "index.html", REVIEW_CLICKS, tmp_path)
    assert seen["download"] == "review.csv" and seen["marked"] == "3"
    assert seen["href"].startswith("data:text/csv")
    text = urllib.parse.unquote(seen["href"].split(",", 1)[1])
    rows = list(csv.DictReader(io.StringIO(text)))
    ids = seen["ids"]
    assert [(r["id"], r["verdict"]) for r in rows] == [
        (ids[0], "false_alarm"), (ids[1], "new_content"), (ids[2], "new_content")]
    assert all(r["file"].endswith(".png") and r["env"] == "camA" for r in rows)
    # every full-size link opens a file from the page's folder: the image's own file
    stored = {i.id: i.uri for i in read_scores(scores)}
    assert len(seen["links"]) == len(ids)
    for id, link in zip(ids, seen["links"], strict=True):
        assert not Path(link).is_absolute()
        target = (out / urllib.parse.unquote(link)).resolve()
        assert target.is_file() and target == Path(stored[id]).resolve()

    review = tmp_path / "review.csv"
    review.write_text(text)
    assert main(["label", "--from", str(review), "--server", server.address]) == 0
    printed = capsys.readouterr().out
    assert "labelled 1 row(s) 'normal'" in printed and "labelled 2 row(s) 'anomaly'" in printed
    labels: dict[str, str] = {}
    with EnvadClient(server.address) as client:
        for batch in client.export(with_vectors=False):
            labels.update(zip(batch.column("id").to_pylist(), batch.column("label").to_pylist(),
                              strict=True))
    assert (labels[ids[0]], labels[ids[1]], labels[ids[2]]) == ("normal", "anomaly", "anomaly")
    assert labels[ids[3]] == ""          # toggled on and off: not in review.csv, untouched


def test_neighbours_prefer_the_camera_and_captions_name_files(scored, tmp_path) -> None:
    server, scores = scored
    out = tmp_path / "review"
    with EnvadClient(server.address) as client:
        build_report(scores, out, top=2, neighbours=3, client=client)
    page = (out / "index.html").read_text()
    items = re.findall(r'<div class="item [^"]*" data-id="\w+" data-env="(\w+)".*?'
                       r'<div class="neighbours">(.*?)</div></div></div>', page, re.S)
    assert len(items) == 4
    for env, neighbours in items:
        captions = re.findall(r"<figcaption>(.*?)</figcaption>", neighbours)
        assert len(captions) == 3 and all(re.match(r"[\w.]+\.png<br>", c) for c in captions)
        # the camera's other stored images come before any other camera's
        assert all(f"{env} (same camera)" in c for c in captions), captions
    assert re.search(r"taken (unknown|\d{4}-)", page)


def test_report_on_a_scan_store_and_an_unreachable_server(tmp_path, tiny_model_path,
                                                          capsys) -> None:
    tree = make_image_tree(tmp_path / "tree", envs=("camA", "camB"), per_env=12)
    scan_dir = tmp_path / "scan"
    assert main(["scan", str(tree), "--model", str(tiny_model_path), "--data-dir",
                 str(scan_dir), "--allow-few-rows", "--no-progress"]) == 0
    capsys.readouterr()
    scores = scan_dir / "scores.jsonl"
    out = tmp_path / "review"
    assert main(["report", str(scores), "--out", str(out), "--top", "2",
                 "--neighbours", "2", "--data-dir", str(scan_dir)]) == 0
    assert "review page" in capsys.readouterr().out
    assert (out / "index.html").read_text().count('class="neighbour"') == 2 * 2 * 2
    assert main(["report", str(scores), "--out", str(out), "--neighbours", "2",
                 "--server", "127.0.0.1:1", "--timeout", "5"]) == 1
    err = capsys.readouterr().err
    assert "--neighbours 0" in err and "--data-dir" in err
    assert main(["report", str(scores), "--out", str(out),
                 "--data-dir", str(tmp_path / "nothing")]) == 1
    assert "no envad scan store there" in capsys.readouterr().err
