//! matmul: Cpu against an f64-accumulating reference, Xpu against Cpu, for edge sizes,
//! batched with broadcast batch dims, transposed operands, and every float dtype.

use crate::common;
use common::{assert_close, eps, randn, values, FLOATS};
use xpu::{DType, Device, Tensor};

/// Reference product of row-major [b, m, k] @ [b, k, n] values.
fn reference(a: &[f64], b: &[f64], batch: usize, m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; batch * m * n];
    for z in 0..batch {
        for i in 0..m {
            for j in 0..n {
                out[(z * m + i) * n + j] = (0..k)
                    .map(|p| a[(z * m + i) * k + p] * b[(z * k + p) * n + j])
                    .sum();
            }
        }
    }
    out
}

/// `a @ b` computed on the Xpu.
fn xpu_matmul(a: &Tensor, b: &Tensor) -> Tensor {
    a.to(Device::Xpu)
        .unwrap()
        .matmul(&b.to(Device::Xpu).unwrap())
        .unwrap()
}

fn tol(dtype: DType, k: usize) -> (f64, f64) {
    let e = if dtype == DType::F32 {
        1e-6
    } else {
        eps(dtype)
    };
    (4.0 * e * (k as f64).sqrt() + 1e-6, 4.0 * e)
}

#[test]
fn matmul_edge_sizes() {
    let xpu = common::xpu();
    let sizes = [1, 7, 17, 63, 64, 65, 129];
    for &dtype in &FLOATS {
        for (i, &m) in sizes.iter().enumerate() {
            for &k in &sizes[..] {
                let n = sizes[(i + k) % sizes.len()];
                let a = randn(&[m, k], dtype, (m * 1000 + k) as u64);
                let b = randn(&[k, n], dtype, (k * 1000 + n) as u64);
                let cpu = a.matmul(&b).unwrap();
                assert_eq!(cpu.shape(), &[m, n]);
                let want = reference(&values(&a), &values(&b), 1, m, k, n);
                let (atol, rtol) = tol(dtype, k);
                let what = format!("{dtype} {m}x{k}x{n}");
                assert_close(&format!("cpu {what}"), &values(&cpu), &want, atol, rtol);
                if xpu {
                    let gpu = xpu_matmul(&a, &b);
                    assert_eq!(gpu.dtype(), dtype);
                    assert_close(
                        &format!("xpu {what}"),
                        &values(&gpu),
                        &values(&cpu),
                        atol,
                        rtol,
                    );
                }
            }
        }
    }
}

#[test]
fn matmul_batched_broadcast_and_transposed() {
    let xpu = common::xpu();
    for &dtype in &FLOATS {
        // [2,3,m,k] @ [3,k,n] -> [2,3,m,n], rhs given transposed ([3,n,k] viewed as [3,k,n]).
        let (m, k, n) = (17, 33, 65);
        let a = randn(&[2, 3, m, k], dtype, 1);
        let bt = randn(&[3, n, k], dtype, 2);
        let b = bt.transpose(-1, -2).unwrap();
        let cpu = a.matmul(&b).unwrap();
        assert_eq!(cpu.shape(), &[2, 3, m, n]);
        let bb = b.broadcast_to(&[2, 3, k, n]).unwrap();
        let want = reference(&values(&a), &values(&bb), 6, m, k, n);
        let (atol, rtol) = tol(dtype, k);
        assert_close(
            &format!("cpu batched {dtype}"),
            &values(&cpu),
            &want,
            atol,
            rtol,
        );
        // Transposed lhs too.
        let at = randn(&[k, m], dtype, 3);
        let b2 = randn(&[k, n], dtype, 4);
        let cpu2 = at.t().unwrap().matmul(&b2).unwrap();
        let want2 = reference(&values(&at.t().unwrap()), &values(&b2), 1, m, k, n);
        assert_close(
            &format!("cpu lhs^T {dtype}"),
            &values(&cpu2),
            &want2,
            atol,
            rtol,
        );
        if xpu {
            let gpu = a
                .to(Device::Xpu)
                .unwrap()
                .matmul(&bt.to(Device::Xpu).unwrap().transpose(-1, -2).unwrap())
                .unwrap();
            assert_eq!(gpu.shape(), &[2, 3, m, n]);
            assert_close(
                &format!("xpu batched {dtype}"),
                &values(&gpu),
                &values(&cpu),
                atol,
                rtol,
            );
            let gpu2 = at
                .to(Device::Xpu)
                .unwrap()
                .t()
                .unwrap()
                .matmul(&b2.to(Device::Xpu).unwrap())
                .unwrap();
            assert_close(
                &format!("xpu lhs^T {dtype}"),
                &values(&gpu2),
                &values(&cpu2),
                atol,
                rtol,
            );
        }
    }
}

