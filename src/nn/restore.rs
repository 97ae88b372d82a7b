//! Ways a Cpu layer can give back a weight it does not hold: the weight made again by its
//! source ([`WeightRestore::Regenerate`]), read back from implicit-GEMM packs
//! ([`WeightRestore::Packs`]), or kept in a 16-bit dtype that holds every value exactly
//! ([`WeightRestore::Narrow`]).
//!
//! Why: a Cpu convolution runs from its prepacked panels, and a Winograd layer's panels are the
//! filters transformed (`G·g·Gᵀ`, rounded), from which the 3×3 weight cannot be recovered bit for
//! bit. Keeping the weight tensor as well cost an f32 SD 1.5 UNet 2.1 GB of its 7.7 GB. Seeded
//! random weights (`UNet2DConditionModel::random`, the example's and benchmarks' model) are
//! cheap to draw again from their seed and name; weights read from a 16-bit checkpoint into an
//! f32 model take half the memory in their own dtype.
//!
//! Invariants: [`WeightRestore::rebuild`] returns, on the Cpu and contiguous, exactly the values,
//! shape and dtype of the weight the layer was built from (a regenerator is only made by a
//! source whose draws depend on nothing but their name and seed; a narrow copy is only made
//! after every value was checked to round-trip; a packs restore only for a layer packed for the
//! implicit GEMM, whose panels hold the weight's values exactly, and such a layer keeps its
//! weight tensor before its packs change to another kernel's: `Conv2d::weight_for_repack`);
//! the caller ([`super::held_weight::HeldWeight`]) checks shape and dtype again.

use std::sync::Arc;

use half::{bf16, f16};

use crate::backend::prepared::LayerConv;
use crate::{DType, Device, Error, Layout, Result, Tensor};

/// Draws a parameter again, bit for bit (see the module invariants).
pub(crate) type Regenerate = Arc<dyn Fn() -> Result<Tensor> + Send + Sync>;

/// How a layer that holds only its packs gives its weight back.
#[derive(Clone)]
pub(crate) enum WeightRestore {
    /// Draw it again from the source that made it.
    Regenerate(Regenerate),
    /// Read back from the layer's implicit-GEMM packs (see the module invariants).
    Packs {
        /// The layer's packs.
        layer: Arc<LayerConv>,
        /// The weight's shape.
        shape: Vec<usize>,
        /// The weight's dtype.
        dtype: DType,
    },
    /// The weight in f16 or bf16, every value exact; widened to `dtype` on demand.
    Narrow {
        /// The 16-bit copy (contiguous, Cpu).
        copy: Tensor,
        /// The weight's own dtype.
        dtype: DType,
    },
}

impl WeightRestore {
    /// A narrow copy of `w` when `w` is a contiguous f32 Cpu tensor whose every value is an
    /// f16 or a bf16 value (as a 16-bit checkpoint read into an f32 model is); else `None`.
    pub(crate) fn narrow_exact(w: &Tensor) -> Option<WeightRestore> {
        if w.device() != Device::Cpu || w.dtype() != DType::F32 || !w.is_contiguous() {
            return None;
        }
        let values = w.storage().cpu_f32_run(w.layout())?;
        let f16_exact = |v: &f32| f16::from_f32(*v).to_f32().to_bits() == v.to_bits();
        let bf16_exact = |v: &f32| bf16::from_f32(*v).to_f32().to_bits() == v.to_bits();
        let narrow = if values.iter().all(f16_exact) {
            DType::F16
        } else if values.iter().all(bf16_exact) {
            DType::BF16
        } else {
            return None;
        };
        let copy = w.to_dtype(narrow).ok()?;
        Some(WeightRestore::Narrow {
            copy,
            dtype: DType::F32,
        })
    }

