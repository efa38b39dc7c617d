"""Forms of the pages."""

from __future__ import annotations

import json
import re
from datetime import date
from typing import Any

from django import forms
from django.utils.text import capfirst

from agentweb.middleware import BadInput, strict_json
from agentweb.runs import profiles
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


class AgentProfileForm(forms.Form):
    """Create, clone or edit a profile. What the form posts is turned into the profile's
    JSON shape (its JSON fields parsed by the API's strict parser) and read by the same
    pydantic models and checks as ``POST/PUT /api/agents`` and ``agents import``
    (``profiles.prepare_profile``): one set of rules, each error under its field."""

    name = _profile_field("name")
    description = _profile_field("description")
    model = _profile_field("model")
    system_prompt = _profile_field("system_prompt", widget=_mono(14), strip=False)
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
        return data

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
