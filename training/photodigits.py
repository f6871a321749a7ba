"""PhotoDigits: a camera-trap-like multi-environment benchmark built offline (BENCHMARK.md).

Content = scikit-learn's real 8x8 handwritten digits; style = one camera per real
scikit-image photograph (background), each with its own crop scale, brightness,
contrast, tint, noise, blur, ink polarity, and night/infrared (greyscale) cameras.
Six training cameras hold only normals with a skewed bucket mix (a style-content
shortcut); three unseen test cameras hold balanced normals and 40% anomalies. Which
photographs, styles and digits make a dataset is a recipe (`RECIPES`): `standard`
(BENCHMARK.md: normal_a = {0,1,2}, normal_b = {3,4,5}, anomalies = {6,...,9}), on which
every default of the product was chosen, `holdout`, nine other cameras and another
digit split, kept for checking that those defaults carry over, and `shapes`, another
content family (training/content_families.py: procedural shapes with near-neighbour
classes) through other cameras, for choosing pipelines on more than one family.

Written in the folder format (metadata.csv + ad_spec.json + images/ENV/ID.png) plus
`digits.npz` (`ids`, `digits` uint8 [N, H, W] in 0..16: the clean content of each
image, 8x8 digits or 24x24 shapes, for the "content oracle" reference row) and
`photodigits.json` (the recipe).
"""

from __future__ import annotations

import csv
import json
import shutil
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import skimage.data
from PIL import Image
from scipy.ndimage import gaussian_filter
from tqdm import tqdm

from envad.training import content_families

VERSION = 1
TRAIN_POOL_FRACTION = 0.6      # per class: 60% of instances for training cameras
VAL_FRACTION = 0.1
TEST_ANOMALY_FRACTION = 0.4
GLYPH_SIDE = (0.60, 0.85)      # digit side as a fraction of the image side
BACKGROUND_CONTRAST = 0.6      # background contrast scaled around mid-grey


@dataclass(frozen=True)
class Camera:
    """One environment's style. `p_a`: P(bucket a) of its normals; `crop`: background
    crop side as a fraction of the photo's shorter side; `blur` in pixels at 32 px."""

    env: str
    photo: str
    p_a: float
    crop: float
    brightness: float
    contrast: float
    tint: tuple[float, float, float]
    noise: float
    blur: float
    ink: float            # glyph ink grey level: 0.08 dark ink, 0.92 light ink
    night: bool = False   # infrared: greyscale, flat colour


@dataclass(frozen=True)
class Recipe:
    """Which cameras film which content: the training cameras (normals only, each with
    its skewed bucket mix), the unseen test cameras, and the digits of the two normal
    buckets (every other digit is an anomaly)."""

    name: str
    train_cameras: tuple[Camera, ...]
    test_cameras: tuple[Camera, ...]
    normal_a: tuple[int, ...]
    normal_b: tuple[int, ...]
    content: str = "digits"        # a content_families.CONTENT_FAMILIES name

    @property
    def anomalies(self) -> tuple[int, ...]:
        return tuple(d for d in content_families.get(self.content).labels
                     if d not in self.normal_a + self.normal_b)

    @property
    def cameras(self) -> tuple[Camera, ...]:
        return self.train_cameras + self.test_cameras


#: the benchmark every evaluation and every default of the product was chosen on
#: (BENCHMARK.md)
STANDARD = Recipe(
    "standard",
    train_cameras=(
        Camera("cam-grass", "grass", 0.9, 0.50, 1.00, 1.00, (0.85, 1.10, 0.75), 0.03, 0.0,
               0.08),
        Camera("cam-gravel", "gravel", 0.8, 0.35, 1.15, 0.80, (1.05, 1.00, 0.90), 0.06, 0.6,
               0.92),
        Camera("cam-brick", "brick", 0.7, 0.70, 0.85, 1.20, (1.15, 0.90, 0.80), 0.02, 0.0,
               0.92),
        Camera("cam-coffee", "coffee", 0.3, 0.60, 1.05, 0.90, (1.00, 1.00, 1.00), 0.04, 0.8,
               0.08),
        Camera("cam-astronaut", "astronaut", 0.2, 0.45, 0.95, 1.10, (0.90, 0.95, 1.15), 0.05,
               0.3, 0.92),
        Camera("cam-camera", "camera", 0.1, 0.80, 0.75, 1.30, (1.00, 1.00, 1.00), 0.08, 0.5,
               0.92, night=True),
    ),
    test_cameras=(
        Camera("cam-rocket", "rocket", 0.5, 0.55, 1.10, 0.90, (1.00, 0.95, 1.10), 0.04, 0.4,
               0.08),
        Camera("cam-moon", "moon", 0.5, 0.65, 0.80, 1.25, (1.00, 1.00, 1.00), 0.07, 0.2, 0.92,
               night=True),
        Camera("cam-coins", "coins", 0.5, 0.40, 1.05, 1.05, (1.10, 1.05, 0.85), 0.03, 0.7,
               0.08),
    ),
    normal_a=(0, 1, 2),
    normal_b=(3, 4, 5),
)

