"""Products with a packed quantized weight, and int8 x int8 -> int32 (docs/quant-kernels.md).

The weight W (n, k) is stored as `ember/ops/quant_matmul.py` says: `values` uint8 (n, kb), codes packed
along k, `scales` (n, nblocks) or (1,), `zeros` for the affine codes. `quant_matmul` runs, for x @ W.T:

- M <= `GEMV_MAX_M` (decoding): `qmv_words_kernel` on the C target where rows are whole u32 words (a
  word a lane, codes by shifts or `lut16`, every op 32 bits wide so gcc vectorizes it in 512-bit
  registers), else `qmv_kernel` (`span` units on a row's bytes, their sums met in planes or a tree);
- more rows, and g @ W (the input gradient): `large_tuner`'s pick, per device and shape class, of
  `slab` (W dequantized a slab at a time by `dequant_kernel` into one scratch buffer, multiplied by
  `tuned_matmul`: BLAS, cuBLAS, tensor cores) and `tiled` (`qmm_kernel`: W widened a panel at a time
  in shared memory; `qmm_t_kernel`: each unit reads its column's codes in place).

`int_matmul_kernel`: units along k for a tile of outputs (`mad8` into i32); on the C target one unit a
tile, whose k loop gcc turns into VNNI dot products of a + 128 (u8) by b, less 128 * b's row sums.
nf4, fp4 and fp8 codes go through the code's f32 table (`code_table`), UE8M0 scales through theirs,
kept on the device once per runtime.

Example:
    >>> w = np.array([[0x21]], np.uint8); s = np.array([1.0], np.float32)
    >>> quant_matmul(np.ones((1, 2), np.float32), w, s, None, code="int4", block=2, k=2, n=1)
    array([[3.]], dtype=float32)
"""

from __future__ import annotations

import re
from contextlib import nullcontext
from functools import partial
from typing import NamedTuple

import numpy as np

from .. import cube
from ..cube.kernel import launch_runtime
from ..cube.runtime.autotune import Autotuner, anchor, device_cache
from ..ops.quant_matmul import CODES, SIGNED, UNSIGNED, code_table, packed_width, ue8m0_table
from .common import assign, contiguous, empty, zeros
from .elementwise import cast
from .matmul import tuned_matmul
from .reduce import PLANE_WIDTH, units_combine

GEMV_MAX_M = 16
"""x rows up to which the forward runs a GEMV kernel (bandwidth-bound decoding), above `large_tuner`'s pick."""
GEMV_UNITS = {"cpu": 16, "wgsl": 64, "cuda": 256}
"""Units per cube of `qmv_kernel`: one vector of f32 on the C target, a cube per column on WGSL, 8
planes (8 columns) on CUDA."""
GEMV_VEC = 4
"""Rounds of `span` bytes `qmv_kernel` takes a trip (loads in flight; the C target's vector loop runs longer)."""
GEMV_CPU_WIDE = (64, 2)
"""(units, rounds a trip) of `qmv_kernel` on the C target where a round's bytes share one scale (one block
a row, or blocks of a multiple of 64 bytes): 64 u8 lanes are one 512-bit vector, which gcc widens to four
f32 vectors (with 16 units it picks 16-byte vectors throughout, four times the instructions); int8 per
channel (1, 4096) x (4096, 4096): 1.5 ms against 2.4. Other blocks keep 16 units (a round of 64 would load
a scale per unit, a gather)."""
GEMV_WORDS_LANES = 16
"""`qmv_words_kernel`'s units a cube: one vector of u32 words."""
GEMV_WORDS_ROWS = 4
"""x rows `qmv_words_kernel` takes at a time (more would not fit the vector registers)."""
GEMV_WORDS_COLS = {8: {1: 8, 2: 4, 4: 2}, 4: {1: 1}, 2: {1: 1}}
"""Weight rows a cube of `qmv_words_kernel` owns, by bits a code and x rows a group: 8-bit rows share each
x load (1.0-1.2 ms at 1 to 16 rows on int8 (1, 4096) x (4096, 4096), the machine's noise); 4-bit and
2-bit ones run one a cube (int4 blocks of 32: 1.1 ms against 1.3-1.6 for 2 or 4)."""
TILE_ROWS, TILE_UNITS, PANEL = 8, 64, 32
"""`qmm_kernel`'s and `qmm_t_kernel`'s tile: rows x units outputs a cube, k in panels of PANEL."""
DEQUANT_UNITS, DEQUANT_CHUNK = 64, 1024
"""`dequant_kernel`'s units (bytes of a weight row a round) and bytes of a row per cube."""
SLAB_ELEMENTS = {"cpu": 1 << 24, "cuda": 1 << 24}
"""Elements of the dequantized slab `slab` multiplies at a time (16M: a 4096 x 4096 weight in one): BLAS
runs thin products slower, (512, 4096) x (4096, 4096) on two threads in 1.28x torch's time in one slab,
1.44x in slabs of 1024 rows, 2.4x in slabs of 256 (one thread: 0.84-0.97x at every size)."""
INT_TILE, INT_SPAN, INT_DEPTH = 4, 16, 4
"""`int_matmul_kernel` on the GPU targets: INT_TILE x INT_TILE outputs a cube, INT_SPAN units along k (a
plane on CUDA), INT_DEPTH rounds per trip."""
INT_CPU_TILE = (4, 4)
"""`int_matmul_kernel` on the C target: one unit a cube, R x C outputs (16 dot-product accumulators in
vector registers; 4 x 8 measured alike, 8 x 2 and 16 x 1 slower, k in chunks of 256 slower: each
chunk ends in 16 horizontal sums)."""


