"""Forms of the pages."""

from __future__ import annotations

import json
import re
from datetime import date
from typing import Any

from django import forms
from django.utils.text import capfirst

from agentweb.middleware import BadInput, strict_json
from agentweb.runs import profiles, prompts, toolset
from agentweb.runs.models import AgentProfile, Run


def _agent_choices() -> list[tuple[str, str]]:
    names = AgentProfile.objects.order_by("name").values_list("name", flat=True)
    return [("", "default agent")] + [(name, name) for name in names]


class TaskForm(forms.Form):
    task = forms.CharField(
        max_length=20000,
        widget=forms.Textarea(
            attrs={"rows": 3, "placeholder": "Describe the task, e.g. “Where is order A1001?”"}
        ),
    )
    agent = forms.ChoiceField(required=False, choices=())

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["agent"].choices = _agent_choices()  # type: ignore[attr-defined]

    def clean_task(self) -> str:
        task = str(self.cleaned_data["task"]).strip()
        if not task:
            raise forms.ValidationError("The task must not be empty.")
        return task


def _plausible_date(value: date) -> None:
    # 9999-12-31 plus a day (the end of "until") overflows; no run is that old or young.
    if not 1970 <= value.year <= 2999:
        raise forms.ValidationError("Pick a date between 1970 and 2999.")


