//! Typed pipeline cache.
//!
//! A pipeline is identified by a [`PipelineKey`] (shader, entry point, input and output dtype,
//! workgroup size, variant), never by a string. Specialisation uses WGSL `override` constants
//! (`DT_IN`, `DT_OUT`, `WG`, `VARIANT`, declared by `shaders/common.wgsl`), so each shader source
//! is fixed text that `tests/shaders.rs` validates without a GPU. Modules are compiled once per
//! shader; pipelines once per key. Creation runs inside a validation error scope, so a shader
//! that fails on some adapter becomes `Error::Shader`, not a panic.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::{DType, Error, Result};

/// The shader families, each one `.wgsl` file composed after `shaders/common.wgsl`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShaderId {
    /// `shaders/elementwise.wgsl` (after its accurate functions `elementwise_math.wgsl`):
    /// copy/cast, unary, binary, cat.
    Elementwise,
    /// `shaders/reduce.wgsl`: reductions and softmax.
    Reduce,
    /// `shaders/matmul.wgsl`: the matmul prelude (loads, fused epilogue), the simple kernel and
    /// the unfused epilogue pass.
    Matmul,
    /// `shaders/matmul_tiled.wgsl` (after `matmul.wgsl`): cooperative-tile kernels.
    MatmulTiled,
    /// `shaders/matmul_coop.wgsl` (after `matmul.wgsl`): hardware cooperative matrices, 8x8 f32.
    MatmulCoop,
    /// `shaders/matmul_coop16.wgsl` (after `matmul.wgsl`, before the convolution gather's
    /// addressing `matmul_coop16_gather.wgsl`, its word staging `matmul_coop16_words.wgsl` and
    /// its workgroup layout `matmul_coop16_single.wgsl`): 16x16
    /// f16 cooperative matrices with f32 accumulation (NVIDIA tensor cores through Vulkan).
    MatmulCoop16,
    /// The same kernel with the layout `matmul_coop16_double.wgsl` (two tile pairs, one barrier
    /// per K step; no GEGLU); an experiment chosen only by `XPU_COOP16_DOUBLE=1`.
    MatmulCoop16Double,
    /// `shaders/matmul_coop16_tiles.wgsl` (after `matmul.wgsl` and `matmul_coop16_gather.wgsl`):
    /// the tensor-core product (and convolution gather) with
    /// its workgroup and subgroup tiles as pipeline constants; an experiment chosen only by
    /// `XPU_COOP16_TILES` (see `xpu::kernels::coop16_tiles`).
    MatmulCoop16Tiles,
    /// `shaders/matmul_subgroup.wgsl` (after `matmul.wgsl`): GEMV with subgroup reductions.
    MatmulSubgroup,
    /// `shaders/matmul_vec4.wgsl` (after `matmul.wgsl` and `matmul_tiled.wgsl`): the large and
    /// medium tile configs with vec4 tiles in workgroup memory.
    MatmulVec4,
    /// `shaders/norm.wgsl`: layer norm and group norm (optionally with fused SiLU).
    Norm,
    /// `shaders/conv.wgsl`: implicit-GEMM 2-D convolution with a fused epilogue.
    Conv,
    /// `shaders/conv_vec4.wgsl` (after `conv.wgsl`): the large and medium convolution tiles with
    /// vec4 tiles in workgroup memory.
    ConvVec4,
    /// `shaders/winograd.wgsl`: the filter, input and output transforms of a Winograd F(2x2,
    /// 3x3) convolution (its point products are batched matmuls).
    Winograd,
    /// `shaders/attention.wgsl`: fused scaled dot-product attention (online softmax).
    Attention,
    /// `shaders/attention_vec4.wgsl` (after `attention.wgsl`): the same kernel with vec4
    /// workgroup tiles.
    AttentionVec4,
    /// `shaders/attention_coop16.wgsl` (before its pair loads `attention_coop16_words.wgsl`,
    /// the subgroup size `attention_coop16_sg32.wgsl` and the workgroup layout
    /// `attention_coop16_rows64.wgsl`): fused attention on 16x16 f16 cooperative matrices.
    AttentionCoop16,
    /// The same kernel with the layout `attention_coop16_rows128.wgsl` (128 query rows per
    /// workgroup, head dims up to 48); an experiment chosen only by `XPU_ATTN_ROWS128=1`.
    AttentionCoop16Rows128,
    /// [`ShaderId::AttentionCoop16`] for subgroups of 8 lanes (`attention_coop16_sg8.wgsl`:
    /// lavapipe).
    AttentionCoop16Sg8,
    /// [`ShaderId::AttentionCoop16Rows128`] for subgroups of 8 lanes.
    AttentionCoop16Rows128Sg8,
}