@cube.function
def field(byte, shift, bits):
    """The `bits`-bit field at `shift` of a byte, as i32."""
    v = cube.i32(byte)
    if bits == 8:
        return v
    return (v >> shift) & ((1 << bits) - 1)


@cube.function
def code_value(f, bits, kind, lut):
    """The f32 value of bit pattern `f`: two's complement, unsigned, or the code's table."""
    if kind == SIGNED and bits == 8:
        return cube.f32(cube.cast(f, cube.i8))  # a sign extension (vpmovsxbd on the C target)
    if kind == SIGNED:
        return cube.f32(f - ((f >> (bits - 1)) << bits))
    if kind == UNSIGNED:
        return cube.f32(f)
    return lut[f]


@cube.function
def scale_at(scales, slut, i, ue8m0):
    """Scale i as f32 (a UE8M0 byte through its table)."""
    if ue8m0:
        return slut[cube.i32(scales[i])]
    return cube.f32(scales[i])


@cube.function
def gemv_byte(x, values, scales, zeros, lut, slut, w_at, s_at, p, lane, k, m, acc, rows, bits, kind, ue8m0, affine,
              bpb, span, ragged):
    """acc[r] += x[r, i] * W[col, i] over the codes of byte p + lane of the weight row at w_at (its scales
    from s_at). `bpb`: bytes per scale block (0: one block a row); a round's units share a block when
    bpb is a multiple of `span` (the scale is then one load, not one a unit). `ragged`: the row's last
    byte holds codes past k."""
    per = 8 // bits
    at_p = p + lane
    byte = values[w_at + at_p]
    b = 0 if bpb == 0 else (p // bpb if bpb % span == 0 else at_p // bpb)
    late = bpb == 0 and not affine  # one scale a row, no zero: applied once, after the sum
    s = scale_at(scales, slut, s_at + b, ue8m0)
    z = cube.f32(zeros[s_at + b]) if affine else cube.f32(0)
    for i in cube.unroll(range(per)):
        kk = at_p * per + i
        c = code_value(field(byte, i * bits, bits), bits, kind, lut)
        w = c if late else s * (c - z) if affine else s * c
        at = cube.min(kk, k - 1) if ragged else kk
        if ragged:  # codes past k weigh nothing (an affine code 0 is not a zero weight)
            w = cube.select(kk < k, w, cube.f32(0))
        acc = tuple(acc[r] + cube.f32(x[cube.min(r, m - 1) * k + at]) * w for r in range(rows))
    return acc


@cube.kernel
def qmv_kernel(x: cube.Array, values: cube.Array[cube.u8], scales: cube.Array, zeros: cube.Array[cube.u8],
               lut: cube.Array[cube.f32], slut: cube.Array[cube.f32], out: cube.Array, m: cube.i32, n: cube.i32,
               k: cube.i32, kb: cube.i32, srow: cube.i32, rows: cube.Comptime[int], bits: cube.Comptime[int],
               kind: cube.Comptime[str], ue8m0: cube.Comptime[bool], affine: cube.Comptime[bool],
               bpb: cube.Comptime[int], ragged: cube.Comptime[bool], units: cube.Comptime[int],
               span: cube.Comptime[int], lanes: cube.Comptime[int], vec: cube.Comptime[int]):
    """out (m, n) = x (m, k) @ W.T, `span` units per weight row (see the module docstring)."""
    col = cube.CUBE_POS_X * (units // span) + (cube.UNIT_POS // span if units > span else 0)
    lane = cube.UNIT_POS % span if units > span else cube.UNIT_POS
    if units > span:  # several columns a cube (planes): the last cube's extra planes skip (no barrier below)
        if col < n:
            qmv_column(x, values, scales, zeros, lut, slut, out, m, n, k, kb, srow, col, lane, rows, bits, kind,
                       ue8m0, affine, bpb, ragged, span, lanes, vec)
    else:
        qmv_column(x, values, scales, zeros, lut, slut, out, m, n, k, kb, srow, col, lane, rows, bits, kind, ue8m0,
                   affine, bpb, ragged, span, lanes, vec)


@cube.function
def qmv_column(x, values, scales, zeros, lut, slut, out, m, n, k, kb, srow, col, lane, rows, bits, kind, ue8m0,
               affine, bpb, ragged, span, lanes, vec):
    """Output column `col` of every x row, its weight row walked by `span` lanes in rounds of `span` bytes."""
    acc = tuple(cube.f32(0) for _ in range(rows))
    w_at = col * kb
    s_at = col * srow
    wide = kb // (span * vec) * (span * vec)
    main = kb // span * span
    for p in range(0, wide, span * vec):  # `vec` whole rounds a trip, unguarded: vectors of units on C
        for j in cube.unroll(range(vec)):
            acc = gemv_byte(x, values, scales, zeros, lut, slut, w_at, s_at, p + j * span, lane, k, m, acc, rows,
                            bits, kind, ue8m0, affine, bpb, span, ragged)
    for p in range(wide, main, span):
        acc = gemv_byte(x, values, scales, zeros, lut, slut, w_at, s_at, p, lane, k, m, acc, rows, bits, kind,
                        ue8m0, affine, bpb, span, ragged)
    for p in range(main + lane, kb, span):
        acc = gemv_byte(x, values, scales, zeros, lut, slut, w_at, s_at, p, 0, k, m, acc, rows, bits, kind, ue8m0,
                        affine, bpb, 1, ragged)
    total = tuple(units_combine("sum", acc[r], span, lanes, cube.f32) for r in range(rows))
    if bpb == 0 and not affine:  # `gemv_byte` left the row's one scale out
        s = scale_at(scales, slut, s_at, ue8m0)
        total = tuple(s * total[r] for r in range(rows))
    if lane == 0:
        for r in cube.unroll(range(rows)):
            if r < m:
                out[r * n + col] = out.dtype(total[r])


@cube.function
def word_codes(word, bits, kind, lut):
    """The f32 values of the 32 // bits codes of the u32 `word`, low bits first: each field shifted to the
    top and back (signed), or shifted and masked (unsigned; table codes then looked up: 16-entry tables by
    `lut16`, all fields first, so that the C target shuffles them together)."""
    cpw = 32 // bits
    if kind == SIGNED:
        return tuple(cube.f32(cube.cast(word << (32 - bits * (j + 1)), cube.i32) >> (32 - bits)) for j in range(cpw))
    fields = tuple((word >> (bits * j)) & ((1 << bits) - 1) for j in range(cpw))
    if kind == UNSIGNED:
        return tuple(cube.f32(f) for f in fields)
    if bits == 4:
        return tuple(cube.lut16(lut, cube.i32(f)) for f in fields)
    return tuple(lut[cube.i32(f)] for f in fields)


@cube.function
def lane_block(scales, zeros, slut, first, last, u, wpb, lanes, ue8m0, affine):
    """(scale, zero) of lane u's word in a step whose first scale block is `first` (blocks past `last`, the
    row's, read as `last`): one block a step (wpb a multiple of lanes), else lanes // wpb blocks of wpb
    lanes each, their values loaded once a step and given to their lanes by selects (a load at a per-lane
    index would be a gather on the C target)."""
    blocks = 1 if wpb % lanes == 0 else lanes // wpb
    at = tuple(cube.min(first + i, last) for i in range(blocks))
    s = scale_at(scales, slut, at[blocks - 1], ue8m0)
    z = cube.f32(zeros[at[blocks - 1]]) if affine else cube.f32(0)
    for i in cube.unroll(range(blocks - 2, -1, -1)):
        mine = u < (i + 1) * wpb
        s = cube.select(mine, scale_at(scales, slut, at[i], ue8m0), s)
        if affine:
            z = cube.select(mine, cube.f32(zeros[at[i]]), z)
    return s, z


@cube.function
def words_step(xp, words, scales, zeros, lut, slut, t, u, r0, c0, kw, srow, xs, acc, guard, rows, cols, bits, kind,
               ue8m0, affine, wpb, lanes):
    """acc after words t .. t + lanes of weight rows c0 .. c0 + cols, lane u taking word t + u (`guard`:
    words past kw count nothing). acc[(r * cols + c) * 2 + h]: x row r0 + r, weight row c, even / odd codes."""
    cpw = 32 // bits
    late = wpb == 0 and not affine  # one scale a row, applied to the total
    at = t + u
    for c in cube.unroll(range(cols)):
        row = c0 + c
        if wpb == 0:
            s = scale_at(scales, slut, row * srow, ue8m0)
            z = cube.f32(zeros[row * srow]) if affine else cube.f32(0)
        else:
            s, z = lane_block(scales, zeros, slut, row * srow + t // wpb, row * srow + srow - 1, u, wpb, lanes, ue8m0,
                              affine)
        word = words[row * kw + (cube.min(at, kw - 1) if guard else at)]
        mine = tuple(acc[(q // 2 * cols + c) * 2 + q % 2] for q in range(rows * 2))  # x row q // 2, half q % 2
        parts = mine if late else tuple(cube.f32(0) for _ in range(rows * 2))
        codes = word_codes(word, bits, kind, lut)
        for j in cube.unroll(range(cpw)):
            code = codes[j] - z if affine else codes[j]
            if guard:
                code = cube.select(at < kw, code, cube.f32(0))
            xi = t * cpw + j * lanes + u
            parts = tuple(cube.fma(xp[(r0 + q // 2) * xs + xi], code, parts[q]) if q % 2 == j % 2 else parts[q]
                          for q in range(rows * 2))
        if not late:
            parts = tuple(cube.fma(s, parts[q], mine[q]) for q in range(rows * 2))
        acc = tuple(parts[i // (cols * 2) * 2 + i % 2] if i // 2 % cols == c else acc[i]
                    for i in range(rows * cols * 2))
    return acc


@cube.kernel
def qmv_words_kernel(xp: cube.Array[cube.f32], words: cube.Array[cube.u32], scales: cube.Array,
                     zeros: cube.Array[cube.u8], lut: cube.Array[cube.f32], slut: cube.Array[cube.f32], out: cube.Array,
                     m: cube.i32, n: cube.i32, kw: cube.i32, srow: cube.i32, xs: cube.i32, rows: cube.Comptime[int],
                     cols: cube.Comptime[int], bits: cube.Comptime[int], kind: cube.Comptime[str],
                     ue8m0: cube.Comptime[bool], affine: cube.Comptime[bool], wpb: cube.Comptime[int],
                     lanes: cube.Comptime[int]):
    """out (m, n) = x @ W.T for few x rows on the C target, W read as u32 words (rows of kw words): a cube
    of `lanes` units (one vector of words) owns `cols` weight rows (the last cube shifted back: n >= cols),
    lane u takes words u, u + lanes, ... of each, for `rows` x rows at a time. `xp` is x laid out for it
    (`words_panel`): code j of a step's word u at j * lanes + u. `wpb`: words per scale block (0: one block
    a row), a multiple or a divisor of `lanes`."""
    u = cube.UNIT_POS
    c0 = cube.min(cube.CUBE_POS_X * cols, n - cols)
    main = kw // lanes * lanes
    sums = cube.shared(cube.f32, rows * cols * lanes)
    for r0 in range(0, m, rows):  # groups of `rows` x rows (xp holds whole groups), the weight rows from L1
        acc = tuple(cube.f32(0) for _ in range(rows * cols * 2))
        for t in range(0, main, lanes):
            acc = words_step(xp, words, scales, zeros, lut, slut, t, u, r0, c0, kw, srow, xs, acc, False, rows, cols,
                             bits, kind, ue8m0, affine, wpb, lanes)
        if main < kw:
            acc = words_step(xp, words, scales, zeros, lut, slut, main, u, r0, c0, kw, srow, xs, acc, True, rows,
                             cols, bits, kind, ue8m0, affine, wpb, lanes)
        for q in cube.unroll(range(rows * cols)):
            sums[q * lanes + u] = acc[q * 2] + acc[q * 2 + 1]
        cube.sync_units()
        if u < rows * cols:
            total = sums[u * lanes]
            for l in cube.unroll(range(1, lanes)):
                total = total + sums[u * lanes + l]
            r = r0 + u // cols
            col = c0 + u % cols
            if wpb == 0 and not affine:
                total = total * scale_at(scales, slut, col * srow, ue8m0)
            if r < m:
                out[r * n + col] = out.dtype(total)
        cube.sync_units()  # the sums are read before the next group writes them


@cube.kernel
def qmm_kernel(x: cube.Array, values: cube.Array[cube.u8], scales: cube.Array, zeros: cube.Array[cube.u8],
               lut: cube.Array[cube.f32], slut: cube.Array[cube.f32], out: cube.Array, m: cube.i32, n: cube.i32,
               k: cube.i32, kb: cube.i32, block: cube.i32, srow: cube.i32, rows: cube.Comptime[int],
               units: cube.Comptime[int], kc: cube.Comptime[int], bits: cube.Comptime[int],
               kind: cube.Comptime[str], ue8m0: cube.Comptime[bool], affine: cube.Comptime[bool]):
    """out (m, n) = x (m, k) @ W.T by tiles of rows x units, W widened a (units x kc) panel at a time into
    shared memory; a panel lies in one scale block (the host picks kc so). Tiles at the far edges are
    shifted back to end there (m >= rows, n >= units): they overlap and write equal values twice."""
    per = 8 // bits
    kcb = kc // per
    u = cube.UNIT_POS_X
    m0 = cube.min(cube.CUBE_POS_X * rows, m - rows)
    j0 = cube.min(cube.CUBE_POS_Y * units, n - units)
    panel = cube.shared(cube.f32, kc * units)
    acc = tuple(cube.f32(0) for _ in range(rows))
    for k0 in range(0, k, kc):
        b = k0 // block
        for t in cube.unroll(range(kcb)):  # the panel's units x kcb bytes, consecutive units on one row's bytes
            idx = t * units + u
            jj = idx // kcb
            pb = idx % kcb
            row = j0 + jj
            byte = values[row * kb + cube.min(k0 // per + pb, kb - 1)]
            s = scale_at(scales, slut, row * srow + b, ue8m0)
            z = cube.f32(zeros[row * srow + b]) if affine else cube.f32(0)
            for i in cube.unroll(range(per)):
                w = s * (code_value(field(byte, i * bits, bits), bits, kind, lut) - z)
                panel[(pb * per + i) * units + jj] = cube.select(k0 + pb * per + i < k, w, cube.f32(0))
        cube.sync_units()
        for kk in cube.unroll(range(kc)):
            wv = panel[kk * units + u]
            at = cube.min(k0 + kk, k - 1)  # past k the panel holds zeros
            acc = tuple(acc[r] + cube.f32(x[(m0 + r) * k + at]) * wv for r in range(rows))
        cube.sync_units()
    for r in cube.unroll(range(rows)):
        out[(m0 + r) * n + j0 + u] = out.dtype(acc[r])


@cube.kernel
def qmm_t_kernel(g: cube.Array, values: cube.Array[cube.u8], scales: cube.Array, zeros: cube.Array[cube.u8],
                 lut: cube.Array[cube.f32], slut: cube.Array[cube.f32], out: cube.Array, m: cube.i32, n: cube.i32,
                 k: cube.i32, kb: cube.i32, block: cube.i32, srow: cube.i32, rows: cube.Comptime[int],
                 units: cube.Comptime[int], bits: cube.Comptime[int], kind: cube.Comptime[str],
                 ue8m0: cube.Comptime[bool], affine: cube.Comptime[bool]):
    """out (m, k) = g (m, n) @ W by tiles of rows x units (edge tiles shifted back as in `qmm_kernel`)."""
    per = 8 // bits
    m0 = cube.min(cube.CUBE_POS_X * rows, m - rows)
    col = cube.min(cube.CUBE_POS_Y * units, k - units) + cube.UNIT_POS_X
    p = col // per
    shift = (col % per) * bits
    b = col // block
    acc = tuple(cube.f32(0) for _ in range(rows))
    for j in range(n):
        s = scale_at(scales, slut, j * srow + b, ue8m0)
        c = code_value(field(values[j * kb + p], shift, bits), bits, kind, lut)
        w = s * (c - cube.f32(zeros[j * srow + b])) if affine else s * c
        acc = tuple(acc[r] + cube.f32(g[(m0 + r) * n + j]) * w for r in range(rows))
    for r in cube.unroll(range(rows)):
        out[(m0 + r) * k + col] = out.dtype(acc[r])


@cube.function
def dequant_byte(values, scales, zeros, lut, slut, out, row, r, p, pb, kb, srow, nc, bits, kind, ue8m0, affine, bpb,
                 ragged):
    """out[r, pb * per + i] = W[row, p * per + i] for the `per` codes of byte p of the row."""
    per = 8 // bits
    byte = values[row * kb + p]
    at = row * srow + (0 if bpb == 0 else p // bpb)
    s = scale_at(scales, slut, at, ue8m0)
    z = cube.f32(zeros[at]) if affine else cube.f32(0)
    for i in cube.unroll(range(per)):
        c = code_value(field(byte, i * bits, bits), bits, kind, lut)
        w = s * (c - z) if affine else s * c
        col = pb * per + i
        if ragged:
            if col < nc:
                out[r * nc + col] = out.dtype(w)
        else:
            out[r * nc + col] = out.dtype(w)


@cube.kernel
def dequant_kernel(values: cube.Array[cube.u8], scales: cube.Array, zeros: cube.Array[cube.u8],
                   lut: cube.Array[cube.f32], slut: cube.Array[cube.f32], out: cube.Array, kb: cube.i32,
                   srow: cube.i32, j0: cube.i32, c0b: cube.i32, ncb: cube.i32, nc: cube.i32,
                   units: cube.Comptime[int], chunk: cube.Comptime[int], bits: cube.Comptime[int],
                   kind: cube.Comptime[str], ue8m0: cube.Comptime[bool], affine: cube.Comptime[bool],
                   bpb: cube.Comptime[int], ragged: cube.Comptime[bool]):
    """out (rows, nc) = W[j0 + r, c0b * per + c] (a window of the weight; c0b and ncb count bytes): cube
    (x, y) widens bytes x * chunk .. of the window's row y, `units` consecutive bytes a round (whole rounds
    unguarded, then the rest). `bpb`: bytes per scale block (0: one block a row); `ragged`: nc is not a
    whole number of bytes."""
    r = cube.CUBE_POS_Y
    row = j0 + r
    start = cube.CUBE_POS_X * chunk
    stop = cube.min(ncb, start + chunk)
    whole = start + (stop - start) // units * units
    for t in range(start, whole, units):
        pb = t + cube.UNIT_POS_X
        dequant_byte(values, scales, zeros, lut, slut, out, row, r, c0b + pb, pb, kb, srow, nc, bits, kind, ue8m0,
                     affine, bpb, ragged)
    pb = whole + cube.UNIT_POS_X
    if pb < stop:
        dequant_byte(values, scales, zeros, lut, slut, out, row, r, c0b + pb, pb, kb, srow, nc, bits, kind, ue8m0,
                     affine, bpb, ragged)


@cube.function
def int_round(a, b, acc, i0, j0, kk, k, R, C, offset):
    """acc[r * C + c] += a[i0 + r, kk] * b[j0 + c, kk] (`mad8`); with `offset`, a's byte is taken as the u8
    a + 128 (u8 x i8 is what VNNI multiplies)."""
    av = tuple(cube.cast(a[(i0 + r) * k + kk], cube.u8) ^ cube.u8(128) if offset else a[(i0 + r) * k + kk]
               for r in range(R))
    bv = tuple(b[(j0 + c) * k + kk] for c in range(C))
    return tuple(cube.mad8(acc[r * C + c], av[r], bv[c]) for r in range(R) for c in range(C))


@cube.kernel
def int_matmul_kernel(a: cube.Array[cube.i8], b: cube.Array[cube.i8], bsums: cube.Array[cube.i32],
                      out: cube.Array[cube.i32], m: cube.i32, n: cube.i32, k: cube.i32, R: cube.Comptime[int],
                      C: cube.Comptime[int], span: cube.Comptime[int], lanes: cube.Comptime[int],
                      depth: cube.Comptime[int], offset: cube.Comptime[bool]):
    """out (m, n) = a (m, k) @ b (n, k).T in i32: an R x C tile a cube, its `span` units along k (edge
    tiles shifted back: m >= R, n >= C). With one unit (the C target) the k loop is a plain loop of byte
    products gcc vectorizes as dot products; with `offset` they are (a + 128) . b (VNNI multiplies u8 by
    i8), less 128 * bsums[j] (b's row sums, from a launch with a = -127 and bsums = 0)."""
    lane = cube.UNIT_POS
    i0 = cube.min(cube.CUBE_POS_X * R, m - R)
    j0 = cube.min(cube.CUBE_POS_Y * C, n - C)
    acc = tuple(cube.i32(0) for _ in range(R * C))
    step = span * depth
    main = k // step * step
    for k0 in range(0, main, step):
        for d in cube.unroll(range(depth)):
            acc = int_round(a, b, acc, i0, j0, k0 + d * span + lane, k, R, C, offset)
    for kk in range(main + lane, k, span):
        acc = int_round(a, b, acc, i0, j0, kk, k, R, C, offset)
    if span > 1:
        acc = tuple(units_combine("sum", acc[t], span, lanes, cube.i32) for t in range(R * C))
    if offset:
        acc = tuple(acc[t] - bsums[j0 + t % C] * 128 for t in range(R * C))
    if lane == 0:
        for t in cube.unroll(range(R * C)):
            out[(i0 + t // C) * n + j0 + t % C] = acc[t]


# ---- host functions --------------------------------------------------------------------------------

_tables: dict = {}


def _table(runtime, name: str, host: np.ndarray):
    """`host` (a code's or UE8M0's table) on `runtime`, copied there once."""
    key = (id(runtime), name)
    found = _tables.get(key)
    if found is None or found[0] is not runtime:
        found = _tables[key] = (runtime, runtime.to_device(np.array(host)))
    return found[1]


def _floor2(v: int) -> int:
    return 1 << (max(1, v).bit_length() - 1)


def _panel(block: int, k: int) -> int:
    """`qmm_kernel`'s panel depth: the largest of 32, 16, 8 that lies in one scale block (0: none)."""
    if block >= k:
        return PANEL
    return next((kc for kc in (PANEL, 16, 8) if block % kc == 0), 0)


def supports(block: int, k: int, transpose: bool) -> str:
    """"" when the kernels compute this layout, else why not (the caller runs the reference instead):
    the forward kernels walk k in steps that lie in one scale block, so blocks are multiples of 8 codes
    (or one block a row).

    Example:
        >>> supports(12, 48, False)
        'blocks of 12 codes: the forward kernels take multiples of 8 (or one block a row)'
    """
    if not transpose and _panel(block, k) == 0:
        return f"blocks of {block} codes: the forward kernels take multiples of 8 (or one block a row)"
    return ""


class Weight(NamedTuple):
    """A quantized weight W (n, k) as the kernels take it: its parts on the runtime (`zeros` a 1-element
    stand-in when symmetric), the code's and UE8M0's tables, and the geometry. `srow`: scales a row (0 per
    tensor); `bpb`: bytes per scale block (0: one block a row)."""

    values: object
    scales: object
    zeros: object
    lut: object
    slut: object
    bits: int
    kind: str
    ue8m0: bool
    affine: bool
    k: int
    n: int
    kb: int
    block: int
    srow: int
    bpb: int

    @property
    def flags(self) -> dict:
        return dict(bits=self.bits, kind=self.kind, ue8m0=self.ue8m0, affine=self.affine)

    @property
    def parts(self) -> tuple:
        return self.values, self.scales, self.zeros, self.lut, self.slut


def weight(values, scales, zeros, code: str, block: int, k: int, n: int, runtime) -> Weight:
    """The `Weight` of these parts on `runtime` (tables copied there once)."""
    bits, kind = CODES[code]
    affine = zeros is not None
    zarr = zeros if affine else _table(runtime, "none", np.zeros(1, np.uint8))
    per_tensor = len(scales.shape) == 1
    block = k if per_tensor else block  # one scale: every code is in block 0
    srow = 0 if per_tensor else -(-k // block)
    bpb = 0 if block >= k else block // (8 // bits)
    return Weight(contiguous(values), contiguous(scales), contiguous(zarr), _table(runtime, code, code_table(code)),
                  _table(runtime, "ue8m0", ue8m0_table()), bits, kind, scales.dtype == np.uint8, affine, k, n,
                  packed_width(code, k), block, srow, bpb)


def quant_matmul(x, values, scales, zeros, *, code: str, block: int, k: int, n: int, transpose: bool = False):
    """x @ W.T (or g @ W with `transpose`) for the quantized weight W (n, k): x (..., k) (or (..., n)) of
    f32/f16/bf16, the result (..., n) (or (..., k)) of x's dtype. Shapes are the primitive's (checked
    by its shape rule); `supports` must hold. More than `GEMV_MAX_M` rows go to `large_tuner`'s pick."""
    inner, outer = (n, k) if transpose else (k, n)
    lead = tuple(x.shape[:-1])
    m = int(np.prod(lead, dtype=np.int64))
    if m == 0 or outer == 0 or inner == 0:
        return zeros_like_out(lead + (outer,), x)
    x2 = contiguous(x).reshape(m, inner)
    runtime = launch_runtime(x2, values, scales)
    w = weight(values, scales, zeros, code, block, k, n, runtime)
    if not transpose and m <= GEMV_MAX_M:
        out = gemv(x2, w)
    else:
        out = large_tuner(runtime, transpose)(x2, w)
    return out.reshape(lead + (outer,))


def gemv(x2, w: Weight):
    """x2 (m, k) @ W.T for m <= GEMV_MAX_M by `qmv_words_kernel` where it applies, else `qmv_kernel`."""
    m = x2.shape[0]
    runtime = launch_runtime(x2, w.values)
    target = runtime.target
    if words_fit(w, target):
        return gemv_words(x2, w)
    units, vec = GEMV_UNITS.get(target, 64), GEMV_VEC
    if target == "cpu" and w.bpb % GEMV_CPU_WIDE[0] == 0:
        units, vec = GEMV_CPU_WIDE
    lanes = PLANE_WIDTH.get(target, 1)
    span = lanes if lanes > 1 else units
    rows = 1 << (m - 1).bit_length()
    out = empty((m, w.n), x2.dtype, x2)
    qmv_kernel.launch(cube.CubeCount(-(-w.n // (units // span))), cube.CubeDim(units), x2, *w.parts, out, m, w.n,
                      w.k, w.kb, w.srow, rows=rows, bpb=w.bpb, ragged=w.k % (8 // w.bits) != 0, units=units,
                      span=span, lanes=lanes, vec=vec, **w.flags)
    return out


def words_fit(w: Weight, target: str) -> bool:
    """Whether `qmv_words_kernel` computes this weight: on the C target, rows of whole u32 words
    (kb % 4 == 0, 4-byte aligned), whose scale blocks are one a row, or whole words that divide or are
    multiples of GEMV_WORDS_LANES words."""
    cpw = 32 // w.bits
    if target != "cpu" or w.kb % 4 or w.values.ctypes.data % 4:
        return False
    if not w.bpb:
        return True
    wpb = w.block // cpw
    return w.block % cpw == 0 and (wpb % GEMV_WORDS_LANES == 0 or GEMV_WORDS_LANES % wpb == 0)


def words_panel(x2, w: Weight, rows: int):
    """x2 (m, k) as `qmv_words_kernel` reads it: f32, zero-padded to whole steps of GEMV_WORDS_LANES words
    and whole groups of `rows` rows, code j of a step's word u at j * lanes + u. Returns it and its row
    length."""
    m = x2.shape[0]
    cpw, lanes = 32 // w.bits, GEMV_WORDS_LANES
    steps = -(-(w.kb // 4) // lanes)
    length, groups = steps * lanes * cpw, -(-m // rows) * rows
    padded = np.zeros((groups, length), np.float32)
    padded[:m, :w.k] = x2
    return padded.reshape(groups, steps, lanes, cpw).transpose(0, 1, 3, 2).reshape(groups, length), length


def gemv_words(x2, w: Weight):
    """x2 (m, k) @ W.T by `qmv_words_kernel` (where `words_fit`)."""
    m = x2.shape[0]
    rows = min(GEMV_WORDS_ROWS, 1 << (m - 1).bit_length())
    cols = min(GEMV_WORDS_COLS[w.bits].get(rows, 1), _floor2(w.n), GEMV_WORDS_LANES // rows)  # a unit a sum
    xp, xs = words_panel(x2, w, rows)
    out = empty((m, w.n), x2.dtype, x2)
    qmv_words_kernel.launch(cube.CubeCount(-(-w.n // cols)), cube.CubeDim(GEMV_WORDS_LANES), xp,
                            w.values.reshape(-1).view(np.uint32), w.scales, w.zeros, w.lut, w.slut, out, m, w.n,
                            w.kb // 4, w.srow, xs, rows=rows, cols=cols, wpb=w.block // (32 // w.bits) if w.bpb else 0,
                            lanes=GEMV_WORDS_LANES, **w.flags)
    return out


def tiled(x2, w: Weight, transpose: bool = False):
    """x2 (m, k) @ W.T by `qmm_kernel`'s tiles (W widened panel by panel in shared memory), or with
    `transpose` x2 (m, n) @ W by `qmm_t_kernel`'s (each unit reads its column's codes in place)."""
    m, outer = x2.shape[0], (w.k if transpose else w.n)
    rows, units = _floor2(min(TILE_ROWS, m)), _floor2(min(TILE_UNITS, outer))
    out = empty((m, outer), x2.dtype, x2)
    count, dim = cube.CubeCount(-(-m // rows), -(-outer // units)), cube.CubeDim(units)
    args = (x2, *w.parts, out, m, w.n, w.k, w.kb, w.block, w.srow)
    if transpose:
        qmm_t_kernel.launch(count, dim, *args, rows=rows, units=units, **w.flags)
    else:
        qmm_kernel.launch(count, dim, *args, rows=rows, units=units, kc=_panel(w.block, w.k), **w.flags)
    return out


def dequantize_window(w: Weight, out, j0: int, c0: int):
    """out (rows, nc) = W[j0 : j0 + rows, c0 : c0 + nc] by `dequant_kernel` (c0 a whole byte's first code)."""
    per = 8 // w.bits
    rows, nc = out.shape
    ncb = -(-nc // per)
    units, chunk = DEQUANT_UNITS, DEQUANT_CHUNK
    dequant_kernel.launch(cube.CubeCount(-(-ncb // chunk), rows), cube.CubeDim(units), *w.parts, out, w.kb, w.srow,
                          j0, c0 // per, ncb, nc, units=units, chunk=chunk, bpb=w.bpb, ragged=nc % per != 0,
                          **w.flags)
    return out


def slab(x2, w: Weight):
    """x2 (m, k) @ W.T as dense products: W dequantized about SLAB_ELEMENTS at a time into one scratch buffer,
    each slab multiplied by `tuned_matmul` (BLAS or the matmul kernel on the CPU, cuBLAS or tensor cores
    on CUDA) into its columns of the result."""
    xf = _dense_operand(x2)
    out = empty((x2.shape[0], w.n), x2.dtype, x2)
    ns = _slab_size(w.n, w.k, launch_runtime(x2).target)
    scratch = empty((ns, w.k), xf.dtype, x2)
    for j0 in range(0, w.n, ns):
        part = dequantize_window(w, scratch[:min(ns, w.n - j0)], j0, 0)
        assign(out[:, j0:j0 + part.shape[0]], tuned_matmul(xf, part.T))
    return out


def slab_t(g2, w: Weight):
    """g2 (m, n) @ W as dense products: W's columns dequantized a slab at a time (every row), each slab
    multiplied by `tuned_matmul` into its columns of the result."""
    gf = _dense_operand(g2)
    out = empty((g2.shape[0], w.k), g2.dtype, g2)
    per = 8 // w.bits
    kc = _slab_size(w.k, w.n, launch_runtime(g2).target)
    kc = max(per, kc // per * per)
    scratch = empty((w.n, kc), gf.dtype, g2)
    for c0 in range(0, w.k, kc):
        nc = min(kc, w.k - c0)
        part = scratch if nc == kc else empty((w.n, nc), gf.dtype, g2)
        assign(out[:, c0:c0 + nc], tuned_matmul(gf, dequantize_window(w, part, 0, c0)))
    return out


def _dense_operand(x2):
    """x2 as the dense product's operand: f32 on the CPU (BLAS), x2's own dtype elsewhere (tensor cores)."""
    if launch_runtime(x2).target == "cpu" and x2.dtype != np.float32:
        return cast(x2, np.float32)
    return x2


def _slab_size(rows: int, length: int, target: str) -> int:
    """Rows of `length` elements a slab holds: about SLAB_ELEMENTS, a multiple of 64, at most `rows`."""
    per_slab = SLAB_ELEMENTS.get(target, SLAB_ELEMENTS["cuda"]) // max(1, length)
    return min(rows, max(64, per_slab // 64 * 64))


LARGE = {False: {"slab": slab, "tiled": tiled}, True: {"slab": slab_t, "tiled": partial(tiled, transpose=True)}}
"""The candidates for more than GEMV_MAX_M rows (the forward) and for the transposed product: dense products
on slabs of the dequantized weight (first: the default where timing does not pay) and the tiled kernels."""
TUNE_MIN_WORK = 1 << 22
"""m * n * k below which `large_tuner` takes the default without timing."""

_tuners: dict = {}


def large_tuner(runtime, transpose: bool) -> Autotuner:
    """The `Autotuner` of `runtime` over `LARGE[transpose]`, per shape class (m, n, k anchored), code, scale
    blocks and dtype; decisions persist in the device's cache (`[autotune] cache_dir`).

    Example:
        >>> large_tuner(cpu_runtime(), False).choose(x2, w)
        'slab'
    """
    key = (id(runtime), transpose)
    found = _tuners.get(key)
    if found is not None and found[0] is runtime:
        return found[1]
    timer, sync, aside = None, runtime.synchronize, nullcontext
    if runtime.target == "cuda":
        from .matmul_tc import gpu_timer
        timer, aside = gpu_timer(runtime), runtime.unrecorded
    cpu = runtime.target == "cpu"
    name = "cpu" if cpu else re.sub(r"[^A-Za-z0-9._-]+", "_", f"{runtime.target}-{runtime.adapter_name}")
    tiers = {"tiled": "extensive"} if cpu else None  # 10-22x slower than the slabs there
    tuner = Autotuner("quant_matmul_t" if transpose else "quant_matmul", LARGE[transpose], _large_key,
                      cache=device_cache(name), tiers=tiers, sync=sync, timer=timer, aside=aside,
                      worth=lambda x2, w: x2.shape[0] * w.n * w.k >= TUNE_MIN_WORK)
    _tuners[key] = (runtime, tuner)
    return tuner


def _large_key(x2, w: Weight) -> tuple:
    return (anchor(x2.shape[0]), anchor(w.n), anchor(w.k), w.bits, w.kind, w.affine, w.ue8m0, w.bpb and anchor(w.bpb),
            str(x2.dtype), str(w.scales.dtype))


def _int_launch(a, b, bsums, tile: tuple, span: int, lanes: int, depth: int, offset: bool):
    """One `int_matmul_kernel` launch: a (m, k) @ b (n, k).T in tiles of at most `tile`."""
    (m, k), n = a.shape, b.shape[0]
    R, C = _floor2(min(tile[0], m)), _floor2(min(tile[1], n))
    out = empty((m, n), np.int32, a)
    int_matmul_kernel.launch(cube.CubeCount(-(-m // R), -(-n // C)), cube.CubeDim(span), a, b, bsums, out, m, n, k,
                             R=R, C=C, span=span, lanes=lanes, depth=depth, offset=offset)
    return out


def zeros_like_out(shape: tuple, x):
    """A zero result of `shape` beside x (an empty product)."""
    return zeros(shape, x.dtype, x)


def int_matmul(a, b):
    """a (..., k) int8 @ b (n, k).T int8 -> (..., n) int32, exact (wrapping past 2^31 as int32 does).

    Example:
        >>> int_matmul(np.full((1, 3), -128, np.int8), np.full((2, 3), -128, np.int8))
        array([[49152, 49152]], dtype=int32)
    """
    lead = tuple(a.shape[:-1])
    k, n = a.shape[-1], b.shape[0]
    m = int(np.prod(lead, dtype=np.int64))
    if m == 0 or n == 0 or k == 0:
        return zeros(lead + (n,), np.int32, a, b)
    a2, b2 = contiguous(a).reshape(m, k), contiguous(b)
    runtime = launch_runtime(a2, b2)
    if runtime.target != "cpu":
        lanes = PLANE_WIDTH.get(runtime.target, 1)
        span = lanes if lanes > 1 else INT_SPAN
        out = _int_launch(a2, b2, zeros((1,), np.int32, a2), (INT_TILE, INT_TILE), span, lanes, INT_DEPTH,
                          False)
    else:  # u8 x i8 dot products: b's row sums first (a row of -127, offset to 1), then the product
        sums = _int_launch(np.full((1, k), -127, np.int8), b2, np.zeros(n, np.int32), INT_CPU_TILE, 1, 1,
                           1, True)
        out = _int_launch(a2, b2, sums.reshape(n), INT_CPU_TILE, 1, 1, 1, True)
    return out.reshape(lead + (n,))