class RunSearchForm(forms.Form):
    q = forms.CharField(required=False, label="Task text")
    tool = forms.CharField(required=False)
    status = forms.ChoiceField(required=False, choices=[("", "any status"), *Run.Status.choices])
    outcome = forms.ChoiceField(
        required=False, choices=[("", "any outcome"), ("needs_follow_up", "Needs follow-up")]
    )
    agent = forms.ChoiceField(required=False, choices=())
    requester = forms.CharField(required=False)
    since = forms.DateField(
        required=False,
        widget=forms.DateInput(attrs={"type": "date"}),
        validators=[_plausible_date],
    )
    until = forms.DateField(
        required=False,
        widget=forms.DateInput(attrs={"type": "date"}),
        validators=[_plausible_date],
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choices = _agent_choices()
        choices[0] = ("", "any agent")
        self.fields["agent"].choices = choices  # type: ignore[attr-defined]


class ImportForm(forms.Form):
    file = forms.FileField(help_text="A run exported from this or another agentweb (JSON).")


#: The profile fields the form edits, in the order it shows them.
PROFILE_FORM_FIELDS = (
    "name",
    "description",
    "model",
    "system_prompt",
    "allowed_tools",
    "tool_selection",
    "validator",
    "max_iterations",
    "risk_overrides",
    "approval_policies",
    "delegates",
    "context_budget_tokens",
    "vision",
    "budget",
)
_JSON_FIELDS = ("allowed_tools", "risk_overrides", "approval_policies", "delegates", "budget")
_PICKED = ("allowed_tools", "risk_overrides", "approval_policies", "delegates")
_WHOLE_FIELDS = ("max_iterations", "context_budget_tokens")
_ASCII_INTEGER = re.compile(r"-?[0-9]{1,30}")


def _profile_field(name: str, field_class: type[forms.Field] = forms.CharField, **kw: Any) -> Any:
    """A form field labelled and explained as the model's field; the form itself checks
    nothing: the API's rules do (``AgentProfileForm.clean``)."""
    model_field = AgentProfile._meta.get_field(name)
    kw.setdefault("label", capfirst(str(getattr(model_field, "verbose_name", name))))
    kw.setdefault("help_text", str(getattr(model_field, "help_text", "")))
    return field_class(required=False, **kw)


def _mono(rows: int) -> forms.Textarea:
    return forms.Textarea(attrs={"rows": rows, "class": "mono"})


def profile_initial(profile: AgentProfile) -> dict[str, Any]:
    """A profile's values as the form shows them (JSON fields as JSON text)."""
    values: dict[str, Any] = {}
    for name in PROFILE_FORM_FIELDS:
        value = getattr(profile, name)
        values[name] = json.dumps(value, ensure_ascii=False) if name in _JSON_FIELDS else value
    return values


# -- the profile form's tool rows and delegate picker ------------------------------------------
#
# Tools, their risk overrides and approval policies are edited as one row per tool (posted
# with ``tool_rows=1``); delegates as a list of the other profiles (``delegate_rows=1``).
# A post without those markers gives the four fields as JSON text, as the API does.

POLICY_MODES = (
    ("", "tool's own rule"),
    ("always", "always ask a person"),
    ("never", "never ask"),
    ("amount", "ask from an amount on"),
    ("custom", "custom (JSON)"),
)
RISKS = ("low", "medium", "high")


def _policy_row(rule: Any) -> dict[str, Any]:
    """The row's values for a stored policy rule (anything the row cannot show as fields
    is shown as JSON)."""
    row: dict[str, Any] = {
        "mode": "",
        "argument": "",
        "at_least": "",
        "sum_per": "",
        "approvers": "",
    }
    if rule is None or rule == "default":
        return row
    if rule in ("always", "never"):
        return {**row, "mode": rule}
    if isinstance(rule, dict) and set(rule) <= {"argument", "at_least", "sum_per", "approvers"}:
        approvers = rule.get("approvers")
        row["approvers"] = "" if approvers in (None, 1) else str(approvers)
        if "argument" in rule and "at_least" in rule:
            at_least = rule["at_least"]
            return {
                **row,
                "mode": "amount",
                "argument": str(rule["argument"]),
                "at_least": str(at_least),
                "sum_per": str(rule.get("sum_per") or ""),
            }
        if set(rule) == {"approvers"}:
            return {**row, "mode": "always"}
    return {**row, "mode": "custom", "json": json.dumps(rule, ensure_ascii=False)}


def _number(text: str) -> Any:
    text = text.strip()
    if re.fullmatch(r"-?[0-9]{1,15}", text):
        return int(text)
    if re.fullmatch(r"-?[0-9]{1,15}\.[0-9]{1,10}", text):
        return float(text)
    return text  # said to be wrong by the policy check


def _rule_from(get: Any, name: str) -> tuple[Any, str | None]:
    """The policy rule a tool's row posts (``None``: the tool's own rule), or an error."""
    mode = get(f"policy__{name}")
    approvers_text = get(f"policy_approvers__{name}").strip()
    approvers = _number(approvers_text) if approvers_text else None
    people = {"approvers": approvers} if approvers not in (None, 1) else {}
    if mode == "always":
        return (people or "always"), None
    if mode == "never":
        return "never", None
    if mode == "amount":
        argument = get(f"policy_argument__{name}").strip()
        at_least = get(f"policy_at_least__{name}").strip()
        if not argument or not at_least:
            return None, f"{name}: an amount rule needs its argument and the amount to ask from"
        rule: dict[str, Any] = {"argument": argument, "at_least": _number(at_least)}
        sum_per = get(f"policy_sum_per__{name}").strip()
        if sum_per:
            rule["sum_per"] = sum_per
        return {**rule, **people}, None
    if mode == "custom":
        text = get(f"policy_json__{name}").strip()
        try:
            return strict_json(text) if text else None, None
        except BadInput as exc:
            return None, f"{name}: not accepted: {exc}"
    return None, None


class AgentProfileForm(forms.Form):
    """Create, clone or edit a profile. What the form posts is turned into the profile's
    JSON shape (its JSON fields parsed by the API's strict parser) and read by the same
    pydantic models and checks as ``POST/PUT /api/agents`` and ``agents import``
    (``profiles.prepare_profile``): one set of rules, each error under its field."""

    name = _profile_field("name")
    description = _profile_field("description")
    model = _profile_field("model")
    system_prompt = _profile_field(
        "system_prompt",
        widget=_mono(14),
        strip=False,
        help_text="Template; variables: "
        + ", ".join("{{" + name + "}}" for name in prompts.VARIABLES)
        + " (any other name, or a {{ without its }}, is refused)",
    )
    allowed_tools = _profile_field("allowed_tools", widget=_mono(3))
    tool_selection = _profile_field("tool_selection")
    validator = _profile_field(
        "validator",
        widget=forms.TextInput(
            attrs={"class": "mono", "placeholder": "agentweb.shop.validators.claims_validator"}
        ),
    )
    max_iterations = _profile_field("max_iterations", widget=forms.NumberInput)
    risk_overrides = _profile_field("risk_overrides", widget=_mono(4))
    approval_policies = _profile_field("approval_policies", widget=_mono(5))
    delegates = _profile_field("delegates", widget=_mono(2))
    context_budget_tokens = _profile_field("context_budget_tokens", widget=forms.NumberInput)
    vision = _profile_field("vision", forms.BooleanField)
    budget = _profile_field(
        "budget",
        widget=forms.Textarea(
            attrs={
                "rows": 2,
                "class": "mono",
                "placeholder": '{"max_cost_usd_per_run": 0.5, "daily_cost_usd": 20}',
            }
        ),
    )

    def __init__(
        self,
        data: Any = None,
        *,
        profile: AgentProfile | None = None,
        initial: dict[str, Any] | None = None,
    ) -> None:
        if not initial:  # a new profile starts with the model's defaults
            initial = profile_initial(profile or AgentProfile())
        super().__init__(data, initial=initial)
        self.edited = profile  # None: a new profile
        self.profile: AgentProfile | None = None  # checked, not saved: after is_valid()
        if profile is not None:  # runs refer to a profile by name: no renames
            self.fields["name"].disabled = True

    def api_data(self, cleaned: dict[str, Any]) -> dict[str, Any]:
        """The profile's JSON shape from the form's text (adds an error to each JSON
        field the strict parser refuses)."""
        data: dict[str, Any] = {}
        for name in PROFILE_FORM_FIELDS:
            if name == "name" and self.edited is not None:
                continue  # a profile keeps its name
            value = cleaned.get(name)
            if name in self.picked:
                continue  # read from the rows below
            if name in _JSON_FIELDS:
                text = str(value or "").strip()
                try:
                    data[name] = strict_json(text) if text else None  # null: blank
                except BadInput as exc:
                    self.add_error(name, f"not accepted: {exc}")
                    data.pop(name, None)
            elif name in _WHOLE_FIELDS:
                text = str(value or "").strip()
                # ASCII digits only; anything else goes on as text, which the model refuses.
                data[name] = int(text) if _ASCII_INTEGER.fullmatch(text) else text
            elif name == "tool_selection":
                data[name] = str(value or "").strip() or "all"
            elif name == "vision":
                data[name] = bool(value)
            else:
                data[name] = "" if value is None else str(value)
        if "allowed_tools" in self.picked:
            self._read_tool_rows(data)
        if "delegates" in self.picked:
            data["delegates"] = [n for n in self._list("delegate") if n]
        return data

    risk_choices = RISKS
    policy_modes = POLICY_MODES

    def _list(self, key: str) -> list[str]:
        """Every value posted under ``key`` (a QueryDict's list; one value otherwise)."""
        getlist = getattr(self.data, "getlist", None)
        if getlist is not None:
            return [str(v) for v in getlist(key)]
        value = self.data.get(key)
        if value is None:
            return []
        return [str(v) for v in value] if isinstance(value, list | tuple) else [str(value)]

    @property
    def picked(self) -> frozenset[str]:
        """The JSON fields this post gives as rows and pickers instead of JSON text (all of
        them on a new form: the page shows rows)."""
        if not self.is_bound:
            return frozenset(_PICKED)
        picked = set()
        if self.data.get("tool_rows") == "1":
            picked |= {"allowed_tools", "risk_overrides", "approval_policies"}
        if self.data.get("delegate_rows") == "1":
            picked.add("delegates")
        return frozenset(picked)

    def _read_tool_rows(self, data: dict[str, Any]) -> None:
        get = lambda key: str(self.data.get(key, ""))  # noqa: E731
        rows = [str(n) for n in self._list("tool_row")]
        allowed = set(self._list("tool_allowed"))
        data["allowed_tools"] = [n for n in rows if n in allowed]
        data["risk_overrides"] = {n: get(f"risk__{n}") for n in rows if get(f"risk__{n}") in RISKS}
        policies: dict[str, Any] = {}
        problems: list[str] = []
        for n in rows:
            rule, problem = _rule_from(get, n)
            if problem:
                problems.append(problem)
            elif rule is not None:
                policies[n] = rule
        if problems:
            self.add_error("approval_policies", "; ".join(problems))
        else:
            data["approval_policies"] = policies

    @property
    def changed_data(self) -> list[str]:
        """The fields a save changes (the audit line names them): an edited profile's are
        compared with its stored row, since rows post no JSON text to compare."""
        if self.edited is None or self.edited.pk is None or self.profile is None:
            return super().changed_data
        stored = AgentProfile.objects.filter(pk=self.edited.pk).values(*PROFILE_FORM_FIELDS).first()
        if stored is None:
            return super().changed_data
        return [n for n in PROFILE_FORM_FIELDS if stored[n] != getattr(self.profile, n)]

    def _initial_json(self, name: str, kind: type) -> Any:
        """The stored (or cloned) value of a JSON field the rows show: the profile's own,
        else the form's initial JSON text (a clone's, a new profile's defaults)."""
        value = getattr(self.edited, name, None) if self.edited is not None else None
        if value is None:
            text = self.initial.get(name)
            try:
                value = json.loads(text) if isinstance(text, str) and text else text
            except ValueError:
                value = None
        return value if isinstance(value, kind) else kind()

    def tool_rows(self) -> list[dict[str, Any]]:
        """One row per tool the page offers: every registered tool, each named by the
        profile that is not (loaded no more), and each MCP server's ``<server>__*``."""
        if self.is_bound and "allowed_tools" in self.picked:
            get = lambda key: str(self.data.get(key, ""))  # noqa: E731
            allowed = set(self._list("tool_allowed"))
            posted = {n: None for n in self._list("tool_row")}
        else:
            get = None
            allowed = {str(n) for n in self._initial_json("allowed_tools", list)}
            posted = {}
        overrides = self._initial_json("risk_overrides", dict)
        policies = self._initial_json("approval_policies", dict)
        registry = toolset.registry()
        names: dict[str, None] = {t.name: None for t in sorted(registry, key=lambda t: t.name)}
        for extra in (*posted, *sorted(allowed), *overrides, *policies):
            names.setdefault(str(extra), None)
        wildcards = sorted(toolset.tool_wildcards())
        errors = (
            " ".join(str(e) for e in self.errors.get("approval_policies", ()))
            if self.is_bound
            else ""
        )
        rows = []
        for name in [*names, *(w for w in wildcards if w not in names)]:
            found = registry.get(name)
            wildcard = name in wildcards
            properties = found.spec().parameters.get("properties") if found is not None else None
            row: dict[str, Any] = {
                "name": name,
                "loaded": found is not None or wildcard or name in toolset.BUILTIN_RISK,
                "wildcard": wildcard,
                "risk": getattr(found, "risk", "") if found is not None else "",
                "description": getattr(found, "description", "") if found is not None else "",
                "arguments": sorted(properties) if isinstance(properties, dict) else [],
                "allowed": name in allowed,
            }
            if get is not None:
                row["override"] = get(f"risk__{name}")
                row["policy"] = {
                    "mode": get(f"policy__{name}"),
                    "argument": get(f"policy_argument__{name}"),
                    "at_least": get(f"policy_at_least__{name}"),
                    "sum_per": get(f"policy_sum_per__{name}"),
                    "approvers": get(f"policy_approvers__{name}"),
                    "json": get(f"policy_json__{name}"),
                }
            else:
                row["override"] = str(overrides.get(name, ""))
                row["policy"] = _policy_row(policies.get(name))
            row["error"] = next(
                (e for e in errors.split("; ") if e.startswith((f"{name}:", f"{name} "))), ""
            )
            rows.append(row)
        return rows

    def delegate_choices(self) -> list[dict[str, Any]]:
        """The other profiles, each ticked when the profile delegates to it."""
        if self.is_bound and "delegates" in self.picked:
            chosen = set(self._list("delegate"))
        else:
            chosen = {str(n) for n in self._initial_json("delegates", list)}
        names = AgentProfile.objects.order_by("name").values_list("name", "description")
        own = self.edited.name if self.edited is not None else None
        out = [
            {"name": n, "description": d, "chosen": n in chosen, "known": True}
            for n, d in names
            if n != own
        ]
        known = {o["name"] for o in out}
        out += [
            {"name": n, "description": "", "chosen": True, "known": False}
            for n in sorted(chosen - known)
            if n
        ]
        return out

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        data = self.api_data(cleaned)  # a JSON field it refused is left out ...
        refused = set(self.errors)
        for _ in range(3):  # ... and the rest checked all the same, each field at once:
            try:
                profile, _ = profiles.prepare_profile(data, self.edited)
            except profiles.ProfileInvalid as exc:
                said = {f: m for f, m in exc.errors.items() if f not in refused}
                for field, message in said.items():
                    self.add_error(field if field in self.fields else None, message)
                refused |= set(said)
                # A field the API's models refused is left out and the rest read again,
                # so the checks that need the whole profile say what they find too.
                again = [f for f in said if f in data and f not in ("name", "system_prompt")]
                if not again:
                    break
                for field in again:
                    data.pop(field)
            else:
                self.profile = None if refused else profile
                break
        return cleaned


def start_mode(request: Any) -> str:
    """A start form's "Dry run" (DESIGN §14): medium/high-risk tools are not executed."""
    return "dry" if request.POST.get("mode") == "dry" else "normal"
