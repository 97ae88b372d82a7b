//! The bf16 product method of prepared Cpu weights as an autotuner family
//! (`cpu_bf16_product`): AMX tiles (`amx`), `vdpbf16ps` pairs (`dot`) or bf16 widened to f32 for
//! the FMA kernel (`widen`), each selected by the layout its weight is packed in.
//!
//! The static rule is the layout the weight was packed in at construction: the process's
//! method (`cpu::gemm::bf16_kind`, AMX where usable, else a once-per-process calibration). On
//! the first call of a problem (rows bucketed, K, N, GEGLU or plain) the other methods this CPU
//! can run are measured on the real product, each checked against the rule's result; the layer
//! then keeps its weight packed for the winner. Packing for a candidate (the weight given back
//! by the panels, exactly, and packed again) is left out of its time. Where AMX is the rule
//! the others are not measured (they lose everywhere there), only run when forced: the family
//! chooses between dot products and widening on CPUs without AMX.
//!
//! Invariants: every candidate multiplies the same bf16 values with f32 accumulation (only the
//! summation order differs), so results agree within the bf16 tolerance; f32 and f16 weights,
//! and bf16 ones under an instruction set cap or a configured method, have one candidate and
//! never tune; a forced candidate (`XPU_AUTOTUNE_FORCE=cpu_bf16_product=NAME`) runs only where
//! this CPU can run it.

use std::sync::Arc;

use super::prepared::PreparedProduct;
use super::tuning;
use crate::cpu::gemm::{PackKind, Residual};
use crate::cpu::prepack::PackedWeight;
use crate::cpu::CpuStorage;
use crate::desc::Activation;
use crate::layout::Layout;
use crate::Result;

/// The family's name (what `config::AutotuneConfig::force` takes).
pub(crate) const FAMILY: &str = "cpu_bf16_product";

/// A candidate's name.
fn name(kind: PackKind) -> &'static str {
    match kind {
        PackKind::Amx => "amx",
        PackKind::Bf16 => "dot",
        PackKind::F32 => "widen",
    }
}

/// Results of two bf16 products agree within this fraction of the largest magnitude (bf16
/// outputs rounded from sums in another order).
const TOLERANCE: f32 = 3e-2;

/// `act(x @ B + bias) + residual` on `product`'s packs, by the method the autotuner picks for a
/// bf16 weight (see the module documentation); other weights run their packs as they are.
pub(crate) fn apply_tuned(
    product: &PreparedProduct,
    x: &CpuStorage,
    xl: &Layout,
    bias: Option<&[f32]>,
    activation: Activation,
    residual: Option<Residual>,
) -> Result<CpuStorage> {
    let current = product.current();
    let Some(rule_kind) = current.bf16_layout() else {
        return current.apply(x, xl, bias, activation, residual);
    };
    let mut kinds = crate::cpu::gemm::bf16_kinds();
    if !kinds.contains(&rule_kind) {
        kinds.push(rule_kind);
    }
    let forced = crate::config::with(|c| c.autotune.forced(FAMILY).map(str::to_owned));
    if rule_kind == PackKind::Amx {
        // AMX tiles do 16× the FMA pipes' multiply-adds per cycle: on a Xeon with AMX every
        // bf16 product of SD 1.5's UNet (rows 2 to 8192) measured 1.5–45× faster on them than
        // with dot products or widening, and measuring those took 3.2 s of a first step. They
        // are not measured there, and run only when forced by name.
        kinds.retain(|k| *k == PackKind::Amx || forced.as_deref() == Some(name(*k)));
    }
    // One candidate runs directly, unless forced (then the autotuner records it: `trace`).
    if kinds.len() == 1 && forced.is_none() {
        return current.apply(x, xl, bias, activation, residual);
    }
    let rule = kinds.iter().position(|k| *k == rule_kind).unwrap_or(0);
    let names: Vec<&'static str> = kinds.iter().map(|k| name(*k)).collect();
    let m = xl.shape().first().copied().unwrap_or(0);
    let problem = format!(
        "m {} k {} n {} {}",
        crate::autotune::bucket(m),
        current.k(),
        current.n(),
        if current.is_geglu() { "geglu" } else { "plain" }
    );
    let key = tuning::cpu_key(FAMILY, &problem);
    tuning::run_tuned_repacking(
        &key,
        &names,
        rule,
        &current,
        &|i| packs_for(product, &current, kinds[i]),
        &|packs| packs.apply(x, xl, bias, activation, residual),
        &|a, b| tuning::cpu_agree(a, b, TOLERANCE),
        &|winner| product.replace(winner),
    )
}

