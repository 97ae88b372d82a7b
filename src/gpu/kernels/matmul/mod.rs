//! Batched matrix products on Xpu with fused epilogues:
//! `out = act(alpha * A@B + beta * C + bias) + residual`, or GEGLU over the product's column
//! halves (`matmul*.wgsl` in this folder).
//!
//! Invariants: A and B are read in place through their strides (transposed or broadcast
//! operands need no copy); the product accumulates in f32; the epilogue runs in the kernel's
//! store, except on the `Simple` engine (an f32 product, then one `epilogue` pass) and for
//! split-K products (`split_k`: f32 partials the same pass sums). Output
//! words are written by exactly one invocation: 16-bit outputs are stored in column pairs with
//! an even row pitch, so for odd N the kernel writes rows of N+1 (the last lane zero) and one
//! strided copy packs them. C and residual arrive broadcast to `[..batch, M, N]`, bias as a
//! 1-D view; operands that are absent are bound to A's buffer and never read. All indices are
//! 32-bit: every buffer involved is checked to fit.

pub(crate) mod coop16_tiles;
pub(crate) mod coop_check;
pub(crate) mod select;
mod split;
pub(crate) mod split_k;

use crate::desc::Activation;
use crate::desc::MatmulKernel;
use crate::gpu::kernels::dispatch;
use crate::gpu::kernels::params::{
    u32_arg, Params, EXTRA, OFFSET0, OFFSET1, RANK, SHAPE, STRIDES0, STRIDES1,
};
use crate::gpu::pipelines::{PipelineKey, ShaderId};
use crate::gpu::XpuStorage;
use crate::layout::Layout;
use crate::{DType, Device, Error, Result};
pub(crate) use select::{Engine, Shape};

/// First parameter word of the C / residual batch strides (see `matmul.wgsl`).
const EPI_BATCH_STRIDES: usize = 51;
/// Parameter words of split K: the number of splits, then K per split (`matmul.wgsl`).
pub(crate) const SPLITS: usize = 2;

/// An optional Xpu operand with its layout.
pub(crate) type Operand<'a> = Option<(&'a XpuStorage, &'a Layout)>;

/// The epilogue of one product, with Xpu operands (views broadcast to the output).
pub(crate) struct Epilogue<'a> {
    pub op: &'static str,
    pub alpha: f32,
    pub beta: f32,
    pub c: Operand<'a>,
    pub bias: Operand<'a>,
    pub residual: Operand<'a>,
    pub activation: Activation,
    pub geglu: bool,
    pub kernel: MatmulKernel,
    pub out_dtype: DType,
}

impl Epilogue<'_> {
    /// No epilogue: the product itself, as `out_dtype`.
    pub(crate) fn identity(op: &'static str, kernel: MatmulKernel, out_dtype: DType) -> Self {
        Epilogue {
            op,
            alpha: 1.0,
            beta: 0.0,
            c: None,
            bias: None,
            residual: None,
            activation: Activation::None,
            geglu: false,
            kernel,
            out_dtype,
        }
    }

    fn flags(&self) -> u32 {
        let act = crate::gpu::kernels::conv::activation_code(self.activation);
        u32::from(self.c.is_some())
            | u32::from(self.bias.is_some()) << 1
            | u32::from(self.residual.is_some()) << 2
            | u32::from(self.geglu) << 3
            | act << 8
    }

    fn is_identity(&self) -> bool {
        self.alpha == 1.0 && self.flags() == 0
    }
}

/// Shape of one product: `[..batch, M, K] @ [..batch, K, np]` with N output columns.
struct Problem<'a> {
    lhs: &'a Layout,
    rhs: &'a Layout,
    batch_shape: &'a [usize],
    batch: usize,
    m: usize,
    k: usize,
    np: usize,
    n: usize,
    /// Output row pitch in elements (N, or N+1 for 16-bit outputs with odd N).
    pitch: usize,
}

impl Problem<'_> {
    /// B's columns are contiguous in K (a transposed weight).
    fn b_col_major(&self) -> bool {
        let st = self.rhs.strides();
        let rank = st.len();
        st[rank - 2] == 1 && st[rank - 1] != 1
    }
}

