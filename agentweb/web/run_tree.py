"""The run tree on the run page: each child's status, link and latest step.

Rendered by the view and sent again over the run's WebSocket whenever a run of the tree
stores events (a ``run.tree`` wake-up); everything comes from the database.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.template.loader import render_to_string

from agentweb.runs import delegation
from agentweb.runs.event_text import text_of
from agentweb.runs.models import Run, RunEvent
from agentweb.web import outcome


@dataclass
class Node:
    run: Run
    level: int  # 1: a child of the page's run
    latest: str  # the latest step, in words

    @property
    def label(self) -> str:
        return outcome.status_label(self.run.status)


def latest_step(event: RunEvent | None) -> str:
    """One line about a run's latest stored event (escaped by the template)."""
    if event is None:
        return "waiting for a worker"
    data = event.data if isinstance(event.data, dict) else {}
    return text_of(event.type, data).summary


def nodes_for(run: Run) -> list[Node]:
    """The runs under ``run``, depth first, each with its latest step (two queries)."""
    runs = delegation.tree(run)
    if not runs:
        return []
    latest = {
        e.run_id: e
        for e in RunEvent.objects.filter(run_id__in=[r.pk for r in runs])
        .order_by("run_id", "-seq")
        .distinct("run_id")
    }
    by_parent: dict[int | None, list[Run]] = {}
    for r in runs:
        by_parent.setdefault(r.parent_id, []).append(r)
    out: list[Node] = []

    def walk(parent_id: int, level: int) -> None:
        for child in by_parent.get(parent_id, ()):
            out.append(Node(child, level, latest_step(latest.get(child.pk))))
            walk(child.pk, level + 1)

    walk(run.pk, 1)
    return out


def tree_context(run: Run) -> dict[str, Any]:
    parent = top = None
    if run.parent_id is not None:
        parent = Run.objects.select_related("agent").filter(pk=run.parent_id).first()
        top = run.root_id if run.root_id != run.parent_id else None
    return {"run": run, "tree": nodes_for(run), "tree_parent": parent, "tree_top": top}


def tree_html(run_id: int) -> str:
    run = Run.objects.select_related("agent").get(pk=run_id)
    return render_to_string("web/_run_tree.html", tree_context(run))


# --- compare of trees ---------------------------------------------------------------------


@dataclass
class ChildPair:
    agent: str
    left: Run | None
    right: Run | None

    @property
    def sides(self) -> tuple[Run | None, Run | None]:
        return self.left, self.right

    @property
    def answers_differ(self) -> bool:
        return (self.left.final_answer if self.left else None) != (
            self.right.final_answer if self.right else None
        )


def child_pairs(left: Run, right: Run) -> list[ChildPair]:
    """The two runs' children side by side: the n-th child given to an agent on the left
    against the n-th given to the same agent on the right."""

    def by_agent(run: Run) -> dict[str, list[Run]]:
        out: dict[str, list[Run]] = {}
        for child in Run.objects.filter(parent=run).select_related("agent").order_by("pk"):
            out.setdefault(child.agent.name, []).append(child)
        return out

    lhs, rhs = by_agent(left), by_agent(right)
    pairs = []
    for agent in dict.fromkeys([*lhs, *rhs]):
        a, b = lhs.get(agent, []), rhs.get(agent, [])
        for i in range(max(len(a), len(b))):
            pairs.append(
                ChildPair(agent, a[i] if i < len(a) else None, b[i] if i < len(b) else None)
            )
    return pairs
