"""`convqa answer` end to end on the embedded vital-article corpus (real Wikipedia text)."""
import json

import pytest

from convqa.errors import ConvQAError
from convqa.front.cli.main import main
from convqa.front.paths import default_pipeline
from convqa.types import Turn


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("convqa-cache")


@pytest.fixture(scope="module")
def pipeline(cache):
    return default_pipeline(cache_dir=cache, progress=False, retriever="bm25")


def test_film_question_finds_its_article_and_answer(pipeline):
    result = pipeline.answer("Who directed 2001: A Space Odyssey?")
    assert result.passages[0].title == "2001: A Space Odyssey"
    assert "Stanley Kubrick" in result.passages[0].text
    assert [h.rank for h in result.hits] == [1, 2, 3, 4, 5]
    assert set(result.timings_ms) == {"history", "retrieve", "fetch", "read"}
    answer = result.answer
    assert "Kubrick" in answer.text
    assert answer.evidence.text[answer.start:answer.end] == answer.text
    assert answer.passage_id in {p.id for p in result.passages}


def test_follow_up_uses_the_history(pipeline):
    alone = pipeline.answer("When was it released?")
    assert alone.passages[0].title != "2001: A Space Odyssey"
    history = [Turn("Who directed 2001: A Space Odyssey?", "Stanley Kubrick")]
    follow = pipeline.answer("When was it released?", history)
    assert follow.query_text.startswith("When was it released? [SEP] Stanley Kubrick")
    assert follow.passages[0].title == "2001: A Space Odyssey"


def test_retrieval_only_pipeline(cache):
    result = default_pipeline(cache_dir=cache, progress=False, retriever="bm25",
                              reader=None).answer("Who painted the Mona Lisa?")
    assert result.answer is None and result.passages[0].title == "Mona Lisa"
    assert "read" not in result.timings_ms


@pytest.mark.slow
def test_dense_default_pipeline_answers(tmp_path_factory):
    """The README's first command in process: the embedded dense index of the shipped DPR-IHN
    adapter (built on first use), then the shipped reader names Kubrick. The command itself, in
    a fresh venv with no extras and an empty HOME: scripts/check_readme_first_command.sh (CI)."""
    pipe = default_pipeline(cache_dir=tmp_path_factory.mktemp("dense-cache"), progress=False)
    result = pipe.answer("Who directed 2001: A Space Odyssey?")
    assert result.passages[0].title == "2001: A Space Odyssey"
    assert "Kubrick" in result.answer.text
    follow = pipe.answer("When was it released?",
                         [Turn("Who directed 2001: A Space Odyssey?", result.answer.text)])
    assert follow.passages[0].title == "2001: A Space Odyssey"
    answer = follow.answer
    assert answer.evidence.text[answer.start:answer.end] == answer.text


def test_empty_question_raises(pipeline):
    with pytest.raises(ConvQAError, match="the question is empty"):
        pipeline.answer("  ")


def test_cli_json_output_and_interactive(cache, capsys, monkeypatch, tmp_path):
    assert main(["answer", "who painted the Mona Lisa?", "--json", "--top-k", "2",
                 "--cache-dir", str(cache), "--retriever", "bm25"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["hits"][0]["title"] == "Mona Lisa"
    assert len(result["hits"]) == 2

    lines = iter(["who painted the Mona Lisa?", "where is it displayed?", ":new", ":quit"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(lines))
    assert main(["answer", "--top-k", "1", "--cache-dir", str(cache), "--retriever", "bm25"]) == 0
    out = capsys.readouterr().out
    # the follow-up query carries the earlier answer and question (current-first)
    query = next(line for line in out.splitlines() if line.startswith("query: where is it"))
    assert query.endswith("[SEP] who painted the Mona Lisa?") and query.count("[SEP]") == 2
    assert "(new conversation)" in out


def test_no_answer_in_the_collection_and_always_answer(cache, capsys):
    """The embedded collection has no passage that names Canberra. The shipped reader, trained
    with a "no passage answers" option (also on turns read without their topic article) and
    calibrated on training questions (docs/results/reader-no-answer.md), says so and shows its
    best evidence, while the film question is still answered; --always-answer, or a threshold
    of 0, gives its best answer."""
    from readers.extractive.model import META_FILE
    from convqa.models import shipped_model_path

    shipped = json.loads((shipped_model_path("convqa-reader") / META_FILE).read_text())
    threshold = shipped["decoding"]["no_answer"]["threshold"]
    args = ["--cache-dir", str(cache)]
    assert main(["answer", "What is the capital of Australia?", *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "No answer in the collection."
    assert lines[1].startswith("best evidence: ") and "answer:" not in "\n".join(lines)
    assert main(["answer", "What is the capital of Australia?", "--json", *args]) == 0
    answer = json.loads(capsys.readouterr().out)["answer"]
    assert answer["no_answer"] is True and answer["text"] == ""
    assert 0 < answer["confidence"] < threshold
    assert answer["evidence"]["id"] == answer["passage_id"]
    for loose in (["--always-answer"], ["--set", "reader.no_answer_threshold=0"]):
        assert main(["answer", "What is the capital of Australia?", *loose, *args]) == 0
        first = capsys.readouterr().out.splitlines()[0]
        assert first.startswith("answer: ") and len(first) > len("answer: ")
    assert main(["answer", "Who directed 2001: A Space Odyssey?", "--json", *args]) == 0
    answer = json.loads(capsys.readouterr().out)["answer"]
    assert answer["text"] == "Stanley Kubrick" and answer["confidence"] > threshold