/// What choosing a product's kernel needs: the product's shape, its batch, and the kernels
/// that can run it (the rule's at `rule`).
pub(crate) struct ProductPlan {
    /// Dtype, `[m, n, k]` and B's layout.
    pub shape: Shape,
    /// Product columns (N, or 2N under GEGLU).
    pub np: usize,
    /// Batches.
    pub batch: usize,
    /// The epilogue is GEGLU (a tile covers half its columns of output).
    pub geglu: bool,
    /// The kernels that can run it ([`select::candidates`]).
    pub engines: Vec<Engine>,
    /// The index of the rule's kernel in `engines`.
    pub rule: usize,
}

impl ProductPlan {
    /// Whether the product has no output element (any kernel returns an empty storage).
    pub(crate) fn is_empty(&self) -> bool {
        let [m, n, _] = self.shape.mnk;
        self.batch * m * n == 0
    }

    /// Output tiles (workgroups before any split, all batches) of `engine`.
    pub(crate) fn tiles(&self, engine: Engine) -> usize {
        let [m, n, _] = self.shape.mnk;
        let groups = match engine.geometry(self.shape.b_col_major) {
            Some(g) => {
                let cols = if self.geglu { g.tile_n / 2 } else { g.tile_n };
                n.div_ceil(cols.max(1)) * m.div_ceil(g.tile_m)
            }
            None => self.np.div_ceil(64) * m.div_ceil(64),
        };
        groups * self.batch
    }

    /// The static rule's split count on `engine` ([`split_k::rule`]; 1 on kernels that do not
    /// split K).
    pub(crate) fn rule_splits(&self, engine: Engine) -> usize {
        if engine.splits_k() {
            split_k::rule(self.tiles(engine), self.shape.mnk[2], engine.plans_splits())
        } else {
            1
        }
    }
}

impl XpuStorage {
    /// The fused product of `ops::fused` (operands already validated and broadcast there) on
    /// the static rule's kernel and split (what the self-checks compare against).
    pub(crate) fn matmul_fused(
        &self,
        lhs: &Layout,
        rhs: &XpuStorage,
        rhs_layout: &Layout,
        ep: &Epilogue,
    ) -> Result<XpuStorage> {
        let plan = self.matmul_plan(lhs, rhs, rhs_layout, ep)?;
        let engine = plan.engines[plan.rule];
        let splits = plan.rule_splits(engine);
        self.matmul_on(lhs, rhs, rhs_layout, ep, engine, splits)
    }

    /// Checks a product (`lhs` [..batch, M, K], `rhs` [..batch, K, N] with identical
    /// broadcast batch dims, the epilogue's operands) and lists the kernels that can run it.
    pub(crate) fn matmul_plan(
        &self,
        lhs: &Layout,
        rhs: &XpuStorage,
        rhs_layout: &Layout,
        ep: &Epilogue,
    ) -> Result<ProductPlan> {
        let pr = self.problem(lhs, rhs, rhs_layout, ep)?;
        let shape = Shape {
            dtype: self.dtype,
            mnk: [pr.m, pr.n, pr.k],
            b_col_major: pr.b_col_major(),
            geglu: ep.geglu,
        };
        let limits = coop16_tiles::TileLimits {
            invocations: self.ctx.limits.max_compute_invocations_per_workgroup,
            workgroup_bytes: self.ctx.limits.max_compute_workgroup_storage_size,
        };
        let (engines, rule) = select::candidates(
            ep.op,
            ep.kernel,
            &self.ctx.features,
            &limits,
            shape,
            &coop_check::verdict,
        )?;
        Ok(ProductPlan {
            shape,
            np: pr.np,
            batch: pr.batch,
            geglu: ep.geglu,
            engines,
            rule,
        })
    }

