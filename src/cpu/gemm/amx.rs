//! Intel AMX bf16 microkernel: `tdpbf16ps` on 2×2 accumulator tiles (a 32×32 f32 C block),
//! written with stable inline `asm!` (the AMX intrinsics in `core::arch` are unstable).
//!
//! Invariants:
//! - AMX is used only after [`amx_status`] succeeded: CPUID leaf 7 reports AMX-TILE (EDX bit 24)
//!   and AMX-BF16 (EDX bit 22), the OS enabled XTILECFG/XTILEDATA in XCR0 (bits 17/18), Linux
//!   granted this process the tile data state (`arch_prctl(ARCH_REQ_XCOMP_PERM,
//!   XFEATURE_XTILEDATA)`, checked back with `ARCH_GET_XCOMP_PERM`), and AVX-512F is present for
//!   the shared epilogue. The checks run once per process; any failure keeps AMX off for good
//!   and its reason is reported by [`amx_status`].
//! - Tile registers: tmm0..tmm3 accumulate C rows 0..16/16..32 × columns 0..16/16..32, tmm4/tmm5
//!   hold the two A tiles (16 rows × 32 bf16), tmm6/tmm7 the two B tiles (16 k-pairs × 16
//!   columns × 2 bf16). Every tile is 16 rows × 64 bytes, so one configuration serves all.
//! - The driver calls [`Kernel::begin`] (`ldtilecfg`) on a worker thread before a task's tiles
//!   and [`Kernel::end`] (`tilerelease`) after them; nothing between the two calls touches tiles,
//!   and each [`Kernel::tile`] keeps all tile data inside one `asm!` block.
//! - Packed operands (see [`super::amx_pack`]): A as `[kcu / 16][32 rows][16 pairs]`, B in the
//!   VNNI pair layout of [`super::layout`] with K blocks of whole 16-pair steps. Accumulators
//!   leave the tiles through `tilestored` into a 32×32 f32 block that goes through the same
//!   AVX-512 epilogue as the other kernels, so fused epilogues and edges behave identically.

use super::amx_pack::pack_a_amx;
use super::avx512::has_avx512;
use super::avx512_ep::store;
use super::driver::{EpCtx, Kernel, Tile};
use super::MatRef;
use crate::desc::Activation;
use half::bf16;
use std::arch::asm;
use std::arch::x86_64::{__cpuid, __cpuid_count, __m512};
use std::sync::OnceLock;

/// Rows per AMX micro-panel (two A tiles).
pub(crate) const MR: usize = 32;
/// K pairs consumed per step (rows of a B tile).
pub(crate) const STEP: usize = 16;

/// Linux `arch_prctl` codes and the tile data state component (other systems have no AMX
/// permission call here, so AMX stays off there).
#[cfg(target_os = "linux")]
const SYS_ARCH_PRCTL: i64 = 158;
#[cfg(target_os = "linux")]
const ARCH_GET_XCOMP_PERM: u64 = 0x1022;
#[cfg(target_os = "linux")]
const ARCH_REQ_XCOMP_PERM: u64 = 0x1023;
#[cfg(target_os = "linux")]
const XFEATURE_XTILEDATA: u64 = 18;

static STATE: OnceLock<Result<(), String>> = OnceLock::new();

/// Whether the AMX kernel can run in this process (`Err` says why not). The first call does the
/// CPU/OS checks and asks Linux for the tile state; later calls return the cached outcome.
pub(crate) fn amx_status() -> Result<(), &'static str> {
    match STATE.get_or_init(init) {
        Ok(()) => Ok(()),
        Err(e) => Err(e.as_str()),
    }
}

fn xcr0() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: only called after CPUID reported OSXSAVE, so `xgetbv` with ECX = 0 is valid.
    unsafe {
        asm!("xgetbv", in("ecx") 0u32, out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags));
    }
    (u64::from(hi) << 32) | u64::from(lo)
}