#: a second dataset for checking that defaults chosen on STANDARD carry over to data
#: they were not chosen on: nine other photographs with their own styles, and another
#: split of the digits into normal buckets and anomalies. No choice of the product is
#: made on it (docs/training.md, "PhotoDigits recipes").
HOLDOUT = Recipe(
    "holdout",
    train_cameras=(
        Camera("cam-chelsea", "chelsea", 0.85, 0.55, 1.05, 0.95, (1.10, 0.95, 0.85), 0.04,
               0.2, 0.92),
        Camera("cam-hubble", "hubble_deep_field", 0.75, 0.40, 1.20, 1.15, (0.95, 0.95, 1.10),
               0.05, 0.0, 0.92),
        Camera("cam-tissue", "immunohistochemistry", 0.65, 0.60, 0.90, 1.05,
               (1.05, 0.90, 1.00), 0.03, 0.5, 0.08),
        Camera("cam-page", "page", 0.35, 0.75, 1.00, 0.85, (1.00, 1.00, 1.00), 0.06, 0.4,
               0.92, night=True),
        Camera("cam-clock", "clock", 0.25, 0.65, 0.85, 1.20, (1.10, 1.05, 0.90), 0.02, 0.7,
               0.08),
        Camera("cam-cell", "cell", 0.15, 0.45, 1.10, 1.00, (0.85, 1.05, 1.10), 0.07, 0.0,
               0.92),
    ),
    test_cameras=(
        Camera("cam-cat", "cat", 0.5, 0.50, 0.95, 1.10, (1.05, 1.00, 0.90), 0.05, 0.3, 0.08),
        Camera("cam-retina", "retina", 0.5, 0.35, 1.15, 0.90, (1.00, 0.90, 0.95), 0.03, 0.6,
               0.92),
        Camera("cam-text", "text", 0.5, 0.70, 0.90, 1.20, (1.00, 1.00, 1.00), 0.06, 0.2, 0.92,
               night=True),
    ),
    normal_a=(1, 4, 7),
    normal_b=(0, 8, 9),
)

