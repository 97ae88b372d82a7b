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
use half::bf16;
use std::arch::asm;
use std::arch::x86_64::{__cpuid, __cpuid_count, __m512};
use std::sync::OnceLock;

/// Rows per AMX micro-panel (two A tiles).
pub(crate) const MR: usize = 32;
/// K pairs consumed per step (rows of a B tile).
pub(crate) const STEP: usize = 16;

/// Linux `arch_prctl` codes and the tile data state component.
const SYS_ARCH_PRCTL: i64 = 158;
const ARCH_GET_XCOMP_PERM: u64 = 0x1022;
const ARCH_REQ_XCOMP_PERM: u64 = 0x1023;
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
unsafe fn load_config() {
    asm!("ldtilecfg [{0}]", in(reg) CFG.0.as_ptr(), options(nostack, readonly, preserves_flags));
}

/// Releases this thread's tile state.
///
/// # Safety
/// [`amx_status`] must have returned `Ok`.
unsafe fn release() {
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

/// The 32×32 f32 accumulator block, row-major (row stride 128 bytes).
type Acc = [[__m512; 2]; MR];

/// Multiplies one A micro-panel by one B panel (`kcu` pairs, a multiple of [`STEP`]) and stores
/// the tile through the AVX-512 epilogue.
///
/// # Safety
/// As [`Kernel::tile`], with the tile configuration loaded on this thread.
#[target_feature(enable = "avx512f")]
unsafe fn tile_amx(kcu: usize, a: *const u32, b: *const u32, t: &Tile, ep: &EpCtx) {
    let steps = kcu / STEP;
    let mut acc = std::mem::MaybeUninit::<Acc>::uninit();
    let c = acc.as_mut_ptr() as *mut u8;
    if t.mr > 16 {
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            "test {n}, {n}",
            "jz 3f",
            "2:",
            "tileloadd tmm4, [{a} + {s64}*1]",
            "tileloadd tmm6, [{b} + {s128}*1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tileloadd tmm7, [{b} + {s128}*1 + 64]",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tileloadd tmm5, [{a} + {s64}*1 + 1024]",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            "add {a}, 2048",
            "add {b}, 2048",
            "dec {n}",
            "jnz 2b",
            "3:",
            "tilestored [{c} + {s128}*1], tmm0",
            "tilestored [{c} + {s128}*1 + 64], tmm1",
            "tilestored [{c} + {s128}*1 + 2048], tmm2",
            "tilestored [{c} + {s128}*1 + 2112], tmm3",
            a = inout(reg) a => _,
            b = inout(reg) b => _,
            n = inout(reg) steps => _,
            c = in(reg) c,
            s64 = in(reg) 64usize,
            s128 = in(reg) 128usize,
            out("tmm0") _, out("tmm1") _, out("tmm2") _, out("tmm3") _,
            out("tmm4") _, out("tmm5") _, out("tmm6") _, out("tmm7") _,
            options(nostack),
        );
        // SAFETY: the four tilestored wrote all 32 rows.
        store::<MR>(acc.assume_init_ref(), t, ep);
    } else {
        // At most 16 valid rows: the second A tile holds only zero padding, skip it.
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "test {n}, {n}",
            "jz 3f",
            "2:",
            "tileloadd tmm4, [{a} + {s64}*1]",
            "tileloadd tmm6, [{b} + {s128}*1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tileloadd tmm7, [{b} + {s128}*1 + 64]",
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
            c = in(reg) c,
            s64 = in(reg) 64usize,
            s128 = in(reg) 128usize,
            out("tmm0") _, out("tmm1") _, out("tmm4") _, out("tmm6") _, out("tmm7") _,
            options(nostack),
        );
        // SAFETY: rows 0..16 were written and `store::<16>` reads only those.
        let half = &*(acc.as_ptr() as *const [[__m512; 2]; 16]);
        store::<16>(half, t, ep);
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
