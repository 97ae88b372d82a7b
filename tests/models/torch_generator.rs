//! `xpu::models::generator::TorchGenerator` against PyTorch's CPU generator: the draws recorded by
//! tests/fixtures/make_generator_fixtures.py (`generator.safetensors`) for five seeds, replayed
//! call by call, must match bit for bit under both Box–Muller kernels; a draw moved to the Xpu
//! keeps its bits.

use crate::common;
use std::collections::HashMap;

use safetensors::SafeTensors;
use xpu::models::generator::{NormalKernel, TorchGenerator};
use xpu::{Device, Tensor};

struct Fixture {
    bytes: Vec<u8>,
}

impl Fixture {
    fn load() -> Fixture {
        let path = common::repo_root().join("tests/fixtures/generator.safetensors");
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Fixture { bytes }
    }

    fn file(&self) -> SafeTensors<'_> {
        SafeTensors::deserialize(&self.bytes).unwrap()
    }

    fn metadata(&self) -> HashMap<String, String> {
        let (_, meta) = SafeTensors::read_metadata(&self.bytes).unwrap();
        meta.metadata().clone().unwrap()
    }

    fn json(&self, key: &str) -> serde_json::Value {
        serde_json::from_str(&self.metadata()[key]).unwrap()
    }

    fn bits(&self, name: &str) -> Option<Vec<u32>> {
        let file = self.file();
        let view = file.tensor(name).ok()?;
        assert_eq!(view.dtype(), safetensors::Dtype::F32, "{name}");
        Some(
            view.data()
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
                .collect(),
        )
    }

    fn bitsum(&self, name: &str) -> i64 {
        let file = self.file();
        let view = file.tensor(name).unwrap();
        assert_eq!(view.dtype(), safetensors::Dtype::I64, "{name}");
        i64::from_le_bytes(view.data().try_into().unwrap())
    }
}

fn bits_of(t: &Tensor) -> Vec<u32> {
    t.to_vec::<f32>()
        .unwrap()
        .into_iter()
        .map(f32::to_bits)
        .collect()
}

fn first_difference(what: &str, got: &[u32], want: &[u32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
        panic!(
            "{what}[{i}]: got {} ({:#010x}), torch {} ({:#010x})",
            f32::from_bits(got[i]),
            got[i],
            f32::from_bits(want[i]),
            want[i]
        );
    }
}

/// Replays the fixture's sequence for every seed on a generator with `kernel`; returns how many
/// values were compared.
fn replay(fx: &Fixture, name: &str, kernel: NormalKernel) -> usize {
    let sequence = fx.json("sequence");
    let seeds = fx.json("seeds");
    let slice: usize = fx.metadata()["slice"].parse().unwrap();
    let mut compared = 0;
    for (si, seed) in seeds.as_array().unwrap().iter().enumerate() {
        let seed: u64 = seed.as_str().unwrap().parse().unwrap();
        let mut g = TorchGenerator::with_kernel(seed, kernel);
        for (ci, call) in sequence.as_array().unwrap().iter().enumerate() {
            let op = call[0].as_str().unwrap();
            if op == "reseed" {
                g.manual_seed(seed);
                continue;
            }
            let shape: Vec<usize> = call[1]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap() as usize)
                .collect();
            let t = match op {
                "randn" => g.randn(&shape).unwrap(),
                "rand" => g.rand(&shape).unwrap(),
                other => panic!("unknown op {other}"),
            };
            assert_eq!(t.shape(), &shape[..]);
            assert_eq!(t.device(), Device::Cpu);
            let got = bits_of(&t);
            let key = format!("{name}.s{si}.c{ci:02}");
            let what = format!("{key} (seed {seed}, {op} {shape:?})");
            if let Some(want) = fx.bits(&format!("{key}.full")) {
                first_difference(&what, &got, &want);
                compared += want.len();
                continue;
            }
            let n = got.len();
            let mid = n / 2 - slice / 2;
            for (part, start) in [("head", 0), ("mid", mid), ("tail", n - slice)] {
                let want = fx.bits(&format!("{key}.{part}")).unwrap();
                first_difference(&format!("{what} {part}"), &got[start..start + slice], &want);
                compared += slice;
            }
            let sum: i64 = got.iter().map(|&b| i64::from(b)).sum();
            assert_eq!(sum, fx.bitsum(&format!("{key}.bitsum")), "{what}: bit sum");
            compared += n;
        }
    }
    compared
}

#[test]
fn avx2_kernel_matches_torch_bit_for_bit() {
    let fx = Fixture::load();
    let compared = replay(&fx, "avx2", NormalKernel::Avx2);
    assert!(compared > 400_000, "compared only {compared} values");
}

