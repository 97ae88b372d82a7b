//! Test helpers: strided operands with poisoned gaps, a plain f64 reference, one-case checker.

use super::super::{
    act, gemm_with_path, BSrc, Epilogue, GemmPath, Half, MatRef, Out16, PackedB, Residual, Runner,
};
use crate::cpu::gemm::layout::PackKind;
use crate::cpu::gemm::peak::BF16_KIND;
use crate::desc::Activation;
use crate::WithDType;
use half::{bf16, f16};

/// Small deterministic generator (xorshift64*).
pub(crate) struct Rng(u64);
impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// Uniform in [-1, 1).
    pub(crate) fn next(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
        (x as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// Memory layouts a test operand can take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lay {
    /// Dense row-major.
    Row,
    /// Dense column-major (a transposed operand).
    Col,
    /// Row-major-ish with gaps: row stride `2 * cols + 5`, column stride 2, offset 7.
    Strided,
    /// Column-major-ish with gaps: row stride 2, column stride `2 * rows + 3`, offset 3.
    ColStrided,
}

pub(crate) const LAYS: [Lay; 4] = [Lay::Row, Lay::Col, Lay::Strided, Lay::ColStrided];

/// An operand: its logical values (as f64, exactly representable in `T`) and strided storage
/// whose unaddressed gaps hold NaN.
pub(crate) struct Owned<T> {
    pub vals: Vec<f64>,
    pub data: Vec<T>,
    pub offset: usize,
    pub rows: usize,
    pub cols: usize,
    pub rs: usize,
    pub cs: usize,
}

impl<T: WithDType> Owned<T> {
    pub(crate) fn random(rows: usize, cols: usize, lay: Lay, rng: &mut Rng) -> Self {
        let (offset, rs, cs) = match lay {
            Lay::Row => (0, cols, 1),
            Lay::Col => (0, 1, rows),
            Lay::Strided => (7, 2 * cols + 5, 2),
            Lay::ColStrided => (3, 2, 2 * rows + 3),
        };
        let len = if rows == 0 || cols == 0 {
            offset
        } else {
            offset + (rows - 1) * rs + (cols - 1) * cs + 1
        };
        let mut data = vec![T::from_f64(f64::NAN); len + 2];
        let mut vals = Vec::with_capacity(rows * cols);
        for r in 0..rows {
            for c in 0..cols {
                let x = T::from_f64(rng.next() as f64);
                vals.push(x.to_f64());
                data[offset + r * rs + c * cs] = x;
            }
        }
        Owned {
            vals,
            data,
            offset,
            rows,
            cols,
            rs,
            cs,
        }
    }

    pub(crate) fn view(&self) -> MatRef<'_, T> {
        MatRef::new(
            &self.data,
            self.offset,
            self.rows,
            self.cols,
            self.rs,
            self.cs,
        )
    }

    pub(crate) fn at(&self, r: usize, c: usize) -> f64 {
        self.vals[r * self.cols + c]
    }
}

/// Which epilogue a case uses.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Ep {
    Plain,
    AlphaBeta,
    Bias,
    Act(Activation),
    /// Residual (column-major when true).
    Residual(bool),
    /// Everything at once with this activation.
    All(Activation),
}

/// One GEMM case.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Case {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub la: Lay,
    pub lb: Lay,
    pub ep: Ep,
    pub prepacked: bool,
    pub glu: bool,
}

impl Case {
    pub(crate) fn plain(m: usize, k: usize, n: usize) -> Self {
        Case {
            m,
            k,
            n,
            la: Lay::Row,
            lb: Lay::Row,
            ep: Ep::Plain,
            prepacked: false,
            glu: false,
        }
    }
}