const COMMON: &str = include_str!("../../shaders/common.wgsl");

impl ShaderId {
    /// Every shader, for validation tests.
    pub const ALL: [ShaderId; 20] = [
        ShaderId::Elementwise,
        ShaderId::Reduce,
        ShaderId::Matmul,
        ShaderId::MatmulTiled,
        ShaderId::MatmulCoop,
        ShaderId::MatmulCoop16,
        ShaderId::MatmulCoop16Double,
        ShaderId::MatmulCoop16Tiles,
        ShaderId::MatmulSubgroup,
        ShaderId::MatmulVec4,
        ShaderId::Norm,
        ShaderId::Conv,
        ShaderId::ConvVec4,
        ShaderId::Winograd,
        ShaderId::Attention,
        ShaderId::AttentionVec4,
        ShaderId::AttentionCoop16,
        ShaderId::AttentionCoop16Rows128,
        ShaderId::AttentionCoop16Sg8,
        ShaderId::AttentionCoop16Rows128Sg8,
    ];

    /// The tensor-core matmul kernels (compiled through `xpu::passthrough`).
    pub const MATMUL_COOP16: [ShaderId; 3] = [
        ShaderId::MatmulCoop16,
        ShaderId::MatmulCoop16Double,
        ShaderId::MatmulCoop16Tiles,
    ];

    /// The tensor-core attention kernels (compiled through `xpu::passthrough`).
    pub const ATTENTION_COOP16: [ShaderId; 4] = [
        ShaderId::AttentionCoop16,
        ShaderId::AttentionCoop16Rows128,
        ShaderId::AttentionCoop16Sg8,
        ShaderId::AttentionCoop16Rows128Sg8,
    ];

