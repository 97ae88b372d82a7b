//! diffusers' `PNDMScheduler`: pseudo linear multistep (PLMS) steps, after Runge-Kutta (PRK)
//! warm-up steps unless `skip_prk_steps` (Stable Diffusion's setting).
//!
//! Invariants: the timestep list is diffusers' (with `skip_prk_steps`, the second-to-last
//! spaced timestep repeats: `n + 1` entries for `n ≥ 2` steps; with PRK, 12 warm-up entries
//! for the last four spaced timesteps, then the rest, so at least 4 steps); which rule a step
//! uses follows diffusers' counter of steps run, and the history (past model outputs, the
//! sample the second PLMS step restarts from, the running Runge-Kutta sum) lives here, so steps
//! run in order; `_get_prev_sample`'s ᾱ arithmetic is in f32 as on diffusers' 0-d tensors.

use super::config::{Prediction, SchedulerConfig};
use super::ddim::{add_noise_at_alpha, train_index};
use super::kind::SchedulerKind;
use super::update::{
    check_index, check_operand, combine, narrow_to, noise_for_step, widen, StepOrder,
};
use super::Scheduler;
use crate::{Error, Result, Tensor};

/// diffusers' `PNDMScheduler` (PLMS, with or without Runge-Kutta warm-up).
#[derive(Clone, Debug)]
pub struct PndmScheduler {
    config: SchedulerConfig,
    alphas_cumprod: Vec<f64>,
    final_alpha: f64,
    steps: usize,
    timesteps: Vec<f64>,
    /// How many leading entries of `timesteps` are Runge-Kutta ones.
    prk_len: usize,
    state: History,
}

/// What a PNDM run remembers between steps.
#[derive(Clone, Debug, Default)]
struct History {
    /// Steps run (diffusers' `counter`).
    counter: usize,
    /// The last model outputs, oldest first (diffusers' `ets`, at most 4 used).
    ets: Vec<Tensor>,
    /// The sample a step restarts from (diffusers' `cur_sample`).
    cur_sample: Option<Tensor>,
    /// The running Runge-Kutta sum of outputs (diffusers' `cur_model_output`).
    cur_model_output: Option<Tensor>,
    order: StepOrder,
}

impl PndmScheduler {
    /// A PNDM scheduler for `steps` inference steps (ε- or v-prediction).
    pub fn new(config: SchedulerConfig, steps: usize) -> Result<PndmScheduler> {
        if config.prediction == Prediction::Sample {
            return Err(Error::Config {
                key: "prediction_type".into(),
                msg: "PNDMScheduler supports epsilon and v_prediction, not sample".into(),
            });
        }
        // The spaced timesteps, ascending.
        let mut spaced = config.timesteps(steps, true)?;
        spaced.reverse();
        let n = spaced.len();
        let (prk, plms): (Vec<f64>, Vec<f64>) = if config.skip_prk_steps {
            let mut plms = spaced[..n - 1].to_vec();
            if n >= 2 {
                plms.push(spaced[n - 2]);
            }
            plms.push(spaced[n - 1]);
            plms.reverse();
            (Vec::new(), plms)
        } else {
            if n < 4 {
                return Err(Error::invalid(
                    "PNDMScheduler",
                    format!(
                        "with Runge-Kutta steps (skip_prk_steps false) at least 4 inference \
                         steps are needed, got {n}"
                    ),
                ));
            }
            let half = (config.num_train_timesteps / n / 2) as f64;
            // [a, a+h, b, b+h, c, c+h, d] with each repeated twice, less the first and last.
            let mut base = Vec::with_capacity(8);
            for &t in &spaced[n - 4..] {
                base.extend([t, t + half]);
            }
            base.pop();
            let doubled: Vec<f64> = base.iter().flat_map(|&t| [t, t]).collect();
            let mut prk = doubled[1..doubled.len() - 1].to_vec();
            prk.reverse();
            let mut plms = spaced[..n - 3].to_vec();
            plms.reverse();
            (prk, plms)
        };
        let alphas_cumprod = config.alphas_cumprod();
        let final_alpha = if config.set_alpha_to_one {
            1.0
        } else {
            alphas_cumprod[0]
        };
        let prk_len = prk.len();
        Ok(PndmScheduler {
            config,
            alphas_cumprod,
            final_alpha,
            steps: n,
            timesteps: [prk, plms].concat(),
            prk_len,
            state: History::default(),
        })
    }

    /// diffusers' `_get_prev_sample`: the sample at `prev_t` from the one at `t` and an ε (or v)
    /// estimate, the ᾱ arithmetic in f32.
    fn prev_sample(&self, x: &Tensor, t: i64, prev_t: i64, out: &Tensor) -> Result<Tensor> {
        let alpha = |t: i64| -> f32 {
            if t >= 0 {
                self.alphas_cumprod[train_index(t as f64, &self.alphas_cumprod)] as f32
            } else {
                self.final_alpha as f32
            }
        };
        let (a_t, a_prev) = (alpha(t), alpha(prev_t));
        let (b_t, b_prev) = (1.0 - a_t, 1.0 - a_prev);
        let sample_coeff = (a_prev / a_t).sqrt();
        let denom = a_t * b_prev.sqrt() + (a_t * b_t * a_prev).sqrt();
        let out_coeff = -f64::from(a_prev - a_t) / f64::from(denom);
        match self.config.prediction {
            // ε = √ᾱ·v + √(1−ᾱ)·x.
            Prediction::VPrediction => {
                let (sa, sb) = (f64::from(a_t.sqrt()), f64::from(b_t.sqrt()));
                combine(&[
                    (x, f64::from(sample_coeff) + out_coeff * sb),
                    (out, out_coeff * sa),
                ])
            }
            _ => combine(&[(x, f64::from(sample_coeff)), (out, out_coeff)]),
        }
    }

