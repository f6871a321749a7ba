"""The shared records: an image's id and digest."""

from __future__ import annotations

import hashlib

from envad.records import ImageInput, sha256_hex


def test_an_image_is_hashed_once_however_often_its_id_and_digest_are_asked(monkeypatch):
    data = b"\xff\xd8 not really a jpeg"
    real, hashed = hashlib.sha256, []

    def counting(payload):
        hashed.append(payload)
        return real(payload)

    monkeypatch.setattr(hashlib, "sha256", counting)
    image = ImageInput(data=data, env="cam-1")
    assert image.resolved_id() == image.sha256 == real(data).hexdigest()
    assert image.resolved_id() == image.sha256
    assert hashed == [data]
    assert ImageInput(data=data, id="mine").resolved_id() == "mine"
    assert image == ImageInput(data=data, env="cam-1")      # the digest is not a field
    assert sha256_hex(data) == image.sha256
