"""GGUF: files written by the `gguf` package load with ember's dequantization, bit for bit as
`gguf.quants.dequantize`; raw Q8_0/Q4_0 parts rebuild the same values; damaged files raise StoreError."""

from __future__ import annotations

import json
import sys

import gguf
import ml_dtypes
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

import ember
from ember import store
from ember.errors import StoreError
from ember.store import gguf as ember_gguf
from ember.store.gguf import load_gguf, read_gguf

# where each block type keeps its f16 fields (the rest of a block is any bytes)
F16_FIELDS = {"Q8_0": (0, 1), "Q4_0": (0, 1), "Q4_K": (0, 2), "Q6_K": (208, 1), "Q5_K": (0, 2)}
# odd row counts; rows of K a multiple of the block (32, or 256 for K-quants), 1-D and 3-D included
QUANT_SHAPES = {"Q8_0": [(5, 96), (3, 7, 32), (32,)], "Q4_0": [(7, 64), (2, 3, 32), (160,)],
                "Q4_K": [(3, 512), (256,), (2, 3, 256)], "Q6_K": [(5, 256), (768,), (3, 1, 512)]}
PLAIN_SHAPES = [(5, 7), (3,), (2, 3, 5)]


def random_blocks(rng: np.random.Generator, kind: str, shape: tuple[int, ...]) -> np.ndarray:
    """Any bytes for every block of rows of `shape`, with finite f16 scales of magnitudes 2^-24..2^9."""
    block, size = gguf.GGML_QUANT_SIZES[T[kind]]
    n = int(np.prod(shape)) // block
    blocks = rng.integers(0, 256, (n, size), dtype=np.uint8)
    start, count = F16_FIELDS[kind]
    scales = rng.standard_normal((n, count)) * np.exp2(rng.integers(-24, 8, (n, count)))
    blocks[:, start:start + 2 * count] = scales.astype(np.float16).view(np.uint8)
    return blocks.reshape(*shape[:-1], shape[-1] // block * size)


def plain(rng: np.random.Generator, kind: str, shape: tuple[int, ...]) -> np.ndarray:
    if kind.startswith("I"):
        return rng.integers(-1000, 1000, shape).astype(f"int{kind[1:]}")
    dtype = {"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16, "F64": np.float64}[kind]
    return (rng.standard_normal(shape) * 100).astype(dtype)


def write(path, tensors: dict[str, tuple[str, np.ndarray]], metadata: dict | None = None) -> None:
    """A GGUF file by the reference writer: (type, array) per name, quantized ones as their bytes."""
    writer = gguf.GGUFWriter(path, arch="llama")
    for key, value in (metadata or {}).items():
        writer.add_array(key, value) if isinstance(value, list) else writer.add_key_value(
            key, value, gguf.GGUFValueType.get_type(value))
    for name, (kind, array) in tensors.items():
        if kind == "BF16":
            writer.add_tensor(name, array.view(np.uint8), raw_dtype=T.BF16)
        elif kind in F16_FIELDS:
            writer.add_tensor(name, array, raw_dtype=T[kind])
        else:
            writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def same_bits(got: np.ndarray, want: np.ndarray) -> bool:
    return got.shape == want.shape and np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """One file of every supported type, quantized ones both as any bytes and from gguf's quantizer."""
    rng = np.random.default_rng(30)
    tensors = {}
    for kind, shapes in QUANT_SHAPES.items():
        for shape in shapes:
            tensors[f"{kind}.{'x'.join(map(str, shape))}"] = (kind, random_blocks(rng, kind, shape))
    for kind in ("Q8_0", "Q4_0"):  # what a converter writes: gguf's own quantization of real values
        tensors[f"{kind}.quantized"] = (kind, gguf.quants.quantize(rng.standard_normal((9, 64)).astype(np.float32),
                                                                   T[kind]))
    for kind in ("F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64"):
        for shape in PLAIN_SHAPES:
            tensors[f"{kind}.{'x'.join(map(str, shape))}"] = (kind, plain(rng, kind, shape))
    path = tmp_path_factory.mktemp("gguf") / "model.gguf"
    metadata = {"llama.block_count": 3, "llama.rope.freq_base": 0.5, "tokenizer.ggml.tokens": ["<s>", "a", "bc"],
                "tokenizer.ggml.scores": [0.25, -1.5], "general.name": "tiny", "llama.use_parallel": True}
    write(path, tensors, metadata)
    return path, tensors, metadata


def expected(kind: str, array: np.ndarray) -> np.ndarray:
    """The oracle: the gguf package's dequantization to f32 (its reader layout: PyTorch's)."""
    if kind in ("F16", "BF16"):
        return gguf.quants.dequantize(array.view(np.uint8), T[kind])
    return gguf.quants.dequantize(array, T[kind]) if kind in F16_FIELDS else array


@pytest.mark.parametrize("mmap", [True, False])
def test_every_type_loads_as_the_reference_dequantizes(model, mmap):
    path, tensors, _ = model
    state, _ = read_gguf(path, mmap=mmap)
    assert list(state) == list(tensors)
    for name, (kind, array) in tensors.items():
        got, want = state[name], expected(kind, array)
        if kind in F16_FIELDS:
            assert got.dtype == np.float32 and same_bits(got, want), name
        else:  # plain types keep their dtype and bits, as read-only views of the map unless mmap=False
            assert got.dtype == array.dtype and got.tobytes() == array.tobytes(), name
            assert got.flags.writeable == (not mmap), name
            if kind in ("F16", "BF16"):
                assert same_bits(got.astype(np.float32), want), name


def unpack_codes(parts) -> np.ndarray:
    """The contract's code values: int8 bytes, or int4 two's complement nibbles with element 2j low."""
    if parts.code == "int8":
        return parts.values.view(np.int8).astype(np.float32)
    nibbles = np.stack([parts.values & 0x0F, parts.values >> 4], axis=-1).reshape(*parts.values.shape[:-1], -1)
    return np.where(nibbles >= 8, nibbles.astype(np.int16) - 16, nibbles).astype(np.float32)


def test_raw_parts_rebuild_the_reference_values(model):
    path, tensors, _ = model
    state, _ = read_gguf(path, raw=True)
    for name, (kind, array) in tensors.items():
        got, want = state[name], expected(kind, array)
        if kind not in ("Q8_0", "Q4_0"):
            assert isinstance(got, np.ndarray), name  # K-quants and plain types: as without raw
            continue
        assert got.code == {"Q8_0": "int8", "Q4_0": "int4"}[kind] and got.block == 32 and got.zeros is None
        assert got.shape == want.shape and got.values.dtype == np.uint8 and got.scales.dtype == np.float16
        assert got.values.shape == (*want.shape[:-1], want.shape[-1] // (1 if kind == "Q8_0" else 2)), name
        assert got.scales.shape == (*want.shape[:-1], want.shape[-1] // 32), name
        scales = np.repeat(got.scales.astype(np.float32), 32, axis=-1)
        assert same_bits(scales * unpack_codes(got), want), name


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_quantized_load_keeps_q8_0_and_q4_0_as_qtensors(model, device):
    """`quantized=True`: Q8_0 and Q4_0 come as QTensors (int8 / int4, block 32, f16 scales) whose
    dequantization on the device is the reference's, bit for bit; the rest load as without it."""
    path, tensors, _ = model
    got = load_gguf(path, device=device, quantized=True)
    assert list(got) == list(tensors)
    for name, (kind, array) in tensors.items():
        want = expected(kind, array)
        if kind in ("Q8_0", "Q4_0"):
            q = got[name]
            assert isinstance(q, ember.QTensor) and q.shape == want.shape, name
            assert q.scheme == (ember.quant.int8 if kind == "Q8_0" else ember.quant.int4)(block=32, scale_dtype="f16")
            assert q.nbytes == want.size * (1 if kind == "Q8_0" else 0.5) + want.size // 32 * 2, name
            assert same_bits(q.dequantize().numpy(), want), name
        else:
            assert isinstance(got[name], ember.Tensor), name


def test_metadata_and_the_store_front_door(model):
    path, tensors, metadata = model
    _, read = read_gguf(path)
    assert read == {"general.architecture": "llama", **metadata}
    state, strings = store.load(path)
    assert strings["general.architecture"] == "llama" and strings["llama.block_count"] == "3"
    assert json.loads(strings["tokenizer.ggml.tokens"]) == ["<s>", "a", "bc"]
    name = "Q4_K.3x512"
    assert same_bits(store.load(path, cast="f16", mmap=False)[0][name].astype(np.float32),
                     expected("Q4_K", tensors[name][1]).astype(np.float16).astype(np.float32))
    assert same_bits(state[name], expected("Q4_K", tensors[name][1]))
    with pytest.raises(StoreError, match="reads GGUF files but does not write them"):
        store.save(path.parent / "out.gguf", {"w": np.zeros(2, np.float32)})


@pytest.mark.parametrize("dtype", [None, "bf16"])
def test_load_gguf_gives_tensors(model, dtype):
    path, tensors, _ = model
    loaded = load_gguf(path, device="numpy", dtype=dtype)
    for name in ("Q6_K.5x256", "F16.5x7", "I32.5x7"):
        kind, array = tensors[name]
        want = expected(kind, array) if kind in F16_FIELDS else array
        if dtype is not None and not kind.startswith("I"):
            want = want.astype(ml_dtypes.bfloat16)
        got = loaded[name].numpy()
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), name


def test_not_gguf_and_damaged_headers(tmp_path):
    for content in (b"", b"GG", b"GGML" + bytes(60)):
        (tmp_path / "bad.gguf").write_bytes(content)
        with pytest.raises(StoreError, match="not a GGUF file: it starts with"):
            read_gguf(tmp_path / "bad.gguf")
    write(tmp_path / "m.gguf", {"w": ("F32", np.ones((3, 5), np.float32))}, {"general.name": "x" * 50})
    data = (tmp_path / "m.gguf").read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[:60])  # cut inside the key-value metadata
    with pytest.raises(StoreError, match=r"cut.gguf: truncated GGUF header: it needs bytes \d+\.\.\d+ but the "
                                         r"file has 60$"):
        read_gguf(tmp_path / "cut.gguf")
    (tmp_path / "v9.gguf").write_bytes(data[:4] + (9).to_bytes(4, "little") + data[8:])
    with pytest.raises(StoreError, match="v9.gguf: damaged GGUF header: .*version 9"):
        read_gguf(tmp_path / "v9.gguf")


def test_truncated_tensor_data_names_the_tensor(tmp_path):
    rng = np.random.default_rng(1)
    write(tmp_path / "m.gguf", {"a": ("Q8_0", random_blocks(rng, "Q8_0", (3, 64))),
                                "b": ("Q6_K", random_blocks(rng, "Q6_K", (3, 256)))})
    data = (tmp_path / "m.gguf").read_bytes()
    (tmp_path / "m.gguf").write_bytes(data[:len(data) - 300])
    with pytest.raises(StoreError, match=rf"truncated: tensor 'b' \(Q6_K \(3, 256\)\) needs bytes \d+\.\.\d+ "
                                         rf"but the file has {len(data) - 300}"):
        read_gguf(tmp_path / "m.gguf")


def patched(tmp_path, tensors, name: str, field: str, value: int):
    """The file of `tensors` with one field of tensor `name`'s header entry overwritten: "dim0" or "type"."""
    write(tmp_path / "m.gguf", tensors)
    data = bytearray((tmp_path / "m.gguf").read_bytes())
    at = data.find(len(name).to_bytes(8, "little") + name.encode()) + 8 + len(name)
    n_dims = int.from_bytes(data[at:at + 4], "little")
    at, size = (at + 4, 8) if field == "dim0" else (at + 4 + 8 * n_dims, 4)
    data[at:at + size] = value.to_bytes(size, "little")
    (tmp_path / "m.gguf").write_bytes(bytes(data))
    return tmp_path / "m.gguf"


def test_unsupported_unknown_and_ragged_tensors(tmp_path):
    rng = np.random.default_rng(2)
    tensors = {"w": ("F32", np.ones((2, 3), np.float32)), "k5": ("Q5_K", random_blocks(rng, "Q5_K", (2, 256)))}
    write(tmp_path / "m.gguf", tensors)
    supported = "F32, F16, BF16, F64, I8, I16, I32, I64, Q8_0, Q4_0, Q4_K, Q6_K"
    with pytest.raises(StoreError, match=f"tensor 'k5': tensor type Q5_K is not supported; ember reads {supported}"):
        read_gguf(tmp_path / "m.gguf")
    del tensors["k5"]
    with pytest.raises(StoreError, match="tensor 'w': tensor type 999 is not a GGML type"):
        read_gguf(patched(tmp_path, tensors, "w", "type", 999))
    tensors = {"q": ("Q4_0", random_blocks(rng, "Q4_0", (3, 64)))}
    with pytest.raises(StoreError, match=r"tensor 'q': Q4_0 \(3, 48\): rows of 48 elements are not a multiple of "
                                         "its block of 32"):
        read_gguf(patched(tmp_path, tensors, "q", "dim0", 48))


def test_missing_package_names_the_extra(tmp_path, monkeypatch):
    write(tmp_path / "m.gguf", {"w": ("F32", np.ones(3, np.float32))})
    ember_gguf._reader_class.cache_clear()
    monkeypatch.setitem(sys.modules, "gguf", None)
    try:
        with pytest.raises(ImportError, match=r"pip install 'ember\[gguf\]'"):
            read_gguf(tmp_path / "m.gguf")
    finally:
        ember_gguf._reader_class.cache_clear()


def test_every_truncation_and_header_byte_edit_loads_or_raises_store_error(tmp_path):
    rng = np.random.default_rng(3)
    write(tmp_path / "m.gguf",
          {"a": ("Q4_0", random_blocks(rng, "Q4_0", (3, 32))), "b": ("F16", plain(rng, "F16", (5,)))},
          {"tokenizer.ggml.tokens": ["x", "yz"], "llama.block_count": 2})
    data = (tmp_path / "m.gguf").read_bytes()
    whole, _ = read_gguf(tmp_path / "m.gguf", mmap=False)
    header_end = data.find(b"b") + 40  # the tensor infos end soon after the last name
    edits = []
    for _ in range(300):
        edit = bytearray(data)
        edit[rng.integers(4, header_end)] = rng.integers(0, 256)
        edits.append(bytes(edit))
    for i, content in enumerate([data[:n] for n in range(len(data))] + edits):
        (tmp_path / "d.gguf").write_bytes(content)
        try:
            state, _ = read_gguf(tmp_path / "d.gguf")
        except StoreError:
            continue
        if i < len(data):  # a cut in the padding after the last tensor loses nothing
            assert {k: v.tobytes() for k, v in state.items()} == {k: v.tobytes() for k, v in whole.items()}, i
