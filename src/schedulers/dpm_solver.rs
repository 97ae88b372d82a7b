//! diffusers' `DPMSolverMultistepScheduler` with `algorithm_type="dpmsolver++"`: the
//! multistep DPM-Solver++ of order 1–3 on the data prediction x̂₀ ("DPM++ 2M" at order 2,
//! "DPM++ 2M Karras" with Karras σs).
//!
//! Invariants: timesteps are diffusers' (`n + 1` spaced points less the last for linspace and
//! leading spacing; Karras: inverted from the Karras σs and rounded, except for the cosine
//! schedule), σs stored as f32; per step, α_t = 1/√(σ²+1), σ_t = σ·α_t, λ = ln α_t − ln σ_t
//! and the update's coefficients are computed in f32 exactly as diffusers' 0-d tensor
//! arithmetic orders them; the order of a step follows diffusers (first order at the start,
//! rising with the outputs seen, lowered at the end per `lower_order_final`,
//! `euler_at_final` and a zero final σ). The x̂₀ history is the run's state, so steps run in
//! order.

use super::config::{BetaSchedule, FinalSigma, SchedulerConfig, SolverType, TimestepSpacing};
use super::euler::final_sigma;
use super::kind::SchedulerKind;
use super::sigmas::{interp, karras, log_sigmas, sigma_alphas_cumprod, sigma_to_t, train_sigmas};
use super::update::{
    check_index, check_operand, combine, narrow_to, noise_for_step, widen, StepOrder,
};
use super::Scheduler;
use crate::{Error, Result, Tensor};

/// diffusers' `DPMSolverMultistepScheduler` (DPM-Solver++, order 1–3).
#[derive(Clone, Debug)]
pub struct DpmSolverMultistepScheduler {
    config: SchedulerConfig,
    timesteps: Vec<f64>,
    sigmas: Vec<f64>,
    /// The x̂₀ of the latest steps, oldest first (at most `solver_order`).
    history: Vec<Tensor>,
    /// Steps run so far, capped at the order (diffusers' `lower_order_nums`).
    lower_order_nums: usize,
    order: StepOrder,
}

impl DpmSolverMultistepScheduler {
    /// A DPM-Solver++ scheduler visiting `steps` timesteps.
    pub fn new(config: SchedulerConfig, steps: usize) -> Result<DpmSolverMultistepScheduler> {
        config.validate()?;
        let total = config.num_train_timesteps;
        if steps == 0 || steps > total {
            return Err(Error::invalid(
                "DPMSolverMultistepScheduler",
                format!("expected 1..={total} inference steps, got {steps}"),
            ));
        }
        let mut timesteps = spaced_timesteps(&config, steps)?;
        let train = train_sigmas(&sigma_alphas_cumprod(&config));
        let mut sigmas = if config.use_karras_sigmas {
            let last = train.len() - 1;
            let sigmas = karras(f64::from(train[0]), f64::from(train[last]), steps);
            let logs = log_sigmas(&train);
            let round = config.beta_schedule != BetaSchedule::SquaredCosCapV2;
            timesteps = sigmas
                .iter()
                .map(|&s| {
                    let t = sigma_to_t(s, &logs);
                    // `.round()` (half to even), then the cast to int64 truncates.
                    if round {
                        t.round_ties_even()
                    } else {
                        t.trunc()
                    }
                })
                .collect();
            sigmas
        } else {
            interp(&timesteps, &train)
        };
        sigmas.push(final_sigma(config.final_sigma, &train));
        let sigmas = sigmas.into_iter().map(|s| s as f32 as f64).collect();
        Ok(DpmSolverMultistepScheduler {
            config,
            timesteps,
            sigmas,
            history: Vec::new(),
            lower_order_nums: 0,
            order: StepOrder::default(),
        })
    }

    /// σ for each step, followed by the final σ.
    pub fn sigmas(&self) -> &[f64] {
        &self.sigmas
    }
}

