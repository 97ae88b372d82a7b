//! `all` / `any` along a dim (`torch.all` / `torch.any`) on every device and dtype against
//! host loops: zeros, NaN (nonzero, as in PyTorch), keepdim, negative dims, empty dims.

use crate::common;
use common::{devices, values};
use xpu::{DType, Device, Tensor};

#[test]
fn all_and_any_match_host_loops() {
    // [3, 4]: row 0 all nonzero, row 1 one zero, row 2 all zero; a NaN in row 0.
    let host = vec![
        1.0f32,
        f32::NAN,
        -2.0,
        3.0,
        0.0,
        5.0,
        6.0,
        7.0,
        0.0,
        0.0,
        0.0,
        0.0,
    ];
    for device in devices() {
        for dtype in [DType::F32, DType::F16, DType::BF16, DType::I32, DType::U8] {
            let x = Tensor::from_vec(host.clone(), &[3, 4], Device::Cpu)
                .and_then(|t| t.to_dtype(dtype))
                .and_then(|t| t.to(device))
                .unwrap();
            let nz: Vec<bool> = values(&x).iter().map(|&v| v != 0.0).collect();
            // Reduce the nonzero flags of rows (along dim 1) or columns (along dim 0).
            let reduce = |along_rows: bool, every: bool| -> Vec<f64> {
                let (outer, inner) = if along_rows { (3, 4) } else { (4, 3) };
                (0..outer)
                    .map(|o| {
                        let mut flags = (0..inner).map(|k| {
                            if along_rows {
                                nz[o * 4 + k]
                            } else {
                                nz[k * 4 + o]
                            }
                        });
                        let v = if every {
                            flags.all(|b| b)
                        } else {
                            flags.any(|b| b)
                        };
                        f64::from(u8::from(v))
                    })
                    .collect()
            };
            let what = format!("{device} {dtype}");
            let all1 = x.all(1, false).unwrap();
            assert_eq!(all1.dtype(), DType::U8);
            assert_eq!(values(&all1), reduce(true, true), "{what} all rows");
            assert_eq!(
                values(&x.any(-1, false).unwrap()),
                reduce(true, false),
                "{what} any rows"
            );
            let all0 = x.all(0, true).unwrap();
            assert_eq!(all0.shape(), &[1, 4]);
            assert_eq!(values(&all0), reduce(false, true), "{what} all cols");
            assert_eq!(
                values(&x.any(0, false).unwrap()),
                reduce(false, false),
                "{what} any cols"
            );
        }
        let empty = Tensor::zeros(&[2, 0], DType::F32, device).unwrap();
        assert_eq!(values(&empty.all(1, false).unwrap()), vec![1.0, 1.0]);
        assert_eq!(values(&empty.any(1, true).unwrap()), vec![0.0, 0.0]);
        assert_eq!(empty.any(1, true).unwrap().shape(), &[2, 1]);
        assert!(empty.all(2, false).is_err(), "{device} dim out of range");
    }
}