/// `arch_prctl(code, arg)`; returns the raw result (negative errno on failure).
#[cfg(target_os = "linux")]
fn arch_prctl(code: u64, arg: u64) -> i64 {
    let ret: i64;
    // SAFETY: arch_prctl with these codes only reads/writes the process's xstate permissions
    // (and, for GET, the u64 `arg` points to, which the caller provides).
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL => ret,
            in("rdi") code,
            in("rsi") arg,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

fn init() -> Result<(), String> {
    if !has_avx512() {
        return Err("no AVX-512F (the AMX epilogue needs it)".into());
    }
    let (max_leaf, leaf1) = (__cpuid(0).eax, __cpuid(1));
    if leaf1.ecx & (1 << 27) == 0 {
        return Err("OSXSAVE is off (the OS does not manage extended state)".into());
    }
    if max_leaf < 7 {
        return Err("CPUID has no leaf 7".into());
    }
    let l7 = __cpuid_count(7, 0);
    if l7.edx & (1 << 24) == 0 || l7.edx & (1 << 22) == 0 {
        return Err("CPU lacks AMX-TILE/AMX-BF16 (CPUID.7.0:EDX bits 24/22)".into());
    }
    if xcr0() & (3 << 17) != 3 << 17 {
        return Err("the OS has not enabled the AMX tile state (XCR0 bits 17/18)".into());
    }
    request_permission()
}

#[cfg(target_os = "linux")]
fn request_permission() -> Result<(), String> {
    let r = arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
    if r != 0 {
        return Err(format!(
            "Linux refused the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM: errno {})",
            -r
        ));
    }
    let mut mask = 0u64;
    let r = arch_prctl(ARCH_GET_XCOMP_PERM, &mut mask as *mut u64 as u64);
    if r != 0 || mask & (1 << XFEATURE_XTILEDATA) == 0 {
        return Err(format!(
            "AMX tile state not granted (ARCH_GET_XCOMP_PERM: result {r}, mask {mask:#x})"
        ));
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn request_permission() -> Result<(), String> {
    Err("AMX permission is only requested on Linux".into())
}

/// The 64-byte tile configuration: palette 1, eight tiles of 16 rows × 64 bytes.
#[repr(C, align(64))]
struct TileCfg([u8; 64]);

const CFG: TileCfg = {
    let mut c = [0u8; 64];
    c[0] = 1;
    let mut t = 0;
    while t < 8 {
        c[16 + 2 * t] = 64; // colsb, little-endian u16
        c[48 + t] = 16; // rows
        t += 1;
    }
    TileCfg(c)
};

/// Loads the tile configuration on this thread.
///
/// # Safety
/// [`amx_status`] must have returned `Ok`.
pub(crate) unsafe fn load_config() {
    asm!("ldtilecfg [{0}]", in(reg) CFG.0.as_ptr(), options(nostack, readonly, preserves_flags));
}

/// Releases this thread's tile state.
///
/// # Safety
/// [`amx_status`] must have returned `Ok`.
pub(crate) unsafe fn release() {
    asm!("tilerelease", options(nostack, nomem, preserves_flags));
}

/// The AMX bf16 kernel over an A view (B packed by [`super::amx_pack::pack_b_amx`]).
pub(crate) struct AmxBf16<'a> {
    a: MatRef<'a, bf16>,
}

impl<'a> AmxBf16<'a> {
    /// The kernel, if AMX is usable in this process.
    pub(crate) fn new(a: MatRef<'a, bf16>) -> Option<Self> {
        amx_status().is_ok().then_some(AmxBf16 { a })
    }
}

impl Kernel for AmxBf16<'_> {
    type PA = u32;
    type PB = u32;
    const MR: usize = MR;
    const L3_BOUND_B: bool = true;
    fn begin(&self) {
        // SAFETY: the kernel exists only when amx_status() is Ok.
        unsafe { load_config() }
    }
    fn end(&self) {
        // SAFETY: as above.
        unsafe { release() }
    }
    fn pack_a(&self, row0: usize, rows: usize, u0: usize, u1: usize, dst: &mut [u32]) {
        pack_a_amx(&self.a, row0, rows, u0, u1, dst);
    }
    unsafe fn tile(&self, kcu: usize, a: *const u32, b: *const u32, t: &Tile, ep: &EpCtx) {
        tile_amx(kcu, a, b, t, ep);
    }
}

/// Eight `prefetcht0` of the next step's B lines (2048 bytes ahead), starting `$o` bytes into
/// the step: B streams from L2, and tile loads alone leave most of its bandwidth unused
/// (measured ~10% faster). Prefetches never fault, so running past the panel is harmless.
macro_rules! prefetch_next_b {
    ($o:literal) => {
        concat!(
            "prefetcht0 [{b} + 2048 + ",
            $o,
            "]\n",
            "prefetcht0 [{b} + 2112 + ",
            $o,
            "]\n",
            "prefetcht0 [{b} + 2176 + ",
            $o,
            "]\n",
            "prefetcht0 [{b} + 2240 + ",
            $o,
            "]\n",
            "prefetcht0 [{b} + 2304 + ",
            $o,
            "]\n",
            "prefetcht0 [{b} + 2368 + ",
            $o,
            "]\n",
            "prefetcht0 [{b} + 2432 + ",
            $o,
            "]\n",
            "prefetcht0 [{b} + 2496 + ",
            $o,
            "]"
        )
    };
}

/// The 32×32 f32 accumulator block, row-major (row stride 128 bytes).
type Acc = [[__m512; 2]; MR];

/// Where a full 32×32 tile's accumulators start and end.
struct Ends {
    /// Load the accumulators from C (partial sums of earlier K blocks) instead of zeroing them.
    load_c: bool,
    /// Store the accumulators straight into C (no epilogue work left) instead of the buffer.
    direct: bool,
}

/// Multiplies one A micro-panel by one B panel (`kcu` pairs, a multiple of [`STEP`]) and stores
/// the tile through the AVX-512 epilogue.
///
/// Full 32×32 tiles with `alpha == 1` keep C's partial sums in AMX form: a later K block loads
/// them into the accumulator tiles (`tileloadd` from C) and a block with nothing left to apply
/// (not the last, or a plain product) stores them back with `tilestored`, so plain GEMMs never
/// run the vector epilogue. Otherwise the accumulators go through a buffer into the epilogue,
/// with `first`/`beta` adjusted when C was already folded in.
///
/// # Safety
/// As [`Kernel::tile`], with the tile configuration loaded on this thread.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn tile_amx(kcu: usize, a: *const u32, b: *const u32, t: &Tile, ep: &EpCtx) {
    let steps = kcu / STEP;
    // No prefetch of the 16-bit output lines here (the AVX-512 kernels do it): with AMX the
    // A panel, the streaming B panel and the 4 KiB accumulator buffer nearly fill L1, and 32
    // more lines per tile cost more than the store's misses (bf16 8192×320×320 0.84 → 0.75
    // ms, 8192×320×1280 2.73 → 2.50 ms, interleaved).
    if t.last {
        super::avx512_ep::prefetch_residual(ep, t);
    }
    let mut acc = std::mem::MaybeUninit::<Acc>::uninit();
    let buf = acc.as_mut_ptr() as *mut u8;
    if t.mr <= 16 {
        half_tile(steps, a, b, buf);
        // SAFETY: rows 0..16 were written and `store::<16>` reads only those.
        let half = &*(acc.as_ptr() as *const [[__m512; 2]; 16]);
        store::<16>(half, t, ep);
        return;
    }
    let full = t.mr == MR && t.nr == 32 && !ep.glu && ep.alpha == 1.0;
    let plain = ep.bias.is_none() && ep.act == Activation::None && ep.residual.is_none();
    let ends = Ends {
        load_c: full && !t.first,
        direct: full && (!t.last || plain && ep.out16.is_none()) && !(t.first && ep.beta != 0.0),
    };
    let c = t.c as *mut u8;
    let cs = t.ldc * 4;
    full_tile(steps, a, b, (c, cs), buf, &ends);
    if ends.direct {
        return;
    }
    // SAFETY: the four tilestored wrote all 32 rows of the buffer.
    let acc = acc.assume_init_ref();
    if ends.load_c {
        // C is already inside the accumulators: store as a first block without beta.
        let t2 = Tile { first: true, ..*t };
        let ep2 = EpCtx { beta: 0.0, ..*ep };
        store::<MR>(acc, &t2, &ep2);
    } else {
        store::<MR>(acc, t, ep);
    }
}