    /// File name under `shaders/`.
    pub fn file(self) -> &'static str {
        match self {
            ShaderId::Elementwise => "elementwise.wgsl",
            ShaderId::Reduce => "reduce.wgsl",
            ShaderId::Matmul => "matmul.wgsl",
            ShaderId::MatmulTiled => "matmul_tiled.wgsl",
            ShaderId::MatmulCoop => "matmul_coop.wgsl",
            ShaderId::MatmulCoop16 => "matmul_coop16.wgsl",
            ShaderId::MatmulCoop16Double => "matmul_coop16_double.wgsl",
            ShaderId::MatmulCoop16Tiles => "matmul_coop16_tiles.wgsl",
            ShaderId::MatmulSubgroup => "matmul_subgroup.wgsl",
            ShaderId::MatmulVec4 => "matmul_vec4.wgsl",
            ShaderId::Norm => "norm.wgsl",
            ShaderId::Conv => "conv.wgsl",
            ShaderId::ConvVec4 => "conv_vec4.wgsl",
            ShaderId::Winograd => "winograd.wgsl",
            ShaderId::Attention => "attention.wgsl",
            ShaderId::AttentionVec4 => "attention_vec4.wgsl",
            ShaderId::AttentionCoop16 => "attention_coop16.wgsl",
            ShaderId::AttentionCoop16Rows128 => "attention_coop16_rows128.wgsl",
            ShaderId::AttentionCoop16Sg8 => "attention_coop16_sg8.wgsl",
            ShaderId::AttentionCoop16Rows128Sg8 => "attention_coop16_rows128.wgsl (sg8)",
        }
    }

    /// The family files after the prelude: one file, or the matmul prelude then the family.
    fn family_sources(self) -> &'static [&'static str] {
        const MATMUL: &str = include_str!("../../shaders/matmul.wgsl");
        const TILED: &str = include_str!("../../shaders/matmul_tiled.wgsl");
        const CONV: &str = include_str!("../../shaders/conv.wgsl");
        const ATTENTION: &str = include_str!("../../shaders/attention.wgsl");
        const COOP16: &str = include_str!("../../shaders/matmul_coop16.wgsl");
        const WORDS: &str = include_str!("../../shaders/matmul_coop16_words.wgsl");
        const LEAN: &str = include_str!("../../shaders/matmul_coop16_lean.wgsl");
        const GATHER: &str = include_str!("../../shaders/matmul_coop16_gather.wgsl");
        const SINGLE: &str = include_str!("../../shaders/matmul_coop16_single.wgsl");
        const DOUBLE: &str = include_str!("../../shaders/matmul_coop16_double.wgsl");
        const ATTENTION_COOP16: &str = include_str!("../../shaders/attention_coop16.wgsl");
        const ATTENTION_COOP16_WORDS: &str =
            include_str!("../../shaders/attention_coop16_words.wgsl");
        const SOFTMAX: &str = include_str!("../../shaders/attention_coop16_softmax.wgsl");
        const ATTN_LEAN: &str = include_str!("../../shaders/attention_coop16_lean.wgsl");
        const SG32: &str = include_str!("../../shaders/attention_coop16_sg32.wgsl");
        const SG8: &str = include_str!("../../shaders/attention_coop16_sg8.wgsl");
        const ROWS64: &str = include_str!("../../shaders/attention_coop16_rows64.wgsl");
        const ROWS128: &str = include_str!("../../shaders/attention_coop16_rows128.wgsl");
        match self {
            ShaderId::Elementwise => &[
                include_str!("../../shaders/elementwise_math.wgsl"),
                include_str!("../../shaders/elementwise.wgsl"),
            ],
            ShaderId::Reduce => &[include_str!("../../shaders/reduce.wgsl")],
            ShaderId::Matmul => &[MATMUL],
            ShaderId::MatmulTiled => &[MATMUL, TILED],
            ShaderId::MatmulVec4 => &[
                MATMUL,
                TILED,
                include_str!("../../shaders/matmul_vec4.wgsl"),
            ],
            ShaderId::MatmulCoop => &[MATMUL, include_str!("../../shaders/matmul_coop.wgsl")],
            ShaderId::MatmulCoop16 => &[MATMUL, COOP16, GATHER, WORDS, LEAN, SINGLE],
            ShaderId::MatmulCoop16Double => &[MATMUL, COOP16, GATHER, WORDS, LEAN, DOUBLE],
            ShaderId::MatmulCoop16Tiles => &[
                MATMUL,
                GATHER,
                include_str!("../../shaders/matmul_coop16_tiles.wgsl"),
            ],
            ShaderId::MatmulSubgroup => {
                &[MATMUL, include_str!("../../shaders/matmul_subgroup.wgsl")]
            }
            ShaderId::Norm => &[include_str!("../../shaders/norm.wgsl")],
            ShaderId::Conv => &[CONV],
            ShaderId::ConvVec4 => &[CONV, include_str!("../../shaders/conv_vec4.wgsl")],
            ShaderId::Winograd => &[include_str!("../../shaders/winograd.wgsl")],
            ShaderId::Attention => &[ATTENTION],
            ShaderId::AttentionVec4 => {
                &[ATTENTION, include_str!("../../shaders/attention_vec4.wgsl")]
            }
            ShaderId::AttentionCoop16 => &[
                ATTENTION_COOP16,
                ATTENTION_COOP16_WORDS,
                SOFTMAX,
                ATTN_LEAN,
                SG32,
                ROWS64,
            ],
            ShaderId::AttentionCoop16Rows128 => &[
                ATTENTION_COOP16,
                ATTENTION_COOP16_WORDS,
                SOFTMAX,
                ATTN_LEAN,
                SG32,
                ROWS128,
            ],
            ShaderId::AttentionCoop16Sg8 => &[
                ATTENTION_COOP16,
                ATTENTION_COOP16_WORDS,
                SOFTMAX,
                ATTN_LEAN,
                SG8,
                ROWS64,
            ],
            ShaderId::AttentionCoop16Rows128Sg8 => &[
                ATTENTION_COOP16,
                ATTENTION_COOP16_WORDS,
                SOFTMAX,
                ATTN_LEAN,
                SG8,
                ROWS128,
            ],
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
    // infinite loops) is dropped: every loop in shaders/ runs to a bound taken from the dispatch
    // params or a constant, and the counter sat in every inner product loop.
    // `XPU_SHADER_LOOP_BOUNDING=1` keeps it (for comparison and diagnosis).
    let checks = wgpu::ShaderRuntimeChecks {
        force_loop_bounding: !ours
            || std::env::var_os("XPU_SHADER_LOOP_BOUNDING").is_some_and(|v| v == "1"),
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
        let through_passthrough = super::passthrough::applies(device, &key);
        if let Some(dir) = super::spirv_dump::folder() {
            let source = key.shader.source();
            super::spirv_dump::dump(&dir, &key, &source, &constants, through_passthrough)?;
        }
        if through_passthrough {
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