    /// A Runge-Kutta step (diffusers' `step_prk`).
    fn step_prk(&mut self, out: Tensor, t: i64, x: Tensor) -> Result<Tensor> {
        let s = &mut self.state;
        let ratio = (self.config.num_train_timesteps / self.steps) as i64;
        let diff_to_prev = if s.counter % 2 == 1 { 0 } else { ratio / 2 };
        let prev_t = t - diff_to_prev;
        let t = self.timesteps[s.counter / 4 * 4] as i64;
        let add = |acc: &Option<Tensor>, c: f64| -> Result<Tensor> {
            match acc {
                Some(a) => combine(&[(a, 1.0), (&out, c)]),
                None => out.mul_scalar(c),
            }
        };
        let mut model_output = out.clone();
        match s.counter % 4 {
            0 => {
                s.cur_model_output = Some(add(&s.cur_model_output, 1.0 / 6.0)?);
                s.ets.push(out.clone());
                s.cur_sample = Some(x.clone());
            }
            1 | 2 => s.cur_model_output = Some(add(&s.cur_model_output, 1.0 / 3.0)?),
            _ => {
                model_output = add(&s.cur_model_output, 1.0 / 6.0)?;
                s.cur_model_output = None;
            }
        }
        let cur = s.cur_sample.clone().unwrap_or(x);
        self.prev_sample(&cur, t, prev_t, &model_output)
    }

    /// A linear multistep step (diffusers' `step_plms`).
    fn step_plms(&mut self, out: Tensor, t: i64, x: Tensor) -> Result<Tensor> {
        let ratio = (self.config.num_train_timesteps / self.steps) as i64;
        let s = &mut self.state;
        if !self.config.skip_prk_steps && s.ets.len() < 3 {
            return Err(Error::invalid(
                "PNDMScheduler.step",
                "linear multistep steps need the 12 Runge-Kutta steps first",
            ));
        }
        let (mut t, mut prev_t) = (t, t - ratio);
        if s.counter != 1 {
            let keep = s.ets.len().saturating_sub(3);
            s.ets.drain(..keep);
            s.ets.push(out.clone());
        } else {
            prev_t = t;
            t += ratio;
        }
        let mut x = x;
        let n = s.ets.len();
        let model_output = if n == 1 && s.counter == 0 {
            s.cur_sample = Some(x.clone());
            out
        } else if n == 1 && s.counter == 1 {
            if let Some(cur) = s.cur_sample.take() {
                x = cur;
            }
            combine(&[(&out, 0.5), (&s.ets[0], 0.5)])?
        } else {
            let e = |k: usize| &s.ets[n - k];
            match n {
                2 => combine(&[(e(1), 1.5), (e(2), -0.5)])?,
                3 => combine(&[
                    (e(1), 23.0 / 12.0),
                    (e(2), -16.0 / 12.0),
                    (e(3), 5.0 / 12.0),
                ])?,
                _ => combine(&[
                    (e(1), 55.0 / 24.0),
                    (e(2), -59.0 / 24.0),
                    (e(3), 37.0 / 24.0),
                    (e(4), -9.0 / 24.0),
                ])?,
            }
        };
        self.prev_sample(&x, t, prev_t, &model_output)
    }
}

impl Scheduler for PndmScheduler {
    fn kind(&self) -> SchedulerKind {
        SchedulerKind::Pndm
    }

    fn timesteps(&self) -> &[f64] {
        &self.timesteps
    }

    fn inference_steps(&self) -> usize {
        self.steps
    }

    fn init_noise_sigma(&self) -> f64 {
        1.0
    }

    fn scale_model_input(&self, sample: &Tensor, index: usize) -> Result<Tensor> {
        check_index(
            "PNDMScheduler.scale_model_input",
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
        const OP: &str = "PNDMScheduler.step";
        check_index(OP, index, self.timesteps.len())?;
        check_operand(OP, sample, model_output, "model output")?;
        noise_for_step(OP, false, index, sample, noise)?;
        self.state.order.check(OP, index)?;
        let (x, out) = (widen(sample)?, widen(model_output)?);
        let t = self.timesteps[index] as i64;
        let y = if self.state.counter < self.prk_len && !self.config.skip_prk_steps {
            self.step_prk(out, t, x)?
        } else {
            self.step_plms(out, t, x)?
        };
        self.state.counter += 1;
        self.state.order.advance(index);
        narrow_to(y, sample.dtype())
    }

    fn add_noise(&self, original: &Tensor, noise: &Tensor, index: usize) -> Result<Tensor> {
        const OP: &str = "PNDMScheduler.add_noise";
        check_index(OP, index, self.timesteps.len())?;
        let t = train_index(self.timesteps[index], &self.alphas_cumprod);
        add_noise_at_alpha(OP, original, noise, self.alphas_cumprod[t])
    }

    fn set_begin_index(&mut self, index: usize) -> Result<()> {
        check_index("PNDMScheduler.set_begin_index", index, self.timesteps.len())?;
        self.state = History {
            order: StepOrder::begin_at(index),
            ..History::default()
        };
        Ok(())
    }
}
