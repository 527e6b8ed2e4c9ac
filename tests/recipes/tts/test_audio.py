"""Features against librosa's own pipeline; the Griffin-Lim vocoder."""
import numpy as np

from lavo_zoo.recipes.tts.audio import FeatureSettings, griffin_lim, log_mel
from lavo_zoo.recipes.tts.espeak import espeak


def reference_log_mel(wave: np.ndarray, s: FeatureSettings) -> np.ndarray:
    """fairseq's features, slowly: reflect pad (n_fft/2, n_fft/2 + 1), frame by frame |rfft| of the Hann-windowed
    frame, librosa's mel filterbank, log(max(., eps)). (librosa.stft itself costs a minute of JIT on a loaded CPU.)"""
    import librosa.filters
    import scipy.signal

    padded = np.pad(wave.astype(np.float64), (s.n_fft // 2, s.n_fft // 2 + 1), mode="reflect")
    window = scipy.signal.get_window("hann", s.win_length, fftbins=True)
    frames = [np.abs(np.fft.rfft(padded[t:t + s.n_fft] * window))
              for t in range(0, len(padded) - s.n_fft + 1, s.hop_length)]
    basis = librosa.filters.mel(sr=s.sample_rate, n_fft=s.n_fft, n_mels=s.n_mels, fmin=s.f_min, fmax=s.f_max)
    return np.log(np.maximum(np.stack(frames) @ basis.T, s.eps))


def test_log_mel_matches_a_frame_by_frame_reference() -> None:
    s = FeatureSettings()
    rng = np.random.default_rng(0)
    for n in (4000, 22_050 + 77):
        wave = (rng.standard_normal(n) * 0.1).astype(np.float32)
        ours = log_mel(wave, s)
        assert ours.shape == ((n + 1) // s.hop_length + 1, 80)  # fairseq's frame count
        np.testing.assert_allclose(ours, reference_log_mel(wave, s), atol=2e-4, rtol=1e-4)


def test_griffin_lim_reconstructs_the_spectrum() -> None:
    s = FeatureSettings()
    wave = espeak().speak("A short test sentence.").astype(np.float32) / 32768
    mel = log_mel(wave, s)
    out = griffin_lim(mel, s)
    assert out.dtype == np.float32 and abs(out.size - wave.size) <= s.hop_length + 1
    np.testing.assert_array_equal(out, griffin_lim(mel, s))  # seeded: deterministic
    again = log_mel(out, s)[: len(mel)]
    voiced = mel > np.log(1e-3)
    assert np.corrcoef(again[voiced], mel[voiced])[0, 1] > 0.95  # the same spectrogram, phase aside
