//! A seeded generator whose draws are bit for bit those of PyTorch's CPU generator
//! (`torch.Generator("cpu").manual_seed(seed)`), so a pipeline given a seed starts from the
//! latents diffusers draws with `randn_tensor(shape, generator=g, dtype=torch.float32)`, and a
//! stochastic scheduler draws the same noise at every step.
//!
//! What torch does, and so what this does:
//! - The engine is MT19937 seeded with the low 32 bits of the seed (torch's `at::mt19937`);
//!   a uniform f32 is `(u32 & 0xFF_FFFF) * 2^-24`, a uniform f64 takes two words (high first)
//!   and keeps 53 bits.
//! - `randn` of 16 or more elements (`normal_fill`) draws one uniform f32 per element, turns each
//!   block of 16 into normals with Box–Muller (`u1 = 1 - x[j]`, `u2 = x[j + 8]`, cosine to `j`,
//!   sine to `j + 8`), and when the count is not a multiple of 16 draws 16 fresh uniforms for the
//!   last 16 elements and transforms them again. It neither reads nor clears the cached normal.
//! - `randn` of fewer than 16 elements draws each element in f64 with the scalar Box–Muller
//!   (`normal_distribution<double>`) and rounds it to f32: each pair's cosine half is returned
//!   and its sine half cached for the next such element, in this call or a later one;
//!   [`TorchGenerator::manual_seed`] clears the cache.
//! - `rand` draws one uniform f32 per element.
//!
//! The 16-wide Box–Muller is the one place torch's result depends on the CPU ([`NormalKernel`]):
//! x86 CPUs with AVX2 and FMA (AVX-512 ones included: torch does not dispatch this kernel to
//! AVX-512) run Cephes' float polynomials for log, sin and cos, compiled with fused
//! multiply-adds; other CPUs call the C library's `logf`, `sinf` and `cosf`. Both are here; the
//! AVX2 one is reproduced operation by operation in portable code, so its draws are the same on
//! every CPU this crate runs on (checked with baseline x86-64, x86-64-v3 and AVX-512 builds).
//! Matched bit for bit: torch 2.15 Linux x86_64 wheels (GCC builds) under `ATEN_CPU_CAPABILITY`
//! `avx2` and `avx512` (kernel `Avx2`) and `default` (kernel `Libm`, with glibc). Not checked:
//! torch builds from other compilers (Windows, macOS), which may fuse the AVX2 kernel's
//! multiply-adds elsewhere; not reproduced: PowerPC's VSX kernel.
//!
//! Invariant: a generator's draws depend only on its seed, its kernel and the calls made on it.

use crate::{Device, Error, Result, Tensor};

const STATE_N: usize = 624;
const STATE_M: usize = 397;
const MATRIX_A: u32 = 0x9908_b0df;

/// MT19937 exactly as torch keeps it (`left` counts down to a refill of the whole state).
#[derive(Clone)]
struct Mt19937 {
    state: [u32; STATE_N],
    left: usize,
    next: usize,
}

impl Mt19937 {
    fn new(seed: u64) -> Mt19937 {
        let mut state = [0u32; STATE_N];
        state[0] = seed as u32;
        for j in 1..STATE_N {
            let prev = state[j - 1];
            state[j] = 1_812_433_253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(j as u32);
        }
        Mt19937 {
            state,
            left: 1,
            next: 0,
        }
    }

    fn twist(u: u32, v: u32) -> u32 {
        let mixed = (u & 0x8000_0000) | (v & 0x7fff_ffff);
        (mixed >> 1) ^ if v & 1 == 1 { MATRIX_A } else { 0 }
    }

    fn refill(&mut self) {
        let s = &mut self.state;
        for i in 0..STATE_N {
            s[i] = s[(i + STATE_M) % STATE_N] ^ Self::twist(s[i], s[(i + 1) % STATE_N]);
        }
        self.left = STATE_N;
        self.next = 0;
    }

    fn next_u32(&mut self) -> u32 {
        self.left -= 1;
        if self.left == 0 {
            self.refill();
        }
        let mut y = self.state[self.next];
        self.next += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }
}

/// The Box–Muller kernel torch applies to blocks of 16 uniforms; it decides the last bits of
/// `randn` draws of 16 or more elements (smaller draws are the same under both).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormalKernel {
    /// torch's AVX2 kernel, run on x86 CPUs with AVX2 and FMA (AVX-512 ones included): Cephes'
    /// float log and sincos with the fused multiply-adds of torch's Linux builds.
    Avx2,
    /// torch's portable kernel (CPUs without AVX2, ARM): the C library's `logf`, `sinf` and
    /// `cosf`, which this calls too, so it matches torch on the same platform.
    Libm,
}