#[test]
fn matmul_zero_sizes_and_large() {
    for device in common::devices() {
        let a = Tensor::zeros(&[3, 0], DType::F32, device).unwrap();
        let b = Tensor::zeros(&[0, 4], DType::F32, device).unwrap();
        assert_eq!(
            a.matmul(&b).unwrap().to_vec::<f32>().unwrap(),
            vec![0.0; 12],
            "{device}: K = 0 gives zeros"
        );
        let e = Tensor::zeros(&[0, 5], DType::F32, device).unwrap();
        let w = Tensor::ones(&[5, 2], DType::F32, device).unwrap();
        assert_eq!(e.matmul(&w).unwrap().shape(), &[0, 2]);
    }
    // A larger product, compared on a sample of outputs against the f64 reference.
    let (m, k, n) = (300, 520, 260);
    let a = randn(&[m, k], DType::F32, 8);
    let b = randn(&[k, n], DType::F32, 9);
    let (va, vb) = (values(&a), values(&b));
    let sample: Vec<(usize, usize)> = (0..64).map(|i| ((i * 37) % m, (i * 53) % n)).collect();
    let want: Vec<f64> = sample
        .iter()
        .map(|&(i, j)| (0..k).map(|p| va[i * k + p] * vb[p * n + j]).sum())
        .collect();
    for device in common::devices() {
        let c = values(
            &a.to(device)
                .unwrap()
                .matmul(&b.to(device).unwrap())
                .unwrap(),
        );
        let got: Vec<f64> = sample.iter().map(|&(i, j)| c[i * n + j]).collect();
        assert_close(&format!("{device} large sample"), &got, &want, 1e-4, 1e-5);
    }
}

#[test]
fn matmul_k0_gives_zeros_in_every_float_dtype() {
    for device in common::devices() {
        for &dtype in &FLOATS {
            // A dropped large (pooled: over 1 MiB) result may come back as the output's buffer: K = 0 must still give
            // zeros (the 16-bit outputs are written by the GEMM store, which writes nothing here).
            let junk = Tensor::ones(&[1024, 1024], dtype, device)
                .unwrap()
                .mul_scalar(3.0)
                .unwrap();
            drop(junk);
            let a = Tensor::zeros(&[1024, 0], dtype, device).unwrap();
            let b = Tensor::zeros(&[0, 1024], dtype, device).unwrap();
            let got = values(&a.matmul(&b).unwrap());
            assert!(
                got.len() == 1024 * 1024 && got.iter().all(|&x| x == 0.0),
                "{device} {dtype}: K = 0 gives zeros"
            );
        }
    }
}

#[test]
fn matmul_vectors_follow_torch() {
    let xpu = common::xpu();
    // (lhs shape, rhs shape, result shape): a 1-D operand gains a dim that the result drops.
    let cases: [(&[usize], &[usize], &[usize]); 6] = [
        (&[65], &[65], &[]),
        (&[7], &[7, 13], &[13]),
        (&[2, 3, 17, 33], &[33], &[2, 3, 17]),
        (&[33], &[3, 33, 5], &[3, 5]),
        (&[1], &[1, 1], &[1]),
        (&[63, 257], &[257], &[63]),
    ];
    for &dtype in &FLOATS {
        for (i, &(sa, sb, want_shape)) in cases.iter().enumerate() {
            let a = randn(sa, dtype, 100 + i as u64);
            let b = randn(sb, dtype, 200 + i as u64);
            let cpu = a.matmul(&b).unwrap();
            assert_eq!(cpu.shape(), want_shape, "{dtype} {sa:?} @ {sb:?}");
            // The same product with the dims made explicit.
            let a2 = if sa.len() == 1 {
                a.unsqueeze(0).unwrap()
            } else {
                a.clone()
            };
            let b2 = if sb.len() == 1 {
                b.unsqueeze(1).unwrap()
            } else {
                b.clone()
            };
            let explicit = a2.matmul(&b2).unwrap();
            assert_eq!(values(&cpu), values(&explicit), "{dtype} {sa:?} @ {sb:?}");
            let k = *sa.last().unwrap();
            let (atol, rtol) = tol(dtype, k);
            if sa.len() == 1 && sb.len() == 1 {
                let dot: f64 = values(&a).iter().zip(values(&b)).map(|(x, y)| x * y).sum();
                assert_close("dot", &values(&cpu), &[dot], atol, rtol);
            }
            if xpu {
                let gpu = xpu_matmul(&a, &b);
                assert_eq!(gpu.shape(), want_shape);
                let what = format!("xpu {dtype} {sa:?} @ {sb:?}");
                assert_close(&what, &values(&gpu), &values(&cpu), atol, rtol);
            }
        }
    }
    // Rank 0 and mismatched vectors are errors that name the shapes.
    let s = Tensor::from_vec(vec![1.0f32], &[], Device::Cpu).unwrap();
    let v = randn(&[3], DType::F32, 1);
    let e = s.matmul(&v).unwrap_err().to_string();
    assert!(e.contains("rank >= 1"), "{e}");
    let e = v
        .matmul(&randn(&[4], DType::F32, 2))
        .unwrap_err()
        .to_string();
    assert!(e.contains("[4]") && e.contains("[3]"), "{e}");
}
