//! Typed pipeline cache.
//!
//! A pipeline is identified by a [`PipelineKey`] (shader, entry point, input and output dtype,
//! workgroup size, variant), never by a string. Specialisation uses WGSL `override` constants
//! (`DT_IN`, `DT_OUT`, `WG`, `VARIANT`, declared by `kernels/common.wgsl`), so each shader source
//! is fixed text that `tests/shaders.rs` validates without a GPU. Modules are compiled once per
//! shader; pipelines once per key. Creation runs inside a validation error scope, so a shader
//! that fails on some adapter becomes `Error::Shader`, not a panic.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::{DType, Error, Result};

/// The shader modules, each composed from `.wgsl` files of one kernel family folder
/// (`src/gpu/kernels/<family>/`) after the shared prelude `src/gpu/kernels/common.wgsl`. This
/// list is the one registry of the crate's WGSL: [`ShaderId::ALL`] is what
/// `xpu::shader_sources()` returns and what the shader tests validate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShaderId {
    /// `elementwise/elementwise.wgsl` (after its accurate functions `elementwise_math.wgsl`):
    /// copy/cast, unary, binary, cat, comparisons, selection, gathers.
    Elementwise,
    /// `reduce/reduce.wgsl`: reductions and softmax.
    Reduce,
    /// `matmul/matmul.wgsl`: the matmul prelude (loads, fused epilogue), the simple kernel and
    /// the unfused epilogue pass.
    Matmul,
    /// `matmul/matmul_tiled.wgsl` (after `matmul.wgsl`): the skinny and GEMV tiles.
    MatmulTiled,
    /// `matmul/matmul_coop.wgsl` (after `matmul.wgsl`): hardware cooperative matrices, 8x8 f32.
    MatmulCoop,
    /// `matmul/matmul_coop16.wgsl` (after `matmul.wgsl`, before the convolution gather's
    /// addressing `matmul_coop16_gather.wgsl` and the word-pair staging
    /// `matmul_coop16_words.wgsl`): 16x16 f16 cooperative matrices with f32 accumulation
    /// (NVIDIA tensor cores through Vulkan).
    MatmulCoop16,
    /// `matmul/matmul_coop16_tiles.wgsl` (after `matmul.wgsl` and the convolution gather's
    /// addressing `matmul_coop16_gather.wgsl`): the f16 tensor-core product with its tile shape
    /// as pipeline constants (`mm_coop16t`, autotuner candidates).
    MatmulCoop16Tiles,
    /// `matmul/matmul_subgroup.wgsl` (after `matmul.wgsl`): GEMV with subgroup reductions.
    MatmulSubgroup,
    /// `matmul/matmul_vec4.wgsl` (after `matmul.wgsl` and `matmul_tiled.wgsl`): the large and
    /// medium tiles with vec4 tiles in workgroup memory.
    MatmulVec4,
    /// `norm/norm.wgsl`: layer norm and group norm (optionally with fused SiLU).
    Norm,
    /// `conv/conv.wgsl`: implicit-GEMM 2-D convolution with a fused epilogue (the narrow tile).
    Conv,
    /// `conv/conv_vec4.wgsl` (after `conv.wgsl`): the large and medium convolution tiles with
    /// vec4 tiles in workgroup memory.
    ConvVec4,
    /// `winograd/winograd.wgsl`: the filter, input and output transforms of a Winograd F(2x2,
    /// 3x3) convolution (its point products are batched matmuls).
    Winograd,
    /// `attention/attention_vec4.wgsl` (after the family prelude `attention.wgsl`): fused scaled
    /// dot-product attention on FMAs (online softmax), vec4 workgroup tiles.
    AttentionVec4,
    /// `attention/attention_coop16.wgsl` (before its pair loads `attention_coop16_words.wgsl`,
    /// its lane softmax `attention_coop16_softmax.wgsl` and the subgroup size
    /// `attention_coop16_sg32.wgsl`): fused attention on 16x16 f16 cooperative matrices.
    AttentionCoop16,
    /// [`ShaderId::AttentionCoop16`] for subgroups of 8 lanes (`attention_coop16_sg8.wgsl`:
    /// lavapipe).
    AttentionCoop16Sg8,
}

