//! The AMX implicit GEMM against the plain AMX GEMM on the materialised A (bit for bit), with
//! runs that start at odd k and cross AMX steps, and zero rows past M.

use super::util::{with_bf16_kind, Lay, Owned, Rng};
use crate::cpu::gemm::amx_gather::gemm_gather_amx;
use crate::cpu::gemm::layout::PackKind;
use crate::cpu::gemm::{
    amx_unavailable_reason, gemm_with_path, BSrc, Epilogue, GemmPath, PackedB, RowSource,
};
use crate::desc::Activation;
use half::bf16;

/// A dense row-major bf16 matrix handed out in runs of varying length.
struct Runs<'a> {
    data: &'a [bf16],
    m: usize,
    k: usize,
    zeros: Vec<bf16>,
}

// SAFETY: every pointer is into `data` (row r < m, run inside the row) or `zeros` (K long), valid
// for `len <= K - k` elements while `self` is borrowed.
unsafe impl RowSource for Runs<'_> {
    type Elem = bf16;
    fn runs(&self, row0: usize, rows: usize, k: usize, ptrs: &mut [*const bf16]) -> usize {
        let len = ((k * 7 + 3) % 37 + 1).min(self.k - k);
        for (r, p) in ptrs.iter_mut().enumerate() {
            *p = if r < rows && row0 + r < self.m {
                self.data[(row0 + r) * self.k + k..].as_ptr()
            } else {
                self.zeros.as_ptr()
            };
        }
        len
    }
}

#[test]
fn amx_gather_matches_plain_amx_bitwise() {
    for (i, &(m, k, n)) in [
        (1, 1, 1),
        (33, 65, 40),
        (100, 333, 70),
        (64, 1100, 64),
        (17, 31, 33),
    ]
    .iter()
    .enumerate()
    {
        let mut rng = Rng::new(40 + i as u64);
        let a = Owned::<bf16>::random(m, k, Lay::Row, &mut rng);
        let b = Owned::<bf16>::random(k, n, Lay::Col, &mut rng);
        let bias: Vec<f32> = (0..n).map(|_| rng.next()).collect();
        let src = Runs {
            data: &a.data,
            m,
            k,
            zeros: vec![bf16::ZERO; k],
        };
        for ep in [
            Epilogue::new(),
            Epilogue::new()
                .with_bias(&bias)
                .with_activation(Activation::Gelu),
        ] {
            with_bf16_kind(Some(PackKind::Amx), || {
                let pb = PackedB::new(b.view()).expect("pack");
                let mut want = vec![0f32; m * n];
                gemm_with_path(
                    GemmPath::Avx512,
                    a.view(),
                    BSrc::Packed(&pb),
                    &mut want,
                    n,
                    &ep,
                )
                .expect("gemm");
                let mut got = vec![f32::NAN; m * n];
                let ran = gemm_gather_amx(GemmPath::Avx512, &src, m, &pb, &mut got, n, &ep)
                    .expect("gather");
                match amx_unavailable_reason() {
                    None => {
                        assert!(ran, "AMX available but the gathered GEMM did not run");
                        assert_eq!(got, want, "{m}x{k}x{n}");
                    }
                    Some(why) => {
                        eprintln!("AMX unavailable ({why}): checked that the gather declines");
                        assert!(!ran && got.iter().all(|x| x.is_nan()));
                    }
                }
                // The portable path never takes AMX.
                let mut c = vec![f32::NAN; m * n];
                let ran = gemm_gather_amx(GemmPath::Fallback, &src, m, &pb, &mut c, n, &ep)
                    .expect("gather");
                assert!(!ran && c.iter().all(|x| x.is_nan()));
            });
        }
    }
}

#[test]
fn amx_gather_declines_other_layouts_and_checks_shapes() {
    let b = vec![bf16::ONE; 6];
    let pb = with_bf16_kind(Some(PackKind::F32), || {
        PackedB::new(crate::cpu::gemm::MatRef::row_major(&b, 2, 3)).expect("pack")
    });
    let a = vec![bf16::ONE; 4];
    let src = Runs {
        data: &a,
        m: 2,
        k: 2,
        zeros: vec![bf16::ZERO; 2],
    };
    let mut c = vec![0f32; 6];
    let ran = gemm_gather_amx(GemmPath::Avx512, &src, 2, &pb, &mut c, 3, &Epilogue::new());
    assert!(matches!(ran, Ok(false)));
    if amx_unavailable_reason().is_none() {
        let pb = with_bf16_kind(Some(PackKind::Amx), || {
            PackedB::new(crate::cpu::gemm::MatRef::row_major(&b, 2, 3)).expect("pack")
        });
        // C too small for 2 x 3 with ldc 3.
        assert!(gemm_gather_amx(
            GemmPath::Avx512,
            &src,
            2,
            &pb,
            &mut c[..4],
            3,
            &Epilogue::new()
        )
        .is_err());
        assert!(
            gemm_gather_amx(GemmPath::Avx512, &src, 2, &pb, &mut c, 3, &Epilogue::new())
                .expect("gather")
        );
        assert_eq!(c, vec![2.0; 6]);
    }
}