    /// A restore from `layer`'s packs for a weight of `shape` and `dtype`, when they are the
    /// implicit GEMM's (which hold its values exactly); `None` for Winograd packs.
    pub(crate) fn from_packs(
        layer: &Arc<LayerConv>,
        shape: &[usize],
        dtype: DType,
    ) -> Option<WeightRestore> {
        (!layer.current().is_winograd()).then(|| WeightRestore::Packs {
            layer: Arc::clone(layer),
            shape: shape.to_vec(),
            dtype,
        })
    }

    /// The weight again (see the module invariants), or why it could not be made (out of
    /// memory; a checkpoint file changed since loading).
    pub(crate) fn try_rebuild(&self) -> Result<Tensor> {
        match self {
            WeightRestore::Regenerate(draw) => draw(),
            WeightRestore::Packs {
                layer,
                shape,
                dtype,
            } => layer
                .unpack_weight(*dtype)
                .map(|s| Tensor::from_storage(s, Layout::contiguous(shape)))
                .ok_or_else(|| {
                    Error::invalid("Conv2d", "the weight back from packs that cannot give it")
                }),
            WeightRestore::Narrow { copy, dtype } => copy.to_dtype(*dtype),
        }
    }

    /// [`Self::try_rebuild`] for the infallible accessors: a failure is reported on stderr and
    /// gives `None` (the caller then hands out zeros; conversions and repacking use
    /// [`Self::try_rebuild`] and fail instead).
    pub(crate) fn rebuild(&self) -> Option<Tensor> {
        self.try_rebuild().map_err(|e| eprintln!("xpu: {e}")).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact_bits(t: &Tensor) -> Vec<u32> {
        t.to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect()
    }

    #[test]
    fn narrow_copies_are_made_only_for_exact_values_and_give_them_back() {
        let halves: Vec<f32> = (0..257)
            .map(|i| f16::from_f32(i as f32 * 0.37 - 40.0).to_f32())
            .collect();
        let brains: Vec<f32> = (0..65)
            .map(|i| bf16::from_f32(i as f32 * 1e6 - 3e7).to_f32())
            .collect();
        let mut full: Vec<f32> = halves.clone();
        full[100] = 0.1; // not an f16 nor a bf16 value
        for (values, want) in [
            (halves, Some(DType::F16)),
            (brains, Some(DType::BF16)),
            (full, None),
        ] {
            let n = values.len();
            let w = Tensor::from_vec(values, &[n], Device::Cpu).unwrap();
            let got = WeightRestore::narrow_exact(&w);
            match (&got, want) {
                (Some(WeightRestore::Narrow { copy, dtype }), Some(narrow)) => {
                    assert_eq!(copy.dtype(), narrow);
                    assert_eq!(*dtype, DType::F32);
                    let back = got.as_ref().unwrap().rebuild().unwrap();
                    assert_eq!(exact_bits(&back), exact_bits(&w));
                }
                (None, None) => {}
                _ => panic!("{n} values: wanted {want:?}"),
            }
        }
        // Not f32, or a view: no copy.
        let w16 = Tensor::zeros(&[4], DType::F16, Device::Cpu).unwrap();
        assert!(WeightRestore::narrow_exact(&w16).is_none());
        let m = Tensor::zeros(&[3, 5], DType::F32, Device::Cpu).unwrap();
        assert!(WeightRestore::narrow_exact(&m.t().unwrap()).is_none());
    }

    fn bits(t: &Tensor) -> Vec<u32> {
        exact_bits(&t.to_dtype(DType::F32).unwrap())
    }

    /// Layers that own their weight hold only their packs (Winograd, 1×1 and stride-2 implicit
    /// GEMM panels alike), compute what a layer holding the weight computes, check inputs with
    /// the stand-in, and give the weight back bit for bit without keeping it on conversions.
    #[test]
    fn conv_layers_that_own_their_weight_hold_only_packs_and_give_it_back() {
        // Bit-for-bit comparisons of two layers: both on the static rules' kernels.
        crate::config::scoped(
            |c| c.autotune.mode = crate::config::AutotuneMode::Off,
            conv_layers_hold_only_packs,
        );
    }

    fn conv_layers_hold_only_packs() {
        use crate::nn::weights::{Init, ParamSource, RandomSource};
        use crate::nn::Conv2d;
        use crate::{Conv2dParams, Error};
        let pad1 = Conv2dParams {
            padding: (1, 1),
            ..Conv2dParams::default()
        };
        let stride2 = Conv2dParams {
            stride: (2, 2),
            ..pad1
        };
        let cases = [
            ([20, 18, 3, 3], pad1, true),
            ([7, 5, 1, 1], Conv2dParams::default(), false),
            ([17, 16, 3, 3], stride2, false),
        ];
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for (shape, params, winograd) in cases {
                let mut src = RandomSource {
                    dtype,
                    device: Device::Cpu,
                    seed: 3,
                };
                let init = Init::FanIn(shape[1] * shape[2] * shape[3]);
                let w = src.get("conv.weight", &shape, init).unwrap();
                let regenerate = src.regenerate("conv.weight", &shape, init);
                let b = Tensor::randn(&[shape[0]], dtype, Device::Cpu, 4).unwrap();
                let layer =
                    Conv2d::new_owned(w.clone(), Some(b.clone()), params, regenerate).unwrap();
                let plain = Conv2d::new(w.clone(), Some(b), params).unwrap();
                let what = format!("{dtype} {shape:?}");
                assert!(!layer.holds_weight_tensor(), "{what}: packs only");
                assert!(
                    plain.holds_weight_tensor(),
                    "{what}: new() keeps the tensor"
                );
                if dtype == DType::F32 {
                    assert_eq!(layer.uses_winograd(), winograd, "{what}: path");
                }
                let x = Tensor::randn(&[2, shape[1], 9, 7], dtype, Device::Cpu, 5).unwrap();
                let want = bits(&plain.forward(&x).unwrap());
                assert_eq!(bits(&layer.forward(&x).unwrap()), want, "{what}: forward");
                let other = if dtype == DType::F32 {
                    DType::F16
                } else {
                    DType::F32
                };
                assert!(
                    matches!(
                        layer.forward(&x.to_dtype(other).unwrap()),
                        Err(Error::DTypeMismatch { .. })
                    ),
                    "{what}: dtype check"
                );
                let narrow_x = x.narrow(1, 0, shape[1] - 1).unwrap();
                // The stand-in's checks say what the weight's say.
                let (got, plain_err) = (layer.forward(&narrow_x), plain.forward(&narrow_x));
                assert!(got.is_err(), "{what}: channel check");
                assert_eq!(format!("{got:?}"), format!("{plain_err:?}"), "{what}");
                let wide = layer.to_dtype(DType::F32).unwrap();
                assert!(!layer.holds_weight_tensor(), "{what}: to_dtype kept a copy");
                assert_eq!(bits(wide.weight()), bits(&w), "{what}: to_dtype values");
                assert_eq!(bits(layer.weight()), bits(&w), "{what}: rebuilt weight");
                assert!(layer.holds_weight_tensor(), "{what}: weight() keeps it");
                assert_eq!(bits(&layer.forward(&x).unwrap()), want, "{what}: after");
            }
        }
    }

