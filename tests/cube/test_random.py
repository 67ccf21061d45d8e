"""Philox4x32-10: known answers, kernel == NumPy reference bit for bit, distributions."""

import numpy as np
import pytest

from ember.kernels import random as rnd

# Known-answer vectors of Random123 (kat_vectors: philox4x32_10).
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("counter, key, expected", KAT)
def test_reference_matches_known_answers(counter, key, expected):
    got = rnd.philox4x32(np.array([counter], np.uint32), key)[0]
    assert [int(v) for v in got] == list(expected)


@pytest.mark.parametrize("n, seed, offset", [(1, 0, 0), (10, 42, 5), (1001, 2**40 + 3, 2**32 - 2)])
def test_kernel_bits_equal_the_reference(n, seed, offset):
    np.testing.assert_array_equal(rnd.bits(n, seed, offset), rnd.bits_reference(n, seed, offset))


def test_streams_are_reproducible_and_offsets_continue_them():
    a = rnd.uniform((4, 5), seed=3)
    np.testing.assert_array_equal(a, rnd.uniform((4, 5), seed=3))
    assert not np.array_equal(a, rnd.uniform((4, 5), seed=4))
    whole = rnd.uniform(16, seed=9)
    np.testing.assert_array_equal(whole[8:], rnd.uniform(8, seed=9, offset=2))


def test_uniform_values_follow_the_words():
    words = rnd.bits_reference(1000, 11)
    expected = np.float32(-2) + np.float32(5) * ((words >> 8).astype(np.float32) * np.float32(2**-24))
    np.testing.assert_allclose(rnd.uniform(1000, seed=11, low=-2, high=3), expected, rtol=1e-6, atol=1e-6)


def test_distributions():
    u = rnd.uniform(200_000, seed=1, dtype=np.float64)
    assert u.dtype == np.float64 and u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
    z = rnd.normal((400, 500), seed=2, mean=1.0, std=2.0)
    assert z.shape == (400, 500) and np.isfinite(z).all()
    assert abs(z.mean() - 1.0) < 0.02 and abs(z.std() - 2.0) < 0.02
    assert abs(np.mean(np.abs(z - 1) < 2) - 0.6827) < 0.005  # one sigma


def test_empty():
    assert rnd.normal((0, 3), seed=0).shape == (0, 3)
