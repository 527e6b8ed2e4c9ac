"""``lavo-zoo bench tts``: the decoding benchmark synthesises exactly the frames asked for."""


def test_speed_benchmark_decodes_exactly_the_asked_frames() -> None:
    from lavo_zoo.bench.tts import DECODERS, measure

    for name in DECODERS:
        res = measure(name, frames=16, at=[8, 16], size="tiny", device="cpu")
        assert res["frames"] == 16 and set(res["per_frame_ms"]) == {8, 16} and res["rtf"] > 0