impl NormalKernel {
    /// The kernel torch runs on this machine: `Libm` when the environment sets
    /// `ATEN_CPU_CAPABILITY=default` (torch reads it too), else `Avx2` on x86 CPUs with AVX2
    /// and FMA, else `Libm`.
    pub fn native() -> NormalKernel {
        let torch_default = crate::config::with(|c| {
            c.torch_cpu_capability
                .as_deref()
                .is_some_and(|v| v == "default")
        });
        if torch_default {
            return NormalKernel::Libm;
        }
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            return NormalKernel::Avx2;
        }
        NormalKernel::Libm
    }
}

/// A seeded random generator drawing what `torch.Generator("cpu").manual_seed(seed)` draws.
#[derive(Clone)]
pub struct TorchGenerator {
    engine: Mt19937,
    seed: u64,
    cached_normal: Option<f64>,
    kernel: NormalKernel,
}

impl std::fmt::Debug for TorchGenerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TorchGenerator")
            .field("seed", &self.seed)
            .field("kernel", &self.kernel)
            .field("cached_normal", &self.cached_normal)
            .finish_non_exhaustive()
    }
}

impl TorchGenerator {
    /// A generator seeded like `torch.Generator("cpu").manual_seed(seed)`, with the Box–Muller
    /// kernel torch runs on this machine ([`NormalKernel::native`]).
    pub fn new(seed: u64) -> TorchGenerator {
        TorchGenerator::with_kernel(seed, NormalKernel::native())
    }

    /// A generator seeded with `seed` that applies `kernel` to draws of 16 or more normals
    /// (to reproduce torch as another CPU runs it).
    pub fn with_kernel(seed: u64, kernel: NormalKernel) -> TorchGenerator {
        TorchGenerator {
            engine: Mt19937::new(seed),
            seed,
            cached_normal: None,
            kernel,
        }
    }

    /// Reseeds in place, as `manual_seed` does: a fresh engine and no cached normal.
    pub fn manual_seed(&mut self, seed: u64) {
        *self = TorchGenerator::with_kernel(seed, self.kernel);
    }

    /// The seed last given (`initial_seed()`); only its low 32 bits seed the engine.
    pub fn initial_seed(&self) -> u64 {
        self.seed
    }

    /// The Box–Muller kernel this generator applies.
    pub fn kernel(&self) -> NormalKernel {
        self.kernel
    }

    /// The engine's next 32-bit word.
    pub fn next_u32(&mut self) -> u32 {
        self.engine.next_u32()
    }

    fn uniform_f32(&mut self) -> f32 {
        (self.next_u32() & 0x00ff_ffff) as f32 * (1.0 / (1u32 << 24) as f32)
    }

