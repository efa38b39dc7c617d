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


class AgentProfileForm(forms.ModelForm):
    """Create, clone or edit a profile. Every check is the model's (``clean()`` ->
    ``agentweb.runs.profile_rules``): the API and ``agents import`` run the
    same ones, and each error shows under its field."""

    class Meta:
        model = AgentProfile
        fields = [
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
        ]
        widgets = {
            "system_prompt": forms.Textarea(attrs={"rows": 14, "class": "mono"}),
            "allowed_tools": forms.Textarea(attrs={"rows": 3, "class": "mono"}),
            "risk_overrides": forms.Textarea(attrs={"rows": 4, "class": "mono"}),
            "approval_policies": forms.Textarea(attrs={"rows": 5, "class": "mono"}),
            "delegates": forms.Textarea(attrs={"rows": 2, "class": "mono"}),
            "validator": forms.TextInput(
                attrs={"class": "mono", "placeholder": "agentweb.shop.validators.claims_validator"}
            ),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:  # runs refer to a profile by name: no renames
            self.fields["name"].disabled = True
        for name in ("allowed_tools", "risk_overrides", "approval_policies", "delegates"):
            self.fields[name].required = False
        self.fields["tool_selection"].required = False

    def clean_tool_selection(self) -> str:
        return str(self.cleaned_data.get("tool_selection") or "").strip() or "all"
