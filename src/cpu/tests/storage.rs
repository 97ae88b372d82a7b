//! Construction, bytes, strided reads, contiguous copies, casts and concatenation.

use super::*;
use crate::cpu::CpuStorage;
use crate::layout::Layout;
use crate::{DType, Error};
use half::{bf16, f16};

/// Non-contiguous views of a `[4, 6]` contiguous storage of 30 elements (offset room), with
/// their logical element indices.
pub(crate) fn views() -> Vec<(Layout, Vec<usize>)> {
    let base = Layout::contiguous(&[4, 6]);
    let mut v = Vec::new();
    let t = base.transpose(0, 1);
    v.push((t.clone(), t.offsets().collect()));
    let n = base.narrow(1, 2, 3).unwrap();
    v.push((n.clone(), n.offsets().collect()));
    let b = Layout::contiguous(&[6]).broadcast_to(&[5, 6]).unwrap();
    v.push((b.clone(), b.offsets().collect()));
    let p = Layout::contiguous(&[2, 3, 4]).permute(&[2, 0, 1]).unwrap();
    v.push((p.clone(), p.offsets().collect()));
    let o = Layout::from_parts(vec![3, 2], vec![1, 7], 5);
    v.push((o.clone(), o.offsets().collect()));
    v
}

#[test]
fn from_vec_to_vec_and_bytes_roundtrip() {
    let v: Vec<f32> = (0..30).map(|i| i as f32 * 0.5).collect();
    let s = CpuStorage::from_vec(v.clone()).unwrap();
    assert_eq!(s.dtype(), DType::F32);
    assert_eq!(s.len(), 30);
    assert!(!s.is_empty());
    for (layout, idx) in views() {
        let got: Vec<f32> = s.to_vec(&layout).unwrap();
        let want: Vec<f32> = idx.iter().map(|&i| v[i]).collect();
        assert_eq!(got, want, "{layout:?}");
        let c = s.contiguous(&layout).unwrap();
        assert_eq!(
            c.to_vec::<f32>(&Layout::contiguous(&[want.len()])).unwrap(),
            want
        );
    }
    assert!(matches!(
        s.to_vec::<i32>(&Layout::contiguous(&[30])),
        Err(Error::DTypeMismatch { op: "to_vec", .. })
    ));
    assert!(s.to_vec::<f32>(&Layout::contiguous(&[31])).is_err());
    assert!(s
        .to_vec::<f32>(&Layout::from_parts(vec![2], vec![usize::MAX], 0))
        .is_err());
    assert!(s.contiguous(&Layout::contiguous(&[5, 7])).is_err());
    let bytes = s.as_bytes().to_vec();
    assert_eq!(bytes.len(), 120);
    assert_eq!(CpuStorage::from_bytes(DType::F32, &bytes).unwrap(), s);
    assert!(CpuStorage::from_bytes(DType::F32, &bytes[..7]).is_err());
    let h = CpuStorage::from_vec(vec![f16::from_f32(1.5), f16::from_f32(-2.0)]).unwrap();
    assert_eq!(CpuStorage::from_bytes(DType::F16, h.as_bytes()).unwrap(), h);
    for d in DType::ALL {
        let z = CpuStorage::zeros(d, 5).unwrap();
        assert_eq!(
            (z.dtype(), z.len(), z.as_bytes().len()),
            (d, 5, 5 * d.size_in_bytes())
        );
    }
    let u = CpuStorage::from_vec(vec![1u8, 2, 3]).unwrap();
    assert_eq!(
        u.to_vec::<u8>(&Layout::contiguous(&[3]).narrow(0, 1, 2).unwrap())
            .unwrap(),
        vec![2, 3]
    );
    assert_eq!(
        CpuStorage::from_vec(vec![bf16::ONE]).unwrap().dtype(),
        DType::BF16
    );
    assert_eq!(
        CpuStorage::from_vec(vec![7i32]).unwrap().dtype(),
        DType::I32
    );
    assert!(CpuStorage::zeros(DType::F32, 0)
        .unwrap()
        .to_vec::<f32>(&Layout::contiguous(&[0, 3]))
        .unwrap()
        .is_empty());
}

fn cast_ref(x: f64, from: DType, to: DType) -> f64 {
    match to {
        DType::F32 => x as f32 as f64,
        DType::F16 => f16::from_f64(x).to_f64(),
        DType::BF16 => bf16::from_f64(x).to_f64(),
        DType::I32 => x as i32 as f64,
        DType::U8 if from == DType::I32 => x as i32 as u8 as f64,
        DType::U8 => x as u8 as f64,
    }
}

fn storage_of(d: DType, v: &[f64]) -> CpuStorage {
    match d {
        DType::F32 => {
            CpuStorage::from_vec(v.iter().map(|&x| x as f32).collect::<Vec<_>>()).unwrap()
        }
        DType::F16 => {
            CpuStorage::from_vec(v.iter().map(|&x| f16::from_f64(x)).collect::<Vec<_>>()).unwrap()
        }
        DType::BF16 => {
            CpuStorage::from_vec(v.iter().map(|&x| bf16::from_f64(x)).collect::<Vec<_>>()).unwrap()
        }
        DType::I32 => {
            CpuStorage::from_vec(v.iter().map(|&x| x as i32).collect::<Vec<_>>()).unwrap()
        }
        DType::U8 => CpuStorage::from_vec(v.iter().map(|&x| x as u8).collect::<Vec<_>>()).unwrap(),
    }
}

