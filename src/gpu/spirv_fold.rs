//! A SPIR-V peephole for the passthrough modules: `vec2<f16>(unpack2x16float(w))` as one
//! `OpBitcast` of the word `w`.
//!
//! Why: the tensor-core kernels stage f16 operands as u32 words (two halves each) and store the
//! halves to workgroup memory. WGSL (naga 30) has no bitcast from `u32` to `vec2<f16>`, so the
//! shaders write `vec2<f16>(unpack2x16float(w))`, which naga emits as `UnpackHalf2x16` (two
//! halves widened to f32) and an `OpFConvert` back to `vec2<f16>`. Mesa's NAK compiles that to
//! three conversion instructions per staged word (two `f2f.f32.f16` and an `f2fp.pack_ab`);
//! SPIR-V itself allows `OpBitcast` from a
//! 32-bit integer to a two-component 16-bit float vector (GLSL's `unpackFloat2x16`), which costs
//! nothing. Every f16 value, infinities and subnormals included, survives the widening and
//! narrowing unchanged, so the bitcast gives the same bits (NaN payloads aside, which it keeps
//! where a conversion may quieten them).
//!
//! Invariants: only an `OpFConvert` whose result type is a two-component vector of 16-bit floats
//! and whose operand is the result of a `GLSL.std.450 UnpackHalf2x16` is rewritten, in place and
//! with the same result id and length (4 words); the now unused `UnpackHalf2x16` stays (drivers
//! drop dead code). SPIR-V requires definitions to dominate their uses and types to be declared
//! before use, so one forward pass sees every pattern.

const OP_EXT_INST_IMPORT: u32 = 11;
const OP_EXT_INST: u32 = 12;
const OP_TYPE_FLOAT: u32 = 22;
const OP_TYPE_VECTOR: u32 = 23;
const OP_FCONVERT: u32 = 115;
const OP_BITCAST: u32 = 124;
const GLSL_UNPACK_HALF_2X16: u32 = 62;

/// `words` with every `vec2<f16>(unpack2x16float(w))` turned into `OpBitcast` of `w`, and how
/// many were turned; an error names a malformed instruction.
pub(crate) fn fold_unpack_half(words: &[u32]) -> Result<(Vec<u32>, usize), String> {
    let mut out = words.to_vec();
    let mut glsl = None;
    let mut half = Vec::new();
    let mut half2 = Vec::new();
    // Result id of each UnpackHalf2x16 and its word operand.
    let mut unpacked = std::collections::HashMap::new();
    let mut folded = 0;
    for (i, inst) in super::passthrough::instructions(words)? {
        let count = inst.len();
        let opcode = inst[0] & 0xffff;
        match opcode {
            OP_EXT_INST_IMPORT
                if count >= 3
                    && super::passthrough::literal_string(&inst[2..]) == "GLSL.std.450" =>
            {
                glsl = Some(inst[1]);
            }
            OP_TYPE_FLOAT if count >= 3 && inst[2] == 16 => half.push(inst[1]),
            OP_TYPE_VECTOR if count == 4 && inst[3] == 2 && half.contains(&inst[2]) => {
                half2.push(inst[1]);
            }
            OP_EXT_INST
                if count == 6 && Some(inst[3]) == glsl && inst[4] == GLSL_UNPACK_HALF_2X16 =>
            {
                unpacked.insert(inst[2], inst[5]);
            }
            OP_FCONVERT if count == 4 && half2.contains(&inst[1]) => {
                if let Some(&word) = unpacked.get(&inst[3]) {
                    out[i] = (4 << 16) | OP_BITCAST;
                    out[i + 3] = word;
                    folded += 1;
                }
            }
            _ => {}
        }
    }
    Ok((out, folded))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A module's instructions, after a 5-word header.
    fn module(instructions: &[&[u32]]) -> Vec<u32> {
        let mut words = vec![0x0723_0203, 0x0001_0600, 0, 100, 0];
        for inst in instructions {
            words.push(((inst.len() as u32) << 16) | inst[0]);
            words.extend_from_slice(&inst[1..]);
        }
        words
    }

    const GLSL: [u32; 5] = [0x4c53_4c47, 0x6474_732e, 0x3035_342e, 0, 0];

    fn import(id: u32) -> Vec<u32> {
        let mut v = vec![OP_EXT_INST_IMPORT, id];
        v.extend_from_slice(&GLSL[..4]);
        v
    }

    #[test]
    fn unpack_then_narrow_becomes_a_bitcast() {
        let imp = import(1);
        let m = module(&[
            &imp,
            &[OP_TYPE_FLOAT, 2, 32],
            &[OP_TYPE_FLOAT, 3, 16],
            &[OP_TYPE_VECTOR, 4, 2, 2],
            &[OP_TYPE_VECTOR, 5, 3, 2],
            &[OP_EXT_INST, 4, 10, 1, GLSL_UNPACK_HALF_2X16, 9],
            &[OP_FCONVERT, 5, 11, 10],
            // A narrowing of something else stays.
            &[OP_FCONVERT, 5, 12, 8],
        ]);
        let (out, n) = fold_unpack_half(&m).unwrap();
        assert_eq!(n, 1);
        let at = m.len() - 8;
        assert_eq!(&out[at..at + 4], &[(4 << 16) | OP_BITCAST, 5, 11, 9]);
        assert_eq!(&out[at + 4..], &m[at + 4..]);
        assert_eq!(out[..at], m[..at]);
    }

    #[test]
    fn other_ext_sets_and_result_types_stay() {
        let imp = import(1);
        let m = module(&[
            &imp,
            &[OP_TYPE_FLOAT, 2, 32],
            &[OP_TYPE_FLOAT, 3, 16],
            &[OP_TYPE_VECTOR, 4, 2, 2],
            &[OP_TYPE_VECTOR, 5, 3, 4],
            // Another set's instruction 62, and an unpack narrowed to a 4-vector: not folded.
            &[OP_EXT_INST, 4, 10, 7, GLSL_UNPACK_HALF_2X16, 9],
            &[OP_FCONVERT, 5, 11, 10],
            &[OP_EXT_INST, 4, 12, 1, GLSL_UNPACK_HALF_2X16, 9],
            &[OP_FCONVERT, 5, 13, 12],
        ]);
        let (out, n) = fold_unpack_half(&m).unwrap();
        assert_eq!((out, n), (m, 0));
    }

    #[test]
    fn malformed_words_are_errors() {
        assert!(fold_unpack_half(&[1, 2]).is_err());
        let mut m = module(&[&[OP_TYPE_FLOAT, 2, 32]]);
        m[5] = (9 << 16) | OP_TYPE_FLOAT;
        assert!(fold_unpack_half(&m).is_err());
        m[5] = OP_TYPE_FLOAT;
        assert!(fold_unpack_half(&m).is_err());
    }
}