/// The 2×2-tile loop: accumulators from zero or C (`ends.load_c`), stored to C
/// (`ends.direct`) or to `buf` (row stride 128 bytes).
///
/// # Safety
/// Tile configuration loaded; `a`/`b` hold `steps` steps; C (`c`, row stride `cs` bytes) holds
/// a full 32×32 tile when `load_c` or `direct`; `buf` is writable for 4 KiB.
#[inline(always)]
unsafe fn full_tile(
    steps: usize,
    a: *const u32,
    b: *const u32,
    (c, cs): (*mut u8, usize),
    buf: *mut u8,
    ends: &Ends,
) {
    let ci = if ends.load_c { c } else { std::ptr::null_mut() };
    let (co, os) = if ends.direct { (c, cs) } else { (buf, 128) };
    asm!(
        "test {ci}, {ci}",
        "jz 5f",
        "tileloadd tmm0, [{ci} + {cs}*1]",
        "tileloadd tmm1, [{ci} + {cs}*1 + 64]",
        "tileloadd tmm2, [{ci2} + {cs}*1]",
        "tileloadd tmm3, [{ci2} + {cs}*1 + 64]",
        "jmp 6f",
        "5:",
        "tilezero tmm0",
        "tilezero tmm1",
        "tilezero tmm2",
        "tilezero tmm3",
        "6:",
        "test {n}, {n}",
        "jz 3f",
        "2:",
        "tileloadd tmm4, [{a} + {s64}*1]",
        "tileloadd tmm6, [{b} + {s128}*1]",
        prefetch_next_b!(0),
        "tdpbf16ps tmm0, tmm4, tmm6",
        prefetch_next_b!(512),
        "tileloadd tmm7, [{b} + {s128}*1 + 64]",
        "tdpbf16ps tmm1, tmm4, tmm7",
        prefetch_next_b!(1024),
        "tileloadd tmm5, [{a} + {s64}*1 + 1024]",
        "tdpbf16ps tmm2, tmm5, tmm6",
        prefetch_next_b!(1536),
        "tdpbf16ps tmm3, tmm5, tmm7",
        "add {a}, 2048",
        "add {b}, 2048",
        "dec {n}",
        "jnz 2b",
        "3:",
        "tilestored [{co} + {os}*1], tmm0",
        "tilestored [{co} + {os}*1 + 64], tmm1",
        "tilestored [{co2} + {os}*1], tmm2",
        "tilestored [{co2} + {os}*1 + 64], tmm3",
        a = inout(reg) a => _,
        b = inout(reg) b => _,
        n = inout(reg) steps => _,
        ci = in(reg) ci,
        ci2 = in(reg) ci.wrapping_add(16 * cs),
        cs = in(reg) cs,
        co = in(reg) co,
        co2 = in(reg) co.wrapping_add(16 * os),
        os = in(reg) os,
        s64 = in(reg) 64usize,
        s128 = in(reg) 128usize,
        out("tmm0") _, out("tmm1") _, out("tmm2") _, out("tmm3") _,
        out("tmm4") _, out("tmm5") _, out("tmm6") _, out("tmm7") _,
        options(nostack),
    );
}

