//! TEMPORARY naive CPU storage (f64 reference arithmetic); replaced by the SIMD backend.
#![allow(missing_docs)]
use half::{bf16, f16};

use crate::layout::Layout;
use crate::ops::kinds::{BinaryOp, ReduceOp, UnaryOp};
use crate::{DType, Device, Error, Result, WithDType};

pub enum CpuStorage {
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    I32(Vec<i32>),
    U8(Vec<u8>),
}

macro_rules! each {
    ($s:expr, $v:ident => $e:expr) => {
        match $s {
            CpuStorage::F32($v) => $e,
            CpuStorage::F16($v) => $e,
            CpuStorage::BF16($v) => $e,
            CpuStorage::I32($v) => $e,
            CpuStorage::U8($v) => $e,
        }
    };
}

impl CpuStorage {
    pub fn dtype(&self) -> DType {
        match self {
            CpuStorage::F32(_) => DType::F32,
            CpuStorage::F16(_) => DType::F16,
            CpuStorage::BF16(_) => DType::BF16,
            CpuStorage::I32(_) => DType::I32,
            CpuStorage::U8(_) => DType::U8,
        }
    }
    pub fn len(&self) -> usize {
        each!(self, v => v.len())
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn as_bytes(&self) -> &[u8] {
        each!(self, v => bytemuck::cast_slice(v))
    }
    pub fn from_bytes(dtype: DType, bytes: &[u8]) -> Result<CpuStorage> {
        let n = bytes.len() / dtype.size_in_bytes();
        let f = |i: usize| &bytes[i * dtype.size_in_bytes()..(i + 1) * dtype.size_in_bytes()];
        Ok(match dtype {
            DType::F32 => CpuStorage::F32((0..n).map(|i| bytemuck::pod_read_unaligned(f(i))).collect()),
            DType::F16 => CpuStorage::F16((0..n).map(|i| bytemuck::pod_read_unaligned(f(i))).collect()),
            DType::BF16 => CpuStorage::BF16((0..n).map(|i| bytemuck::pod_read_unaligned(f(i))).collect()),
            DType::I32 => CpuStorage::I32((0..n).map(|i| bytemuck::pod_read_unaligned(f(i))).collect()),
            DType::U8 => CpuStorage::U8(bytes.to_vec()),
        })
    }
    pub fn from_vec<T: WithDType>(v: Vec<T>) -> CpuStorage {
        Self::from_f64(T::DTYPE, v.into_iter().map(|x| x.to_f64()).collect())
    }
    fn from_f64(dtype: DType, v: Vec<f64>) -> CpuStorage {
        match dtype {
            DType::F32 => CpuStorage::F32(v.into_iter().map(f32::from_f64).collect()),
            DType::F16 => CpuStorage::F16(v.into_iter().map(f16::from_f64).collect()),
            DType::BF16 => CpuStorage::BF16(v.into_iter().map(bf16::from_f64).collect()),
            DType::I32 => CpuStorage::I32(v.into_iter().map(|x| if x.is_nan() { 0 } else { x as i32 }).collect()),
            DType::U8 => CpuStorage::U8(v.into_iter().map(|x| if x.is_nan() { 0 } else { x as u8 }).collect()),
        }
    }
    fn gather(&self, layout: &Layout) -> Vec<f64> {
        each!(self, v => layout.offsets().map(|o| v[o].to_f64()).collect())
    }
    pub fn zeros(dtype: DType, n: usize) -> CpuStorage {
        Self::from_f64(dtype, vec![0.0; n])
    }
    pub fn to_vec<T: WithDType>(&self, layout: &Layout) -> Result<Vec<T>> {
        if self.dtype() != T::DTYPE {
            return Err(Error::DTypeMismatch { op: "to_vec", expected: self.dtype(), got: T::DTYPE });
        }
        Ok(self.gather(layout).into_iter().map(T::from_f64).collect())
    }
    pub fn contiguous(&self, layout: &Layout) -> CpuStorage {
        self.cast(layout, self.dtype())
    }
    pub fn cast(&self, layout: &Layout, dtype: DType) -> CpuStorage {
        Self::from_f64(dtype, self.gather(layout))
    }
    pub fn unary(&self, layout: &Layout, op: UnaryOp) -> Result<CpuStorage> {
        Ok(Self::from_f64(self.dtype(), self.gather(layout).into_iter().map(|x| op.apply(x)).collect()))
    }
    pub fn binary(&self, l: &Layout, rhs: &CpuStorage, r: &Layout, op: BinaryOp) -> Result<CpuStorage> {
        let a = self.gather(l);
        let b = rhs.gather(r);
        Ok(Self::from_f64(self.dtype(), a.iter().zip(&b).map(|(&x, &y)| op.apply(x, y)).collect()))
    }
    pub fn reduce(&self, layout: &Layout, dim: usize, op: ReduceOp) -> Result<CpuStorage> {
        let perm: Vec<usize> = (0..layout.rank()).filter(|&d| d != dim).chain([dim]).collect();
        let v = self.gather(&layout.permute(&perm)?);
        let r = layout.shape()[dim];
        let rows = if r == 0 { layout.numel() } else { v.len() / r };
        let out: Vec<f64> = (0..rows)
            .map(|i| {
                let row = &v[i * r..(i + 1) * r];
                match op {
                    ReduceOp::Sum => row.iter().sum(),
                    ReduceOp::Mean => row.iter().sum::<f64>() / r as f64,
                    ReduceOp::Max => row.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                    ReduceOp::Min => row.iter().cloned().fold(f64::INFINITY, f64::min),
                    ReduceOp::ArgMax => row.iter().enumerate().fold((0, f64::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b }).0 as f64,
                    ReduceOp::ArgMin => row.iter().enumerate().fold((0, f64::INFINITY), |b, (i, &x)| if x < b.1 { (i, x) } else { b }).0 as f64,
                }
            })
            .collect();
        let dt = if op.returns_index() { DType::I32 } else { self.dtype() };
        Ok(Self::from_f64(dt, out))
    }
    pub fn softmax(&self, layout: &Layout, dim: usize) -> Result<CpuStorage> {
        let rank = layout.rank();
        let perm: Vec<usize> = (0..rank).filter(|&d| d != dim).chain([dim]).collect();
        let v = self.gather(&layout.permute(&perm)?);
        let r = layout.shape()[dim].max(1);
        let mut out = v.clone();
        for row in out.chunks_mut(r) {
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = row.iter().map(|x| (x - m).exp()).sum();
            row.iter_mut().for_each(|x| *x = (*x - m).exp() / s);
        }
        // back to original order
        let moved: Vec<usize> = perm.iter().map(|&p| layout.shape()[p]).collect();
        let mut inv = vec![0; rank];
        for (i, &p) in perm.iter().enumerate() {
            inv[p] = i;
        }
        let view = Layout::contiguous(&moved).permute(&inv)?;
        let tmp = Self::from_f64(DType::F32, out);
        let _ = Device::Cpu;
        Ok(Self::from_f64(self.dtype(), tmp.gather(&view)))
    }
    pub fn matmul(&self, l: &Layout, rhs: &CpuStorage, r: &Layout) -> Result<CpuStorage> {
        let a = self.gather(l);
        let b = rhs.gather(r);
        let rank = l.rank();
        let (m, k, n) = (l.shape()[rank - 2], l.shape()[rank - 1], r.shape()[rank - 1]);
        let batch: usize = l.shape()[..rank - 2].iter().product();
        let mut out = vec![0.0; batch * m * n];
        for bi in 0..batch {
            for i in 0..m {
                for j in 0..n {
                    out[bi * m * n + i * n + j] = (0..k).map(|p| a[bi * m * k + i * k + p] * b[bi * k * n + p * n + j]).sum();
                }
            }
        }
        Ok(Self::from_f64(self.dtype(), out))
    }
    pub fn cat(parts: &[(&CpuStorage, &Layout)], dim: usize) -> Result<CpuStorage> {
        let Some((first, l0)) = parts.first() else { return Err(Error::invalid("cat", "no tensors")) };
        let outer: usize = l0.shape()[..dim].iter().product();
        let mut out = Vec::new();
        let data: Vec<Vec<f64>> = parts.iter().map(|(s, l)| s.gather(l)).collect();
        for o in 0..outer {
            for (d, (_, l)) in data.iter().zip(parts) {
                let chunk: usize = l.shape()[dim..].iter().product();
                out.extend_from_slice(&d[o * chunk..(o + 1) * chunk]);
            }
        }
        Ok(Self::from_f64(first.dtype(), out))
    }
}
