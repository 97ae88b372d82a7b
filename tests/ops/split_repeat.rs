//! `chunk`, `split`, `split_sizes` (views, PyTorch's sizes: uneven last pieces, fewer chunks
//! than asked for small dims, empty dims) and `repeat` (a copy, every dtype, views, leading
//! repetitions) on every device, against host index arithmetic; and their errors.

use crate::common;
use common::{devices, values};
use xpu::{DType, Device, Tensor};

fn source(shape: &[usize], dtype: DType, device: Device) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|v| (v % 251) as f32).collect(), shape, device)
        .and_then(|t| t.to_dtype(dtype))
        .unwrap()
}

fn sizes(parts: &[Tensor], dim: usize) -> Vec<usize> {
    parts.iter().map(|t| t.shape()[dim]).collect()
}

#[test]
fn chunks_and_splits_follow_torch_sizes() {
    for device in devices() {
        let x = source(&[3, 10], DType::F32, device);
        assert_eq!(sizes(&x.chunk(3, 1).unwrap(), 1), [4, 4, 2]);
        assert_eq!(sizes(&x.chunk(5, 1).unwrap(), 1), [2, 2, 2, 2, 2]);
        assert_eq!(sizes(&x.chunk(4, 0).unwrap(), 0), [1, 1, 1]);
        let six = source(&[6], DType::F32, device);
        assert_eq!(sizes(&six.chunk(4, 0).unwrap(), 0), [2, 2, 2]);
        let empty = source(&[0, 4], DType::F32, device);
        assert_eq!(sizes(&empty.chunk(3, 0).unwrap(), 0), [0, 0, 0]);
        assert_eq!(sizes(&empty.split(2, 0).unwrap(), 0), [0]);
        assert_eq!(sizes(&x.split(4, -1).unwrap(), 1), [4, 4, 2]);
        assert_eq!(sizes(&x.split(20, 1).unwrap(), 1), [10]);
        let parts = x.split_sizes(&[3, 0, 7], 1).unwrap();
        assert_eq!(sizes(&parts, 1), [3, 0, 7]);
        // The pieces are the right elements: joined again they give the source.
        let refs: Vec<&Tensor> = parts.iter().collect();
        assert_eq!(values(&Tensor::cat(&refs, 1).unwrap()), values(&x));
        let pieces = x.chunk(3, 1).unwrap();
        let refs: Vec<&Tensor> = pieces.iter().collect();
        assert_eq!(values(&Tensor::cat(&refs, 1).unwrap()), values(&x));
        // Errors.
        assert!(x.chunk(0, 1).is_err());
        assert!(x.split(0, 1).is_err());
        assert!(x.split_sizes(&[3, 3], 1).is_err());
        assert!(x.split_sizes(&[usize::MAX, 11], 1).is_err());
        assert!(x.split(2, 2).is_err());
    }
}

#[test]
fn repeat_tiles_every_dim_like_torch() {
    for device in devices() {
        for dtype in [DType::F32, DType::F16, DType::BF16, DType::I32, DType::U8] {
            let x = source(&[2, 3], dtype, device);
            let host = values(&x);
            // [2, 3].repeat([2, 1, 2]) -> [2, 2, 6]: out[a][i][j] = x[i][j % 3].
            let got = x.repeat(&[2, 1, 2]).unwrap();
            assert_eq!(got.shape(), &[2, 2, 6]);
            assert_eq!(got.dtype(), dtype);
            let want: Vec<f64> = (0..2)
                .flat_map(|_| (0..2).flat_map(|i| (0..6).map(move |j| (i, j % 3))))
                .map(|(i, j)| host[i * 3 + j])
                .collect();
            assert_eq!(values(&got), want, "{device} {dtype}");
            // Ones change nothing; a zero empties the dim; a view is read through its strides.
            assert_eq!(values(&x.repeat(&[1, 1]).unwrap()), host);
            assert_eq!(x.repeat(&[0, 2]).unwrap().shape(), &[0, 6]);
            let t = x.t().unwrap();
            assert_eq!(
                values(&t.repeat(&[3, 2]).unwrap()),
                values(&t.contiguous().unwrap().repeat(&[3, 2]).unwrap()),
                "{device} {dtype} view"
            );
            assert!(x.repeat(&[2]).is_err(), "{device} too few repetitions");
            assert!(x.repeat(&[usize::MAX, 2]).is_err(), "{device} overflow");
        }
    }
}
