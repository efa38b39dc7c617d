"""Forms of the pages."""

from __future__ import annotations

from datetime import date
from typing import Any

from django import forms

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


class AgentProfileForm(forms.ModelForm):
    class Meta:
        model = AgentProfile
        fields = [
            "description",
            "model",
            "system_prompt",
            "allowed_tools",
            "max_iterations",
            "risk_overrides",
            "approval_policies",
            "context_budget_tokens",
            "vision",
        ]
        widgets = {
            "system_prompt": forms.Textarea(attrs={"rows": 14, "class": "mono"}),
            "allowed_tools": forms.Textarea(attrs={"rows": 3, "class": "mono"}),
            "risk_overrides": forms.Textarea(attrs={"rows": 4, "class": "mono"}),
            "approval_policies": forms.Textarea(attrs={"rows": 5, "class": "mono"}),
        }

    def clean_allowed_tools(self) -> Any:
        value = self.cleaned_data["allowed_tools"]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise forms.ValidationError('A JSON list of tool names, e.g. ["get_order"].')
        return value

    def clean_risk_overrides(self) -> Any:
        value = self.cleaned_data["risk_overrides"]
        if not isinstance(value, dict) or any(
            v not in ("low", "medium", "high") for v in value.values()
        ):
            raise forms.ValidationError('A JSON object like {"tool": "high"}.')
        return value

    def clean_approval_policies(self) -> Any:
        value = self.cleaned_data["approval_policies"]
        if not isinstance(value, dict):
            raise forms.ValidationError("A JSON object keyed by tool name.")
        return value
