"""The lm recipe's models as transformers models (recipes/lm/hf): registration with the Auto classes, logits and loss
equal to the recipe's own model, ``generate`` through the carried state equal to ``lavo-zoo generate``, the
tokenizers, and lm-evaluation-harness and transformers' Trainer on an exported folder. Tiny random models (2 x 32,
bytes), exported through the project's own checkpoint writer and ``lavo-zoo export --format hf``."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers", reason="the hf extra (pip install -e '.[dev]') is not installed")

from lavo_zoo.cli import main
from lavo_zoo.engine.checkpoint_io import save_checkpoint
from lavo_zoo.nn.tokenizers import get_tokenizer
from lavo_zoo.recipes.lm.infer import filter_logits, generate_ids
from tests.recipes.lm.helpers import tiny_config

# lavo (constant-size state), sdpa (KV cache), local (window cache), longshort (cannot stream: re-runs the prefix)
ATTENTIONS = {"lavo": {"num_bases": 8, "window_size": 4}, "sdpa": {}, "local": {"window_size": 4}, "longshort": {}}
# a hybrid (exported("hybrid")): each layer its own mechanism and state, over lavo's options
HYBRID = {"num_layers": 4, "attention_schedule": [{"name": "gated_deltanet", "chunk_size": 8}, "lavo",
                                                  {"name": "local", "window_size": 4, "num_sinks": 2}, "sdpa"]}
PROMPT = list(b"def read(self, n):\n    ")
# the strings on which the transformers tokenizers must give the recipe's ids
STRINGS = ["", "hello world", "  two leading spaces\n\ttab", "déjà vu, naïve café", "日本語のテキスト",
           "emoji 🚀 👨‍👩‍👧", "text that spells <|endoftext|>", "Ā\x00nul", "def f(x):\n    return x ** 2  # square\n",
           "I'm 've 'll", "z" * 300, "zero\u200dwidth\u00a0nbsp\r\n"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory):
    """exported(attention) -> (the recipe's model, its checkpoint, its transformers folder), built once each."""
    root = tmp_path_factory.mktemp("hf")
    made: dict[str, tuple[torch.nn.Module, Path, Path]] = {}

    def get(attention: str) -> tuple[torch.nn.Module, Path, Path]:
        if attention not in made:
            name, model = ("lavo", HYBRID) if attention == "hybrid" else (attention, {})
            recipe, cfg = tiny_config(name, ATTENTIONS[name], model=model, eval={"batch_size": 4})
            torch.manual_seed(sum(map(ord, attention)))
            model = recipe.build_model(cfg).eval()
            ckpt = save_checkpoint(root / attention / "checkpoints", 7, model, cfg, "lm")
            folder = root / attention / "hf"
            assert main(["export", str(ckpt), str(folder), "--format", "hf", "--name", "lm/tiny@v1"]) == 0
            made[attention] = (model, ckpt, folder)
        return made[attention]

    return get


def load(folder: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder).eval()


# ------------------------------------------------------------------------------------------------ registration
def test_importing_lavo_zoo_registers_the_classes_without_importing_transformers(exported):
    """This process imported lavo_zoo first (tests/conftest.py) and transformers' Auto modules later: the classes
    registered themselves when those were imported. ``import lavo_zoo`` itself imports no transformers."""
    from transformers import AutoConfig, AutoModelForCausalLM

    _, _, folder = exported("lavo")
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert type(AutoConfig.from_pretrained(folder)).__name__ == "LavoZooLMConfig"
    assert type(model).__name__ == "LavoZooLMForCausalLM" and type(model.model).__name__ == "TransformerLM"
    script = ("import sys, lavo_zoo\n"
              "print(sorted(m for m in sys.modules if m.split('.')[0] in ('transformers', 'torch')))")
    fresh = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert fresh.returncode == 0 and fresh.stdout.strip() == "[]", fresh.stderr


TRANSFORMERS_FIRST = """
import sys
from transformers import AutoModelForCausalLM
try:
    AutoModelForCausalLM.from_pretrained(sys.argv[1])  # lavo-zoo not imported: the classes are unknown
except ValueError as e:
    print("RESULT refused", "trust_remote_code" in str(e))
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True)  # through lavo_zoo_lm.py
print("RESULT remote", type(model).__name__, type(model.model).__module__)
import lavo_zoo  # imported by then (the file imports it): the Auto classes know the model without remote code
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
print("RESULT registered", type(model).__module__)
"""


def test_without_lavo_zoo_imported_first_the_folder_loads_with_trust_remote_code(exported, tmp_path):
    _, _, folder = exported("lavo")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home"), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", TRANSFORMERS_FIRST, str(folder)], capture_output=True, text=True,
                            env=env, stdin=subprocess.DEVNULL, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    printed = [line[line.index("RESULT"):] for line in result.stdout.splitlines() if "RESULT" in line]  # after a prompt
    assert printed == [
        "RESULT refused True", "RESULT remote LavoZooLMForCausalLM lavo_zoo.recipes.lm.model",
        "RESULT registered lavo_zoo.recipes.lm.hf.modeling"]


