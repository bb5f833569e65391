//! Each sampling filter's effect on small hand-made logits, drawn on MLX.

use anyhow::Result;
use engine::sampler::{
    apply_min_p, apply_repetition_penalty, apply_top_k, apply_top_p, Sampler, SamplerConfig,
    SamplerError,
};
use mlx_rs::Array;

/// Logits whose softmax is exactly `probs`.
fn logits_of(probs: &[f32]) -> Array {
    let logs: Vec<f32> = probs.iter().map(|p| p.ln()).collect();
    Array::from_slice(&logs, &[logs.len() as i32])
}

fn no_history() -> Array {
    Array::from_slice::<u32>(&[], &[0])
}

/// Token counts over `n` draws.
fn histogram(config: SamplerConfig, logits: &Array, n: usize) -> Result<Vec<usize>> {
    let mut sampler = Sampler::new(config)?;
    let mut counts = vec![0; logits.shape()[0] as usize];
    let history = no_history();
    for _ in 0..n {
        let token = sampler.sample(logits, &history)?;
        token.eval()?;
        counts[token.item_exact::<u32>() as usize] += 1;
    }
    Ok(counts)
}

/// Which entries a filter left finite.
fn kept(filtered: &Array) -> Result<Vec<bool>> {
    filtered.eval()?;
    Ok(filtered
        .as_slice::<f32>()
        .iter()
        .map(|v| v.is_finite())
        .collect())
}

fn logprobs_of(probs: &[f32]) -> Array {
    logits_of(probs)
}

fn sampling(temperature: f32) -> SamplerConfig {
    SamplerConfig {
        temperature,
        seed: 7,
        ..SamplerConfig::default()
    }
}

#[test]
fn greedy_is_argmax() -> Result<()> {
    let logits = Array::from_slice(&[0.1f32, 2.0, -1.0, 1.9], &[4]);
    let mut sampler = Sampler::new(SamplerConfig::greedy())?;
    for _ in 0..5 {
        let token = sampler.sample(&logits, &no_history())?;
        assert_eq!(token.shape(), &[] as &[i32]);
        assert_eq!(token.item_exact::<u32>(), 1);
    }
    // [1, vocab] logits give a [1] token, ready to feed back as a batch of one.
    let batched = logits.reshape(&[1, 4])?;
    let token = sampler.sample(&batched, &no_history())?;
    assert_eq!(token.shape(), &[1]);
    assert_eq!(token.as_slice::<u32>(), &[1]);
    let token = sampler.sample(&logits.reshape(&[1, 1, 4])?, &no_history())?;
    assert_eq!(token.shape(), &[1, 1]);
    assert_eq!(token.as_slice::<u32>(), &[1]);
    Ok(())
}

#[test]
fn top_k_never_yields_a_token_outside_the_k_best() -> Result<()> {
    let logits = logits_of(&[0.3, 0.05, 0.35, 0.3]);
    let config = SamplerConfig {
        top_k: Some(2),
        ..sampling(1.0)
    };
    let counts = histogram(config, &logits, 200)?;
    assert_eq!(counts[1], 0, "{counts:?}");
    // Ties at the k-th place may go either way, but only 2 tokens survive.
    assert_eq!(counts.iter().filter(|&&c| c > 0).count(), 2, "{counts:?}");
    assert!(counts[2] > 0, "the best token must be drawn: {counts:?}");

    let filtered = apply_top_k(&logprobs_of(&[0.1, 0.4, 0.2, 0.3]), 2)?;
    assert_eq!(kept(&filtered)?, vec![false, true, false, true]);
    let all = apply_top_k(&logprobs_of(&[0.5, 0.5]), 5)?;
    assert_eq!(kept(&all)?, vec![true, true]);
    Ok(())
}

#[test]
fn top_p_keeps_the_minimal_nucleus() -> Result<()> {
    let probs = [0.15, 0.5, 0.05, 0.3];
    // 0.5 < 0.7 ≤ 0.5 + 0.3: the two best tokens.
    assert_eq!(
        kept(&apply_top_p(&logprobs_of(&probs), 0.7)?)?,
        vec![false, true, false, true]
    );
    // 0.8 < 0.9 ≤ 0.95: three tokens.
    assert_eq!(
        kept(&apply_top_p(&logprobs_of(&probs), 0.9)?)?,
        vec![true, true, false, true]
    );
    // A tiny p still keeps the best token.
    assert_eq!(
        kept(&apply_top_p(&logprobs_of(&probs), 0.01)?)?,
        vec![false, true, false, false]
    );

    let config = SamplerConfig {
        top_p: Some(0.7),
        ..sampling(1.0)
    };
    let counts = histogram(config, &logits_of(&probs), 200)?;
    assert_eq!(counts[0] + counts[2], 0, "{counts:?}");
    assert!(counts[1] > 0 && counts[3] > 0, "{counts:?}");
    Ok(())
}