#: a second content family through the same camera machinery: procedural shapes
#: (training/shapes.py) whose classes come in near-neighbour pairs. Both normal buckets
#: hold near neighbours of each other (square / rounded square, 5- / 6-point star), so a
#: leave-one-class-out fold holds out a class whose near neighbour stays normal; four of
#: the six anomalies are near neighbours of a normal class (hexagon and ring of the disc,
#: cross of the plus, diamond of the square), the two triangles are not. Six other
#: cameras: new styles on four of STANDARD's training photographs and on two
#: photographs no other recipe films; its three test cameras film photographs no other
#: recipe uses either. For choosing defaults on more than one content family
#: (`envad select --data` twice; docs/training.md, "PhotoDigits recipes").
SHAPES = Recipe(
    "shapes",
    train_cameras=(
        Camera("cam-lawn", "grass", 0.9, 0.70, 0.90, 1.10, (0.90, 1.05, 0.85), 0.05, 0.4,
               0.92),
        Camera("cam-path", "gravel", 0.8, 0.55, 1.05, 0.90, (1.00, 0.95, 0.90), 0.03, 0.0,
               0.08),
        Camera("cam-wall", "brick", 0.7, 0.45, 1.00, 1.05, (1.05, 1.00, 0.95), 0.06, 0.5,
               0.08, night=True),
        Camera("cam-cafe", "coffee", 0.3, 0.40, 0.90, 1.15, (1.10, 0.95, 0.85), 0.02, 0.3,
               0.92),
        Camera("cam-motorcycle", "stereo_motorcycle", 0.2, 0.50, 1.10, 0.95,
               (0.95, 1.00, 1.10), 0.04, 0.0, 0.08),
        Camera("cam-colorwheel", "colorwheel", 0.1, 0.35, 0.95, 0.85, (1.00, 1.00, 1.00),
               0.07, 0.6, 0.92),
    ),
    test_cameras=(
        Camera("cam-vessels", "microaneurysms", 0.5, 0.60, 1.00, 1.20, (1.05, 0.95, 0.90),
               0.05, 0.3, 0.92),
        Camera("cam-logo", "logo", 0.5, 0.45, 0.95, 1.00, (1.00, 1.05, 0.95), 0.03, 0.5,
               0.08),
        Camera("cam-phantom", "shepp_logan_phantom", 0.5, 0.70, 0.90, 1.10,
               (1.00, 1.00, 1.00), 0.06, 0.2, 0.92, night=True),
    ),
    normal_a=(0, 2, 4),            # square, disc, 5-point star
    normal_b=(1, 5, 6),            # rounded square, 6-point star, plus
    content="shapes",
)

#: recipe name -> recipe (`envad data photodigits --recipe`)
RECIPES = {recipe.name: recipe for recipe in (STANDARD, HOLDOUT, SHAPES)}


def generate(out_dir: str | Path, size: int = 32, seed: int = 0, *, progress: bool = True,
             train_per_camera: int = 800, test_per_camera: int = 300,
             id_test_per_camera: int | None = None, recipe: str = STANDARD.name) -> Path:
    """Write PhotoDigits to `out_dir` (replacing a previous PhotoDigits there); returns it.

    Besides train/val (training cameras) and test (unseen cameras), the `id_test` split
    holds held-out content instances rendered by the training cameras, with the test mix
    of anomalies: the in-distribution reference of evaluations. Its size per training
    camera defaults to a third of `test_per_camera`.

    `recipe` names one of RECIPES (which cameras, which content family, which classes
    are normal).

    Deterministic for (recipe, size, seed, counts): the same call writes byte-identical
    files.
    """
    chosen = _checked_recipe(recipe, size, train_per_camera, test_per_camera)
    out = _fresh_folder(Path(out_dir))
    family = content_families.get(chosen.content)
    glyphs, targets = family.bank(seed)
    pools = _digit_pools(targets, np.random.default_rng([seed, 0]), family.labels)
    if id_test_per_camera is None:
        id_test_per_camera = max(int(round(test_per_camera / 3)), 1)
    plan = _plan(chosen, pools, seed, (train_per_camera, test_per_camera,
                                       id_test_per_camera))
    rows, contents = _render_plan(out, chosen, plan, glyphs, size, seed, progress)
    _write_folder(out, chosen, rows, contents)
    (out / "photodigits.json").write_text(json.dumps({
        "name": "-".join(["photodigits"] + ([] if chosen is STANDARD else [chosen.name])
                         + [str(size)]),
        "version": VERSION, "size": size, "seed": seed,
        "train_per_camera": train_per_camera, "test_per_camera": test_per_camera,
        "id_test_per_camera": id_test_per_camera,
        "recipe": chosen.name, "content": chosen.content,
        "classes": dict(zip(map(str, family.labels), family.class_names, strict=True)),
        "train_cameras": [asdict(c) for c in chosen.train_cameras],
        "test_cameras": [asdict(c) for c in chosen.test_cameras],
    }, indent=1))
    return out


def _checked_recipe(recipe: str, size: int, train_per_camera: int,
                    test_per_camera: int) -> Recipe:
    """The recipe called `recipe`, after checking the generator's arguments."""
    if recipe not in RECIPES:
        raise ValueError(f"unknown PhotoDigits recipe {recipe!r}; known: "
                         f"{', '.join(RECIPES)}")
    if size not in (32, 64):
        raise ValueError(f"PhotoDigits size must be 32 or 64, got {size}")
    if train_per_camera < 10 or test_per_camera < 5:
        raise ValueError("need at least 10 images per training and 5 per test camera")
    return RECIPES[recipe]


