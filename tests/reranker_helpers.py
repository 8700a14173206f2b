"""Shared by tests/test_reranker_*.py: tiny random BERT cross-encoders with MiniLM's tokenizer,
and a toy set whose positive is identifiable (it alone names the thing asked about)."""
from __future__ import annotations

import json

from reader_helpers import bert_config, one_thread, save_tiny_encoder  # noqa: F401

THINGS = ["violin", "glacier", "harbour", "lantern", "meadow", "orchard", "pyramid", "saddle",
          "tunnel", "volcano", "whistle", "anchor", "bakery", "canyon", "dolphin", "engine"]
FILLER = ["the weather was mild that year", "a committee met twice in spring",
          "prices rose slowly over the decade", "the road was repaved in autumn",
          "several books were published on history", "the council approved a budget"]


def model_config(**overrides):
    from retrievers.rerank.model import CrossEncoderConfig

    base = dict(model="tiny-random-bert", max_length=96, max_query_length=24,
                max_title_length=6)
    return CrossEncoderConfig(**{**base, **overrides})


def tiny_cross_encoder(seed: int = 0, dropout: float = 0.0, **overrides):
    """A random 2-layer, 32-d BERT cross-encoder (no pooler) with MiniLM's tokenizer."""
    import torch
    from transformers import BertModel

    from convqa.models import load_tokenizer
    from retrievers.rerank.model import CrossEncoder

    torch.manual_seed(seed)
    encoder = BertModel(bert_config(dropout), add_pooling_layer=False)
    head = torch.nn.Linear(32, 1)
    torch.nn.init.normal_(head.weight, std=0.02)
    torch.nn.init.zeros_(head.bias)
    return CrossEncoder(model_config(**overrides), encoder, load_tokenizer(), head)


def toy_examples(count: int = 16, negatives: int = 5, split: str = "train", offset: int = 0):
    """Question i asks about thing i; its positive is the one passage that names it, its
    negatives (same article, and mined from others) name other things or none."""
    from convqa.types import Passage
    from retrievers.rerank.data import RerankExample

    examples = []
    for i in range(count):
        thing = THINGS[(i + offset) % len(THINGS)]
        positive = Passage(f"{split}{i}#0", f"the {thing} is described here. "
                           f"{FILLER[i % len(FILLER)]}.", f"Article {i}")
        article = [Passage(f"{split}{i}#{n}", f"{FILLER[(i + n) % len(FILLER)]}.",
                           f"Article {i}") for n in range(1, 1 + negatives // 2)]
        mined = [Passage(f"{split}{i}-m{n}", f"the {THINGS[(i + offset + n + 1) % len(THINGS)]}"
                         f" was elsewhere. {FILLER[n % len(FILLER)]}.", f"Other {n}")
                 for n in range(negatives - len(article))]
        examples.append(RerankExample(f"{split}/{i}", f"where is the {thing}?",
                                      [("what is this about?", "places")], [positive], article,
                                      mined, split, "toy"))
    return examples


def reader_records(count=6, negatives=4, split="train", offset=0, title=None):
    """Reader example records (`convqa train reader`'s format) of `toy_examples`: the thing
    named in the question is the positive's answer span; `title` replaces every title."""
    records = []
    for e in toy_examples(count, negatives, split, offset):
        positive = e.positives[0]
        thing = e.question.split()[-1].rstrip("?")
        records.append({
            "id": e.id, "question": e.question, "history": [list(h) for h in e.history],
            "answers": [thing],
            "positives": [{**positive.to_dict(), **({"title": title} if title else {}),
                           "answers": [{"text": thing, "start": positive.text.index(thing)}]}],
            "negatives": [{**n.to_dict(), **({"title": title} if title else {})}
                          for n in e.negatives], "split": split, "source": "toy"})
    return records


def write_lines(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def scored_passages(reranker) -> list:
    """The passage ids of each `score` call `reranker` makes from now on (a list that fills)."""
    calls: list = []
    score = reranker.score
    reranker.score = lambda query, passages: (calls.append([p.id for p in passages])
                                              or score(query, passages))
    return calls


def rescore_gaps_args(root) -> tuple:
    """(the benchmark folder, `rescore_gaps` arguments over a tiny reranker saved in root and
    the tiny benchmark's BM25 top 4, caching in root/cache, reporting to root/r.json)."""
    from training_helpers import make_benchmark_with_bm25

    folder = root / "reranker"
    tiny_cross_encoder(seed=4).save_pretrained(folder)
    bench, bm25 = make_benchmark_with_bm25(root)
    return bench, ["--reranker", str(folder), "--top-n", "4", "--at-least", "1",
                   "--benchmark", str(bench),
                   "--retriever", json.dumps({"name": "bm25", "index": str(bm25)}),
                   "--history", "current_first", "--cache", str(root / "cache"),
                   "--report", str(root / "r.json"), "--quiet"]


def topic_article_turns(first_passages: int) -> list:
    """Real TopiOCQA train turns whose topic is an article among the first `first_passages`
    passages of the shared Wikipedia file, with 10+ passages, and whose answer is in exactly
    one of them: (the article's passages, the index of the one holding the answer, the text a
    passage's words are matched with: the question and the one before it)."""
    import collections
    import gzip
    import itertools

    from conftest import shared_file
    from convqa.corpus import iter_article_passages
    from convqa.types import Turn
    from retrievers.rerank.word_matches import match_text

    path = shared_file("wikipedia/topiocqa_wiki_articles.jsonl.gz")
    articles: dict[str, list] = collections.defaultdict(list)
    for passage in itertools.islice(iter_article_passages(path), first_passages):
        articles[passage.title].append(passage)
    with gzip.open(shared_file("topiocqa/topiocqa_train.json.gz"), "rt", encoding="utf-8") as f:
        rows = json.load(f)
    questions = {(r["Conversation_no"], r["Turn_no"]): r["Question"] for r in rows}
    turns = []
    for r in rows:
        siblings = articles.get(r["Topic"], [])
        holders = [i for i, p in enumerate(siblings) if r["Answer"] in p.text]
        if len(siblings) < 10 or len(r["Answer"]) < 4 or len(holders) != 1:
            continue
        before = questions.get((r["Conversation_no"], r["Turn_no"] - 1))
        history = [Turn(before, "")] if before else []
        turns.append((siblings, holders[0], match_text(r["Question"], history)))
    return turns