#[test]
fn min_p_drops_tokens_below_a_fraction_of_the_best() -> Result<()> {
    let probs = [0.6, 0.25, 0.1, 0.05];
    // Threshold 0.2 × 0.6 = 0.12.
    assert_eq!(
        kept(&apply_min_p(&logprobs_of(&probs), 0.2)?)?,
        vec![true, true, false, false]
    );
    assert_eq!(
        kept(&apply_min_p(&logprobs_of(&probs), 0.05)?)?,
        vec![true; 4]
    );

    let config = SamplerConfig {
        min_p: Some(0.2),
        ..sampling(1.0)
    };
    let counts = histogram(config, &logits_of(&probs), 200)?;
    assert_eq!(counts[2] + counts[3], 0, "{counts:?}");
    assert!(counts[1] > 0, "{counts:?}");
    Ok(())
}

#[test]
fn repetition_penalty_divides_positive_and_multiplies_negative_logits() -> Result<()> {
    let logits = Array::from_slice(&[2.0f32, -1.0, 0.5, 3.0], &[4]);
    let history = Array::from_slice(&[0u32, 1, 1], &[3]);
    let out = apply_repetition_penalty(&logits, &history, 2.0, 20)?;
    out.eval()?;
    assert_eq!(out.as_slice::<f32>(), &[1.0, -2.0, 0.5, 3.0]);

    // Only the last `window` ids count.
    let history = Array::from_slice(&[0i32, 1, 3], &[3]);
    let out = apply_repetition_penalty(&logits, &history, 2.0, 1)?;
    out.eval()?;
    assert_eq!(out.as_slice::<f32>(), &[2.0, -1.0, 0.5, 1.5]);

    // Through the sampler: greedy would repeat token 3; a strong penalty moves it to 0.
    let config = SamplerConfig {
        repetition_penalty: Some(4.0),
        ..SamplerConfig::greedy()
    };
    let mut sampler = Sampler::new(config)?;
    let token = sampler.sample(&logits, &Array::from_slice(&[3u32], &[1]))?;
    assert_eq!(token.item_exact::<u32>(), 0);

    let bad = Array::from_slice(&[1.0f32], &[1]);
    assert!(matches!(
        apply_repetition_penalty(&logits, &bad, 2.0, 4),
        Err(SamplerError::History { .. })
    ));
    Ok(())
}

#[test]
fn the_same_seed_draws_the_same_sequence() -> Result<()> {
    let logits = logits_of(&[0.125; 8]);
    let draw = |seed| -> Result<Vec<u32>> {
        let mut sampler = Sampler::new(SamplerConfig {
            seed,
            ..SamplerConfig::default()
        })?;
        let mut tokens = Vec::new();
        for _ in 0..40 {
            let token = sampler.sample(&logits, &no_history())?;
            tokens.push(token.item_exact::<u32>());
        }
        Ok(tokens)
    };
    let a = draw(11)?;
    assert_eq!(a, draw(11)?);
    assert_ne!(a, draw(12)?);
    // Each step uses a fresh key: a uniform draw over 8 tokens does not repeat one 40 times.
    assert!(a.iter().any(|&t| t != a[0]), "{a:?}");
    // The global MLX generator does not influence the sampler.
    mlx_rs::random::seed(999)?;
    assert_eq!(a, draw(11)?);
    Ok(())
}

#[test]
fn temperature_sharpens_and_flattens_the_distribution() -> Result<()> {
    // Two tokens with logits 1 and 0: p(first) = sigmoid(1 / T).
    let logits = Array::from_slice(&[1.0f32, 0.0], &[2]);
    let n = 2000;
    let share = |t: f32| -> Result<f64> {
        let counts = histogram(sampling(t), &logits, n)?;
        Ok(counts[0] as f64 / n as f64)
    };
    let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
    let (cold, neutral, hot) = (share(0.5)?, share(1.0)?, share(2.0)?);
    // Standard error at n = 2000 is ≤ 0.011; allow 4 of them.
    for (got, t) in [(cold, 0.5), (neutral, 1.0), (hot, 2.0)] {
        let want = sigmoid(1.0 / t);
        assert!((got - want).abs() < 0.045, "T={t}: {got} vs {want}");
    }
    assert!(cold > neutral && neutral > hot);
    Ok(())
}

#[test]
fn invalid_settings_and_shapes_are_errors() -> Result<()> {
    for config in [
        SamplerConfig {
            temperature: -1.0,
            ..SamplerConfig::default()
        },
        SamplerConfig {
            top_p: Some(0.0),
            ..SamplerConfig::default()
        },
        SamplerConfig {
            top_k: Some(0),
            ..SamplerConfig::default()
        },
        SamplerConfig {
            min_p: Some(1.5),
            ..SamplerConfig::default()
        },
        SamplerConfig {
            repetition_penalty: Some(0.0),
            ..SamplerConfig::default()
        },
    ] {
        assert!(
            matches!(
                Sampler::new(config.clone()),
                Err(SamplerError::Invalid { .. })
            ),
            "{config:?}"
        );
    }
    let mut sampler = Sampler::new(SamplerConfig::default())?;
    let batch = Array::from_slice(&[0.0f32; 6], &[2, 3]);
    assert!(matches!(
        sampler.sample(&batch, &no_history()),
        Err(SamplerError::LogitsShape { .. })
    ));
    Ok(())
}