/// diffusers' DPM-Solver timesteps before any Karras conversion (integers, descending).
fn spaced_timesteps(config: &SchedulerConfig, n: usize) -> Result<Vec<f64>> {
    let last = config.num_train_timesteps;
    Ok(match config.spacing {
        TimestepSpacing::Linspace => {
            let step = (last - 1) as f64 / n as f64;
            (1..=n)
                .rev()
                .map(|i| {
                    let t = if i == n {
                        (last - 1) as f64
                    } else {
                        i as f64 * step
                    };
                    t.round_ties_even()
                })
                .collect()
        }
        TimestepSpacing::Leading => {
            let ratio = last / (n + 1);
            (1..=n)
                .rev()
                .map(|i| (i * ratio + config.steps_offset) as f64)
                .collect()
        }
        // As DDIM's: `round(arange(T, 0, −T/n)) − 1`.
        TimestepSpacing::Trailing => config.timesteps(n, true)?,
    })
}

/// α_t = 1/√(σ²+1) and σ_t = σ·α_t, in f32.
fn alpha_sigma(sigma: f64) -> (f32, f32) {
    let s = sigma as f32;
    let alpha = 1.0 / (s * s + 1.0).sqrt();
    (alpha, s * alpha)
}

/// λ = ln α − ln σ, in f32.
fn lambda(alpha: f32, sigma: f32) -> f32 {
    alpha.ln() - sigma.ln()
}

impl DpmSolverMultistepScheduler {
    /// diffusers' `convert_model_output` for DPM-Solver++: x̂₀ at step `index`.
    fn data_prediction(&self, out: &Tensor, x: &Tensor, index: usize) -> Result<Tensor> {
        use super::config::Prediction;
        let (alpha, sigma) = alpha_sigma(self.sigmas[index]);
        let (a, s) = (f64::from(alpha), f64::from(sigma));
        match self.config.prediction {
            Prediction::Epsilon => combine(&[(x, 1.0 / a), (out, -s / a)]),
            Prediction::Sample => Ok(out.clone()),
            Prediction::VPrediction => combine(&[(x, a), (out, -s)]),
        }
    }

    /// The update from step `i` to `i + 1` of order `k`, as a combination of the sample and
    /// the history's x̂₀s (newest first: m0, m1, m2).
    fn update(&self, x: &Tensor, i: usize, k: usize) -> Result<Tensor> {
        let n = self.history.len();
        let m = |j: usize| &self.history[n - 1 - j];
        let (alpha_t, sigma_t) = alpha_sigma(self.sigmas[i + 1]);
        let (alpha_s0, sigma_s0) = alpha_sigma(self.sigmas[i]);
        let lambda_t = lambda(alpha_t, sigma_t);
        let lambda_s0 = lambda(alpha_s0, sigma_s0);
        let h = lambda_t - lambda_s0;
        let em1 = (-h).exp() - 1.0;
        let c_x = f64::from(sigma_t / sigma_s0);
        let c0 = f64::from(alpha_t * em1);
        if k == 1 {
            // x_t = (σ_t/σ_s)·x − α_t(e^{−h} − 1)·D0.
            return combine(&[(x, c_x), (m(0), -c0)]);
        }
        let (alpha_s1, sigma_s1) = alpha_sigma(self.sigmas[i - 1]);
        let lambda_s1 = lambda(alpha_s1, sigma_s1);
        let h0 = lambda_s0 - lambda_s1;
        let r0 = h0 / h;
        // D1 coefficient: midpoint −½α_t(e^{−h}−1), Heun α_t((e^{−h}−1)/h + 1).
        let c1 = match (k, self.config.solver_type) {
            (2, SolverType::Midpoint) => f64::from(-(0.5 * (alpha_t * em1))),
            _ => f64::from(alpha_t * (em1 / h + 1.0)),
        };
        if k == 2 {
            // D1 = (m0 − m1)/r0.
            let inv_r0 = f64::from(1.0 / r0);
            return combine(&[(x, c_x), (m(0), -c0 + c1 * inv_r0), (m(1), -c1 * inv_r0)]);
        }
        let (alpha_s2, sigma_s2) = alpha_sigma(self.sigmas[i - 2]);
        let h1 = lambda_s1 - lambda(alpha_s2, sigma_s2);
        let r1 = h1 / h;
        let c2 = f64::from(-(alpha_t * ((em1 + h) / (h * h) - 0.5)));
        // D1_0 = (m0−m1)/r0, D1_1 = (m1−m2)/r1, D1 = D1_0 + q(D1_0 − D1_1),
        // D2 = (D1_0 − D1_1)/(r0+r1), q = r0/(r0+r1).
        let (a, b) = (f64::from(1.0 / r0), f64::from(1.0 / r1));
        let q = f64::from(r0 / (r0 + r1));
        let p = f64::from(1.0 / (r0 + r1));
        // In m0, m1, m2: D1_0 = a·m0 − a·m1, D1_1 = b·m1 − b·m2.
        let d1 = [(1.0 + q) * a, -(1.0 + q) * a - q * b, q * b];
        let d2 = [p * a, -p * a - p * b, p * b];
        combine(&[
            (x, c_x),
            (m(0), -c0 + c1 * d1[0] + c2 * d2[0]),
            (m(1), c1 * d1[1] + c2 * d2[1]),
            (m(2), c1 * d1[2] + c2 * d2[2]),
        ])
    }
}