/// Logical values of a storage as `f64`.
pub(crate) fn values(s: &CpuStorage, l: &Layout) -> Vec<f64> {
    let c = s.contiguous(l).unwrap();
    let l = Layout::contiguous(&[c.len()]);
    match &c {
        CpuStorage::F32(_) => c
            .to_vec::<f32>(&l)
            .unwrap()
            .iter()
            .map(|&x| x as f64)
            .collect(),
        CpuStorage::F16(_) => c
            .to_vec::<f16>(&l)
            .unwrap()
            .iter()
            .map(|x| x.to_f64())
            .collect(),
        CpuStorage::BF16(_) => c
            .to_vec::<bf16>(&l)
            .unwrap()
            .iter()
            .map(|x| x.to_f64())
            .collect(),
        CpuStorage::I32(_) => c
            .to_vec::<i32>(&l)
            .unwrap()
            .iter()
            .map(|&x| x as f64)
            .collect(),
        CpuStorage::U8(_) => c
            .to_vec::<u8>(&l)
            .unwrap()
            .iter()
            .map(|&x| x as f64)
            .collect(),
    }
}

#[test]
fn casts_between_all_dtypes() {
    let mut src: Vec<f64> = vec![
        0.0, -0.0, 1.5, -1.5, 2.5, -2.7, 255.9, 256.0, -1.0, 1e9, -1e9, 3e38, 65519.0, 65520.0,
        1e-6,
    ];
    src.extend([
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1.0 + 2f64.powi(-11),
        1.0 + 2f64.powi(-8) + 2f64.powi(-20),
    ]);
    let mut rng = Lcg::new(11);
    src.extend((0..300).map(|_| rng.range(-300.0, 300.0) as f64));
    for level in levels() {
        crate::cpu::with_simd_level(level, || {
            for from in DType::ALL {
                let s = storage_of(from, &src);
                let exact = values(&s, &Layout::contiguous(&[src.len()]));
                for to in DType::ALL {
                    for n in [0, 1, 17, src.len()] {
                        let out = s.cast(&Layout::contiguous(&[n]), to).unwrap();
                        assert_eq!((out.dtype(), out.len()), (to, n));
                        let got = values(&out, &Layout::contiguous(&[n]));
                        for i in 0..n {
                            let want = cast_ref(exact[i], from, to);
                            assert!(
                                got[i] == want || (got[i].is_nan() && want.is_nan()),
                                "{level:?} {from}->{to}: {} gave {} want {want}",
                                exact[i],
                                got[i]
                            );
                        }
                    }
                }
                // Strided input.
                let l = Layout::contiguous(&[src.len() / 2, 2]).transpose(0, 1);
                let got = values(
                    &s.cast(&l, DType::F32).unwrap(),
                    &Layout::contiguous(&[l.numel()]),
                );
                let want: Vec<f64> = l.offsets().map(|i| exact[i] as f32 as f64).collect();
                assert_eq!(format!("{got:?}"), format!("{want:?}"));
            }
        });
    }
    // Big cast: exercises threading.
    let big: Vec<f32> = (0..1_100_000).map(|i| (i as f32) * 0.37 - 1000.0).collect();
    let s = CpuStorage::from_vec(big.clone()).unwrap();
    let h = s
        .cast(&Layout::contiguous(&[big.len()]), DType::BF16)
        .unwrap();
    let back = h
        .cast(&Layout::contiguous(&[big.len()]), DType::F32)
        .unwrap();
    let back: Vec<f32> = back.to_vec(&Layout::contiguous(&[big.len()])).unwrap();
    assert!(big
        .iter()
        .zip(&back)
        .all(|(&a, &b)| b == bf16::from_f32(a).to_f32()));
}

#[test]
fn cat_along_each_dim() {
    let a = CpuStorage::from_vec((0..24).map(|i| i as f32).collect::<Vec<_>>()).unwrap();
    let b = CpuStorage::from_vec((100..130).map(|i| i as f32).collect::<Vec<_>>()).unwrap();
    let la = Layout::contiguous(&[2, 3, 4]);
    // b viewed as [2, 3, 5] transposed from [2, 5, 3].
    let lb = Layout::contiguous(&[2, 5, 3]).transpose(1, 2);
    let out = CpuStorage::cat(&[(&a, &la), (&b, &lb)], 2).unwrap();
    let got = values(&out, &Layout::contiguous(&[out.len()]));
    let (va, vb) = (values(&a, &la), values(&b, &lb));
    let mut want = Vec::new();
    for o in 0..6 {
        want.extend_from_slice(&va[o * 4..o * 4 + 4]);
        want.extend_from_slice(&vb[o * 5..o * 5 + 5]);
    }
    assert_eq!(got, want);
    let out0 = CpuStorage::cat(&[(&a, &la), (&a, &la)], 0).unwrap();
    assert_eq!(values(&out0, &Layout::contiguous(&[48]))[24..], va[..]);
    let l1 = Layout::contiguous(&[2, 0, 4]);
    let out1 = CpuStorage::cat(&[(&a, &la), (&a, &l1)], 1).unwrap();
    assert_eq!(out1.len(), 24);
    assert!(matches!(
        CpuStorage::cat(&[], 0),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        CpuStorage::cat(&[(&a, &la), (&b, &lb)], 1),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        CpuStorage::cat(&[(&a, &la)], 3),
        Err(Error::DimOutOfRange { .. })
    ));
    let i = CpuStorage::zeros(DType::I32, 24).unwrap();
    assert!(matches!(
        CpuStorage::cat(&[(&a, &la), (&i, &la)], 0),
        Err(Error::DTypeMismatch { op: "cat", .. })
    ));
    assert!(CpuStorage::cat(&[(&a, &Layout::contiguous(&[2, 3, 5]))], 0).is_err());
}