/// Runs `cs` on `path` and checks every output against the f64 reference; returns C.
pub(crate) fn run_case<T: Runner + WithDType>(path: GemmPath, cs: Case, seed: u64) -> Vec<f32> {
    let Case { m, k, n, .. } = cs;
    let mut rng = Rng::new(seed);
    let ntot = if cs.glu { 2 * n } else { n };
    let a = Owned::<T>::random(m, k, cs.la, &mut rng);
    let b = Owned::<T>::random(k, ntot, cs.lb, &mut rng);
    let (mut alpha, mut beta, mut use_bias, mut act, mut res) =
        (1.0f32, 0.0f32, false, Activation::None, None);
    match cs.ep {
        Ep::Plain => {}
        Ep::AlphaBeta => (alpha, beta) = (-1.5, 0.75),
        Ep::Bias => use_bias = true,
        Ep::Act(a) => act = a,
        Ep::Residual(t) => res = Some(t),
        Ep::All(a) => {
            (alpha, beta, use_bias, act, res) =
                (0.5, if cs.glu { 0.0 } else { -2.0 }, true, a, Some(false))
        }
    }
    let bias: Vec<f32> = (0..ntot).map(|_| rng.next()).collect();
    let residual =
        res.map(|t| Owned::<f32>::random(m, n, if t { Lay::Col } else { Lay::Row }, &mut rng));
    let ldc = n + 3;
    let cin: Vec<f32> = (0..m * ldc)
        .map(|i| {
            if beta != 0.0 || i % ldc >= n {
                rng.next()
            } else {
                f32::NAN
            }
        })
        .collect();
    let ep = Epilogue {
        alpha,
        beta,
        bias: use_bias.then_some(&bias[..]),
        activation: act,
        residual: residual.as_ref().map(|r| r.view()),
        out16: None,
        residual16: None,
    };
    let mut c = cin.clone();
    let packed_b = cs.prepacked.then(|| {
        if cs.glu {
            PackedB::new_geglu(b.view()).expect("pack")
        } else {
            PackedB::new(b.view()).expect("pack")
        }
    });
    let bsrc = match &packed_b {
        Some(p) => BSrc::Packed(p),
        None => BSrc::Raw(b.view(), cs.glu),
    };
    gemm_with_path(path, a.view(), bsrc, &mut c, ldc, &ep).expect("gemm");

    let tol_rel = 1e-5 * (k.max(1) as f64).sqrt() + 1e-6;
    for i in 0..m {
        for j in 0..ldc {
            let got = c[i * ldc + j];
            if j >= n {
                assert_eq!(
                    got.to_bits(),
                    cin[i * ldc + j].to_bits(),
                    "{cs:?} {path:?}: padding ({i},{j}) written"
                );
                continue;
            }
            let dot = |col: usize| {
                let (mut s, mut sa) = (0f64, 0f64);
                for p in 0..k {
                    s += a.at(i, p) * b.at(p, col);
                    sa += (a.at(i, p) * b.at(p, col)).abs();
                }
                (s, sa)
            };
            let bias_of = |col: usize| if use_bias { bias[col] as f64 } else { 0.0 };
            let al = alpha as f64;
            let (mut want, mut scale) = if cs.glu {
                let ((sh, ah), (sg, ag)) = (dot(j), dot(n + j));
                let h = al * sh + bias_of(j);
                let g = al * sg + bias_of(n + j);
                let (sch, scg) = (
                    al.abs() * ah + bias_of(j).abs(),
                    al.abs() * ag + bias_of(n + j).abs(),
                );
                (h * act::apply(act, g), sch * (scg + 1.0) + scg * h.abs())
            } else {
                let (s, sa) = dot(j);
                let ci = if beta != 0.0 {
                    beta as f64 * cin[i * ldc + j] as f64
                } else {
                    0.0
                };
                let x = al * s + ci + bias_of(j);
                (
                    act::apply(act, x),
                    al.abs() * sa + ci.abs() + bias_of(j).abs(),
                )
            };
            if let Some(r) = &residual {
                want += r.at(i, j);
                scale += r.at(i, j).abs();
            }
            let tol = tol_rel * scale + 1e-30;
            let err = (got as f64 - want).abs();
            assert!(err <= tol, "{cs:?} {path:?} dtype {:?}: C[{i},{j}] = {got}, want {want} (err {err:e} > tol {tol:e})", T::DTYPE);
        }
    }
    // A 16-bit residual read in place adds exactly its f32 widening.
    if let Some(t) = res {
        let lay = if t { Lay::ColStrided } else { Lay::Row };
        let mut rng16 = Rng::new(seed ^ 0x5eed);
        let rb = Owned::<bf16>::random(m, n, lay, &mut rng16);
        let rh = Owned::<f16>::random(m, n, lay, &mut rng16);
        for (narrow, wide) in [
            (Residual::bf16(rb.view()), widened(&rb)),
            (Residual::f16(rh.view()), widened(&rh)),
        ] {
            let run = |ep: &Epilogue| {
                let mut c = cin.clone();
                let bsrc = match &packed_b {
                    Some(p) => BSrc::Packed(p),
                    None => BSrc::Raw(b.view(), cs.glu),
                };
                gemm_with_path(path, a.view(), bsrc, &mut c, ldc, ep).expect("gemm");
                c
            };
            let want = run(&ep.with_residual(wide.view()));
            let got = run(&ep.with_any_residual(narrow));
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(
                    g.to_bits(),
                    w.to_bits(),
                    "{cs:?} {path:?} 16-bit residual, C[{i}]"
                );
            }
        }
    }
    // The same product rounded to 16 bits by the store: bit for bit the rounding of that C,
    // nothing written past N, whatever C then holds (partial sums of earlier K blocks).
    let half = if T::DTYPE == crate::DType::F16 {
        Half::F16
    } else {
        Half::Bf16
    };
    let sentinel = 0x7e5au16;
    let mut bits = vec![sentinel; m * ldc];
    let mut c16 = cin.clone();
    {
        let out = match half {
            Half::Bf16 => Out16::bf16(bytemuck::cast_slice_mut(&mut bits), ldc),
            Half::F16 => Out16::f16(bytemuck::cast_slice_mut(&mut bits), ldc),
        };
        let bsrc = match &packed_b {
            Some(p) => BSrc::Packed(p),
            None => BSrc::Raw(b.view(), cs.glu),
        };
        gemm_with_path(path, a.view(), bsrc, &mut c16, ldc, &ep.with_out16(out)).expect("gemm");
    }
    for (i, (&got, &want)) in bits.iter().zip(&c).enumerate() {
        let want = if i % ldc >= n {
            sentinel
        } else if half == Half::F16 {
            f16::from_f32(want).to_bits()
        } else {
            crate::cpu::simd::bf16_from_f32_rne(want).to_bits()
        };
        assert_eq!(
            got, want,
            "{cs:?} {path:?} {half:?} output {i} (row stride {ldc})"
        );
    }
    c
}

