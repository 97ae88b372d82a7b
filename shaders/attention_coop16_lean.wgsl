// attention_coop16_lean.wgsl: the lean form of attention_coop16.wgsl (VARIANT bit 8192,
// `XPU_ATTN_LEAN=1`, an experiment until a GPU times it; composed after the softmax file).
//
// Why: counted as NVIDIA machine code (Mesa's NAK, benches/lavapipe_coop/kloop.sh), one key
// block of the default form takes about 1840 instructions per invocation for 36 tensor-core
// instructions, and the H200 anatomy (twenty-eighth session) put the K/V staging and the
// softmax at most of the kernel's time. Most of those instructions are addresses and checks
// computed again for every word and every score:
// - Staging: each word's key row and column came from a division of its word number, its bounds
//   were checked in a function call per word (branches), and its two halves were converted to
//   f32 and back. Here an invocation keeps one pair column c of key rows row0, row0 + LR, ...
//   (LR rows per pass), so its word and workgroup offsets grow by constants; the row bound is
//   tested only in the key block that crosses Lk (a uniform branch), and the column bound is one
//   mask per invocation. (naga has no bitcast of a u32 to vec2<f16>: the halves still go
//   through unpack2x16float.)
// - Softmax: the scores are stored key-major (S^T: as_s[sbase + key * 16 + row]) so each lane's
//   scores of a row (keys lane % LPR + LPR * i) lie at constant offsets from one base, and the
//   32 lanes of a step read 32 different banks without the rotated order. Scores are scaled by
//   scale * log2(e) once, so the statistics are in base 2 and each probability is one exp2;
//   past Lk a score is NEG_S, whose exp2 against any finite row max is 0 (every row max is
//   finite from the first key block on: key 0 exists). P is written key-major too (P^T, PS
//   halves per key) and loaded as a column-major A tile.
// The form is two-pass like the default, or one-pass with VARIANT bit 4096 (the lazily raised
// row max of attention_coop16_softmax.wgsl, in base 2); the prefetch bit is ignored with it;
// the host also writes its module without naga's bounds clamps (src/gpu/passthrough.rs): every
// workgroup index here is bounded by construction (rows < 32, pair columns < 8 * MAX_TILES,
// lanes < SG, subgroups < SUBGROUPS).

const LEAN: u32 = 8192u;
const LOG2E: f32 = 1.4426950408889634;

// Word i of K (buf 1) or V (buf 2).
fn lean_word(buf: u32, i: u32) -> u32 {
    if (buf == 1u) {
        return src1[i];
    }
    return src_v[i];
}

// The f16 pair of a word into the K (buf 1) or V (buf 2) tile at element `at`.
fn lean_put(buf: u32, at: u32, w: u32) {
    let h = vec2<f16>(unpack2x16float(w));
    if (buf == 1u) {
        ak[at] = h.x;
        ak[at + 1u] = h.y;
    } else {
        av[at] = h.x;
        av[at + 1u] = h.y;
    }
}

// Stages `tiles` head-dim tiles of K or V rows k0..k0+32 (row stride rs, width elements, zeros
// past the width and past Lk) at element offset `base`. Words per key row kp = 8 * tiles; LR =
// THREADS / kp rows per pass (on a workgroup narrower than a row, each invocation also takes
// columns c + THREADS, c + 2 THREADS, ...).
fn lean_stage_one(buf: u32, base: u32, k0: u32, lid: u32, rs: u32, width: u32, tiles: u32) {
    let kp = tiles * 8u;
    let lr = max(THREADS / kp, 1u);
    let row0 = lid / kp;
    if (row0 >= lr) {
        return;
    }
    let lk = p(33u);
    let full = k0 + 32u <= lk;
    // Word offsets: the block's first row, this invocation's row and column, one pass's rows.
    let block = (base + k0 * rs) / 2u;
    let step = lr * rs / 2u;
    // A constant trip count (one where a row fits the workgroup), so no dead second pass.
    for (var q = 0u; q < (kp + THREADS - 1u) / THREADS; q = q + 1u) {
        let c = lid % kp + q * THREADS;
        if (c >= kp) {
            break;
        }
        let keep = select(0u, 0xffffffffu, 2u * c < width);
        // Past the width the invocation reads its row's first word, masked to zero.
        let col = select(0u, c, 2u * c < width) + row0 * rs / 2u;
        let at = row0 * AV + 2u * c;
        if (full) {
            for (var i = 0u; i < 32u / lr; i = i + 1u) {
                let w = lean_word(buf, block + col + i * step) & keep;
                lean_put(buf, at + i * lr * AV, w);
            }
            if (32u % lr != 0u && row0 + lr * (32u / lr) < 32u) {
                let i = 32u / lr;
                let w = lean_word(buf, block + col + i * step) & keep;
                lean_put(buf, at + i * lr * AV, w);
            }
        } else {
            // The key block that crosses Lk: rows past it read the block's first row, masked.
            for (var i = 0u; i < (32u + lr - 1u) / lr; i = i + 1u) {
                let j = row0 + lr * i;
                if (j < 32u) {
                    let ok = k0 + j < lk;
                    let first = col - row0 * rs / 2u;
                    let w = lean_word(buf, block + select(first, col + i * step, ok));
                    lean_put(buf, at + i * lr * AV, w & select(0u, keep, ok));
                }
            }
        }
    }
}

