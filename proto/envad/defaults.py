"""Defaults stated in more than one place: each has its one owner here.

The server applies most of them (a 0 or "" in a request means "the server's default");
the client's sources apply the MegaDetector ones. Help text and documentation render
them from here. Plain Python, so the client can import it without loading the server
or a source.
"""

from __future__ import annotations

#: the port `envad serve` listens on and the port of a `--server HOST` without one
DEFAULT_PORT = 50051
#: where the client looks for a server when neither `--server` nor `$ENVAD_SERVER` says
DEFAULT_ADDRESS = f"127.0.0.1:{DEFAULT_PORT}"
#: the gRPC service of envad.v1 (envad.proto's `AnomalyService`; the health check's name)
SERVICE_NAME = "envad.v1.AnomalyService"

#: stored neighbours a Score returns as evidence when the request names no top_k
DEFAULT_TOP_K = 5
#: the cap on fit rows (a seeded sample) when a Fit names no max_samples
FIT_MAX_SAMPLES = 20_000
#: the expected anomaly rate of the fit rows that sets a bundle's threshold
DEFAULT_CONTAMINATION = 0.05
#: images an unseen camera sends before the camera-aware spaces re-centre it on its own mean
DEFAULT_MIN_CAMERA_ROWS = 32
#: frames of one camera at most this many seconds apart (each to the next) are one event
DEFAULT_EVENT_GAP_S = 60.0
#: MegaDetector files: the folder level of an image's 'file' path that names its camera
MEGADETECTOR_ENV_LEVEL = 0
#: MegaDetector files: the least detection confidence that counts as a detection when the
#: file states no typical_detection_threshold
MEGADETECTOR_MIN_CONF = 0.2