    /// The product on `engine` (one that [`Self::matmul_plan`] lists for it) with K cut into
    /// `splits` (1: whole; more only on a kernel that splits, see [`split_k::split`]).
    pub(crate) fn matmul_on(
        &self,
        lhs: &Layout,
        rhs: &XpuStorage,
        rhs_layout: &Layout,
        ep: &Epilogue,
        engine: Engine,
        splits: usize,
    ) -> Result<XpuStorage> {
        let op = ep.op;
        let pr = self.problem(lhs, rhs, rhs_layout, ep)?;
        if splits > 1 && !engine.splits_k() {
            return Err(Error::invalid(
                op,
                format!("the {} kernel does not split K", engine.name()),
            ));
        }
        if engine == Engine::GemvSubgroup && !(pr.b_col_major() && self.ctx.features.subgroup) {
            return Err(Error::invalid(
                op,
                "the subgroup GEMV needs SUBGROUP and B's columns contiguous in K",
            ));
        }
        if matches!(engine, Engine::Coop | Engine::Coop16) {
            // A cooperative engine serves calls only after it computed a known product right.
            coop_check::verdict().map_err(|why| Error::invalid(op, why))?;
        }
        if pr.batch * pr.m * pr.n == 0 {
            return XpuStorage::alloc(&self.ctx, ep.out_dtype, 0);
        }
        let split = split_k::split(pr.k, splits);
        let out = match engine {
            Engine::Simple => self.matmul_simple(rhs, &pr, ep, split)?,
            _ => self.matmul_tiled(rhs, &pr, ep, engine, split)?,
        };
        if pr.pitch == pr.n {
            return Ok(out);
        }
        let (batch, m, n, pitch) = (pr.batch, pr.m, pr.n, pr.pitch);
        let packed = Layout::from_parts(vec![batch, m, n], vec![m * pitch, pitch, 1], 0);
        out.copy_cast(&packed, ep.out_dtype)
    }