/// At most 16 valid rows: one A tile (the second holds only zero padding), two accumulators,
/// stored to `buf` rows 0..16 (row stride 128 bytes).
///
/// # Safety
/// Tile configuration loaded; `a`/`b` hold `steps` steps; `buf` is writable for 2 KiB.
#[inline(always)]
unsafe fn half_tile(steps: usize, a: *const u32, b: *const u32, buf: *mut u8) {
    asm!(
        "tilezero tmm0",
        "tilezero tmm1",
        "test {n}, {n}",
        "jz 3f",
        "2:",
        "tileloadd tmm4, [{a} + {s64}*1]",
        "tileloadd tmm6, [{b} + {s128}*1]",
        prefetch_next_b!(0),
        prefetch_next_b!(512),
        "tdpbf16ps tmm0, tmm4, tmm6",
        "tileloadd tmm7, [{b} + {s128}*1 + 64]",
        prefetch_next_b!(1024),
        prefetch_next_b!(1536),
        "tdpbf16ps tmm1, tmm4, tmm7",
        "add {a}, 2048",
        "add {b}, 2048",
        "dec {n}",
        "jnz 2b",
        "3:",
        "tilestored [{c} + {s128}*1], tmm0",
        "tilestored [{c} + {s128}*1 + 64], tmm1",
        a = inout(reg) a => _,
        b = inout(reg) b => _,
        n = inout(reg) steps => _,
        c = in(reg) buf,
        s64 = in(reg) 64usize,
        s128 = in(reg) 128usize,
        out("tmm0") _, out("tmm1") _, out("tmm4") _, out("tmm6") _, out("tmm7") _,
        options(nostack),
    );
}