/// `o` with every stored value (gaps included) widened to f32.
fn widened<T: WithDType>(o: &Owned<T>) -> Owned<f32> {
    Owned {
        vals: o.vals.clone(),
        data: o.data.iter().map(|x| x.to_f64() as f32).collect(),
        offset: o.offset,
        rows: o.rows,
        cols: o.cols,
        rs: o.rs,
        cs: o.cs,
    }
}

/// Runs `cs` on both paths (each checked against the reference); bf16 additionally under both
/// packed layouts (widened f32 and `vdpbf16ps` pairs).
pub(crate) fn both_paths<T: Runner + WithDType>(cs: Case, seed: u64) {
    let kinds: &[Option<PackKind>] = if T::DTYPE == crate::DType::BF16 {
        &[Some(PackKind::F32), Some(PackKind::Bf16)]
    } else {
        &[None]
    };
    for &kind in kinds {
        with_bf16_kind(kind, || {
            run_case::<T>(GemmPath::Avx512, cs, seed);
            run_case::<T>(GemmPath::Avx2, cs, seed);
            run_case::<T>(GemmPath::Fallback, cs, seed);
        });
    }
}

/// Runs `f` with this thread's bf16 layout forced to `kind`.
pub(crate) fn with_bf16_kind<R>(kind: Option<PackKind>, f: impl FnOnce() -> R) -> R {
    BF16_KIND.with(|c| c.set(kind));
    let r = f();
    BF16_KIND.with(|c| c.set(None));
    r
}

/// The kernels' epilogue context of a plain product (`C = A @ B`, `n` columns).
pub(crate) fn plain_ep<'a>(n: usize) -> crate::cpu::gemm::driver::EpCtx<'a> {
    crate::cpu::gemm::driver::EpCtx {
        alpha: 1.0,
        beta: 0.0,
        bias: None,
        act: crate::desc::Activation::None,
        residual: None,
        glu: false,
        n,
        out16: None,
    }
}