def _fresh_folder(out: Path) -> Path:
    """`out` emptied for a new dataset (only a PhotoDigits folder or an empty one)."""
    if out.exists():
        if not (out / "photodigits.json").is_file() and any(out.iterdir()):
            raise FileExistsError(f"{out} exists and is not a PhotoDigits folder; "
                                  "choose an empty or new directory")
        shutil.rmtree(out)
    (out / "images").mkdir(parents=True)
    return out


def _plan(recipe: Recipe, pools, seed: int, counts: tuple[int, int, int]
          ) -> list[tuple[str, int, str, int]]:
    """(env, label, split, content index) of every image: training cameras, test
    cameras, then the training cameras' id_test images."""
    train_per_camera, test_per_camera, id_test_per_camera = counts
    plan = []
    for k, camera in enumerate(recipe.train_cameras):
        plan += _train_camera_plan(recipe, camera, pools[0], train_per_camera,
                                   np.random.default_rng([seed, 1, k]))
    for k, camera in enumerate(recipe.test_cameras):
        plan += _test_camera_plan(recipe, camera, pools[1], test_per_camera,
                                  np.random.default_rng([seed, 2, k]))
    for k, camera in enumerate(recipe.train_cameras):
        plan += _test_camera_plan(recipe, camera, pools[1], id_test_per_camera,
                                  np.random.default_rng([seed, 4, k]), split="id_test")
    return plan


def _render_plan(out: Path, recipe: Recipe, plan, glyphs: np.ndarray, size: int,
                 seed: int, progress: bool) -> tuple[list[dict], list[np.ndarray]]:
    """Render and save every planned image; its metadata row and its clean content."""
    cameras = {c.env: c for c in recipe.cameras}
    photos = {c.photo: _load_photo(c.photo) for c in cameras.values()}
    rows, contents = [], []
    for n, (env, label, split, index) in enumerate(
            tqdm(plan, desc="photodigits", unit="img", disable=not progress)):
        camera = cameras[env]
        image_id = f"{env}-{n:05d}"
        rng = np.random.default_rng([seed, 3, n])
        pixels = render(photos[camera.photo], glyphs[index], camera, size, rng)
        rel = f"images/{env}/{image_id}.png"
        (out / rel).parent.mkdir(exist_ok=True)
        Image.fromarray(pixels).save(out / rel, format="PNG")
        rows.append({"id": image_id, "path": rel, "env": env, "label": str(label),
                     "split": split, "is_anomaly": str(label in recipe.anomalies).lower()})
        contents.append(glyphs[index].astype(np.uint8))
    return rows, contents


