"""Batched matmul against NumPy: shapes, broadcasting, transposed views, dtypes."""

import ml_dtypes
import numpy as np
import pytest

from ember.kernels.matmul import matmul
from ember.errors import DTypeError, ShapeError

rng = np.random.default_rng(3)

SHAPES = [((5, 7), (7, 9)), ((1, 1), (1, 1)), ((3, 1, 70, 33), (4, 33, 65)), ((7,), (7, 3)),
          ((2, 5), (5,)), ((130, 17), (17, 200)), ((2, 3, 0), (0, 4)), ((0, 3), (3, 2))]


def test_shapes_and_broadcasting(parallel):
    def check(shapes):
        a = rng.standard_normal(shapes[0]).astype(np.float32)
        b = rng.standard_normal(shapes[1]).astype(np.float32)
        got, want = matmul(a, b), a @ b
        assert got.shape == want.shape, shapes
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=str(shapes))

    parallel(check, SHAPES)


def test_transposed_and_strided_views_need_no_copy():
    a = rng.standard_normal((40, 30)).astype(np.float64)
    b = rng.standard_normal((50, 80)).astype(np.float64)
    c = rng.standard_normal((25, 40)).astype(np.float64)
    for left, right in [(a.T, b[:40, ::2]), (a.T, c.T), (a.T, a[::-1])]:
        np.testing.assert_allclose(matmul(left, right), left @ right, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype, tol", [(np.float16, 2e-2), (ml_dtypes.bfloat16, 5e-2), (np.int32, 0)])
def test_dtypes(dtype, tol):
    a = rng.integers(-4, 4, (9, 12)).astype(dtype)
    b = rng.integers(-4, 4, (12, 10)).astype(dtype)
    want = a.astype(np.float64) @ b.astype(np.float64)
    got = matmul(a, b)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


def test_errors():
    with pytest.raises(ShapeError, match="inner"):
        matmul(np.ones((2, 3)), np.ones((4, 2)))
    with pytest.raises(ShapeError, match="batch"):
        matmul(np.ones((2, 2, 3)), np.ones((3, 3, 2)))
    with pytest.raises(DTypeError):
        matmul(np.ones((2, 2), np.float32), np.ones((2, 2)))


# ---- tile variants and the autotuned entry point -------------------------------------------------

import importlib  # noqa: E402

from ember import settings  # noqa: E402
from ember.kernels.matmul import TILES, Tile, matmul_key, matmul_tuner, tuned_matmul  # noqa: E402

matmul_module = importlib.import_module("ember.kernels.matmul")  # the package exports the function


def test_every_tile_variant_matches_numpy(parallel):
    # Odd sizes: the last tiles along m and n are shifted back inside and overlap their neighbours.
    a = rng.standard_normal((2, 37, 50)).astype(np.float32)
    b = rng.standard_normal((50, 301)).astype(np.float32)

    def check(tile):
        np.testing.assert_allclose(matmul(a, b, tile=tile), a @ b, rtol=1e-4, atol=1e-4, err_msg=str(tile))

    parallel(check, list(TILES.values()))


def test_k_in_several_launches_matches_numpy():
    # kc=8 splits k into launches that accumulate; shapes that tile exactly (and batches) take that path,
    # the others (overlapping edge tiles) and f16 (accumulator wider than the output) run k in one launch.
    tile = Tile(4, 16, 4, 8)
    cases = [((8, 37), (37, 32), np.float32), ((3, 2, 8, 20), (20, 16), np.float64),
             ((9, 37), (37, 33), np.float32), ((8, 37), (37, 32), np.float16), ((8, 8), (8, 16), np.float32)]
    for a_shape, b_shape, dtype in cases:
        a, b = rng.standard_normal(a_shape).astype(dtype), rng.standard_normal(b_shape).astype(dtype)
        tol = 1e-2 if dtype == np.float16 else 1e-5
        np.testing.assert_allclose(matmul(a, b, tile=tile).astype(np.float64),
                                   a.astype(np.float64) @ b.astype(np.float64), rtol=tol, atol=tol,
                                   err_msg=str((a_shape, b_shape, dtype)))


def test_matmul_key_anchors_sizes_and_names_layouts():
    a, b = np.ones((3, 1000, 64), np.float32), np.ones((64, 5), np.float32)
    assert matmul_key(a, b)[:7] == (4, 1024, 8, 64, "float32", "rows", "rows")
    assert matmul_key(a, np.ones((5, 64), np.float32).T)[-2] == "columns"
    assert matmul_key(a[..., ::2], b[::2])[-3] == "strided"


@pytest.fixture
def fresh_tuner(tmp_path, monkeypatch):
    """matmul's tuner rebuilt on an empty cache folder, at a level the test sets with `level(name)`."""
    monkeypatch.setenv("EMBER_AUTOTUNE_DIR", str(tmp_path))

    def level(name):
        monkeypatch.setenv("EMBER_AUTOTUNE", name)
        settings.reload()
        monkeypatch.setattr(matmul_module, "_tuner", None)
        return matmul_tuner()

    yield level
    monkeypatch.delenv("EMBER_AUTOTUNE")
    monkeypatch.delenv("EMBER_AUTOTUNE_DIR")
    settings.reload()


def fake_costs(winner, timed):
    def timer(name, run):
        timed.append(name)
        return 1.0 if name == winner else 2.0
    return timer


def test_the_tuned_winner_runs_and_is_cached(fresh_tuner, tmp_path):
    tuner = fresh_tuner("balanced")
    timed = []
    tuner.timer = fake_costs("cube_8x128", timed)
    a = rng.standard_normal((130, 200)).astype(np.float32)
    b = rng.standard_normal((200, 140)).astype(np.float32)
    np.testing.assert_allclose(tuned_matmul(a, b), a @ b, rtol=1e-4, atol=1e-4)
    assert sorted(set(timed)) == ["blas", "cube_8x128"], "balanced times BLAS and the default tile"
    assert tuner.choose(a, b) == "cube_8x128"
    stored = next(tmp_path.glob("cpu-*.json")).read_text()
    assert "cube_8x128" in stored and "matmul:" in stored


def test_extensive_times_every_tile(fresh_tuner):
    tuner = fresh_tuner("extensive")
    timed = []
    tuner.timer = fake_costs("cube_8x64", timed)
    # The shapes of test_every_tile_variant_matches_numpy (batched, n over every tile's units): the
    # candidates' warm-up runs reuse those compiled kernels.
    a, b = np.ones((2, 130, 50), np.float32), np.ones((50, 301), np.float32)
    assert tuner.choose(a, b) == "cube_8x64"
    assert set(timed) == {"blas", *TILES}


def test_minimal_and_small_problems_take_blas_without_timing(fresh_tuner):
    tuner = fresh_tuner("minimal")
    tuner.timer = lambda name, run: pytest.fail(f"timed {name}")
    big = np.ones((256, 256), np.float32)
    assert tuner.choose(big, big) == "blas"
    tuner = fresh_tuner("full")
    tuner.timer = lambda name, run: pytest.fail(f"timed {name}")
    small = rng.standard_normal((8, 9)).astype(np.float32)
    assert tuner.choose(small, small.T) == "blas"
    np.testing.assert_allclose(tuned_matmul(small, small.T), small @ small.T, rtol=1e-5)


def test_other_dtypes_run_the_kernel():
    a = rng.integers(-4, 4, (40, 30)).astype(np.float16)
    got = tuned_matmul(a, a.T)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), a.astype(np.float64) @ a.T.astype(np.float64), atol=0.5)
