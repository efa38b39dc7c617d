"""Typed tools: ``@tool`` on a plain function, JSON schema generated once with pydantic
from type hints and the Google-style docstring, and an immutable registry."""

from __future__ import annotations

import importlib
import inspect
import logging
import re
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Annotated, Any, Literal, Protocol, get_type_hints, overload

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError, create_model

from .approvals import Threshold
from .gateway import ToolSpec

__all__ = [
    "Risk",
    "Suspend",
    "Tool",
    "ToolArgumentError",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "ToolSource",
    "ToolSources",
    "load_tools",
    "repair_keys",
    "tool",
]

log = logging.getLogger(__name__)

Risk = Literal["low", "medium", "high"]
RISKS: tuple[str, ...] = ("low", "medium", "high")


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Injected into tools that declare a ``ctx`` parameter.

    ``call_id`` is the idempotency key of this call: a tool with side effects should pass
    it on (scoped by ``run_id``). ``subject`` is what the run is about, as the
    application names it (a case, a request, a record id); ``extra`` carries any other
    data the application hands its tools. The runtime gives neither a meaning."""

    call_id: str
    run_id: str | None = None
    user: str | None = None
    subject: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Suspend(Exception):
    """Raised by a tool that cannot answer yet: the run pauses (``NeedsSubtasks``) until
    the host wakes it, then the same call runs again with the same id. ``waiting_on``
    names what it waits for (e.g. child run ids). Only an idempotent tool may raise it."""

    def __init__(self, waiting_on: list[Any]) -> None:
        super().__init__(f"waiting on {waiting_on}")
        self.waiting_on = list(waiting_on)


class ToolError(Exception):
    """Raise it in a tool (or its ``check``) to fail or refuse the call with a reason: the
    model receives exactly ``str(exc)`` as the call's result (no prefix, no type name),
    and a person reads the same. Any other exception reaches the model as
    ``Error: TypeName: message`` and is logged."""


class ToolArgumentError(ValueError):
    """Arguments that do not fit the tool's schema; the message is written for the model.
    ``fields`` says what is wrong per top-level argument (``""``: the arguments as a
    whole), for a form that shows each error beside its field."""

    def __init__(self, message: str, fields: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.fields: dict[str, str] = dict(fields or {})


class _ArgsBase(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


class _SchemaArgs(RootModel[dict[str, Any]]):
    """The arguments of a tool described by a JSON Schema, as given (checked beforehand)."""


class Tool:
    """A registered tool. Call it like the function it wraps."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        risk: Risk = "low",
        approval: Callable[[dict[str, Any]], bool] | Mapping[str, Any] | None = None,
        timeout: float = 30.0,
        expected_duration: float = 1.0,
        idempotent: bool | None = None,
        check: Callable[[dict[str, Any]], Any] | None = None,
        input_schema: Mapping[str, Any] | None = None,
        read_only: bool = False,
    ) -> None:
        if risk not in RISKS:
            raise ValueError(f"tool {name or fn.__name__}: risk must be one of {RISKS}")
        self.fn = fn
        self.name = name or fn.__name__
        if not re.fullmatch(r"[A-Za-z_][\w.-]{0,63}", self.name):
            raise ValueError(f"tool name {self.name!r} is not a valid identifier")
        self.risk: Risk = risk
        # A predicate over the arguments, or a threshold rule (see ``approvals``).
        self.approval: Callable[[dict[str, Any]], bool] | Threshold | None = (
            Threshold.from_json(approval) if isinstance(approval, Mapping) else approval
        )
        # The meaning of the arguments (amount > 0, at most what was paid ...): raises
        # ``ToolError`` with the reason; runs before execution and on a person's edit.
        self.check = check
        self.timeout = float(timeout)
        self.expected_duration = float(expected_duration)
        self.idempotent = (risk == "low") if idempotent is None else bool(idempotent)
        # Changes nothing anywhere (a look-up): a call of it may run before the reply that
        # asked for it is stored (``Turns.reads_now``). Only low-risk tools count as such.
        self.read_only = bool(read_only) and risk == "low"
        self.is_async = inspect.iscoroutinefunction(fn)
        summary, param_docs = _parse_docstring(inspect.getdoc(fn) or "")
        self.description = description or summary or self.name
        # A JSON Schema's validator (``from_schema``), or None: a model from the signature.
        self._validator: jsonschema.protocols.Validator | None = None
        if input_schema is None:
            self.takes_ctx, self._model = _args_model(fn, self.name, param_docs)
            self.params: tuple[str, ...] = tuple(self._model.model_fields)
            self.required: frozenset[str] = frozenset(
                n for n, f in self._model.model_fields.items() if f.is_required()
            )
            self.schema: dict[str, Any] = _clean_schema(self._model.model_json_schema())
        else:
            self.takes_ctx, self._model = True, _SchemaArgs
            self.schema = dict(input_schema)
            self._validator = _schema_validator(self.name, self.schema)
            props, required = self.schema.get("properties"), self.schema.get("required")
            self.params = tuple(props) if isinstance(props, dict) else ()
            self.required = frozenset(
                r for r in (required if isinstance(required, list) else ()) if isinstance(r, str)
            )
        self._normalized = {_norm(p): p for p in self.params}
        self._param_set = frozenset(self.params)
        # How its calls have gone so far (``execution``: quick ones, or -1 once slow; the
        # last call's duration).
        self._pace = 0
        self._last_ms: float | None = None
        self._spec = ToolSpec(self.name, self.description, self.schema)
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", self.name)
        self.__module__ = getattr(fn, "__module__", __name__)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Tool {self.name} risk={self.risk}>"

    @classmethod
    def from_schema(
        cls,
        name: str,
        input_schema: Mapping[str, Any],
        call: Callable[[dict[str, Any], ToolContext | None], Any],
        *,
        description: str = "",
        risk: Risk = "high",
        timeout: float = 30.0,
        idempotent: bool | None = None,
        check: Callable[[dict[str, Any]], Any] | None = None,
        read_only: bool = False,
    ) -> Tool:
        """A tool that comes from elsewhere (an MCP server's): its arguments are described
        by a JSON Schema, not by a Python signature. The schema goes to the model as
        given; arguments are checked against it (``jsonschema``, the draft its
        ``$schema`` names, else 2020-12) whenever a call is planned, edited or run;
        ``call(arguments, ctx)`` runs it. Raises ``ValueError`` for a schema that is
        not a valid JSON Schema of an object."""

        def run(arguments: dict[str, Any], ctx: ToolContext | None = None) -> Any:
            return call(arguments, ctx)

        run.__name__ = run.__qualname__ = name
        return cls(
            run,
            name=name,
            description=description or name,
            risk=risk,
            timeout=timeout,
            idempotent=idempotent,
            check=check,
            input_schema=input_schema,
            read_only=read_only,
        )

    def spec(self) -> ToolSpec:
        return self._spec

    def check_arguments(self, args: Mapping[str, Any]) -> None:
        """Run the tool's ``check``; raises ``ToolError`` with the reason it refuses.
        Any other failure of the check refuses too (fail closed)."""
        if self.check is None:
            return
        try:
            self.check(dict(args))
        except ToolError:
            raise
        except Exception as exc:
            raise ToolError(
                f"the check of {self.name} failed: {type(exc).__name__}: {exc}"
            ) from exc

    def repair(self, args: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
        if self._param_set.issuperset(args):  # every key is a parameter: nothing to repair
            return dict(args), {}
        return repair_keys(args, self.params, self._normalized)

    def parse(self, args: Mapping[str, Any]) -> BaseModel:
        """Validate ``args`` (keys as given) into the tool's argument model."""
        if self._validator is not None:
            problems = list(self._validator.iter_errors(dict(args)))
            if problems:
                raise ToolArgumentError(self._explain_schema(problems), _schema_fields(problems))
            return _SchemaArgs.model_validate(dict(args))
        try:
            return self._model.model_validate(args if type(args) is dict else dict(args))
        except ValidationError as exc:
            raise ToolArgumentError(self._explain(exc), _field_errors(exc)) from None

    def validate(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Validated, JSON-ready arguments; raises ``ToolArgumentError`` with a readable message."""
        return self.parse(args).model_dump(mode="json")

    def call_kwargs(self, parsed: BaseModel, ctx: ToolContext | None) -> dict[str, Any]:
        if isinstance(parsed, _SchemaArgs):
            return {"arguments": dict(parsed.root), "ctx": ctx}
        kwargs = {name: getattr(parsed, name) for name in self.params}
        if self.takes_ctx:
            kwargs["ctx"] = ctx
        return kwargs

    def _explain(self, exc: ValidationError) -> str:
        lines = [f"Invalid arguments for tool {self.name!r}:"]
        props = self.schema.get("properties", {})
        for err in exc.errors(include_url=False):
            loc = ".".join(str(p) for p in err["loc"]) or "(arguments)"
            if err["type"] == "missing":
                lines.append(f"- missing required argument {loc!r}{_type_hint(props, loc)}")
            elif err["type"] == "extra_forbidden":
                lines.append(f"- unexpected argument {loc!r}")
            else:
                got = _clip(repr(err.get("input")), 80)
                lines.append(f"- {loc!r}: {err['msg']} (got {got})")
        expected = ", ".join(
            f"{p}{_type_hint(props, p)}{'' if p in self.required else ' optional'}"
            for p in self.params
        )
        lines.append(f"Expected arguments: {expected or '(none)'}.")
        return "\n".join(lines)

    def _explain_schema(self, problems: list[jsonschema.ValidationError]) -> str:
        lines = [f"Invalid arguments for tool {self.name!r}:"]
        props = self.schema.get("properties")
        props = props if isinstance(props, dict) else {}
        for err in sorted(problems, key=lambda e: [str(p) for p in e.absolute_path])[:10]:
            loc = ".".join(str(p) for p in err.absolute_path)
            if not loc and err.validator in ("required", "additionalProperties"):
                lines.append(f"- {_clip(err.message, 200)}")
            else:
                lines.append(f"- {loc or '(arguments)'!r}: {_clip(err.message, 200)}")
        expected = ", ".join(
            f"{p}{_type_hint(props, p)}{'' if p in self.required else ' optional'}"
            for p in self.params
        )
        lines.append(f"Expected arguments: {expected or '(none)'}.")
        return "\n".join(lines)


def _schema_validator(name: str, schema: dict[str, Any]) -> jsonschema.protocols.Validator:
    """A validator of ``schema`` (its own draft, else 2020-12), checked once; no formats
    and no remote references are fetched."""
    if schema.get("type", "object") != "object":
        raise ValueError(f"tool {name!r}: its input schema must describe an object")
    kind = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        kind.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"tool {name!r}: its input schema is not valid: {exc.message}") from None
    return kind(schema)


def _schema_fields(problems: list[jsonschema.ValidationError]) -> dict[str, str]:
    """The first problem of each top-level argument of a JSON-Schema tool, in words."""
    out: dict[str, str] = {}
    for err in problems:
        given = err.instance if isinstance(err.instance, dict) else {}
        if err.path:
            inner = ".".join(str(p) for p in list(err.path)[1:])
            text = f"{inner}: {err.message}" if inner else err.message
            out.setdefault(str(err.path[0]), text)
        elif err.validator == "required" and isinstance(err.validator_value, list):
            for name in err.validator_value:
                if isinstance(name, str) and name not in given:
                    out.setdefault(name, "required")
        elif err.validator == "additionalProperties":
            known = err.schema.get("properties") if isinstance(err.schema, dict) else None
            for name in given:
                if not isinstance(known, dict) or name not in known:
                    out.setdefault(name, "not an argument of this tool")
        else:
            out.setdefault("", err.message)
    return out


def _field_errors(exc: ValidationError) -> dict[str, str]:
    """The first problem of each top-level argument, in words."""
    out: dict[str, str] = {}
    for err in exc.errors(include_url=False):
        name = str(err["loc"][0]) if err["loc"] else ""
        if err["type"] == "missing":
            text = "required"
        elif err["type"] == "extra_forbidden":
            text = "not an argument of this tool"
        else:
            inner = ".".join(str(p) for p in err["loc"][1:])
            text = f"{inner}: {err['msg']}" if inner else str(err["msg"])
        out.setdefault(name, text)
    return out


def _type_hint(props: Mapping[str, Any], name: str) -> str:
    prop = props.get(name.split(".")[0]) or {}
    if not isinstance(prop, Mapping):  # a schema may be a bare true/false
        return ""
    if "enum" in prop:
        return " (one of " + ", ".join(repr(v) for v in prop["enum"]) + ")"
    if "type" in prop:
        return f" ({prop['type']})"
    return ""


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n] + "…"


def _norm(key: str) -> str:
    return re.sub(r"[\s_\-.]", "", key).lower()


def repair_keys(
    args: Mapping[str, Any],
    params: Iterable[str],
    normalized: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Rename keys that differ from a parameter only in case or separators
    (``ItemId``, ``itemid``, ``item-id`` → ``item_id``). Returns (args, {old: new})."""
    params = tuple(params)
    if all(k in params for k in args):
        return dict(args), {}
    lookup = normalized if normalized is not None else {_norm(p): p for p in params}
    fixed: dict[str, Any] = {}
    repairs: dict[str, str] = {}
    for key, value in args.items():
        if key not in params:
            target = lookup.get(_norm(key))
            if target is not None and target not in args and target not in fixed:
                fixed[target] = value
                repairs[key] = target
                continue
        fixed[key] = value
    return fixed, repairs


def _args_model(
    fn: Callable[..., Any], tool_name: str, docs: Mapping[str, str]
) -> tuple[bool, type[BaseModel]]:
    sig = inspect.signature(fn)
    try:
        hints = get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise TypeError(f"tool {tool_name!r}: cannot resolve type hints: {exc}") from exc
    takes_ctx = False
    fields: dict[str, Any] = {}
    for pname, param in sig.parameters.items():
        ann = hints.get(pname, Any)
        if pname == "ctx" or ann is ToolContext or ann == "ToolContext":
            takes_ctx = True
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {tool_name!r}: *args/**kwargs are not supported")
        if pname in docs:
            ann = Annotated[ann, Field(description=docs[pname])]
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[pname] = (ann, default)
    model = create_model(f"{tool_name}_arguments", __base__=_ArgsBase, **fields)
    return takes_ctx, model


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's auto titles (noise in a prompt); keep everything else."""

    def walk(node: Any, in_props: bool = False) -> Any:
        if isinstance(node, dict):
            out: dict[str, Any] = {}
            for key, value in node.items():
                if key == "title" and not in_props and isinstance(value, str):
                    continue
                out[key] = walk(value, in_props=key in ("properties", "$defs"))
            return out
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    cleaned: dict[str, Any] = walk(schema)
    cleaned = _inline_refs(cleaned)
    cleaned.setdefault("properties", {})
    cleaned["type"] = "object"
    return cleaned


def _inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """Replace local ``$ref``s by their definitions (many OpenAI-compatible servers handle
    flat schemas better). Recursive models keep their ``$defs``."""
    defs = schema.get("$defs")
    if not defs:
        return schema
    recursive = False

    def resolve(node: Any, seen: tuple[str, ...]) -> Any:
        nonlocal recursive
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                name = ref.rsplit("/", 1)[-1]
                if name in seen or name not in defs:
                    recursive = True
                    return node
                extra = {k: v for k, v in node.items() if k != "$ref"}
                return {**resolve(defs[name], (*seen, name)), **extra}
            return {k: resolve(v, seen) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [resolve(v, seen) for v in node]
        return node

    flat: dict[str, Any] = resolve(schema, ())
    if recursive:
        flat["$defs"] = defs
    return flat


_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Params|Returns|Return|Raises|Yields|Examples?|Notes?)\s*:\s*$"
)


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Summary and per-parameter descriptions of a Google-style docstring."""
    summary: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    base_indent: int | None = None
    for line in doc.splitlines():
        m = _SECTION.match(line.strip()) if not line.startswith((" ", "\t")) else None
        if m:
            section = m.group(1).lower()
            current, base_indent = None, None
            continue
        if section is None:
            summary.append(line)
            continue
        if section not in ("args", "arguments", "parameters", "params") or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        pm = re.match(r"^\s*\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", line)
        if pm and (base_indent is None or indent <= base_indent):
            base_indent = indent
            current = pm.group(1)
            params[current] = pm.group(2).strip()
        elif current is not None:
            params[current] = (params[current] + " " + line.strip()).strip()
    text = "\n".join(summary).strip()
    return re.sub(r"[ \t]*\n[ \t]*(?!\n)", " ", text).strip(), params


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    risk: Risk = "low",
    approval: Callable[[dict[str, Any]], bool] | Mapping[str, Any] | None = None,
    timeout: float = 30.0,
    expected_duration: float = 1.0,
    idempotent: bool | None = None,
    check: Callable[[dict[str, Any]], Any] | None = None,
    read_only: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    risk: Risk = "low",
    approval: Callable[[dict[str, Any]], bool] | Mapping[str, Any] | None = None,
    timeout: float = 30.0,
    expected_duration: float = 1.0,
    idempotent: bool | None = None,
    check: Callable[[dict[str, Any]], Any] | None = None,
    read_only: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a ``Tool`` of a plain function (sync or async): ``@tool`` or ``@tool(risk="high")``."""

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(
            f,
            name=name,
            description=description,
            risk=risk,
            approval=approval,
            timeout=timeout,
            expected_duration=expected_duration,
            idempotent=idempotent,
            check=check,
            read_only=read_only,
        )

    return wrap(fn) if fn is not None else wrap


class ToolRegistry:
    """An immutable set of tools, safe to share between threads."""

    __slots__ = ("_specs", "_tools")

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        by_name: dict[str, Tool] = {}
        for t in tools:
            if not isinstance(t, Tool):
                raise TypeError(f"not a Tool: {t!r} (decorate it with @tool)")
            if t.name in by_name and by_name[t.name] is not t:
                raise ValueError(f"duplicate tool name {t.name!r}")
            by_name[t.name] = t
        self._tools: Mapping[str, Tool] = MappingProxyType(by_name)
        self._specs: tuple[ToolSpec, ...] = tuple(t.spec() for t in by_name.values())

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self, allowed: Iterable[str] | None = None) -> list[ToolSpec]:
        if allowed is None:
            return list(self._specs)
        keep = set(allowed)
        return [s for s in self._specs if s.name in keep]

    def subset(self, names: Iterable[str]) -> ToolRegistry:
        names = list(names)
        missing = [n for n in names if n not in self._tools]
        if missing:
            raise KeyError(f"unknown tools {missing}; available: {self.names()}")
        keep = set(names)
        return ToolRegistry(t for t in self._tools.values() if t.name in keep)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"ToolRegistry({self.names()})"


class ToolSource(Protocol):
    """Tools that come from elsewhere than a module's ``@tool`` functions (an MCP
    server's, say) and may change while the process runs."""

    def tools(self) -> Sequence[Tool]:
        """The tools now. Asked whenever a registry is assembled, so it answers from a
        cache, with the same sequence object as long as nothing changed."""
        ...

    def families(self) -> Collection[str]:
        """The names of the groups its tools come in (an MCP server's name), each of
        which a profile may allow whole as ``<family>__*``, even while it has no tools."""
        ...


class ToolSources:
    """Fixed tools (a registry) plus tool sources, assembled into one registry whenever
    asked; the assembly is redone only when a source's answer changed. A tool whose
    name is already taken is left out, with a warning (a source never breaks the
    tools the installation loaded)."""

    def __init__(self) -> None:
        self._sources: list[ToolSource] = []
        self._lock = threading.Lock()
        self._last: tuple[ToolRegistry, tuple[Sequence[Tool], ...], ToolRegistry] | None = None

    def add(self, source: ToolSource) -> None:
        with self._lock:
            if source not in self._sources:
                self._sources.append(source)
                self._last = None

    def remove(self, source: ToolSource) -> None:
        with self._lock:
            if source in self._sources:
                self._sources.remove(source)
                self._last = None

    def families(self) -> set[str]:
        """Every source's tool families (see ``ToolSource.families``)."""
        return {f for source in list(self._sources) for f in source.families()}

    def registry(self, base: ToolRegistry) -> ToolRegistry:
        """``base`` with the sources' tools as they are now."""
        if not self._sources:
            return base
        parts = tuple(source.tools() for source in list(self._sources))
        last = self._last
        if (
            last is not None
            and last[0] is base
            and len(last[1]) == len(parts)
            and all(a is b for a, b in zip(last[1], parts, strict=True))
        ):
            return last[2]
        merged = list(base)
        taken = set(base.names())
        for part in parts:
            for t in part:
                if t.name in taken:
                    log.warning("tool %r from a tool source is left out: the name is taken", t.name)
                    continue
                taken.add(t.name)
                merged.append(t)
        assembled = ToolRegistry(merged)
        self._last = (base, parts, assembled)
        return assembled


def load_tools(module_paths: Iterable[str]) -> ToolRegistry:
    """Import each module and collect its module-level ``Tool`` objects, in order."""
    found: list[Tool] = []
    for path in module_paths:
        path = path.strip()
        if not path:
            continue
        try:
            module = importlib.import_module(path)
        except ImportError as exc:
            raise ImportError(f"cannot import tool module {path!r}: {exc}") from exc
        found.extend(v for v in vars(module).values() if isinstance(v, Tool))
    return ToolRegistry(found)