    /// The checked problem of a product.
    fn problem<'a>(
        &self,
        lhs: &'a Layout,
        rhs: &XpuStorage,
        rhs_layout: &'a Layout,
        ep: &Epilogue,
    ) -> Result<Problem<'a>> {
        let op = ep.op;
        self.check_same_context(rhs, op)?;
        if !self.dtype.is_float() || rhs.dtype != self.dtype {
            return Err(Error::UnsupportedDType {
                op,
                dtype: if self.dtype.is_float() {
                    rhs.dtype
                } else {
                    self.dtype
                },
                device: Device::Xpu,
                hint: "; matmul takes f32, f16 or bf16 operands of one dtype".into(),
            });
        }
        if ep.out_dtype != self.dtype && ep.out_dtype != DType::F32 {
            return Err(Error::invalid(
                op,
                format!(
                    "output dtype must be {} or f32, got {}",
                    self.dtype, ep.out_dtype
                ),
            ));
        }
        for (s, _) in [ep.c, ep.bias, ep.residual].into_iter().flatten() {
            self.check_same_context(s, op)?;
            if s.dtype != self.dtype {
                return Err(Error::invalid(
                    op,
                    format!("epilogue operands must be {}, got {}", self.dtype, s.dtype),
                ));
            }
            u32_arg(op, s.len)?;
        }
        let rank = lhs.rank();
        if rank < 2 || rhs_layout.rank() != rank {
            return Err(Error::invalid(
                op,
                "operands must be [..batch, M, K] and [..batch, K, N]",
            ));
        }
        let (m, k, np) = (
            lhs.shape()[rank - 2],
            lhs.shape()[rank - 1],
            rhs_layout.shape()[rank - 1],
        );
        let n = if ep.geglu { np / 2 } else { np };
        let batch_shape = &lhs.shape()[..rank - 2];
        let batch: usize = batch_shape.iter().product();
        let pitch = if ep.out_dtype.size_in_bytes() == 2 && n % 2 == 1 {
            n + 1
        } else {
            n
        };
        u32_arg(op, self.len)?;
        u32_arg(op, rhs.len)?;
        u32_arg(op, batch * m * pitch.max(np))?;
        if EPI_BATCH_STRIDES + 2 * batch_shape.len() > crate::gpu::stream::PARAM_WORDS {
            return Err(Error::invalid(
                op,
                format!("at most 6 batch dims, got {}", batch_shape.len()),
            ));
        }
        Ok(Problem {
            lhs,
            rhs: rhs_layout,
            batch_shape,
            batch,
            m,
            k,
            np,
            n,
            pitch,
        })
    }

    /// One fused kernel over all batches (in chunks of the adapter's z limit).
    fn matmul_tiled(
        &self,
        rhs: &XpuStorage,
        pr: &Problem,
        ep: &Epilogue,
        engine: Engine,
        split: Option<(usize, usize)>,
    ) -> Result<XpuStorage> {
        let b_col_major = pr.b_col_major();
        let Some(geo) = engine.geometry(b_col_major) else {
            return Err(Error::invalid(
                ep.op,
                format!("{engine:?} has no fused kernel"),
            ));
        };
        let (tile_n, tile_m) = (geo.tile_n, geo.tile_m);
        let tile_cols = if ep.geglu { tile_n / 2 } else { tile_n };
        let groups = [pr.n.div_ceil(tile_cols), pr.m.div_ceil(tile_m)];
        let key = PipelineKey {
            shader: geo.shader,
            entry: geo.entry,
            dt_in: self.dtype,
            dt_out: ep.out_dtype,
            workgroup: geo.workgroup,
            variant: geo.variant,
        };
        if let Some(split) = split {
            return self.matmul_split(rhs, pr, ep, key, [tile_n, tile_m], split);
        }
        let out = XpuStorage::alloc(&self.ctx, ep.out_dtype, pr.batch * pr.m * pr.pitch)?;
        let bindings = self.bindings(rhs, ep);
        self.per_batch_chunk(ep.op, pr.batch, 1, |first, count| {
            let p = params(pr, ep, pr.batch, first)?;
            let grid = [groups[0], groups[1], count];
            dispatch(&out, key, p, &bindings, grid, ep.op)
        })?;
        Ok(out)
    }

    /// The simple engine: the f32 product (K cut as `split` says), then the epilogue pass
    /// (skipped when it is the identity on an unsplit f32 output).
    fn matmul_simple(
        &self,
        rhs: &XpuStorage,
        pr: &Problem,
        ep: &Epilogue,
        split: Option<(usize, usize)>,
    ) -> Result<XpuStorage> {
        let (splits, kc) = split.unwrap_or((1, 0));
        let prod = XpuStorage::alloc(&self.ctx, DType::F32, pr.batch * splits * pr.m * pr.np)?;
        let groups = [pr.np.div_ceil(64), pr.m.div_ceil(64)];
        self.per_batch_chunk(ep.op, pr.batch, splits, |first, count| {
            let mut p = params(pr, ep, pr.batch, first)?;
            p.set(SPLITS, splits, ep.op)?.set(SPLITS + 1, kc, ep.op)?;
            let grid = [groups[0], groups[1], count * splits];
            let bindings = [(2, self), (3, rhs)];
            dispatch(
                &prod,
                self.simple_key("matmul", DType::F32),
                p,
                &bindings,
                grid,
                ep.op,
            )
        })?;
        if splits == 1 && ep.out_dtype == DType::F32 && ep.is_identity() {
            return Ok(prod);
        }
        self.epilogue_pass(&prod, rhs, pr, ep, splits)
    }

    /// A pipeline of `matmul.wgsl` itself (the simple engine's product or the epilogue
    /// pass) reading this storage's dtype.
    pub(crate) fn simple_key(&self, entry: &'static str, dt_out: DType) -> PipelineKey {
        PipelineKey {
            shader: ShaderId::Matmul,
            entry,
            dt_in: self.dtype,
            dt_out,
            workgroup: 256,
            variant: 0,
        }
    }

    /// The epilogue pass over an f32 product `prod` (`[batch, splits, M, np]`, the partials
    /// summed when `splits > 1`) into a new output.
    fn epilogue_pass(
        &self,
        prod: &XpuStorage,
        rhs: &XpuStorage,
        pr: &Problem,
        ep: &Epilogue,
        splits: usize,
    ) -> Result<XpuStorage> {
        let out = XpuStorage::alloc(&self.ctx, ep.out_dtype, pr.batch * pr.m * pr.pitch)?;
        let words = pr.batch * pr.m * pr.pitch / if ep.out_dtype == DType::F32 { 1 } else { 2 };
        let mut p = params(pr, ep, words, 0)?;
        p.set(SPLITS, splits, ep.op)?;
        let mut bindings = self.bindings(rhs, ep);
        bindings[0] = (2, prod);
        bindings.remove(1);
        let max = self.ctx.limits.max_compute_workgroups_per_dimension;
        let grid = crate::gpu::kernels::params::grid(words.div_ceil(256), max);
        let grid = [grid[0] as usize, grid[1] as usize, 1];
        dispatch(
            &out,
            self.simple_key("epilogue", ep.out_dtype),
            p,
            &bindings,
            grid,
            ep.op,
        )?;
        Ok(out)
    }

    /// Bindings 2..=6: A, B, C, bias, residual (absent ones bound to A).
    fn bindings<'a>(
        &'a self,
        rhs: &'a XpuStorage,
        ep: &Epilogue<'a>,
    ) -> Vec<(u32, &'a XpuStorage)> {
        let or_a = |x: Operand<'a>| x.map_or(self, |(s, _)| s);
        vec![
            (2, self),
            (3, rhs),
            (4, or_a(ep.c)),
            (5, or_a(ep.bias)),
            (6, or_a(ep.residual)),
        ]
    }

    /// Calls `f(first, count)` over the batch in chunks the z dimension allows (`per_batch`
    /// workgroups along z per batch).
    fn per_batch_chunk(
        &self,
        op: &'static str,
        batch: usize,
        per_batch: usize,
        mut f: impl FnMut(usize, usize) -> Result<()>,
    ) -> Result<()> {
        let max =
            (self.ctx.limits.max_compute_workgroups_per_dimension as usize / per_batch).max(1);
        let mut first = 0;
        while first < batch {
            let count = (batch - first).min(max);
            u32_arg(op, count)?;
            f(first, count)?;
            first += count;
        }
        Ok(())
    }
}

