from click.testing import CliRunner

from lavo_zoo.recipes.lm.cli import generate
from lavo_zoo.recipes.lm.infer import generate_ids
from tests.recipes.lm.helpers import require_attention, tiny_config


def test_generate_command_continues_the_prompt_from_a_checkpoint(tmp_path):
    require_attention("lavo")
    from lavo_zoo.engine.checkpoint import save_checkpoint

    recipe, cfg = tiny_config("lavo", {"num_bases": 8, "window_size": 4})
    model = recipe.build_model(cfg).eval()
    ckpt = save_checkpoint(tmp_path / "checkpoints", 1, model, cfg, "lm")
    result = CliRunner().invoke(generate, [str(ckpt), "--prompt", "Once", "--temperature", "0",
                                           "--max-new-tokens", "12"])
    assert result.exit_code == 0, result.output
    expected = generate_ids(model, list(b"Once"), 12, temperature=0, stop=0)
    assert result.output.startswith("Once" + bytes(i for i in expected if i).decode("utf-8", errors="replace"))


def test_generate_help_ends_with_examples():
    result = CliRunner().invoke(generate, ["--help"])
    assert result.exit_code == 0
    assert "Examples:" in result.output and result.output.rstrip().splitlines()[-1].strip().startswith("lavo-zoo")


def test_the_python_api_is_what_the_command_prints(tmp_path):
    """``lavo_zoo.load`` returns the LanguageModel the command uses: the same greedy continuation, one per prompt of a
    list, and the same with the recurrent state carried as with the sequence re-run every step."""
    require_attention("lavo")
    import lavo_zoo
    from lavo_zoo.engine.checkpoint import save_checkpoint

    recipe, cfg = tiny_config("lavo", {"num_bases": 8, "window_size": 4})
    ckpt = save_checkpoint(tmp_path / "checkpoints", 1, recipe.build_model(cfg).eval(), cfg, "lm")
    lm = lavo_zoo.load(ckpt, device="cpu")
    one = lm.generate("Once", max_new_tokens=12, temperature=0)
    assert lm.generate(["Once", "Twice"], max_new_tokens=12, temperature=0)[0] == one
    assert lm.generate("Once", max_new_tokens=12, temperature=0, stream_state=False) == one
    result = CliRunner().invoke(generate, [str(ckpt), "--prompt", "Once", "--temperature", "0",
                                           "--max-new-tokens", "12"])
    assert result.exit_code == 0 and result.output.startswith("Once" + one), result.output
    sampled = [lm.generate("Once", max_new_tokens=12, temperature=1.0, seed=3) for _ in range(2)]
    assert sampled[0] == sampled[1]  # a seed fixes the sample
