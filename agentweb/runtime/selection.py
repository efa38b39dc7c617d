"""Tool selection: rank the allowed tools by relevance to the conversation, offer the top N.

``BM25Scorer`` is a small Okapi BM25 over each tool's name, description and parameters,
with a light English stemmer and an optional table of synonyms (given by the domain)
applied to the query. Any other scorer (embeddings, say) fits the ``ToolScorer`` protocol.
``make_search_tool`` builds the ``search_tools`` meta-tool for large registries: the model
describes what it needs, and the tools found are offered from its next step on.
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from .gateway import ToolSpec
from .tools import Tool, ToolRegistry

__all__ = [
    "DEFAULT_SYNONYMS",
    "SEARCH_TOOL",
    "BM25Scorer",
    "EmbeddingScorer",
    "ToolScorer",
    "make_search_tool",
    "rank_tools",
    "tokenize",
]

SEARCH_TOOL = "search_tools"

_STOP_TEXT = (
    "a an the and or but if of to in on at by for with from as is are was were be been "
    "it its this that these those my our your their his her i we you he she they me us "
    "them do does did done have has had can could would should will shall may might must "
    "please hi hello thanks thank not no yes so just also about into out up down then "
    "than there here what which who whom when why how all any some each e g eg"
)
_STOPWORDS = frozenset(_STOP_TEXT.split())

# Query-side expansion (a word people use -> words tools are described with) is
# domain knowledge: a domain passes its table (``ContextHints.synonyms``); none by default.
DEFAULT_SYNONYMS: Mapping[str, tuple[str, ...]] = {}

_WORD = re.compile(r"[a-z0-9]+")
_DOUBLE = re.compile(r"([bdfglmnprt])\1$")


def _stem(word: str) -> str:
    """A deliberately small stemmer: plurals, -ing, -ed, a doubled final consonant."""
    w = word
    if len(w) > 4 and w.endswith("ies"):
        w = w[:-3] + "y"
    elif w.endswith("sses"):
        w = w[:-2]
    elif len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    if len(w) > 5 and w.endswith("ing"):
        w = w[:-3]
    elif len(w) > 4 and w.endswith("ed"):
        w = w[:-2]
    if len(w) > 4 and _DOUBLE.search(w):
        w = w[:-1]
    return w


def tokenize(text: str) -> list[str]:
    """Lower-case word stems without stop words (``get_order`` -> ``get``, ``order``)."""
    text = re.sub(r"([a-z])([A-Z])", r"\1 \2", text).lower()
    return [_stem(w) for w in _WORD.findall(text) if w not in _STOPWORDS]


class ToolScorer(Protocol):
    """Relevance of each tool to a query; higher is more relevant, 0 is unrelated."""

    def scores(self, query: str, tools: Sequence[ToolSpec]) -> dict[str, float]: ...


def _tool_text(spec: ToolSpec, name_weight: int) -> list[str]:
    words = tokenize(spec.name.replace("_", " ")) * name_weight
    words += tokenize(spec.description)
    props = spec.parameters.get("properties") or {}
    for pname, prop in props.items():
        words += tokenize(pname.replace("_", " "))
        if isinstance(prop, dict) and isinstance(prop.get("description"), str):
            words += tokenize(prop["description"])
    return words


class _Index:
    __slots__ = ("avgdl", "df", "docs", "lengths", "n")

    def __init__(self, docs: dict[str, Counter[str]]) -> None:
        self.docs = docs
        self.n = len(docs)
        self.lengths = {name: sum(c.values()) for name, c in docs.items()}
        self.avgdl = (sum(self.lengths.values()) / self.n) if self.n else 0.0
        self.df: Counter[str] = Counter()
        for c in docs.values():
            self.df.update(c.keys())


class BM25Scorer:
    """Okapi BM25 over tool names (weighted), descriptions and parameter docs.

    ``synonyms`` maps a query word stem to extra query words (none by default: plain
    BM25; a domain passes its own table). Indexes are cached per tool set."""

    def __init__(
        self,
        *,
        k1: float = 1.2,
        b: float = 0.75,
        name_weight: int = 3,
        synonyms: Mapping[str, Iterable[str]] | None = None,
    ) -> None:
        self.k1 = k1
        self.b = b
        self.name_weight = name_weight
        table = DEFAULT_SYNONYMS if synonyms is None else synonyms
        self.synonyms = {_stem(k): [_stem(v) for v in vs] for k, vs in table.items()}
        self._cache: dict[tuple[tuple[str, str], ...], _Index] = {}
        self._lock = threading.Lock()

    def _index(self, tools: Sequence[ToolSpec]) -> _Index:
        key = tuple((t.name, t.description) for t in tools)
        with self._lock:
            index = self._cache.get(key)
            if index is None:
                if len(self._cache) > 64:
                    self._cache.clear()
                docs = {t.name: Counter(_tool_text(t, self.name_weight)) for t in tools}
                index = self._cache[key] = _Index(docs)
            return index

    def query_weights(self, query: str) -> dict[str, float]:
        """Query stems with weights: 1 + log(count) for the words given, 0.5 for a synonym
        that the query does not contain itself."""
        counts = Counter(tokenize(query))
        weights = {term: 1.0 + math.log(n) for term, n in counts.items()}
        for word in counts:
            for extra in self.synonyms.get(word, ()):
                weights.setdefault(extra, 0.5)
        return weights

    def scores(self, query: str, tools: Sequence[ToolSpec]) -> dict[str, float]:
        index = self._index(tools)
        weights = self.query_weights(query)
        out: dict[str, float] = {}
        for name, doc in index.docs.items():
            score = 0.0
            dl = index.lengths[name]
            for term, weight in weights.items():
                tf = doc.get(term, 0)
                if not tf:
                    continue
                df = index.df[term]
                idf = math.log(1 + (index.n - df + 0.5) / (df + 0.5))
                norm = (
                    tf
                    * (self.k1 + 1)
                    / (tf + self.k1 * (1 - self.b + self.b * dl / (index.avgdl or 1.0)))
                )
                score += idf * norm * weight
            out[name] = score
        return out


class EmbeddingScorer:
    """Cosine similarity of embeddings, for any embedding function (a MiniLM model
    installed as a package, a provider's embedding endpoint, ...).

    ``embed`` maps texts to vectors. Tool vectors are computed once per tool set. With
    ``blend`` (e.g. ``BM25Scorer()``) and ``weight`` w the score is
    ``w * cosine + (1 - w) * blend_score / max(blend_scores)``: lexical and semantic
    relevance together."""

    def __init__(
        self,
        embed: Callable[[list[str]], Sequence[Sequence[float]]],
        *,
        blend: ToolScorer | None = None,
        weight: float = 0.5,
    ) -> None:
        self.embed = embed
        self.blend = blend
        self.weight = weight if blend is not None else 1.0
        self._cache: dict[tuple[tuple[str, str], ...], dict[str, list[float]]] = {}
        self._lock = threading.Lock()

    def _tool_vectors(self, tools: Sequence[ToolSpec]) -> dict[str, list[float]]:
        key = tuple((t.name, t.description) for t in tools)
        with self._lock:
            vectors = self._cache.get(key)
        if vectors is None:
            texts = [f"{t.name.replace('_', ' ')}: {t.description}" for t in tools]
            vectors = {t.name: list(v) for t, v in zip(tools, self.embed(texts), strict=True)}
            with self._lock:
                if len(self._cache) > 64:
                    self._cache.clear()
                self._cache[key] = vectors
        return vectors

    def scores(self, query: str, tools: Sequence[ToolSpec]) -> dict[str, float]:
        vectors = self._tool_vectors(tools)
        q = list(self.embed([query])[0])
        out = {name: max(0.0, _cosine(q, v)) for name, v in vectors.items()}
        if self.blend is None:
            return out
        lexical = self.blend.scores(query, tools)
        top = max(lexical.values(), default=0.0) or 1.0
        w = self.weight
        return {n: w * out[n] + (1 - w) * lexical.get(n, 0.0) / top for n in out}


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


def rank_tools(
    scorer: ToolScorer, query: str, tools: Sequence[ToolSpec]
) -> list[tuple[ToolSpec, float]]:
    """Tools by descending score; ties keep the registry order."""
    scores = scorer.scores(query, tools) if query.strip() else {}
    order = {t.name: i for i, t in enumerate(tools)}
    return sorted(
        ((t, float(scores.get(t.name, 0.0))) for t in tools),
        key=lambda ts: (-ts[1], order[ts[0].name]),
    )


def make_search_tool(
    registry: ToolRegistry, *, scorer: ToolScorer | None = None, limit: int = 5
) -> Tool:
    """The ``search_tools`` meta-tool over ``registry`` (its other tools).

    Its result lists the tools found; ``LayeredContextPolicy`` reads that result and
    offers those tools from the next model call on."""
    specs = [s for s in registry.specs() if s.name != SEARCH_TOOL]
    chosen: ToolScorer = scorer if scorer is not None else BM25Scorer()

    def search_tools(query: str) -> dict[str, Any]:
        """Find more tools: say what you need to do; the tools found are offered next step.

        Args:
            query: What you need to do, in a few words, e.g. "change a setting".
        """
        ranked = [(s, score) for s, score in rank_tools(chosen, query, specs) if score > 0]
        found = [{"name": s.name, "description": s.description} for s, _ in ranked[:limit]]
        note = (
            "These tools are offered from your next step on."
            if found
            else "No tool matches; try other words."
        )
        return {"query": query, "found": found, "note": note}

    return Tool(search_tools, name=SEARCH_TOOL, risk="low")