/// Packs 16 contiguous columns of a row-major bf16 B into the AMX pair layout for pairs
/// `u0..ureal`: `dst[(u - u0) * 32 + j] = b[2u][j] | b[2u + 1][j] << 16` (high half zero where
/// `2u + 1 >= k`). `src` points at element (0, first column); rows are `rs` elements apart.
///
/// # Safety
/// AVX-512F must be available; rows `2 * u0 .. min(2 * ureal, k)` must hold 16 readable values
/// from `src + row * rs`; `dst` must be writable for `(ureal - u0) * 32` values.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn pack_b_half(
    src: *const u16,
    rs: usize,
    k: usize,
    (u0, ureal): (usize, usize),
    dst: *mut u32,
) {
    use std::arch::x86_64::*;
    for u in u0..ureal {
        let lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256(src.add(2 * u * rs) as *const __m256i));
        let v = if 2 * u + 1 < k {
            let hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256(
                src.add((2 * u + 1) * rs) as *const __m256i
            ));
            _mm512_or_si512(lo, _mm512_slli_epi32::<16>(hi))
        } else {
            lo
        };
        _mm512_storeu_si512(dst.add((u - u0) * 32) as *mut __m512i, v);
    }
}

/// `iters` rounds of four independent `tdpbf16ps` on register-resident tiles; returns the flops
/// (16 × 16 × 32 × 2 per instruction).
///
/// # Safety
/// [`amx_status`] must have returned `Ok`.
pub(crate) unsafe fn peak_iters(iters: usize) -> f64 {
    load_config();
    asm!(
        "tilezero tmm0",
        "tilezero tmm1",
        "tilezero tmm2",
        "tilezero tmm3",
        "tilezero tmm4",
        "tilezero tmm5",
        "tilezero tmm6",
        "tilezero tmm7",
        "test {n}, {n}",
        "jz 3f",
        "2:",
        "tdpbf16ps tmm0, tmm4, tmm6",
        "tdpbf16ps tmm1, tmm4, tmm7",
        "tdpbf16ps tmm2, tmm5, tmm6",
        "tdpbf16ps tmm3, tmm5, tmm7",
        "dec {n}",
        "jnz 2b",
        "3:",
        n = inout(reg) iters => _,
        out("tmm0") _, out("tmm1") _, out("tmm2") _, out("tmm3") _,
        out("tmm4") _, out("tmm5") _, out("tmm6") _, out("tmm7") _,
        options(nostack, nomem),
    );
    release();
    (iters * 4 * 16 * 16 * 32 * 2) as f64
}

/// Test hook: loads the tile configuration on this thread (AMX must be granted).
#[cfg(test)]
pub(crate) unsafe fn load_config_for_tests() {
    load_config();
}