/// The portable kernel calls the C library's logf, sinf and cosf, as torch does: the fixture
/// was made with glibc's.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn libm_kernel_matches_torch_bit_for_bit() {
    let fx = Fixture::load();
    let compared = replay(&fx, "libm", NormalKernel::Libm);
    assert!(compared > 400_000, "compared only {compared} values");
}

#[test]
fn the_kernels_differ_only_in_draws_of_sixteen_or_more() {
    let mut a = TorchGenerator::with_kernel(42, NormalKernel::Avx2);
    let mut b = TorchGenerator::with_kernel(42, NormalKernel::Libm);
    let small = |g: &mut TorchGenerator| bits_of(&g.randn(&[15]).unwrap());
    assert_eq!(small(&mut a), small(&mut b));
    let big_a = bits_of(&a.randn(&[4, 64, 64]).unwrap());
    let big_b = bits_of(&b.randn(&[4, 64, 64]).unwrap());
    assert_ne!(big_a, big_b, "the two kernels round differently somewhere");
    let close = big_a
        .iter()
        .zip(&big_b)
        .all(|(&x, &y)| (f32::from_bits(x) - f32::from_bits(y)).abs() <= 1e-5);
    assert!(close, "the kernels agree to rounding");
    // Both consumed the same words: the next small draws agree again.
    assert_eq!(small(&mut a), small(&mut b));
}

#[test]
fn new_uses_the_kernel_torch_runs_here() {
    let g = TorchGenerator::new(7);
    assert_eq!(g.kernel(), NormalKernel::native());
    assert_eq!(g.initial_seed(), 7);
    #[cfg(target_arch = "x86_64")]
    if std::env::var_os("ATEN_CPU_CAPABILITY").is_none()
        && std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma")
    {
        assert_eq!(g.kernel(), NormalKernel::Avx2);
    }
}

#[test]
fn clones_and_reseeds_continue_identically() {
    let mut g = TorchGenerator::with_kernel(3, NormalKernel::Avx2);
    g.randn(&[5]).unwrap(); // leaves a cached normal
    let mut h = g.clone();
    assert_eq!(
        bits_of(&g.randn(&[3, 7]).unwrap()),
        bits_of(&h.randn(&[3, 7]).unwrap())
    );
    assert_eq!(
        bits_of(&g.rand(&[40]).unwrap()),
        bits_of(&h.rand(&[40]).unwrap())
    );
    g.manual_seed(3);
    let fresh = TorchGenerator::with_kernel(3, NormalKernel::Avx2)
        .randn(&[5])
        .unwrap();
    assert_eq!(bits_of(&g.randn(&[5]).unwrap()), bits_of(&fresh));
    let mut out = [0f32; 33];
    let mut f = TorchGenerator::with_kernel(3, NormalKernel::Avx2);
    f.fill_randn(&mut out);
    let t = TorchGenerator::with_kernel(3, NormalKernel::Avx2)
        .randn(&[33])
        .unwrap();
    assert_eq!(out.map(f32::to_bits).to_vec(), bits_of(&t));
}

#[test]
fn impossible_shapes_are_errors() {
    let mut g = TorchGenerator::new(0);
    let err = g.randn(&[usize::MAX, 2]).unwrap_err().to_string();
    assert!(err.contains("TorchGenerator::randn"), "{err}");
    let err = g.rand(&[1 << 40, 1 << 40]).unwrap_err().to_string();
    assert!(err.contains("TorchGenerator::rand"), "{err}");
    // The failed calls drew nothing.
    let mut fresh = TorchGenerator::new(0);
    assert_eq!(
        bits_of(&g.randn(&[20]).unwrap()),
        bits_of(&fresh.randn(&[20]).unwrap())
    );
}

#[test]
fn draws_keep_their_bits_on_every_device() {
    let mut g = TorchGenerator::new(42);
    let latents = g.randn(&[1, 4, 64, 64]).unwrap();
    let noise = g.rand(&[2, 3, 5]).unwrap();
    for device in common::devices() {
        for t in [&latents, &noise] {
            let moved = t.to(device).unwrap();
            assert_eq!(moved.device(), device);
            assert_eq!(moved.shape(), t.shape());
            let back = moved.to(Device::Cpu).unwrap();
            assert_eq!(bits_of(&back), bits_of(t), "{device:?}");
            // A computation on the device sees the same values: x * 1 + 0 is exact.
            let same = moved.affine(1.0, 0.0).unwrap().to(Device::Cpu).unwrap();
            assert_eq!(
                bits_of(&same),
                bits_of(&t.affine(1.0, 0.0).unwrap()),
                "{device:?}"
            );
        }
    }
}