    fn uniform_f64(&mut self) -> f64 {
        let hi = u64::from(self.next_u32());
        let lo = u64::from(self.next_u32());
        (((hi << 32) | lo) & ((1u64 << 53) - 1)) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// One standard normal from the scalar path (`normal_distribution<double>`), using and
    /// refilling the cached sine half.
    fn normal_f64(&mut self) -> f64 {
        // `val * std + mean` with std 1 and mean 0, as torch applies it (it turns -0 into +0).
        if let Some(cached) = self.cached_normal.take() {
            return cached * 1.0 + 0.0;
        }
        let u1 = self.uniform_f64();
        let u2 = self.uniform_f64();
        let r = (-2.0 * (-u2).ln_1p()).sqrt();
        let theta = 2.0 * std::f64::consts::PI * u1;
        self.cached_normal = Some(r * theta.sin());
        r * theta.cos() * 1.0 + 0.0
    }

    /// Fills `out` with the standard normals `torch.randn(out.len(), generator=g,
    /// dtype=torch.float32)` draws, advancing the generator as torch does.
    pub fn fill_randn(&mut self, out: &mut [f32]) {
        let n = out.len();
        if n < 16 {
            for v in out.iter_mut() {
                *v = self.normal_f64() as f32;
            }
            return;
        }
        for v in out.iter_mut() {
            *v = self.uniform_f32();
        }
        for block in out.chunks_exact_mut(16) {
            box_muller_16(self.kernel, block);
        }
        if !n.is_multiple_of(16) {
            let last = &mut out[n - 16..];
            for v in last.iter_mut() {
                *v = self.uniform_f32();
            }
            box_muller_16(self.kernel, last);
        }
    }

    /// Fills `out` with the uniforms in [0, 1) that `torch.rand(out.len(), generator=g)` draws.
    pub fn fill_rand(&mut self, out: &mut [f32]) {
        for v in out.iter_mut() {
            *v = self.uniform_f32();
        }
    }

    /// `torch.randn(shape, generator=g, dtype=torch.float32)`: an f32 Cpu tensor of standard
    /// normals, equal bit for bit to torch's, advancing the generator as torch does.
    pub fn randn(&mut self, shape: &[usize]) -> Result<Tensor> {
        let mut values = host_buffer("TorchGenerator::randn", shape)?;
        self.fill_randn(&mut values);
        Tensor::from_vec(values, shape, Device::Cpu)
    }

    /// `torch.rand(shape, generator=g)`: an f32 Cpu tensor of uniforms in [0, 1).
    pub fn rand(&mut self, shape: &[usize]) -> Result<Tensor> {
        let mut values = host_buffer("TorchGenerator::rand", shape)?;
        self.fill_rand(&mut values);
        Tensor::from_vec(values, shape, Device::Cpu)
    }
}

/// A zeroed buffer for `shape`, or an error when the element count overflows or cannot be
/// allocated.
fn host_buffer(op: &'static str, shape: &[usize]) -> Result<Vec<f32>> {
    let n = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|n| {
            n.checked_mul(4)
                .is_some_and(|bytes| bytes <= isize::MAX as usize)
        })
        .ok_or_else(|| Error::shape(op, "a shape of at most isize::MAX bytes of f32", shape))?;
    let mut values = Vec::new();
    values
        .try_reserve_exact(n)
        .map_err(|e| Error::invalid(op, format!("cannot allocate {n} f32 for {shape:?}: {e}")))?;
    values.resize(n, 0.0);
    Ok(values)
}

/// Box–Muller on 16 uniforms in place: pair `j` (0..8) takes `u1 = 1 - x[j]`, `u2 = x[j + 8]`
/// and writes `r cos θ` to `j` and `r sin θ` to `j + 8`.
fn box_muller_16(kernel: NormalKernel, x: &mut [f32]) {
    for j in 0..8 {
        let (u, u2) = (x[j], x[j + 8]);
        let (c, s) = match kernel {
            NormalKernel::Avx2 => avx2::pair(u, u2),
            NormalKernel::Libm => libm_pair(u, u2),
        };
        // torch ends with fma(n, std, mean) for std 1 and mean 0: n + 0 (it turns -0 into +0).
        x[j] = c + 0.0;
        x[j + 8] = s + 0.0;
    }
}

/// torch's portable kernel: `logf`, the angle rounded from f64 to f32, `sinf` and `cosf`.
fn libm_pair(u: f32, u2: f32) -> (f32, f32) {
    let radius = (-2.0f32 * (1.0f32 - u).ln()).sqrt();
    let theta = (f64::from(u2) * (2.0 * std::f64::consts::PI)) as f32;
    (radius * theta.cos(), radius * theta.sin())
}

