"""MCD / MSD as fairseq's eval_sp.py: DTW against a slow loop reference, zero against itself, symmetry, files."""

import numpy as np
import pytest

from lavo_zoo.evaluators import build_evaluator
from lavo_zoo.evaluators.mcd import distortion, dtw, frame_distances, mcd_features, msd_features
from tests.recipes.tts.helpers import tone


def loop_dtw(dist: np.ndarray) -> tuple[float, np.ndarray]:
    """The textbook O(MN) double loop with the same step set and tie order (left, diagonal, up)."""
    m, n = dist.shape
    cum = np.full((m, n), np.inf)
    back = {}
    for i in range(m):
        for j in range(n):
            if i == 0 and j == 0:
                cum[i, j] = dist[0, 0]
                continue
            options = [(cum[i, j - 1] if j else np.inf, (i, j - 1)), (cum[i - 1, j - 1] if i and j else np.inf,
                       (i - 1, j - 1)), (cum[i - 1, j] if i else np.inf, (i - 1, j))]
            best = min(range(3), key=lambda k: (options[k][0], k))
            cum[i, j] = options[best][0] + dist[i, j]
            back[i, j] = options[best][1]
    path = np.zeros((m, n), dtype=np.int64)
    cell = (m - 1, n - 1)
    path[cell] = 1
    while cell != (0, 0):
        cell = back[cell]
        path[cell] = 1
    return cum[-1, -1], path


def brute_force_min(dist: np.ndarray) -> float:
    """Minimum cost over every monotone path (tiny matrices only)."""
    m, n = dist.shape
    best = {}
    def go(i, j):
        if (i, j) in best:
            return best[i, j]
        if i == 0 and j == 0:
            return dist[0, 0]
        prev = [go(a, b) for a, b in ((i, j - 1), (i - 1, j - 1), (i - 1, j)) if a >= 0 and b >= 0]
        best[i, j] = dist[i, j] + min(prev)
        return best[i, j]
    return go(m - 1, n - 1)


@pytest.mark.parametrize("m,n", [(1, 1), (1, 7), (6, 1), (5, 9), (23, 17), (40, 41)])
def test_dtw_matches_the_loop_reference(m: int, n: int) -> None:
    rng = np.random.default_rng(m * 100 + n)
    x, y = rng.standard_normal((m, 13)), rng.standard_normal((n, 13))
    dist = frame_distances(x, y)
    slow = np.array([[np.sqrt(((a - b) ** 2).sum() / 13) for b in y] for a in x])
    np.testing.assert_allclose(dist, slow, rtol=1e-10, atol=1e-10)
    cost, path = dtw(dist)
    ref_cost, ref_path = loop_dtw(dist)
    assert cost == pytest.approx(ref_cost, rel=1e-12)
    np.testing.assert_array_equal(path, ref_path)
    if m * n <= 100:
        assert cost == pytest.approx(brute_force_min(dist), rel=1e-12)


def test_symmetry_swaps_insertions_and_deletions() -> None:
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((30, 13)), rng.standard_normal((45, 13))
    ab, ba = distortion(x, y), distortion(y, x)
    assert ab.cost == pytest.approx(ba.cost, rel=1e-12)
    assert (ab.insertions, ab.deletions, ab.path_frames) == (ba.deletions, ba.insertions, ba.path_frames)
    assert ab.insertions - ab.deletions == ab.syn_frames - ab.ref_frames  # path frames = M + insertions = N + dels


def test_a_file_against_itself_scores_zero_and_a_stretched_copy_inserts() -> None:
    wave = tone(1.0)
    ev = build_evaluator("mcd", sample_rate=22_050)
    ev.update([wave], [wave])
    metrics = ev.compute()
    assert metrics["mcd"] < 1e-4 and metrics["msd"] < 1e-4
    assert metrics["mcd_ins"] == metrics["mcd_del"] == 0.0 and metrics["length_error"] == 0.0
    ev.reset()
    ev.update([wave[:wave.size // 4], np.repeat(wave, 2)], [wave, wave])  # stops at a quarter; runs twice as long
    assert ev.compute()["length_error"] == pytest.approx((0.75 + 1.0) / 2, abs=0.02)  # frames are centred: 1 + N // hop
    slow = np.repeat(wave, 2)  # the same signal at half speed: about twice the frames
    ev.reset()
    ev.update([slow], [wave])
    metrics = ev.compute()
    assert metrics["mcd_ins"] > 0.5 and metrics["mcd_ins"] > 3 * metrics["mcd_del"]
    assert set(ev.results()) == set(ev.higher_is_better) and ev.num_samples == 1


def test_features_follow_eval_sp() -> None:
    import torchaudio

    wave = tone(0.5)
    feats = mcd_features(wave, 22_050)
    assert feats.shape == (1 + wave.size // 275, 13)  # hop int(0.0125 * 22050) = 275, centred frames
    mel = torchaudio.transforms.MelSpectrogram(22_050, n_fft=1102, win_length=1102, hop_length=275, f_min=20,
                                               n_mels=80)
    import torch
    np.testing.assert_allclose(msd_features(wave, 22_050), torch.log(mel(torch.from_numpy(wave)) + 1e-6).T.numpy(),
                               rtol=1e-5, atol=1e-5)


def test_features_and_scores_stay_fp32_under_bf16_autocast() -> None:
    """Scoring inside training's (CPU) bf16 autocast gives the fp32 features and scores, from numpy or tensors."""
    import torch

    wave, other = tone(0.5), tone(0.4, freq=330.0)
    plain = (mcd_features(wave, 22_050), msd_features(wave, 22_050))
    ev = build_evaluator("mcd", sample_rate=22_050)
    ev.update([other], [wave])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = (mcd_features(torch.from_numpy(wave).bfloat16().float(), 22_050), msd_features(wave, 22_050))
        ev2 = build_evaluator("mcd", sample_rate=22_050)
        ev2.update([torch.from_numpy(other)], [wave])
    np.testing.assert_allclose(mixed[1], plain[1], rtol=0, atol=0)
    np.testing.assert_allclose(mixed[0], mcd_features(torch.from_numpy(wave).bfloat16().float().numpy(), 22_050))
    assert mixed[0].dtype == np.float32 and ev2.compute() == ev.compute()