    /// Without a regenerator, layers packed for the implicit GEMM (1×1, strided, grouped, few
    /// channels; every dtype) give their weight back from the panels, bit for bit, and keep it
    /// once the autotuner's forced Winograd replaces those panels, whose weight then still comes
    /// back exactly.
    #[test]
    fn implicit_gemm_layers_give_their_weight_back_from_their_packs() {
        use crate::nn::Conv2d;
        use crate::Conv2dParams;
        let pad1 = Conv2dParams {
            padding: (1, 1),
            ..Conv2dParams::default()
        };
        let cases = [
            ([7, 5, 1, 1], Conv2dParams::default()),
            (
                [17, 16, 3, 3],
                Conv2dParams {
                    stride: (2, 2),
                    ..pad1
                },
            ),
            ([12, 3, 3, 3], Conv2dParams { groups: 2, ..pad1 }),
            ([9, 6, 3, 3], pad1),
        ];
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for (i, (shape, params)) in cases.into_iter().enumerate() {
                let cin = shape[1] * params.groups;
                // Values of full f32 precision (no narrow copy could hold them).
                let w = Tensor::randn(&shape, DType::F32, Device::Cpu, 10 + i as u64)
                    .unwrap()
                    .mul_scalar(1.0 + 1e-3)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap();
                let layer = Conv2d::new_owned(w.clone(), None, params, None).unwrap();
                let what = format!("{dtype} {shape:?} {params:?}");
                assert!(!layer.uses_winograd(), "{what}: implicit GEMM");
                assert!(!layer.holds_weight_tensor(), "{what}: packs only");
                let x = Tensor::randn(&[2, cin, 9, 7], dtype, Device::Cpu, 5).unwrap();
                let y = layer.forward(&x).unwrap();
                assert_eq!(bits(&layer.weight_owned()), bits(&w), "{what}: from packs");
                assert!(
                    !layer.holds_weight_tensor(),
                    "{what}: owned() keeps nothing"
                );
                let wide = layer.to_dtype(DType::F32).unwrap();
                assert_eq!(bits(wide.weight()), bits(&w), "{what}: to_dtype");
                assert_eq!(
                    bits(&layer.forward(&x).unwrap()),
                    bits(&y),
                    "{what}: forward"
                );
            }
        }
        // A 3×3 bf16 layer on implicit-GEMM panels (AMX's rule) forced to Winograd F(2,3):
        // the layer keeps its weight before the panels change, and still gives it back.
        let big = [32, 32, 3, 3];
        let w = Tensor::randn(&big, DType::BF16, Device::Cpu, 30).unwrap();
        let layer = crate::config::scoped(
            |c| c.autotune.force("cpu_conv2d", "implicit_gemm"),
            || Conv2d::new_owned(w.clone(), None, pad1, None).unwrap(),
        );
        assert!(!layer.uses_winograd() && !layer.holds_weight_tensor());
        let x = Tensor::randn(&[1, 32, 8, 8], DType::BF16, Device::Cpu, 31).unwrap();
        crate::config::scoped(
            |c| c.autotune.force("cpu_conv2d", "winograd_f2"),
            || layer.forward(&x).unwrap(),
        );
        assert!(layer.uses_winograd(), "forced Winograd packs installed");
        assert!(layer.holds_weight_tensor(), "weight kept before the switch");
        assert_eq!(bits(layer.weight()), bits(&w), "weight after the switch");
    }

    /// Without a regenerator, a layer owning an f32 weight of 16-bit values keeps a 16-bit copy
    /// and gives the weight back exactly; full-precision values keep the tensor.
    #[test]
    fn conv_layers_keep_16_bit_values_narrow_and_other_weights_whole() {
        use crate::nn::Conv2d;
        use crate::Conv2dParams;
        let params = Conv2dParams {
            padding: (1, 1),
            ..Conv2dParams::default()
        };
        let full = Tensor::randn(&[16, 17, 3, 3], DType::F32, Device::Cpu, 6).unwrap();
        for (w, packs_only) in [
            (
                full.to_dtype(DType::F16)
                    .unwrap()
                    .to_dtype(DType::F32)
                    .unwrap(),
                true,
            ),
            (
                full.to_dtype(DType::BF16)
                    .unwrap()
                    .to_dtype(DType::F32)
                    .unwrap(),
                true,
            ),
            (full.clone(), false),
        ] {
            let layer = Conv2d::new_owned(w.clone(), None, params, None).unwrap();
            assert_eq!(!layer.holds_weight_tensor(), packs_only);
            assert_eq!(bits(layer.weight()), bits(&w));
        }
        // A channels-last weight keeps its tensor (the stand-in has standard strides' format).
        let cl = full
            .to_dtype(DType::F16)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .to_memory_format(crate::MemoryFormat::ChannelsLast)
            .unwrap();
        assert!(Conv2d::new_owned(cl, None, params, None)
            .unwrap()
            .holds_weight_tensor());
    }
}
