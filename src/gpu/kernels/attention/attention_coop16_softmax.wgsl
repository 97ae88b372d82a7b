// attention_coop16_softmax.wgsl: the lane-level softmax of attention_coop16.wgsl (composed after
// it and its pair loads): each subgroup's 16 x 32 f32 score block (as_s) becomes f16
// probabilities (ap) and per-row statistics, split over the subgroup's SG lanes.

// Lanes per subgroup SG (the subgroup file's; the host picks the form whose SG is the adapter's
// fixed subgroup size). A subgroup's 16 x 32 score block is split over its lanes: LPR lanes per
// row (CPL columns each) and RPL rows per lane (ROW_STEP apart): SG 32 gives 2 lanes of 16
// columns per row, SG 8 one lane for two whole rows, SG 64 four lanes of 8 columns.
const LPR: u32 = select(1u, SG / 16u, SG >= 16u);
const RPL: u32 = 16u * LPR / SG;
const CPL: u32 = 32u / LPR;
const ROW_STEP: u32 = SG / LPR;

// Row j (0..RPL) of this lane's rows.
fn lane_row(lane: u32, j: u32) -> u32 {
    return lane / LPR + j * ROW_STEP;
}

// Column i (0..CPL) of this lane's part of row r, rotated: part*CPL + (i + r) % CPL. At SG 32
// (rows of two halves) the 32 lanes then read 32 different banks of the [16][32] f32 scores (in
// plain order all 16 rows of a half hit one bank: 16-way conflicts); at SG 8 the 8 rows too.
fn lane_col(lane: u32, r: u32, i: u32) -> u32 {
    return (lane % LPR) * CPL + (i + r) % CPL;
}

// Scaled score of row r, column col of the subgroup's block, NEG_S past Lk.
fn lane_score(sg: u32, r: u32, col: u32, k0: u32) -> f32 {
    let x = as_s[sg * 512u + r * 32u + col] * pf(30u);
    return select(NEG_S, x, k0 + col < p(33u));
}

// Max (or sum) over the LPR lanes of a row (uniform branches: LPR is a constant).
fn row_max(x: f32) -> f32 {
    var v = x;
    if (LPR > 1u) {
        v = max(v, subgroupShuffleXor(v, 1u));
    }
    if (LPR > 2u) {
        v = max(v, subgroupShuffleXor(v, 2u));
    }
    return v;
}

fn row_sum(x: f32) -> f32 {
    var v = x;
    if (LPR > 1u) {
        v = v + subgroupShuffleXor(v, 1u);
    }
    if (LPR > 2u) {
        v = v + subgroupShuffleXor(v, 2u);
    }
    return v;
}

// The max of row r's scores in this key block (over the row's LPR lanes).
fn block_max(sg: u32, lane: u32, r: u32, k0: u32) -> f32 {
    var mx = NEG_S;
    for (var i = 0u; i < CPL; i = i + 1u) {
        mx = max(mx, lane_score(sg, r, lane_col(lane, r, i), k0));
    }
    return row_max(mx);
}

// Pass 1 for this lane's rows: the running max m and sum l (per row j) over the key block.
fn update_stats(sg: u32, lane: u32, k0: u32, m: ptr<function, array<f32, RPL>>,
                l: ptr<function, array<f32, RPL>>) {
    for (var j = 0u; j < RPL; j = j + 1u) {
        let r = lane_row(lane, j);
        let mx = block_max(sg, lane, r, k0);
        let m_new = max((*m)[j], mx);
        var sum = 0.0;
        for (var i = 0u; i < CPL; i = i + 1u) {
            let s = lane_score(sg, r, lane_col(lane, r, i), k0);
            sum = sum + select(0.0, exp(s - m_new), s > NEG_S);
        }
        sum = row_sum(sum);
        (*l)[j] = (*l)[j] * exp((*m)[j] - m_new) + sum;
        (*m)[j] = m_new;
    }
}

// This lane's parts of its rows as normalised probabilities exp(s - m) / l (f16) into ap[prow..].
fn write_probabilities(prow: u32, sg: u32, lane: u32, k0: u32, m: array<f32, RPL>,
                       inv_l: array<f32, RPL>) {
    for (var j = 0u; j < RPL; j = j + 1u) {
        let r = lane_row(lane, j);
        for (var i = 0u; i < CPL; i = i + 1u) {
            let col = lane_col(lane, r, i);
            let s = lane_score(sg, r, col, k0);
            let pr = select(0.0, exp(s - m[j]) * inv_l[j], s > NEG_S);
            ap[prow + r * AP + col] = f16(pr);
        }
    }
}