/// The parameter block of `matmul.wgsl` (its header lists the words).
fn params(pr: &Problem, ep: &Epilogue, count: usize, first: usize) -> Result<Params> {
    let op = ep.op;
    let rank = pr.batch_shape.len();
    let r2 = pr.lhs.rank() - 2;
    let mut p = Params::new(count, op)?;
    p.0[RANK] = rank as u32;
    for (d, &s) in pr.batch_shape.iter().enumerate() {
        p.set(SHAPE + d, s, op)?
            .set(STRIDES0 + d, pr.lhs.strides()[d], op)?
            .set(STRIDES1 + d, pr.rhs.strides()[d], op)?;
    }
    p.set(OFFSET0, pr.lhs.offset(), op)?
        .set(OFFSET1, pr.rhs.offset(), op)?
        .scalars(ep.alpha, ep.beta);
    let words = [
        pr.m,
        pr.n,
        pr.k,
        pr.lhs.strides()[r2],
        pr.lhs.strides()[r2 + 1],
        pr.rhs.strides()[r2],
        pr.rhs.strides()[r2 + 1],
        first,
    ];
    for (i, &w) in words.iter().enumerate() {
        p.set(EXTRA + i, w, op)?;
    }
    p.0[EXTRA + 8] = ep.flags();
    for (at, x) in [(EXTRA + 9, ep.c), (EXTRA + 12, ep.residual)] {
        if let Some((_, l)) = x {
            p.set(at, l.offset(), op)?
                .set(at + 1, l.strides()[r2], op)?
                .set(at + 2, l.strides()[r2 + 1], op)?;
        }
    }
    for (j, x) in [ep.c, ep.residual].into_iter().enumerate() {
        if let Some((_, l)) = x {
            for d in 0..rank {
                p.set(EPI_BATCH_STRIDES + j * rank + d, l.strides()[d], op)?;
            }
        }
    }
    if let Some((_, l)) = ep.bias {
        p.set(EXTRA + 15, l.offset(), op)?.set(
            EXTRA + 16,
            l.strides().first().copied().unwrap_or(1),
            op,
        )?;
    }
    p.set(EXTRA + 17, pr.pitch, op)?
        .set(EXTRA + 18, pr.np, op)?;
    Ok(p)
}
