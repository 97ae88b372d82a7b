#!/usr/bin/env python3
"""Works out where a driver's cooperative loads and stores pointed, from coop_probe's output.

`coop_probe` (examples/coop_probe.rs) prints, per XPU_COOP16_VARIANT, the full 16x16x16 f16
result and its inputs `a`, `b`. Variant 8 replaces the B tiles by identities (the result shows A as
the driver loaded it), variant 4 the A tiles (the result shows B). This script simulates
matmul_coop16.wgsl's workgroup memory (A staged [128][CA], B [32][CB], C tiles of 16x16 f32 at
coop_c[0] and coop_c[256]) with every cooperative access shifted by s_a, s_b, s_c elements, and
prints the shifts that reproduce both variants exactly. A shift of A along K and one of B along
its rows trade off, so a family of fits comes out; the one with equal byte shifts is the simple
explanation (on the H100, 2026-11-23: A, B and C all at -4 bytes).

Usage: python3 benches/gpu/coop_fit.py probe.txt
"""
import re
import sys

import numpy as np

CA, CB, PAD = 40, 136, 1000


def section(text, variant):
    sec = text.split(f"XPU_COOP16_VARIANT={variant}\n")[1]
    got = re.search(r"f16 16x16x16 got \[(.*?)\]", sec).group(1)
    a = re.search(r"\na \[(.*?)\]", sec).group(1)
    b = re.search(r"\nb \[(.*?)\]", sec).group(1)
    as_mat = lambda s: np.array([float(x) for x in s.split(",")]).reshape(16, 16)
    return as_mat(got), as_mat(a), as_mat(b)


def staged_a(a, ident):
    m = np.zeros(5120 + 2 * PAD)
    for r in range(128):
        for k in range(32):
            if ident:
                v = 1.0 if (r % 16 == k and k < 16) else 0.0
            else:
                v = a[r, k] if (r < 16 and k < 16) else 0.0
            m[PAD + r * CA + k] = v
    return m


def staged_b(b, ident):
    m = np.zeros(4352 + 2 * PAD)
    for k in range(32):
        for j in range(128):
            if ident:
                v = 1.0 if (j % 16 == k and k < 16) else 0.0
            else:
                v = b[k, j] if (k < 16 and j < 16) else 0.0
            m[PAD + k * CB + j] = v
    return m


def main():
    text = open(sys.argv[1]).read()
    g8, a, b = section(text, 8)
    g4, _, _ = section(text, 4)
    shifts_b = np.arange(-600, 601)
    rows, cols = np.arange(32)[:, None], np.arange(16)[None, :]

    def b_tiles(mem, col0):
        return mem[PAD + shifts_b[:, None, None] + rows[None] * CB + cols[None] + col0]

    def a_tile(mem, s):
        return mem[PAD + s + np.arange(16)[:, None] * CA + np.arange(32)[None, :]]

    def read_back(c00, c01, s):
        n = c00.shape[0]
        mem = np.zeros((n, 712))
        mem[:, 100 + s : 356 + s] = c00.reshape(n, 256)
        mem[:, 356 + s : 612 + s] = c01.reshape(n, 256)
        return mem[:, 100:356].reshape(n, 16, 16)

    mem_a = {True: staged_a(a, True), False: staged_a(a, False)}
    mem_b = {True: staged_b(b, True), False: staged_b(b, False)}
    tiles = {(i, c): b_tiles(mem_b[i], c) for i in (True, False) for c in (0, 16)}
    fits = []
    for s_a in range(-60, 61):
        a8, a4 = a_tile(mem_a[False], s_a), a_tile(mem_a[True], s_a)
        c8 = [np.einsum("rk,nkc->nrc", a8, tiles[(True, c)]) for c in (0, 16)]
        c4 = [np.einsum("rk,nkc->nrc", a4, tiles[(False, c)]) for c in (0, 16)]
        for s_c in range(-40, 41):
            err = np.abs(read_back(*c8, s_c) - g8).max(axis=(1, 2))
            err += np.abs(read_back(*c4, s_c) - g4).max(axis=(1, 2))
            k = int(err.argmin())
            fits.append((float(err[k]), s_a, int(shifts_b[k]), s_c))
    fits.sort()
    for err, s_a, s_b, s_c in fits[:6]:
        print(f"error {err:.3g}: A {s_a:+d} f16 ({2 * s_a:+d} B), B {s_b:+d} f16 ({2 * s_b:+d} B),"
              f" C {s_c:+d} f32 ({4 * s_c:+d} B)")


if __name__ == "__main__":
    main()