// The lean form's staging of K (and V in pass 2) of the key block at k0.
fn lean_stage_kv(kb: u32, vb: u32, k0: u32, lid: u32, with_v: bool) {
    lean_stage_one(1u, kb, k0, lid, p(38u), p(34u), VARIANT & 15u);
    if (with_v) {
        lean_stage_one(2u, vb, k0, lid, p(40u), p(35u), (VARIANT >> 4u) & 15u);
    }
}

// Offset of row j (0..RPL) of this lane's rows in its subgroup's key-major scores: the lane's
// element i (key lane % LPR + LPR * i) is at this base + 16 * LPR * i.
fn lean_base(sg: u32, lane: u32, j: u32) -> u32 {
    return sg * 512u + (lane % LPR) * 16u + lane_row(lane, j);
}

// Element i of a lane's row in base-2 units (score * scale * log2 e), NEG_S past Lk: lim is the
// block's valid keys less the lane's first key (keys of the lane: lane % LPR + LPR * i).
fn lean_score(base: u32, i: u32, lim: i32, c: f32) -> f32 {
    return select(NEG_S, as_s[base + 16u * LPR * i] * c, i32(LPR * i) < lim);
}

// The valid keys of the block at k0 less this lane's first key (may be negative).
fn lean_limit(lane: u32, k0: u32) -> i32 {
    return i32(min(p(33u) - k0, 32u)) - i32(lane % LPR);
}

// Pass 1 of the lean form for this lane's rows: the running max m and sum l of exp2 (base 2).
fn lean_update_stats(sg: u32, lane: u32, k0: u32, m: ptr<function, array<f32, RPL>>,
                     l: ptr<function, array<f32, RPL>>) {
    let c = pf(30u) * LOG2E;
    let lim = lean_limit(lane, k0);
    for (var j = 0u; j < RPL; j = j + 1u) {
        let base = lean_base(sg, lane, j);
        var mx = NEG_S;
        for (var i = 0u; i < CPL; i = i + 1u) {
            mx = max(mx, lean_score(base, i, lim, c));
        }
        let m_new = max((*m)[j], row_max(mx));
        var sum = 0.0;
        for (var i = 0u; i < CPL; i = i + 1u) {
            sum = sum + exp2(lean_score(base, i, lim, c) - m_new);
        }
        (*l)[j] = (*l)[j] * exp2((*m)[j] - m_new) + row_sum(sum);
        (*m)[j] = m_new;
    }
}

// Pass 2 of the lean form: this lane's probabilities exp2(s - m) / l as f16 into the
// subgroup's key-major P^T (ap[pbase + key * PS + row]).
fn lean_write_probabilities(pbase: u32, sg: u32, lane: u32, k0: u32, m: array<f32, RPL>,
                            inv_l: array<f32, RPL>) {
    let c = pf(30u) * LOG2E;
    let lim = lean_limit(lane, k0);
    for (var j = 0u; j < RPL; j = j + 1u) {
        let base = lean_base(sg, lane, j);
        let at = pbase + (lane % LPR) * PS + lane_row(lane, j);
        for (var i = 0u; i < CPL; i = i + 1u) {
            let pr = exp2(lean_score(base, i, lim, c) - m[j]) * inv_l[j];
            ap[at + LPR * PS * i] = f16(pr);
        }
    }
}

// The one-pass form's probabilities in the lean layout (attention_coop16_softmax.wgsl's
// online_probabilities in base 2, P^T key-major): against a row max mu raised only when the
// block's scores pass it by more than LAZY * log2(e) (the same e^LAZY bound on P), with each
// row's O scale 2^(mu_old - mu) in a_scale; returns whether one of the lane's rows raised a
// max set by an earlier block.
fn lean_online_probabilities(pbase: u32, sg: u32, lane: u32, k0: u32,
                             mu: ptr<function, array<f32, RPL>>,
                             l: ptr<function, array<f32, RPL>>) -> bool {
    let c = pf(30u) * LOG2E;
    let lim = lean_limit(lane, k0);
    var raised = false;
    for (var j = 0u; j < RPL; j = j + 1u) {
        let r = lane_row(lane, j);
        let base = lean_base(sg, lane, j);
        var mx = NEG_S;
        for (var i = 0u; i < CPL; i = i + 1u) {
            mx = max(mx, lean_score(base, i, lim, c));
        }
        mx = row_max(mx);
        let old = (*mu)[j];
        var alpha = 1.0;
        if (mx > old + LAZY * LOG2E) {
            (*mu)[j] = mx;
            alpha = exp2(old - mx);
            raised = raised || old > NEG_S;
        }
        let at = pbase + (lane % LPR) * PS + r;
        var sum = 0.0;
        for (var i = 0u; i < CPL; i = i + 1u) {
            let pr = exp2(lean_score(base, i, lim, c) - (*mu)[j]);
            ap[at + LPR * PS * i] = f16(pr);
            sum = sum + pr;
        }
        (*l)[j] = (*l)[j] * alpha + row_sum(sum);
        if (lane % LPR == 0u) {
            a_scale[sg * 16u + r] = alpha;
        }
    }
    return raised;
}