def _write_folder(out: Path, recipe: Recipe, rows: list[dict],
                  contents: list[np.ndarray]) -> None:
    """metadata.csv, ad_spec.json and the clean content (digits.npz)."""
    with open(out / "metadata.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, ["id", "path", "env", "label", "split", "is_anomaly"])
        writer.writeheader()
        writer.writerows(rows)
    (out / "ad_spec.json").write_text(json.dumps(
        {"normal_a": [str(d) for d in recipe.normal_a],
         "normal_b": [str(d) for d in recipe.normal_b]}))
    write_npz(out / "digits.npz", ids=np.array([r["id"] for r in rows]),
              digits=np.stack(contents))


def load_content(root: str | Path) -> dict[str, np.ndarray]:
    """The clean content (0..16; an 8x8 digit or a 24x24 shape) behind each image id,
    from `digits.npz`."""
    with np.load(Path(root) / "digits.npz") as data:
        return dict(zip(data["ids"].tolist(), data["digits"], strict=True))


def write_npz(path: Path, **arrays: np.ndarray) -> None:
    """Like np.savez_compressed, but byte-identical across runs (fixed zip timestamps)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, array in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            with archive.open(info, "w", force_zip64=True) as handle:
                np.lib.format.write_array(handle, np.asarray(array), allow_pickle=False)


def _digit_pools(targets: np.ndarray, rng: np.random.Generator,
                 labels: tuple[int, ...] = tuple(range(10))):
    """Per class, a seeded 60/40 split of instances: (train pool, test pool)."""
    train, test = {}, {}
    for c in labels:
        members = rng.permutation(np.flatnonzero(targets == c))
        cut = int(round(TRAIN_POOL_FRACTION * len(members)))
        train[c], test[c] = members[:cut], members[cut:]
    return train, test


def _train_camera_plan(recipe: Recipe, camera: Camera, pool, count: int,
                       rng: np.random.Generator):
    bucket_a = rng.random(count) < camera.p_a
    labels = np.where(bucket_a, rng.choice(recipe.normal_a, count),
                      rng.choice(recipe.normal_b, count))
    n_val = int(round(VAL_FRACTION * count))
    splits = np.array(["train"] * count, dtype=object)
    splits[rng.permutation(count)[:n_val]] = "val"
    return [(camera.env, int(y), str(s), int(rng.choice(pool[int(y)])))
            for y, s in zip(labels, splits, strict=True)]


def _test_camera_plan(recipe: Recipe, camera: Camera, pool, count: int,
                      rng: np.random.Generator, split: str = "test"):
    n_anomalies = int(round(TEST_ANOMALY_FRACTION * count))
    n_normal = count - n_anomalies
    labels = np.concatenate([rng.choice(recipe.normal_a, n_normal // 2),
                             rng.choice(recipe.normal_b, n_normal - n_normal // 2),
                             rng.choice(recipe.anomalies, n_anomalies)])
    labels = labels[rng.permutation(count)]
    return [(camera.env, int(y), split, int(rng.choice(pool[int(y)]))) for y in labels]


def _load_photo(name: str) -> np.ndarray:
    image = getattr(skimage.data, name)()
    photo = np.asarray(image[0] if isinstance(image, tuple) else image)   # a stereo pair
    if photo.dtype != np.uint8:           # float in [0, 1] or a binary mask
        photo = np.round(np.clip(photo.astype(np.float64), 0, 1) * 255).astype(np.uint8)
    if photo.ndim == 2:
        photo = np.repeat(photo[..., None], 3, axis=2)
    return np.ascontiguousarray(photo[..., :3].astype(np.uint8))


def render(photo: np.ndarray, digit: np.ndarray, camera: Camera, size: int,
           rng: np.random.Generator) -> np.ndarray:
    """One styled image: background crop, composited glyph, then the camera's style."""
    height, width = photo.shape[:2]
    side = min(height, width) * camera.crop * rng.uniform(0.9, 1.1)
    side = min(side, height, width)
    x0, y0 = rng.uniform(0, width - side), rng.uniform(0, height - side)
    crop = Image.fromarray(photo).resize((size, size), Image.Resampling.BILINEAR,
                                         box=(x0, y0, x0 + side, y0 + side))
    img = np.asarray(crop, dtype=np.float32) / 255.0
    if rng.random() < 0.5:
        img = img[:, ::-1]
    img = 0.5 + BACKGROUND_CONTRAST * (img - 0.5)

    glyph = int(round(rng.uniform(*GLYPH_SIDE) * size))
    alpha = Image.fromarray(digit.astype(np.float32) / 16.0)
    alpha = np.clip(np.asarray(alpha.resize((glyph, glyph), Image.Resampling.BILINEAR)), 0, 1)
    gy, gx = rng.integers(0, size - glyph + 1, size=2)
    patch = img[gy:gy + glyph, gx:gx + glyph]
    img = img.copy()
    img[gy:gy + glyph, gx:gx + glyph] = patch * (1 - alpha[..., None]) + \
        camera.ink * alpha[..., None]

    img = (img - 0.5) * camera.contrast + 0.5
    img = img * camera.brightness * np.asarray(camera.tint, dtype=np.float32)
    if camera.night:
        grey = img @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
        img = np.repeat((0.15 + 0.85 * grey)[..., None], 3, axis=2)
    if camera.blur > 0:
        sigma = camera.blur * size / 32
        img = gaussian_filter(img, sigma=(sigma, sigma, 0))
    img = img + rng.normal(0.0, camera.noise, img.shape).astype(np.float32)
    return np.clip(np.round(img * 255.0), 0, 255).astype(np.uint8)