/// torch's AVX2 kernel (`log256_ps`, `sincos256_ps` of its `avx_mathfun.h`) one lane at a time,
/// with the multiply-adds fused exactly where the compiled kernel fuses them.
mod avx2 {
    const MIN_NORM_POS: f32 = f32::MIN_POSITIVE;
    const SQRTHF: f32 = f32::from_bits(0x3f35_04f3); // 0.707106781186547524
    /// Cephes' logf polynomial, highest power first (7.0376836292e-2 ... 3.3333331174e-1).
    const LOG_P: [f32; 9] = [
        f32::from_bits(0x3d90_21bb),
        f32::from_bits(0xbdeb_d1b8),
        f32::from_bits(0x3def_251a),
        f32::from_bits(0xbdfe_5d4f),
        f32::from_bits(0x3e11_e9bf),
        f32::from_bits(0xbe2a_ae50),
        f32::from_bits(0x3e4c_ceac),
        f32::from_bits(0xbe7f_fffc),
        f32::from_bits(0x3eaa_aaaa),
    ];
    const LOG_Q1: f32 = f32::from_bits(0xb95e_8083); // -2.12194440e-4
    const LOG_Q2: f32 = f32::from_bits(0x3f31_8000); // 0.693359375
    const FOPI: f32 = f32::from_bits(0x3fa2_f983); // 4 / π
    const DP1: f32 = f32::from_bits(0xbf49_0000); // -0.78515625
    const DP2: f32 = f32::from_bits(0xb97d_a000); // -2.4187564849853515625e-4
    const DP3: f32 = f32::from_bits(0xb322_2169); // -3.77489497744594108e-8
    /// Cephes' sinf polynomial (-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1).
    const SIN_P: [f32; 3] = [
        f32::from_bits(0xb94c_a1f9),
        f32::from_bits(0x3c08_839e),
        f32::from_bits(0xbe2a_aaa3),
    ];
    /// Cephes' cosf polynomial (2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2).
    const COS_P: [f32; 3] = [
        f32::from_bits(0x37cc_f5ce),
        f32::from_bits(0xbab6_061a),
        f32::from_bits(0x3d2a_aaa5),
    ];
    const TWO_PI: f32 = f32::from_bits(0x40c9_0fdb); // 2π
    const SIGN: u32 = 0x8000_0000;

    fn fma(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }

    /// Selects `v` where the lane mask is set, +0 where it is not (`and` with an all-ones mask).
    fn keep(mask: bool, v: f32) -> f32 {
        if mask {
            v
        } else {
            0.0
        }
    }

    /// `log256_ps`: natural log, NaN for x <= 0.
    pub(super) fn log(x: f32) -> f32 {
        let invalid = x <= 0.0;
        let x = if x > MIN_NORM_POS { x } else { MIN_NORM_POS };
        let bits = x.to_bits();
        let mut e = ((bits >> 23) as i32 - 0x7f) as f32 + 1.0;
        let mut x = f32::from_bits((bits & !0x7f80_0000) | 0.5f32.to_bits());
        let below = x < SQRTHF;
        let tmp = keep(below, x);
        x -= 1.0;
        e -= keep(below, 1.0);
        x += tmp;
        let z = x * x;
        let mut y = LOG_P[0];
        for &p in &LOG_P[1..] {
            y = fma(y, x, p);
        }
        y = fma(y * x, z, e * LOG_Q1);
        y = fma(-z, 0.5, y);
        x += y;
        x = fma(e, LOG_Q2, x);
        if invalid {
            f32::from_bits(u32::MAX)
        } else {
            x
        }
    }

    /// `sincos256_ps`: (sin, cos) after reduction by multiples of π/4.
    pub(super) fn sincos(theta: f32) -> (f32, f32) {
        let mut sign_sin = theta.to_bits() & SIGN;
        let x = f32::from_bits(theta.to_bits() & !SIGN);
        // cvttps2dq: truncation (|θ| is below 2^31 here, where `as` agrees with it).
        let j = ((x * FOPI) as i32).wrapping_add(1) & !1;
        let y = j as f32;
        sign_sin ^= ((j & 4) as u32) << 29;
        let sine_poly = j & 2 == 0;
        let sign_cos = ((!j.wrapping_sub(2) & 4) as u32) << 29;
        let mut x = fma(y, DP1, x);
        x = fma(y, DP2, x);
        x = fma(y, DP3, x);
        let z = x * x;
        let half_z = z * 0.5;
        let mut yc = fma(COS_P[0], z, COS_P[1]);
        yc = fma(yc, z, COS_P[2]);
        yc = fma(z, z * yc, -half_z) + 1.0;
        let mut ys = fma(SIN_P[0], z, SIN_P[1]);
        ys = fma(ys, z, SIN_P[2]);
        ys = fma(x, z * ys, x);
        let ysin2 = keep(sine_poly, ys);
        let ysin1 = keep(!sine_poly, yc);
        let s = ysin2 + ysin1;
        let c = (ys - ysin2) + (yc - ysin1);
        (
            f32::from_bits(s.to_bits() ^ sign_sin),
            f32::from_bits(c.to_bits() ^ sign_cos),
        )
    }

    /// One Box–Muller pair: (r cos θ, r sin θ) with r = sqrt(-2 log(1 - u)), θ = 2π u2.
    pub(super) fn pair(u: f32, u2: f32) -> (f32, f32) {
        let radius = (log(1.0 - u) * -2.0).sqrt();
        let (s, c) = sincos(TWO_PI * u2);
        (radius * c, radius * s)
    }
}