impl Scheduler for DpmSolverMultistepScheduler {
    fn kind(&self) -> SchedulerKind {
        SchedulerKind::DpmSolverMultistep
    }

    fn timesteps(&self) -> &[f64] {
        &self.timesteps
    }

    fn inference_steps(&self) -> usize {
        self.timesteps.len()
    }

    fn sigmas(&self) -> Option<&[f64]> {
        Some(&self.sigmas)
    }

    fn init_noise_sigma(&self) -> f64 {
        1.0
    }

    fn scale_model_input(&self, sample: &Tensor, index: usize) -> Result<Tensor> {
        check_index(
            "DPMSolverMultistepScheduler.scale_model_input",
            index,
            self.timesteps.len(),
        )?;
        Ok(sample.clone())
    }

    fn step(
        &mut self,
        model_output: &Tensor,
        index: usize,
        sample: &Tensor,
        noise: Option<&Tensor>,
    ) -> Result<Tensor> {
        const OP: &str = "DPMSolverMultistepScheduler.step";
        let len = self.timesteps.len();
        check_index(OP, index, len)?;
        check_operand(OP, sample, model_output, "model output")?;
        noise_for_step(OP, false, index, sample, noise)?;
        self.order.check(OP, index)?;
        let c = &self.config;
        let few = c.lower_order_final && len < 15;
        let lower_final =
            index + 1 == len && (c.euler_at_final || few || c.final_sigma == FinalSigma::Zero);
        let lower_second = index + 2 == len && few;
        let (x, out) = (widen(sample)?, widen(model_output)?);
        let x0 = self.data_prediction(&out, &x, index)?;
        if self.history.len() == c.solver_order {
            self.history.remove(0);
        }
        self.history.push(x0);
        let k = if c.solver_order == 1 || self.lower_order_nums < 1 || lower_final {
            1
        } else if c.solver_order == 2 || self.lower_order_nums < 2 || lower_second {
            2
        } else {
            3
        };
        let y = self.update(&x, index, k)?;
        if self.lower_order_nums < self.config.solver_order {
            self.lower_order_nums += 1;
        }
        self.order.advance(index);
        narrow_to(y, sample.dtype())
    }

    fn add_noise(&self, original: &Tensor, noise: &Tensor, index: usize) -> Result<Tensor> {
        const OP: &str = "DPMSolverMultistepScheduler.add_noise";
        check_index(OP, index, self.timesteps.len())?;
        check_operand(OP, original, noise, "noise")?;
        let (alpha, sigma) = alpha_sigma(self.sigmas[index]);
        let y = combine(&[
            (&widen(original)?, f64::from(alpha)),
            (&widen(noise)?, f64::from(sigma)),
        ])?;
        narrow_to(y, original.dtype())
    }

    fn set_begin_index(&mut self, index: usize) -> Result<()> {
        check_index(
            "DPMSolverMultistepScheduler.set_begin_index",
            index,
            self.timesteps.len(),
        )?;
        self.history.clear();
        self.lower_order_nums = 0;
        self.order = StepOrder::begin_at(index);
        Ok(())
    }
}