# ------------------------------------------------------------------------------------------- logits and loss
@pytest.mark.parametrize("attention", ["lavo", "sdpa"])
def test_exported_logits_and_loss_equal_the_checkpoints(attention, exported):
    model, _, folder = exported(attention)
    hf = load(folder)
    ids = torch.randint(1, 256, (3, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = hf(ids).logits  # [B, T, V]
        assert logits.dtype == torch.float32 and logits.shape == (3, 40, 256)
        for t in (0, 5, 39):  # the recipe's model gives the last position's logits of each prefix
            torch.testing.assert_close(logits[:, t], model(ids[:, :t + 1]), atol=1e-5, rtol=1e-5)
        nll = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 256), ids[:, 1:].reshape(-1),
                                                reduction="none")
        torch.testing.assert_close(nll, model(ids[:, :-1], ids[:, 1:]).reshape(-1), atol=1e-5, rtol=1e-5)
        loss = hf(ids, labels=ids).loss  # transformers' convention: labels are the inputs, shifted inside
        torch.testing.assert_close(loss, model(ids[:, :-1], ids[:, 1:]).mean(), atol=1e-5, rtol=1e-5)
        assert hf(ids, logits_to_keep=1).logits.shape == (3, 1, 256)


def test_a_new_model_is_initialised_as_the_recipes():
    from lavo_zoo.recipes.lm.hf.configuration import LavoZooLMConfig
    from lavo_zoo.recipes.lm.hf.modeling import LavoZooLMForCausalLM

    recipe, cfg = tiny_config("lavo", ATTENTIONS["lavo"])
    torch.manual_seed(3)
    ours = recipe.build_model(cfg).state_dict()
    torch.manual_seed(3)
    theirs = LavoZooLMForCausalLM(LavoZooLMConfig.from_run_config(cfg)).model.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_right_padding_is_scored_left_padding_and_padded_decoding_refused(exported):
    _, _, folder = exported("sdpa")
    hf = load(folder)
    ids = torch.randint(1, 256, (2, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0  # the second row is 8 real tokens and 4 of padding
    with torch.no_grad():
        padded = hf(ids, attention_mask=mask).logits
        torch.testing.assert_close(padded[1, :8], hf(ids[1:, :8]).logits[0], atol=1e-5, rtol=1e-5)
        with pytest.raises(ValueError, match="right padding"):
            hf(ids, attention_mask=mask.flip(1))
        with pytest.raises(ValueError, match="without padding"):
            hf.generate(ids, attention_mask=mask.flip(1), max_new_tokens=2, do_sample=False)


def test_an_empty_prompt_ids_outside_the_vocabulary_and_a_foreign_tokenizer_are_named(exported, tmp_path):
    """Each is an InputError / ConfigError saying what is wrong, never a confusing cache message or an IndexError."""
    import shutil

    import lavo_zoo
    from lavo_zoo.errors import ConfigError, InputError

    _, _, folder = exported("sdpa")
    hf = load(folder)
    with pytest.raises(InputError, match="empty prompt"):
        hf.generate(torch.zeros(1, 0, dtype=torch.long), max_new_tokens=2, do_sample=False)
    with pytest.raises(InputError, match=r"ids 5..300, but the model's vocabulary is 0..255"):
        hf(torch.tensor([[300, 5]]))
    bad = tmp_path / "bad"  # its config names the gpt2 tokenizer (50,257 ids) for a model of 256
    shutil.copytree(folder, bad)
    config = json.loads((bad / "config.json").read_text())
    config["tokenizer"] = config["lavo_zoo"]["config"]["data"]["tokenizer"] = "gpt2"
    (bad / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="gives ids 0..50256, but model.vocab_size is 256"):
        lavo_zoo.load(bad, device="cpu")


# ------------------------------------------------------------------------------------------------- generation
@pytest.mark.parametrize("attention", list(ATTENTIONS))
def test_greedy_generate_gives_the_tokens_of_lavo_zoo_generate(attention, exported):
    model, _, folder = exported(attention)
    hf = load(folder)
    assert type(hf.model).__name__ == "TransformerLM" and hf.model.streaming == (attention != "longshort")
    ours = generate_ids(model, PROMPT, 24, temperature=0, stop=get_tokenizer("bytes").eod)
    prompt = torch.tensor([PROMPT])
    out = hf.generate(prompt, max_new_tokens=24, do_sample=False)
    assert out[0, len(PROMPT):].tolist() == ours
    # a stop token ends both where it first appears, itself included
    stop = ours[len(ours) // 2]
    expected = generate_ids(model, PROMPT, 24, temperature=0, stop=stop)
    out = hf.generate(prompt, max_new_tokens=24, do_sample=False, eos_token_id=stop, pad_token_id=0)
    assert out[0, len(PROMPT):].tolist() == expected and expected[-1] == stop
    # a batch of prompts of one length: each row as alone
    other = list(b"import os, sys\nfor arg ")
    batch = hf.generate(torch.tensor([PROMPT, other]), max_new_tokens=12, do_sample=False)
    assert batch[1, len(other):].tolist() == generate_ids(model, other, 12, temperature=0, stop=0)[:12]


def test_a_hybrid_exports_loads_with_auto_and_generates_what_the_zoo_generates(exported):
    """A hybrid language model exported with --format hf: AutoModelForCausalLM rebuilds each layer's mechanism from
    config.json, its logits are the checkpoint's, greedy generate gives the tokens of `lavo-zoo generate`, the cache
    carries each layer's own state (a matrix state, LAVO's sums, a window with sinks, a growing KV cache), and the
    model card lists the layers."""
    model, _, folder = exported("hybrid")
    hf = load(folder)
    names = ["gated_deltanet", "lavo", "local", "sdpa"]
    assert hf.model.attention_names == model.attention_names == names
    config = json.loads((folder / "config.json").read_text())
    assert [entry["name"] for entry in config["model"]["attention_schedule"]] == names
    assert config["model"]["attention_schedule"][1]["num_bases"] == 8  # lavo's options, from model.attention
    ids = torch.randint(1, 256, (2, 30), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = hf(ids).logits  # [B, T, V]
        for t in (0, 11, 29):
            torch.testing.assert_close(logits[:, t], model(ids[:, :t + 1]), atol=1e-5, rtol=1e-5)
    ours = generate_ids(model, PROMPT, 24, temperature=0, stop=get_tokenizer("bytes").eod)
    out = hf.generate(torch.tensor([PROMPT]), max_new_tokens=24, do_sample=False)
    assert out[0, len(PROMPT):].tolist() == ours
    cache, sizes = None, []
    with torch.no_grad():
        for chunk in ids[:1].split(10, dim=1):
            cache = hf(chunk, cache=cache, use_cache=True).cache
            sizes.append([sum(t.numel() for t in _tensors(layer.state)) for layer in cache.layers])
    assert [type(layer.state).__name__ for layer in cache.layers] == [
        "RecurrentState", "LavoState", "SinkCache", "KVCache"]
    assert [s[:3] for s in sizes] == [sizes[0][:3]] * 3 and sizes[0][3] < sizes[1][3] < sizes[2][3]  # only sdpa grows
    card = (folder / "README.md").read_text()
    for row in ("| `model.attention_schedule` | `gated_deltanet` |", "| layer 0 |", "| `lavo` |",
                "| layer 3 | 2 T D (KV cache, grows with T) |"):
        assert row in card, row


def test_greedy_generate_decodes_to_what_the_predictor_prints(exported):
    from transformers import AutoTokenizer

    import lavo_zoo

    _, ckpt, folder = exported("lavo")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = tokenizer("def read(self", return_tensors="pt").input_ids
    out = load(folder).generate(ids, max_new_tokens=20, do_sample=False)
    text = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    assert text == lavo_zoo.load(ckpt, device="cpu").generate("def read(self", max_new_tokens=20, temperature=0)


def test_the_cache_carries_lavos_constant_size_state_and_sdpas_growing_kv_cache(exported):
    sizes = {}
    for attention in ("lavo", "sdpa"):
        hf = load(exported(attention)[2])
        cache, counts = None, []
        with torch.no_grad():
            for chunk in torch.randint(1, 256, (1, 60)).split(20, dim=1):
                cache = hf(chunk, cache=cache, use_cache=True).cache
                counts.append(sum(t.numel() for layer in cache.layers for t in _tensors(layer.state)))
        assert type(cache).__name__ == "LavoZooLMCache" and cache.get_seq_length() == 60
        sizes[attention] = counts
    assert sizes["lavo"][0] == sizes["lavo"][1] == sizes["lavo"][2]  # window and memory: constant
    assert sizes["sdpa"][0] < sizes["sdpa"][1] < sizes["sdpa"][2]    # keys and values of every token


def _tensors(state):
    from lavo_zoo.recipes.lm.hf.modeling import _tensors

    return _tensors(state)


@pytest.mark.parametrize("attention", ["lavo", "longshort"])
def test_sampling_options_behave_as_transformers_documents(attention, exported):
    model, _, folder = exported(attention)
    hf = load(folder)
    prompt = torch.tensor([PROMPT])

    def sample(**options):
        torch.manual_seed(5)
        return hf.generate(prompt, max_new_tokens=16, do_sample=True, **options)[0, len(PROMPT):].tolist()

    greedy = hf.generate(prompt, max_new_tokens=16, do_sample=False)[0, len(PROMPT):].tolist()
    assert sample(top_k=1) == greedy  # only the most likely token is left
    drawn = sample(top_k=3, temperature=1.5)
    assert drawn == sample(top_k=3, temperature=1.5, use_cache=False), "the carried state samples as full re-runs"
    assert drawn != greedy
    nucleus = sample(top_p=0.6, top_k=0)
    assert nucleus == sample(top_p=0.6, top_k=0, use_cache=False)
    with torch.no_grad():  # every token drawn is one of the 3 most likely / in the 0.6 nucleus after its prefix
        for t, token in enumerate(drawn):
            logits = model(torch.tensor([PROMPT + drawn[:t]]))[0]
            assert token in logits.topk(3).indices.tolist()
        for t, token in enumerate(nucleus):
            logits = model(torch.tensor([PROMPT + nucleus[:t]]))[0]
            assert torch.isfinite(filter_logits(logits, top_p=0.6)[token])  # the recipe's own nucleus


@pytest.mark.parametrize("attention", ["lavo", "sdpa"])
def test_beam_search_through_the_cache_equals_beam_search_by_full_re_runs(attention, exported):
    hf = load(exported(attention)[2])
    prompt = torch.tensor([PROMPT])
    options = {"max_new_tokens": 10, "num_beams": 3, "do_sample": False, "num_return_sequences": 2,
               "early_stopping": True}
    torch.testing.assert_close(hf.generate(prompt, **options), hf.generate(prompt, use_cache=False, **options))


# ------------------------------------------------------------------------------------------------- tokenizers
@pytest.mark.parametrize("name", ["gpt2", "bytes"])
def test_auto_tokenizer_loads_the_recipes_tokenizer_offline_with_its_ids(name, tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    from lavo_zoo.recipes.lm.hf.tokenizer import transformers_tokenizer

    transformers_tokenizer(name).save_pretrained(tmp_path / "tok")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "tok")
    ours = get_tokenizer(name)
    assert len(tokenizer) == ours.vocab_size and tokenizer.eos_token_id == tokenizer.bos_token_id == ours.eod
    for text in STRINGS:
        ids = tokenizer(text)["input_ids"]
        assert ids == ours.encode(text), text
        assert tokenizer.decode(ids) == ours.decode(ids) == text
    broken = [0xFF, 0x41, 0xE6, 0x97] if name == "bytes" else [ours.encode("🚀")[0], 64]
    assert tokenizer.decode(broken) == ours.decode(broken)  # an incomplete UTF-8 sequence: replacement characters


# ------------------------------------------------------------------------------------- lm-evaluation-harness
TASKS = {
    "lavo_zoo_ppl": {"output_type": "loglikelihood_rolling", "doc_to_text": "", "doc_to_target": "{{text}}",
                     "metric_list": [{"metric": "bits_per_byte"}, {"metric": "byte_perplexity"}]},
    "lavo_zoo_choice": {"output_type": "multiple_choice", "doc_to_text": "{{context}}", "doc_to_choice": "{{choices}}",
                        "doc_to_target": "{{label}}", "target_delimiter": "", "metric_list": [{"metric": "acc"}]},
}


def test_lm_evaluation_harness_scores_an_exported_model_offline(exported, tmp_path, monkeypatch):
    """Its `hf` model type on a perplexity task and a multiple-choice one, local JSON lines of the built-in corpus:
    every log-likelihood it reports is the recipe's model's, and so are the metrics."""
    pytest.importorskip("lm_eval")
    import lm_eval
    from lm_eval.tasks import TaskManager

    from lavo_zoo.recipes.lm.builtin import write_stdlib_corpus

    for var, value in {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home"),
                       "HF_DATASETS_CACHE": str(tmp_path / "datasets")}.items():
        monkeypatch.setenv(var, value)
    model, _, folder = exported("lavo")
    corpus = write_stdlib_corpus(tmp_path / "corpus", max_books=12)
    texts = [p.read_text(encoding="utf-8")[:160] for p in sorted((corpus / "train").glob("*.txt"))[:4]]
    docs = [{"text": t} for t in texts]
    cut = [len(t[:60].rstrip()) for t in texts]  # contexts end in a non-space (lm-eval moves trailing spaces on)
    choices = [{"context": t[:cut[i]], "choices": [t[cut[i]:][:30], texts[i - 1][60:90], texts[i - 2][60:90]],
                "label": 0} for i, t in enumerate(texts)]
    for task, rows in (("lavo_zoo_ppl", docs), ("lavo_zoo_choice", choices)):
        data = tmp_path / f"{task}.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        config = {"task": task, "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(data)}},
                  "test_split": "test", **TASKS[task]}
        (tmp_path / f"{task}.yaml").write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
    results = lm_eval.simple_evaluate(
        model="hf", model_args={"pretrained": str(folder), "backend": "causal", "device": "cpu", "dtype": "float32"},
        tasks=list(TASKS), task_manager=TaskManager(include_path=str(tmp_path), include_defaults=False),
        batch_size=2, log_samples=True)

    def loglikelihood(context: list[int], continuation: list[int]) -> float:
        ids = torch.tensor([context + continuation])
        with torch.no_grad():
            return -float(model(ids[:, :-1], ids[:, 1:])[0, len(context) - 1:].sum())

    eod = get_tokenizer("bytes").eod  # lm-eval starts a rolling window with the tokenizer's bos: the boundary
    for sample in results["samples"]["lavo_zoo_ppl"]:
        text = sample["doc"]["text"]
        assert sample["resps"][0][0] == pytest.approx(loglikelihood([eod], list(text.encode())), abs=1e-3)
    total = sum(loglikelihood([eod], list(t.encode())) for t in texts)
    n_bytes = sum(len(t.encode()) for t in texts)
    scores = results["results"]["lavo_zoo_ppl"]
    assert scores["bits_per_byte,none"] == pytest.approx(-total / n_bytes / math.log(2), rel=1e-5)
    assert scores["byte_perplexity,none"] == pytest.approx(math.exp(-total / n_bytes), rel=1e-5)
    correct = []
    for sample in results["samples"]["lavo_zoo_choice"]:
        doc = sample["doc"]
        ours = [loglikelihood(list(doc["context"].encode()), list(c.encode())) for c in doc["choices"]]
        assert [r[0][0] for r in sample["resps"]] == pytest.approx(ours, abs=1e-3)
        correct.append(float(max(range(3), key=ours.__getitem__) == doc["label"]))
    assert results["results"]["lavo_zoo_choice"]["acc,none"] == pytest.approx(sum(correct) / len(correct))


# ---------------------------------------------------------------------------------------------------- Trainer
def test_trainer_steps_on_an_exported_model_and_lavo_zoo_eval_scores_what_it_saves(exported, tmp_path):
    pytest.importorskip("accelerate")
    from safetensors.torch import load_file
    from transformers import Trainer, TrainingArguments

    from lavo_zoo.recipes.lm.model import TransformerLM

    model, _, folder = exported("lavo")
    recipe, cfg = tiny_config("lavo", ATTENTIONS["lavo"], eval={"batch_size": 4})
    blocks = recipe.build_dataset(cfg, "train")  # the built-in corpus, [block_size + 1] token ids each
    train = [{"input_ids": torch.as_tensor(blocks[i][:-1]), "labels": torch.as_tensor(blocks[i][:-1])}
             for i in range(24)]
    hf = load(folder).train()
    args = TrainingArguments(output_dir=str(tmp_path / "trainer"), max_steps=4, per_device_train_batch_size=4,
                             learning_rate=3e-3, save_strategy="no", report_to=[], use_cpu=True, logging_steps=1,
                             disable_tqdm=True, seed=1)
    trainer = Trainer(model=hf, args=args, train_dataset=train)
    logged = trainer.train()
    assert logged.global_step == 4 and math.isfinite(logged.training_loss)
    trainer.save_model(str(tmp_path / "tuned"))

    weights = {k.removeprefix("model."): v for k, v in load_file(tmp_path / "tuned" / "model.safetensors").items()}
    assert not torch.equal(weights["embed_tokens.weight"], model.embed_tokens.weight), "the steps moved the weights"
    tuned = TransformerLM(cfg.model)
    tuned.load_state_dict(weights)
    expected = recipe.evaluate(tuned.eval(), cfg, "test", torch.device("cpu"), max_batches=2).compute()

    out = tmp_path / "tuned.json"
    assert main(["eval", str(tmp_path / "tuned"), "--max-batches", "2", "--device", "cpu", "--out", str(out)]) == 0
    scored = json.loads(out.read_text())
    assert scored["recipe"] == "lm" and scored["metrics"]
    for metric, value in expected.items():
        assert scored["metrics"][metric]["value"] == pytest.approx(value, rel=1e-5), metric
