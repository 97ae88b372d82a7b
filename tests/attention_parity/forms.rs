//! The two forms of the Xpu FMA attention kernel, `attention.wgsl` (`XPU_TILE_VEC4=0`) and
//! `attention_vec4.wgsl` (the default), give the same bits: this test runs itself again in two
//! child processes, `XPU_TILE_VEC4=0` and `=1`, both with `XPU_ATTN_COOP=0` (the tensor-core
//! kernel would otherwise take the f16 cases on adapters that have it), and compares the bits.
//! (Each form is also checked against the Cpu by the other tests of this binary; CI runs them
//! on the default form.)

use super::common::{self, randn, FLOATS};
use super::{qkv, xpu_lock};
use xpu::{Device, Tensor};

const NAME: &str = "forms::scalar_and_vec4_kernels_give_the_same_bits";

/// Output bits of every case: self/cross shapes, odd head dims, Dv != D, Dv up to 160, a
/// boolean and an additive mask, each float dtype.
fn case_bits() -> Vec<u32> {
    let cases: [[usize; 4]; 6] = [
        [257, 77, 40, 40],
        [33, 77, 160, 160],
        [65, 19, 128, 96],
        [40, 50, 5, 3],
        [70, 100, 80, 80],
        [7, 63, 2, 2],
    ];
    let mut bits = Vec::new();
    for &dtype in &FLOATS {
        for (ci, &[lq, lk, d, dv]) in cases.iter().enumerate() {
            let [q, k, v] = qkv([1, 2, lq, lk, d, dv], dtype, 40 + ci as u64)
                .map(|t| t.to(Device::Xpu).unwrap());
            let mask = match ci % 3 {
                0 => None,
                1 => {
                    let keep: Vec<u8> = (0..lq * lk).map(|i| u8::from(i % 5 != 1)).collect();
                    Some(Tensor::from_vec(keep, &[1, 1, lq, lk], Device::Xpu).unwrap())
                }
                _ => Some(randn(&[lk], dtype, 7).to(Device::Xpu).unwrap()),
            };
            let y = q
                .scaled_dot_product_attention(&k, &v, mask.as_ref(), None)
                .unwrap();
            let y = y.to_dtype(xpu::DType::F32).unwrap();
            bits.extend(y.to_vec::<f32>().unwrap().iter().map(|x| x.to_bits()));
        }
    }
    bits
}

#[test]
fn scalar_and_vec4_kernels_give_the_same_bits() {
    let _g = xpu_lock();
    if !common::xpu() {
        return;
    }
    if let Some(path) = std::env::var_os("XPU_TEST_BITS_OUT") {
        let bytes: Vec<u8> = case_bits().iter().flat_map(|b| b.to_le_bytes()).collect();
        std::fs::write(path, bytes).unwrap();
        return;
    }
    // Both forms in child processes with the tensor-core kernel off (f16 calls take it by
    // default where the adapter has one), so each form serves every case.
    let form_bits = |vec4: &str| -> Vec<u32> {
        let path =
            std::env::temp_dir().join(format!("xpu_attention_bits_{}_{vec4}", std::process::id()));
        common::rerun_with_env(
            NAME,
            &[
                ("XPU_TILE_VEC4", vec4.as_ref()),
                ("XPU_ATTN_COOP", "0".as_ref()),
                ("XPU_TEST_BITS_OUT", path.as_os_str()),
            ],
        );
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).ok();
        bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let (scalar, vec4) = (form_bits("0"), form_bits("1"));
    assert!(!scalar.is_empty());
    assert_eq!(scalar.len(), vec4.len());
    let first = scalar.iter().zip(&vec4).position(|(a, b)| a != b);
    assert!(first.is_none(), "forms differ first at output {first:?}");
}
