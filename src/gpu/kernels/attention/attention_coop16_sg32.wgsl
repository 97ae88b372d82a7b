// attention_coop16_sg32.wgsl: subgroups of 32 lanes for attention_coop16.wgsl (composed
// last): NVIDIA's fixed subgroup size, two lanes per score row.

const SG: u32 = 32u;
