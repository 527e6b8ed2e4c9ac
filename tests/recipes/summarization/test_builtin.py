"""The built-in corpus (builtin.py): code summarised by its docstrings, written in the Multi-News layout that the
reader reads back, split by module; what `lavo-zoo data summarization` writes."""
from lavo_zoo.engine.recipe import get_recipe
from lavo_zoo.recipes.summarization.builtin import builtin_split, module_examples, stdlib_sources, write_stdlib_corpus
from lavo_zoo.recipes.summarization.data import load_split

MODULE = '''"""Tools for greeting people politely.

More text that is not part of the summary.
"""
import sys


def greet(name):
    """Return a greeting for the given name."""
    text = "hello " + name
    text = polish(text)
    return text


def polish(text):
    """Capitalise the text."""
    return text.capitalize()


class Greeter:
    """Greets a list of people one by one."""

    prefix = "dear"

    def __init__(self, names):
        """Store the names."""
        self.names = names

    def run(self):
        """Greet every stored name and count them."""
        count = 0
        for name in self.names:
            print(greet(name))
            count += 1
        return self.check(count)

    def check(self, count):
        return count
'''


def test_module_examples_summarise_code_by_its_docstrings():
    examples = {e.id: e for e in module_examples("greetings", MODULE)}
    assert set(examples) == {"greetings", "greetings.greet", "greetings.Greeter", "greetings.Greeter.run"}
    module = examples["greetings"]
    assert module.summary == "Tools for greeting people politely."
    assert module.articles[0] == ("def greet(name):\n    text = 'hello ' + name\n    text = polish(text)\n"
                                  "    return text")
    assert len(module.articles) == 3 and all('"""' not in a and "Capitalise" not in a for a in module.articles)
    cls = examples["greetings.Greeter"]
    assert cls.summary == "Greets a list of people one by one."
    assert cls.articles[0] == "class Greeter:\n    prefix = 'dear'" and len(cls.articles) == 4
    assert examples["greetings.Greeter.run"].articles[1].startswith(
        "def check(self, count)")  # the method it calls, from the same class
    assert examples["greetings.greet"].articles[1] == "def polish(text):\n    return text.capitalize()"


def test_builtin_corpus_round_trips_through_the_multinews_layout(tmp_path):
    sources = [s for s in stdlib_sources() if s[0] in ("textwrap", "shlex", "bisect")]
    assert len(sources) == 3
    counts = write_stdlib_corpus(tmp_path / "builtin", sources)
    assert sorted(p.name for p in (tmp_path / "builtin").iterdir()) == [
        "test.src", "test.tgt", "train.src", "train.tgt", "val.src", "val.tgt"]
    expected = {}
    for module, path in sources:
        for e in module_examples(module, path.read_text()):
            expected.setdefault(builtin_split(module), []).append(e)
    for split, examples in expected.items():
        loaded = load_split(tmp_path / "builtin", split).examples
        assert counts[split] == len(examples) == len(loaded)
        for original, back in zip(examples, loaded):
            assert back.summary == original.summary
            # one example per line: newlines become NEWLINE_CHAR, indentation is not kept
            assert back.articles == ["\n".join(line.strip() for line in a.splitlines()) for a in original.articles]


def test_builtin_split_is_by_module_and_roughly_90_5_5():
    names = [name for name, _ in stdlib_sources()]
    splits = [builtin_split(n) for n in names]
    assert splits == [builtin_split(n) for n in names]
    for split, lo, hi in (("train", 0.8, 0.97), ("validation", 0.02, 0.1), ("test", 0.02, 0.1)):
        assert lo < splits.count(split) / len(splits) < hi, split


def test_write_data_writes_the_multinews_layout(tmp_path, monkeypatch):
    import lavo_zoo.recipes.summarization.builtin as builtin_module

    sources = [s for s in stdlib_sources() if s[0] in ("bisect", "textwrap")]
    monkeypatch.setattr(builtin_module, "write_stdlib_corpus", lambda out: write_stdlib_corpus(out, sources))
    path = get_recipe("summarization").write_data(tmp_path / "mn")
    assert sorted(p.name for p in path.iterdir()) == ["data-manifest.json", "test.src", "test.tgt", "train.src",
                                                      "train.tgt", "val.src", "val.tgt"]  # and what data wrote
    assert all(line.startswith("– ") for line in (path / "train.tgt").read_text().splitlines())