const COMMON: &str = include_str!("kernels/common.wgsl");

impl ShaderId {
    /// Every shader, for validation tests.
    pub const ALL: [ShaderId; 16] = [
        ShaderId::Elementwise,
        ShaderId::Reduce,
        ShaderId::Matmul,
        ShaderId::MatmulTiled,
        ShaderId::MatmulCoop,
        ShaderId::MatmulCoop16,
        ShaderId::MatmulCoop16Tiles,
        ShaderId::MatmulSubgroup,
        ShaderId::MatmulVec4,
        ShaderId::Norm,
        ShaderId::Conv,
        ShaderId::ConvVec4,
        ShaderId::Winograd,
        ShaderId::AttentionVec4,
        ShaderId::AttentionCoop16,
        ShaderId::AttentionCoop16Sg8,
    ];

    /// The cooperative-matrix kernels (compiled through `xpu::passthrough`).
    pub const COOPERATIVE: [ShaderId; 5] = [
        ShaderId::MatmulCoop,
        ShaderId::MatmulCoop16,
        ShaderId::MatmulCoop16Tiles,
        ShaderId::AttentionCoop16,
        ShaderId::AttentionCoop16Sg8,
    ];

    /// The module's name: its main file's name (the files of all families have distinct names).
    pub fn file(self) -> &'static str {
        match self {
            ShaderId::Elementwise => "elementwise.wgsl",
            ShaderId::Reduce => "reduce.wgsl",
            ShaderId::Matmul => "matmul.wgsl",
            ShaderId::MatmulTiled => "matmul_tiled.wgsl",
            ShaderId::MatmulCoop => "matmul_coop.wgsl",
            ShaderId::MatmulCoop16 => "matmul_coop16.wgsl",
            ShaderId::MatmulCoop16Tiles => "matmul_coop16_tiles.wgsl",
            ShaderId::MatmulSubgroup => "matmul_subgroup.wgsl",
            ShaderId::MatmulVec4 => "matmul_vec4.wgsl",
            ShaderId::Norm => "norm.wgsl",
            ShaderId::Conv => "conv.wgsl",
            ShaderId::ConvVec4 => "conv_vec4.wgsl",
            ShaderId::Winograd => "winograd.wgsl",
            ShaderId::AttentionVec4 => "attention_vec4.wgsl",
            ShaderId::AttentionCoop16 => "attention_coop16.wgsl",
            ShaderId::AttentionCoop16Sg8 => "attention_coop16_sg8.wgsl",
        }
    }

    /// The family files after the prelude, in composition order.
    fn family_sources(self) -> &'static [&'static str] {
        const MATMUL: &str = include_str!("kernels/matmul/matmul.wgsl");
        const TILED: &str = include_str!("kernels/matmul/matmul_tiled.wgsl");
        const CONV: &str = include_str!("kernels/conv/conv.wgsl");
        const COOP16: &str = include_str!("kernels/matmul/matmul_coop16.wgsl");
        const GATHER: &str = include_str!("kernels/matmul/matmul_coop16_gather.wgsl");
        const WORDS: &str = include_str!("kernels/matmul/matmul_coop16_words.wgsl");
        const ATTENTION_COOP16: &str = include_str!("kernels/attention/attention_coop16.wgsl");
        const ATTENTION_COOP16_WORDS: &str =
            include_str!("kernels/attention/attention_coop16_words.wgsl");
        const SOFTMAX: &str = include_str!("kernels/attention/attention_coop16_softmax.wgsl");
        const SG32: &str = include_str!("kernels/attention/attention_coop16_sg32.wgsl");
        const SG8: &str = include_str!("kernels/attention/attention_coop16_sg8.wgsl");
        match self {
            ShaderId::Elementwise => &[
                include_str!("kernels/elementwise/elementwise_math.wgsl"),
                include_str!("kernels/elementwise/elementwise.wgsl"),
            ],
            ShaderId::Reduce => &[include_str!("kernels/reduce/reduce.wgsl")],
            ShaderId::Matmul => &[MATMUL],
            ShaderId::MatmulTiled => &[MATMUL, TILED],
            ShaderId::MatmulVec4 => &[
                MATMUL,
                TILED,
                include_str!("kernels/matmul/matmul_vec4.wgsl"),
            ],
            ShaderId::MatmulCoop => &[MATMUL, include_str!("kernels/matmul/matmul_coop.wgsl")],
            ShaderId::MatmulCoop16 => &[MATMUL, COOP16, GATHER, WORDS],
            ShaderId::MatmulCoop16Tiles => &[
                MATMUL,
                GATHER,
                include_str!("kernels/matmul/matmul_coop16_tiles.wgsl"),
            ],
            ShaderId::MatmulSubgroup => {
                &[MATMUL, include_str!("kernels/matmul/matmul_subgroup.wgsl")]
            }
            ShaderId::Norm => &[include_str!("kernels/norm/norm.wgsl")],
            ShaderId::Conv => &[CONV],
            ShaderId::ConvVec4 => &[CONV, include_str!("kernels/conv/conv_vec4.wgsl")],
            ShaderId::Winograd => &[include_str!("kernels/winograd/winograd.wgsl")],
            ShaderId::AttentionVec4 => &[
                include_str!("kernels/attention/attention.wgsl"),
                include_str!("kernels/attention/attention_vec4.wgsl"),
            ],
            ShaderId::AttentionCoop16 => &[ATTENTION_COOP16, ATTENTION_COOP16_WORDS, SOFTMAX, SG32],
            ShaderId::AttentionCoop16Sg8 => {
                &[ATTENTION_COOP16, ATTENTION_COOP16_WORDS, SOFTMAX, SG8]
            }
        }
    }

    /// The full WGSL module exactly as compiled at run time: the prelude and the family files,
    /// in order, with their `enable` directives hoisted to the top (WGSL requires them before
    /// any declaration; the files are otherwise concatenated unchanged).
    pub fn source(self) -> String {
        let mut enables = String::new();
        let mut body = String::from(COMMON);
        for file in self.family_sources() {
            body.push('\n');
            for line in file.lines() {
                if line.trim_start().starts_with("enable ") {
                    enables.push_str(line);
                    enables.push('\n');
                } else {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
        enables + &body
    }
}

/// WGSL dtype code used by the `DT_IN`/`DT_OUT` override constants.
pub fn dtype_code(dtype: DType) -> u32 {
    match dtype {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
        DType::I32 => 3,
        DType::U8 => 4,
    }
}

/// Compiles a WGSL module inside a validation error scope (the path every shader takes).
/// `ours`: the source is one of this crate's shaders (see the loop-bounding note below); other
/// WGSL keeps every runtime check.
pub(crate) fn compile_module(
    device: &wgpu::Device,
    file: &'static str,
    source: &str,
    ours: bool,
) -> Result<wgpu::ShaderModule> {
    let internal = device.push_error_scope(wgpu::ErrorFilter::Internal);
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    // Bounds checks stay on. The forced loop bounding (a counter added to every loop against
    // infinite loops) is dropped for the crate's own shaders: every loop in them runs to a bound
    // taken from the dispatch params or a constant, and the counter sat in every inner product
    // loop.
    let checks = wgpu::ShaderRuntimeChecks {
        force_loop_bounding: !ours,
        ..wgpu::ShaderRuntimeChecks::checked()
    };
    let desc = wgpu::ShaderModuleDescriptor {
        label: Some(file),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    };
    // SAFETY: `checks` keeps bounds and division checks; loop bounding is off only for this
    // crate's shaders, none of which has a loop without a finite bound (see above).
    let module = unsafe { device.create_shader_module_trusted(desc, checks) };
    let errors = [
        pollster::block_on(scope.pop()),
        pollster::block_on(internal.pop()),
    ];
    match errors.into_iter().flatten().next() {
        Some(e) => Err(Error::Shader {
            shader: file,
            msg: e.to_string(),
        }),
        None => Ok(module),
    }
}

/// Identity of one compute pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PipelineKey {
    /// The shader module.
    pub shader: ShaderId,
    /// The entry point.
    pub entry: &'static str,
    /// `DT_IN` override.
    pub dt_in: DType,
    /// `DT_OUT` override.
    pub dt_out: DType,
    /// `WG` override (1-D workgroup size; ignored by entry points with a fixed size).
    pub workgroup: u32,
    /// `VARIANT` override (op code or kernel variant).
    pub variant: u32,
}

/// Cache of compiled modules and pipelines.
#[derive(Default)]
pub(crate) struct PipelineCache {
    modules: Mutex<HashMap<ShaderId, wgpu::ShaderModule>>,
    pipelines: Mutex<HashMap<PipelineKey, wgpu::ComputePipeline>>,
}

thread_local! {
    /// Seconds this thread has spent compiling modules and creating pipelines.
    static CREATING_S: std::cell::Cell<f64> = const { std::cell::Cell::new(0.0) };
}

/// Seconds the calling thread has spent compiling shader modules and creating pipelines (a
/// one-time cost per pipeline that the autotuner leaves out of a candidate's time).
pub(crate) fn creation_seconds() -> f64 {
    CREATING_S.with(std::cell::Cell::get)
}

impl PipelineCache {
    /// The pipeline for `key`, compiled on first use.
    pub(crate) fn get(
        &self,
        device: &wgpu::Device,
        key: PipelineKey,
    ) -> Result<wgpu::ComputePipeline> {
        let poisoned = || Error::Gpu("pipeline cache lock poisoned".into());
        if let Some(p) = self.pipelines.lock().map_err(|_| poisoned())?.get(&key) {
            return Ok(p.clone());
        }
        let start = std::time::Instant::now();
        let made = self.create(device, key);
        let spent = start.elapsed().as_secs_f64();
        CREATING_S.with(|c| c.set(c.get() + spent));
        made
    }

    /// Compiles the pipeline for `key` (and its module, the first time) and keeps it.
    fn create(&self, device: &wgpu::Device, key: PipelineKey) -> Result<wgpu::ComputePipeline> {
        let poisoned = || Error::Gpu("pipeline cache lock poisoned".into());
        let module = {
            let mut modules = self.modules.lock().map_err(|_| poisoned())?;
            match modules.get(&key.shader) {
                Some(m) => m.clone(),
                None => {
                    let m = compile_module(device, key.shader.file(), &key.shader.source(), true)?;
                    modules.insert(key.shader, m.clone());
                    m
                }
            }
        };
        let constants = [
            ("DT_IN", dtype_code(key.dt_in) as f64),
            ("DT_OUT", dtype_code(key.dt_out) as f64),
            ("WG", key.workgroup as f64),
            ("VARIANT", key.variant as f64),
        ];
        if super::passthrough::applies(device, &key) {
            let pipeline =
                super::passthrough::pipeline(device, &key, &key.shader.source(), &constants)?;
            self.pipelines
                .lock()
                .map_err(|_| poisoned())?
                .insert(key, pipeline.clone());
            return Ok(pipeline);
        }
        // A driver that fails to compile the module reports an internal error, not a
        // validation error: both become `Error::Shader` instead of a pipeline that never runs.
        let internal = device.push_error_scope(wgpu::ErrorFilter::Internal);
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(key.entry),
            layout: None,
            module: &module,
            entry_point: Some(key.entry),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: &constants,
                zero_initialize_workgroup_memory: false,
            },
            cache: None,
        });
        let errors = [
            pollster::block_on(scope.pop()),
            pollster::block_on(internal.pop()),
        ];
        if let Some(e) = errors.into_iter().flatten().next() {
            return Err(Error::Shader {
                shader: key.shader.file(),
                msg: format!("entry point {}: {e}", key.entry),
            });
        }
        self.pipelines
            .lock()
            .map_err(|_| poisoned())?
            .insert(key, pipeline.clone());
        Ok(pipeline)
    }
}
