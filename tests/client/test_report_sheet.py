"""The review report's contact sheet captions and the page's item text: each image
named by its file, with its camera, capture time and event."""

from __future__ import annotations

from envad.client.report import CameraSection, Reviewed, ScoredImage, Thumb
from envad.client.report_html import render_page
from envad.client.report_sheet import caption_lines


def _image(uri: str, **fields) -> ScoredImage:
    return ScoredImage(key=uri, id="a" * 64, env="creek", uri=uri, ensemble=0.9731,
                       is_anomaly=True, threshold=0.9,
                       detectors={"KNN": {"calibrated": 0.95, "raw": 1.2},
                                  "LOF5": {"calibrated": 0.5, "raw": 1.1}},
                       **fields)


def test_a_tile_caption_names_the_file_the_camera_and_the_verdict():
    name, camera, verdict = caption_lines(_image("/data/creek/IMG_0042.JPG"))
    assert (name, camera, verdict) == ("IMG_0042.JPG", "creek", "0.973 ANOMALY 1/2")
    long_name, _, _ = caption_lines(_image("/d/" + "x" * 40 + "_running_0042.JPG"))
    assert len(long_name) <= 30 and long_name.endswith("0042.JPG") and "..." in long_name


def _page(image: ScoredImage) -> str:
    thumb = Thumb(image.id, image.env, image.uri, "")
    section = CameraSection(image.env, [image.ensemble], image.threshold,
                            [Reviewed(image, thumb)])
    return render_page([section], "scores.jsonl")


def test_an_item_shows_capture_time_event_and_file_name():
    image = _image("/data/creek/IMG_0042.JPG", event="creek-17", event_size=3,
                   timestamp="2026-06-01T05:12:09")
    html = _page(image)
    assert "IMG_0042.JPG</a>" in html
    assert "taken 2026-06-01T05:12:09" in html
    assert "event creek-17 (3 image(s), the top one shown)" in html
    alone = _page(_image("/data/creek/IMG_0043.JPG"))
    assert "taken unknown" in alone and "event creek" not in alone