/// The packs for `kind`: those in use, or the weight packed again (installed in the layer
/// unless the autotuner is measuring).
fn packs_for(
    product: &PreparedProduct,
    current: &Arc<PackedWeight>,
    kind: PackKind,
) -> Result<Arc<PackedWeight>> {
    if current.bf16_layout() == Some(kind) {
        return Ok(Arc::clone(current));
    }
    let Some(packed) = current.repacked_bf16(kind)? else {
        return Ok(Arc::clone(current));
    };
    let packed = Arc::new(packed);
    if !crate::autotune::measuring() {
        product.replace(Arc::clone(&packed));
    }
    Ok(packed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{scoped, AutotuneMode};

    /// A weight packed for dot products (the rule where AMX is not), tuned on a real product:
    /// every method this CPU runs is measured and agrees with the rule, the call returns the
    /// winner's result, and the layer then holds its weight in the winner's layout, exactly.
    #[test]
    fn a_bf16_weight_is_measured_in_every_layout_and_kept_in_the_winners() {
        let (m, k, n) = (256, 192, 160);
        let w: Vec<half::bf16> = (0..k * n)
            .map(|i| half::bf16::from_f32(((i * 37 % 101) as f32 - 50.0) / 64.0))
            .collect();
        let x: Vec<half::bf16> = (0..m * k)
            .map(|i| half::bf16::from_f32(((i * 11 % 53) as f32 - 26.0) / 32.0))
            .collect();
        let ws = crate::backend::Storage::Cpu(CpuStorage::BF16(w.clone()));
        let product = crate::cpu::gemm::tests::util::with_bf16_kind(Some(PackKind::Bf16), || {
            PreparedProduct::new(&ws, &Layout::contiguous(&[k, n]))
                .unwrap()
                .unwrap()
        });
        assert_eq!(product.current().bf16_layout(), Some(PackKind::Bf16));
        let kinds = crate::cpu::gemm::bf16_kinds();
        if kinds.len() < 2 {
            // One method on this CPU (no AVX-512): nothing to measure.
            #[cfg(target_arch = "x86_64")]
            assert!(!is_x86_feature_detected!("avx512f"), "{kinds:?}");
            return;
        }
        let xs = CpuStorage::BF16(x);
        let xl = Layout::contiguous(&[m, k]);
        let reference = product
            .current()
            .apply(&xs, &xl, None, Activation::None, None)
            .unwrap();
        let got = scoped(
            |c| {
                c.autotune.mode = AutotuneMode::Tune;
                c.autotune.cache_dir = None;
            },
            || apply_tuned(&product, &xs, &xl, None, Activation::None, None).unwrap(),
        );
        assert!(tuning::cpu_agree(&reference, &got, TOLERANCE));
        let record = crate::autotune::report()
            .into_iter()
            .find(|r| r.op == FAMILY && r.problem.starts_with("m 256 k 192 n 160"))
            .expect("measured");
        let measured: Vec<&str> = record
            .candidates
            .iter()
            .filter(|c| c.ms.is_some())
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(measured.len(), kinds.len(), "{record}");
        assert_eq!(
            product.current().bf16_layout().map(name),
            Some(record.winner.as_str())
        );
        let back = product.unpack_transposed().unwrap();
        let crate::backend::Storage::Cpu(CpuStorage::BF16(back)) = &back else {
            panic!("a bf16 weight back");
        };
        // Given back as [n, k]: the transpose of the [k, n] weight.
        for r in 0..k {
            for c in 0..n {
                assert_eq!(back[c * k + r].to_bits(), w[r * n + c].to_bits());
            }
        }
    }
}
