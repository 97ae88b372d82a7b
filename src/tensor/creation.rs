//! Creating tensors: from host data, constants, ranges and seeded random numbers.
//!
//! Everything is built on the host and uploaded once for `Device::Xpu` (zeros are cleared on the
//! GPU instead), so a seeded tensor holds the same values on every device.

use super::{random, Tensor};
use crate::backend::{affine_in_place_f32, alloc, ensure_host_memory, Storage};
use crate::layout::{numel, Layout};
use crate::{DType, Device, Error, Result, WithDType};

fn place<T: WithDType>(data: Vec<T>, shape: &[usize], device: Device) -> Result<Tensor> {
    Ok(Tensor::from_storage(
        Storage::from_vec(data, device)?,
        Layout::contiguous(shape),
    ))
}

/// Generated f32 values in `dtype` on `device` (see [`Storage::from_f32_as`]).
fn place_f32_as(values: Vec<f32>, shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
    Ok(Tensor::from_storage(
        Storage::from_f32_as(values, dtype, device)?,
        Layout::contiguous(shape),
    ))
}

impl Tensor {
    /// A tensor holding `data` (row-major) with `shape` on `device`.
    pub fn from_vec<T: WithDType>(data: Vec<T>, shape: &[usize], device: Device) -> Result<Tensor> {
        if numel(shape) != data.len() {
            return Err(Error::ShapeMismatch {
                op: "from_vec",
                expected: format!("{} elements for shape {shape:?}", numel(shape)),
                got: format!("{} elements", data.len()),
            });
        }
        place(data, shape, device)
    }

    /// A tensor copied from a slice.
    pub fn from_slice<T: WithDType>(data: &[T], shape: &[usize], device: Device) -> Result<Tensor> {
        Tensor::from_vec(alloc::copied("from_slice", data)?, shape, device)
    }

    /// All zeros.
    pub fn zeros(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        let n = numel(shape);
        let storage = Storage::zeros("zeros", dtype, n, device)?;
        Ok(Tensor::from_storage(storage, Layout::contiguous(shape)))
    }

    /// All ones.
    pub fn ones(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        Tensor::full(1.0, shape, dtype, device)
    }

    /// Every element `value` (rounded to `dtype`).
    pub fn full(value: f64, shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        let n = numel(shape);
        ensure_host_memory("full", n, dtype)?;
        fn filled<T: WithDType>(value: f64, n: usize) -> Result<Vec<T>> {
            alloc::filled("full", n, T::from_f64(value))
        }
        match dtype {
            DType::F32 => place(alloc::filled("full", n, value as f32)?, shape, device),
            DType::F16 => place(filled::<half::f16>(value, n)?, shape, device),
            DType::BF16 => place(filled::<half::bf16>(value, n)?, shape, device),
            DType::I32 => place(filled::<i32>(value, n)?, shape, device),
            DType::U8 => place(filled::<u8>(value, n)?, shape, device),
        }
    }

    /// `start, start + step, ...` below `end` (above it for a negative step), as a 1-D tensor.
    pub fn arange(start: f64, end: f64, step: f64, dtype: DType, device: Device) -> Result<Tensor> {
        if step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
            return Err(Error::invalid(
                "arange",
                format!("need finite bounds and a non-zero step, got {start}..{end} step {step}"),
            ));
        }
        let n = ((end - start) / step).ceil().max(0.0) as usize;
        // Each value passes through an f64 (two f32s' bytes).
        ensure_host_memory("arange", n.saturating_mul(2), DType::F32)?;
        let values = alloc::collected("arange", n, (0..n).map(|i| start + i as f64 * step))?;
        fn cast<T: WithDType>(values: &[f64]) -> Result<Vec<T>> {
            alloc::collected(
                "arange",
                values.len(),
                values.iter().map(|&v| T::from_f64(v)),
            )
        }
        match dtype {
            DType::F32 => place(cast::<f32>(&values)?, &[n], device),
            DType::F16 => place(cast::<half::f16>(&values)?, &[n], device),
            DType::BF16 => place(cast::<half::bf16>(&values)?, &[n], device),
            DType::I32 => place(cast::<i32>(&values)?, &[n], device),
            DType::U8 => place(cast::<u8>(&values)?, &[n], device),
        }
    }

    /// Standard normal values from `seed`: the same on every device.
    pub fn randn(shape: &[usize], dtype: DType, device: Device, seed: u64) -> Result<Tensor> {
        ensure_host_memory("randn", numel(shape), DType::F32)?;
        place_f32_as(random::normal(seed, numel(shape))?, shape, dtype, device)
    }

    /// Uniform values in [0, 1) from `seed`: the same on every device.
    pub fn rand(shape: &[usize], dtype: DType, device: Device, seed: u64) -> Result<Tensor> {
        ensure_host_memory("rand", numel(shape), DType::F32)?;
        place_f32_as(random::uniform(seed, numel(shape))?, shape, dtype, device)
    }

    /// `Tensor::rand(shape, F32, Cpu, seed).affine(mul, add)`, the same values, computed in
    /// place: the random initialisation of `nn` models, where a second buffer for SD 1.5's 860M
    /// parameters cost seconds of page faults and copying.
    pub(crate) fn rand_affine_f32(
        shape: &[usize],
        seed: u64,
        mul: f64,
        add: f64,
    ) -> Result<Tensor> {
        ensure_host_memory("rand", numel(shape), DType::F32)?;
        let mut v = random::uniform(seed, numel(shape))?;
        affine_in_place_f32(&mut v, mul as f32, add as f32);
        place(v, shape, Device::Cpu)
    }

    /// Zeros with this tensor's shape, dtype and device.
    pub fn zeros_like(&self) -> Result<Tensor> {
        Tensor::zeros(self.shape(), self.dtype(), self.device())
    }

    /// Ones with this tensor's shape, dtype and device.
    pub fn ones_like(&self) -> Result<Tensor> {
        Tensor::ones(self.shape(), self.dtype(), self.device())
    }

    /// `value` (rounded to this dtype) with this tensor's shape, dtype and device.
    pub fn full_like(&self, value: f64) -> Result<Tensor> {
        Tensor::full(value, self.shape(), self.dtype(), self.device())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The in-place initialisation gives exactly `rand(..).affine(..)`, across chunk edges.
    #[test]
    fn rand_affine_matches_rand_then_affine() -> Result<()> {
        for (n, seed) in [(1usize, 3u64), (4095, 4), (4096, 5), (10_007, 6)] {
            let (mul, add) = (0.173, -0.0865);
            let want = Tensor::rand(&[n], DType::F32, Device::Cpu, seed)?
                .affine(mul, add)?
                .to_vec::<f32>()?;
            let got = Tensor::rand_affine_f32(&[n], seed, mul, add)?.to_vec::<f32>()?;
            assert_eq!(got.len(), n);
            let same = got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "n {n}: in-place affine differs");
            assert!(got
                .iter()
                .all(|&x| (add as f32..=(add + mul) as f32).contains(&x)));
        }
        Ok(())
    }
}
