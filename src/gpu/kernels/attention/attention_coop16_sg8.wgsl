// attention_coop16_sg8.wgsl: subgroups of 8 lanes for attention_coop16.wgsl (composed last):
// lavapipe's fixed subgroup size at 256-bit vectors (each lane two whole score rows), so the
// tensor-core attention runs its tests on a CPU's Vulkan driver too.

const SG: u32 = 8u;
